"""`interlink doctor nccl-tests`: the parser (every nccl-tests layout) and the explanations (variants priced)."""

from __future__ import annotations

import json

import pytest

from interlink.cli.main import main
from interlink.doctor import ncclt
from interlink.model import predict

HEAD = "\n".join(f"#  Rank {r:2d} Group  0 Pid {100 + r} on {'nodeA' if r < 8 else 'nodeB'} device {r % 8} [0x{r:02x}] "
                 f"NVIDIA H100 80GB HBM3" for r in range(16))


def test_parse_layouts_of_every_version():
    new = ("# Collective test starting: all_gather_perf\n" + HEAD + "\n"
           "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
           "     1048576         16384     float    none      -1    40.00   26.21   24.58      0    39.00   26.89   25.21      0\n"
           "# Avg bus bandwidth    : 24.9\n")
    log = ncclt.parse(new)
    assert log.collective == "all_gather" and log.nranks == 16 and log.hosts == ["nodeA", "nodeB"]
    assert log.gpu.startswith("NVIDIA H100") and log.avg_busbw == 24.9
    r = log.rows[0]
    assert (r.nbytes, r.count, r.dtype, r.time_us, r.busbw, r.time_in_us) == (1048576, 16384, "float32", 40.0, 24.58, 39.0)
    # 2017: no redop/root columns, "res" as a float; an op name
    old = ("#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res\n"
           "     8388608       2097152   float     sum    900.0   9.32  16.31    0e+00    901.0   9.31  16.30    0e+00\n")
    r = ncclt.parse(old, "all_reduce").rows[0]
    assert (r.nbytes, r.time_us, r.busbw) == (8388608, 900.0, 16.31)
    # mpirun --tag-output and per-group rank tags glued to the columns; validation off (N/A)
    tagged = ("[1,0]<stdout>:   4194304   1048576   half   sum   -1[0]  300.5  13.96  24.43   N/A[0]  301.0  13.93  24.38   N/A\n"
              "[1,0]<stdout>:   8388608   2097152   bfloat16   sum   -1  590.0  14.22  24.88   0  591.0  14.19  24.84   0\n")
    rows = ncclt.parse(tagged).rows
    assert [(r.nbytes, r.dtype, r.time_us) for r in rows] == [(4194304, "float16", 300.5), (8388608, "bfloat16", 590.0)]
    with pytest.raises(ValueError):
        ncclt.parse("# nothing here\n")


def test_guess_topology():
    log = ncclt.parse(HEAD + "\n 1048576 262144 float sum -1 10 1 1 0 10 1 1 0\n")
    assert ncclt.guess_topology(log) == "2xdgx-h100:gpus=8"
    one = ncclt.parse(HEAD.split("\n")[0] + "\n 1048576 262144 float sum -1 10 1 1 0 10 1 1 0\n")
    one.nranks = 8
    assert ncclt.guess_topology(one) == "dgx-h100"


def _synth(topo: str, name: str, nranks: int) -> ncclt.Log:
    """The curve the model predicts for variant ``name`` of ``topo``, written as nccl-tests rows."""
    v = next(x for x in ncclt.variants() if x.name == name)
    t = ncclt._topology(topo, v)
    lines = []
    for k in (20, 24, 28, 30):
        s = 1 << k
        p = predict("all_reduce", s, t, candidates=list(v.algos), fast_path=False)
        c = min((c for c in p.table if c.protocol in v.protocols), key=lambda c: c.time_us)
        lines.append(f"{s} {s // 4} float sum -1 {c.time_us:.3f} {c.algbw_gbps:.3f} {c.busbw_gbps:.3f} 0 "
                     f"{c.time_us:.3f} {c.algbw_gbps:.3f} {c.busbw_gbps:.3f} 0")
    log = ncclt.parse("\n".join(lines), "all_reduce")
    log.nranks = nranks
    return log


@pytest.mark.parametrize("topo,name,nranks", [
    ("dgx-h100", "P2P through host memory", 8),
    ("2xdgx-h100", "one NIC in eight", 16),
])
def test_the_variant_that_made_a_curve_explains_it_first(topo, name, nranks):
    spec, fits = ncclt.explain(_synth(topo, name, nranks), topo)
    first = fits[0]
    assert first.variant.name == name and first.error < 0.01
    base = next(f for f in fits if f.variant.name == "as specified")
    assert base.error > 0.3  # the healthy cluster does not explain it


def test_the_command(tmp_path, capsys):
    log = _synth("dgx-h100", "NVLS off", 8)
    text = "\n".join(f"{r.nbytes} {r.count} float sum -1 {r.time_us} {r.algbw} {r.busbw} 0 {r.time_us} {r.algbw} "
                     f"{r.busbw} 0" for r in log.rows)
    f = tmp_path / "nvls.log"
    f.write_text("\n".join(HEAD.split("\n")[:8]) + "\n" + text + "\n")
    assert main(["doctor", "nccl-tests", str(f), "--topology", "dgx-h100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["topology"] == "dgx-h100" and out["ranks"] == 8
    assert out["explanations"][0]["name"] in ("NVLS off", "ring only") and out["explanations"][0]["error"] < 0.01
    assert main(["doctor", "nccl-tests", str(f)]) == 0  # the topology guessed from the log: dgx-h100
    text = capsys.readouterr().out
    assert "topology dgx-h100" in text and "1. NVLS off" in text
