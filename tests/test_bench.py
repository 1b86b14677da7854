"""``interlink bench``: the nccl-tests table, the JSON, busbw factors and the #wrong check."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from interlink.bench import report
from interlink.bench.sweep import (
    BenchConfig,
    counts_for,
    count_wrong,
    expected_output,
    iterations_for,
    rank_input,
    sizes,
    sweep_sizes,
)
from interlink.cli.bench import parse_collective, parse_size

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX launcher")


def _bench(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict, list[list[str]]]:
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "interlink", "bench", *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    table = [ln.split() for ln in proc.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    return proc, doc, table


@pytest.mark.parametrize("collective,nranks,extra,factor", [
    ("all_reduce", 2, (), lambda n: 2 * (n - 1) / n),
    ("all_gather", 3, ("--transport", "tcp"), lambda n: (n - 1) / n),
    ("broadcast", 3, ("--transport", "tcp"), lambda n: 1.0),
])
def test_bench_table_and_json(tmp_path, collective, nranks, extra, factor):
    proc, doc, table = _bench(tmp_path, collective, "-b", "8", "-e", "64K", "-f", "4", "--iters", "3", "-w", "1",
                              "--ranks", str(nranks), *extra)
    transport = "tcp" if extra else "shm"
    assert f"#  Collective {collective}, nranks {nranks}, transport {transport}" in proc.stdout
    assert "out-of-place" in proc.stdout and "in-place" in proc.stdout
    assert "# Avg bus bandwidth" in proc.stdout
    assert "interlink bench:" in proc.stderr  # progress went to stderr, not into the table
    nsizes = len(sizes(8, 64 * 1024, 4))
    assert nsizes == 7
    assert doc["collective"] == collective and doc["nranks"] == nranks and doc["transport"] == transport
    assert len(doc["rows"]) == nsizes and len(table) == nsizes
    for cells in table:  # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong | algo
        assert cells[8] == "0" and cells[12] == "0", cells
    f = factor(nranks)
    for row in doc["rows"]:
        assert row["oop_wrong"] == 0 and row["ip_wrong"] == 0
        assert row["nranks"] == nranks and row["transport"] == transport and row["algorithm"]
        assert row["iters"] == 3 and row["warmup"] == 1
        for mode in ("oop", "ip"):
            assert row[f"{mode}_time_us"] > 0
            assert row[f"{mode}_algbw"] == pytest.approx(row["size"] / (row[f"{mode}_time_us"] * 1e-6))
            assert row[f"{mode}_busbw"] == pytest.approx(row[f"{mode}_algbw"] * f)
    # nccl-tests sizes: per-rank count = size / typesize (/ nranks for all_gather), rounded down
    for row, want in zip(doc["rows"], sizes(8, 64 * 1024, 4)):
        count, nbytes = counts_for(collective, want, 4, nranks)
        assert (row["count"], row["size"]) == (count, nbytes)


@pytest.mark.parametrize("collective", ["reduce", "reduce_scatter", "all_to_all", "gather", "scatter", "sendrecv",
                                        "barrier"])
def test_every_bench_collective_runs_as_a_user_types_it(tmp_path, collective):
    """`interlink bench COLLECTIVE` on 3 ranks: every row checked, 0 wrong; the collectives without an
    in-place form (all_to_all, sendrecv; barrier moves no data) print N/A in the in-place columns instead
    of failing (an in-place all_to_all is refused by the API, as NCCL has none)."""
    proc, doc, table = _bench(tmp_path, collective, "-b", "8", "-e", "4K", "-f", "8", "--iters", "2", "-w", "1",
                              "--ranks", "3", "-d", "float64")
    assert f"#  Collective {collective}, nranks 3" in proc.stdout
    no_ip = collective in ("all_to_all", "sendrecv", "barrier")
    assert len(doc["rows"]) == (1 if collective == "barrier" else len(sizes(8, 4096, 8))), doc["rows"]
    for row in doc["rows"]:
        assert row["oop_time_us"] > 0, row
        if collective != "barrier":
            assert row["oop_wrong"] == 0, row
        if collective == "sendrecv":  # point to point: not the timing barrier's path
            assert row["algorithm"] == "p2p", row
        if no_ip:
            assert row["ip_time_us"] is None and row.get("ip_wrong") is None, row
        else:
            assert row["ip_time_us"] > 0 and row["ip_wrong"] == 0, row
    if collective != "barrier":
        assert "# Wrong values         : 0 OK" in proc.stdout
        for cells in table:
            assert cells[8] == "0" and (cells[12] == "N/A") == no_ip, cells


def test_count_wrong_counts_corruption():
    kw = dict(rank=1, nranks=3, count=10, dtype=np.float32, op="sum")
    good = expected_output("all_reduce", **kw)
    assert good is not None and count_wrong("all_reduce", good, **kw) == 0
    bad = good.copy()
    bad[[0, 4, 9]] += 1
    assert count_wrong("all_reduce", bad, **kw) == 3
    # all_gather: a block from the wrong rank is wrong
    ag = expected_output("all_gather", rank=0, nranks=3, count=100, dtype=np.int32)
    swapped = ag.copy()
    swapped[:100], swapped[100:200] = ag[100:200], ag[:100]
    assert count_wrong("all_gather", swapped, rank=0, nranks=3, count=100, dtype=np.int32) > 0
    # unspecified outputs (non-root reduce) are not checked
    assert count_wrong("reduce", np.zeros(10, np.float32), rank=1, nranks=3, count=10, root=0) == 0


@pytest.mark.parametrize("dtype,op", [("float16", "sum"), ("int8", "prod"), ("float32", "avg"), ("uint8", "bxor"),
                                      ("int32", "avg"), ("float64", "min")])
def test_expected_matches_numpy(dtype, op):
    """The reference is exact: inputs are small integers, so any order of reduction agrees."""
    p, n = 4, 50
    ins = [rank_input("all_reduce", r, p, n, dtype, op) for r in range(p)]
    from interlink.ops import ReduceOp, numpy_reduce

    want = numpy_reduce(ReduceOp.parse(op), ins)
    got = expected_output("all_reduce", rank=0, nranks=p, count=n, dtype=dtype, op=op)
    np.testing.assert_array_equal(got, want)
    # reduce_scatter's block = the same slice of the all_reduce result
    rs = expected_output("reduce_scatter", rank=2, nranks=p, count=5, dtype=dtype, op=op)
    full = numpy_reduce(ReduceOp.parse(op), [rank_input("reduce_scatter", r, p, 5, dtype, op) for r in range(p)])
    np.testing.assert_array_equal(rs, full[10:15])


def test_sizes_counts_iterations_and_parsing():
    assert sizes(8, 64, 2) == [8, 16, 32, 64]
    assert sizes(0, 4, 2) == [0, 1, 2, 4]
    assert parse_size("64K") == 65536 and parse_size("64M") == 64 << 20 and parse_size("1G") == 1 << 30
    assert parse_size("8") == 8 and parse_size("1.5k") == 1536 and parse_size("2MiB") == 2 << 20
    assert parse_collective("allreduce") == "all_reduce" and parse_collective("all_gather_perf") == "all_gather"
    assert counts_for("all_reduce", 8, 4, 3) == (2, 8)
    assert counts_for("all_gather", 8, 4, 3) == (0, 0)  # rounded down, min 0
    assert counts_for("reduce_scatter", 1000, 4, 3) == (83, 996)
    assert iterations_for(8, None, None) == (20, 5)
    assert iterations_for(1 << 20, None, None) == (20, 35)  # past the host page's measuring of its two paths
    n, w = iterations_for(1 << 30, None, None)
    assert (n, w) == (1, 1)
    assert iterations_for(1 << 30, 7, 0) == (7, 0)  # explicit values win
    with pytest.raises(TypeError):
        BenchConfig(collective="all_reduce", op="band", dtype="float32").validate(2)
    with pytest.raises(ValueError):
        BenchConfig(collective="gather", root=3).validate(3)


def test_a_zero_minimum_runs_each_buffer_size_once(tmp_path):
    """`-b 0` steps 0, 1, 2, 4, ...: 1 and 2 bytes are 0 float32 elements, the 0-byte row once, not three times
    (all_gather on 2 ranks: 0-7 bytes are 0 elements a rank)."""
    cfg = BenchConfig(collective="all_reduce", min_bytes=0, max_bytes=64)
    assert sizes(0, 64, 2) == [0, 1, 2, 4, 8, 16, 32, 64]
    assert sweep_sizes(cfg, 2) == [0, 4, 8, 16, 32, 64]
    cfg = BenchConfig(collective="all_gather", min_bytes=0, max_bytes=64)
    assert sweep_sizes(cfg, 2) == [0, 8, 16, 32, 64]
    assert sweep_sizes(BenchConfig(collective="barrier"), 2) == [0]
    proc, doc, table = _bench(tmp_path, "-b", "0", "-e", "16", "--iters", "2", "-w", "1", "--ranks", "2")
    assert [r[0] for r in table] == ["0", "4", "8", "16"], proc.stdout
    assert [r["size"] for r in doc["rows"]] == [0, 4, 8, 16]


def test_the_footer_aligns_its_colons_as_nccl_tests_does():
    lines = report.footer([{"size": 8, "oop_wrong": 0, "ip_wrong": 0, "oop_busbw": 1e9, "type": "float32"}])
    assert lines[0].index(":") == lines[1].index(":"), lines


def test_report_prints_optional_pred_column():
    row = dict(size=1024, count=256, type="float32", redop="sum", root=-1, oop_time_us=10.0, oop_algbw=1.024e8,
               oop_busbw=1.024e8, oop_wrong=0, ip_time_us=10.0, ip_algbw=1.024e8, ip_busbw=1.024e8, ip_wrong=0,
               algorithm="ring", nranks=2, transport="shm")
    meta = {"collective": "all_reduce", "nranks": 2, "transport": "shm", "dtype": "float32", "op": "sum"}
    buf = io.StringIO()
    report.print_table(meta, [row], buf)
    assert "pred" not in buf.getvalue() and "# Avg bus bandwidth    : 0.1024" in buf.getvalue()
    buf = io.StringIO()
    report.print_table(meta, [dict(row, pred_busbw=2.5e9)], buf)
    lines = buf.getvalue().splitlines()
    assert any("pred" in ln for ln in lines if ln.startswith("#"))
    data = [ln.split() for ln in lines if not ln.startswith("#")]
    assert data[0][13] == "2.50" and data[0][14] == "ring"


# ---- the main job, run exactly as a new user runs it -----------------------------------------

def _rows(stdout: str) -> list[list[str]]:
    return [ln.split() for ln in stdout.splitlines() if ln.strip() and not ln.startswith("#")]


def _interlink() -> list[str]:
    """The installed console script (what a user types), else ``python -m interlink``."""
    script = Path(sys.executable).parent / "interlink"
    return [str(script)] if script.exists() else [sys.executable, "-m", "interlink"]


def test_bare_bench_as_a_new_user_runs_it(tmp_path):
    """`interlink bench` with no argument: the all_reduce sweep 8 B .. 64 MiB on local ranks, every
    result checked; within 120 s on a small machine."""
    proc = subprocess.run([*_interlink(), "bench"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert out.startswith("# interlink bench") and "nccl-tests format" in out.splitlines()[0]
    assert "#  Collective all_reduce, nranks 2, transport shm, dtype float32, op sum" in out
    header = [ln for ln in out.splitlines() if ln.startswith("#") and "#wrong" in ln]
    assert header and header[0].split()[1:6] == ["size", "count", "type", "redop", "root"], header
    assert "out-of-place" in out and "in-place" in out
    rows = _rows(out)
    assert [int(c[0]) for c in rows] == sizes(8, 64 << 20, 2)  # 8, 16, ..., 67108864: 24 rows
    assert int(rows[-1][0]) == 67108864 and int(rows[-1][1]) == 67108864 // 4
    for c in rows:
        assert c[2:5] == ["float32", "sum", "-1"], c
        assert c[8] == "0" and c[12] == "0", c  # #wrong, out-of-place and in-place
        assert float(c[5]) > 0 and float(c[9]) > 0, c
    assert "# Wrong values         : 0 OK" in out
    assert "# Avg bus bandwidth" in out


def test_bench_float64_max(tmp_path):
    proc = subprocess.run([*_interlink(), "bench", "-d", "float64", "-o", "max",
                           "-b", "8", "-e", "64K"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "dtype float64, op max" in proc.stdout
    rows = _rows(proc.stdout)
    assert [int(c[0]) for c in rows] == sizes(8, 64 * 1024, 2)
    for c in rows:
        assert c[2:4] == ["float64", "max"], c
        assert int(c[1]) == int(c[0]) // 8, c
        assert c[8] == "0" and c[12] == "0", c
    assert "# Wrong values         : 0 OK" in proc.stdout


def test_benchmark_buffers_start_on_a_page() -> None:
    """Every buffer the benchmarks time (interlink bench, compare.py for every system) is page-aligned:
    two arrays allocated one after the other lie 16 bytes apart modulo 4 KiB, where a copy between them
    (MPICH's out-of-place Allreduce, the bench's out-of-place copy) runs 2-8x slower (4K aliasing)."""
    from interlink.bench.peers import aligned_empty, buffers

    for n, dt in ((0, np.float32), (1, np.float64), (4093, np.int8), (1 << 16, np.float32)):
        a = aligned_empty(n, dt)
        assert a.size == n and a.dtype == np.dtype(dt) and a.flags.c_contiguous and a.flags.writeable
        assert n == 0 or a.ctypes.data % 4096 == 0  # (an empty view's address means nothing)
        a[...] = 3  # the whole view is usable
    for coll in ("all_reduce", "broadcast", "all_gather", "reduce_scatter"):
        for nbytes in (8, 65536, 262144 + 12):
            inp, out = buffers(coll, nbytes, 3, 0)
            assert inp.ctypes.data % 4096 == 0 and out.ctypes.data % 4096 == 0, (coll, nbytes)


def test_the_model_column_is_warm_before_the_ranks_start(monkeypatch) -> None:
    """The parent builds and warms the model column (imports, topology, a first prediction: ~70 ms of
    CPU) before it launches the ranks: done while they timed the first sizes, it took a core from one of
    them on a 2-core host and one of the 8-64 B rows read 5x its time in every run."""
    import interlink.launch.local as local
    from interlink.cli import bench as cb
    from interlink.cli.main import main

    order: list[str] = []
    real_warm = cb.ModelColumn.warm

    def warm(self, dtype: str) -> None:
        order.append("warm")
        real_warm(self, dtype)

    def fake_launch(cmd, nranks, **kw) -> int:
        order.append("launch")
        return 3

    monkeypatch.setattr(cb.ModelColumn, "warm", warm)
    monkeypatch.setattr(local, "launch", fake_launch)
    main(["bench", "-b", "8", "-e", "8", "--ranks", "2"])
    assert order[:2] == ["warm", "launch"], order


def test_rows_print_once_when_stdout_and_stderr_share_a_pipe(tmp_path):
    """`interlink bench 2>&1 | tee log`: the table's rows, no progress line a size repeating each row; with
    stderr apart, the progress lines go there."""
    cmd = [sys.executable, "-m", "interlink", "bench", "-e", "64", "--iters", "2", "-w", "1"]
    both = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, cwd=tmp_path)
    assert both.returncode == 0, both.stdout
    assert "interlink bench: [" not in both.stdout
    rows = [ln.split()[0] for ln in both.stdout.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert rows == ["8", "16", "32", "64"], both.stdout
    apart = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert apart.returncode == 0 and apart.stderr.count("interlink bench: [") == 4, apart.stderr
