"""`interlink doctor nccl-tests` on nccl-tests logs published in issue threads whose cause was later found.

tests/data/nccl_tests/cases.json lists each log (rows as printed in the thread), its source, the hardware,
the cause in the thread's words, the cluster to pass with -t, and which of the doctor's variants is that
cause. Per case the rank of the true cause is asserted as found (a change that moves it shows here); the
target of issue 45 (the cause named first in >= 6 of >= 8 cases) is asserted as well, and fails as
expected while fewer than 8 usable logs are collected (see docs/doctor.md, "Published logs").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interlink.cli.main import main
from interlink.doctor import ncclt

DATA = Path(__file__).parent / "data" / "nccl_tests"
CASES = json.loads((DATA / "cases.json").read_text())["cases"]


def _ranked(case: dict) -> list[str]:
    log = ncclt.parse((DATA / case["file"]).read_text(), case.get("collective"))
    topo = case["topology"]
    spec = str(DATA / topo) if topo.endswith((".json", ".yaml", ".yml")) else topo
    _, fits = ncclt.explain(log, spec)
    return [f.variant.name for f in fits]


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_rank_of_the_true_cause(case):
    names = _ranked(case)
    assert case["true_variant"] in names, "the cause is not among the doctor's variants"
    assert names.index(case["true_variant"]) + 1 == case["true_rank"]
    assert names[0] == case["first_answer"]


def test_the_command_on_a_published_log(capsys):
    case = CASES[0]
    assert main(["doctor", "nccl-tests", str(DATA / case["file"]), "-t", str(DATA / case["topology"]),
                 "--op", case["collective"], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["explanations"][0]["name"] == case["first_answer"]


def test_old_size_column_is_read_from_count():
    # NVIDIA/nccl#340 (nccl-tests of 2020, -g 2): the size column is twice count x 4 bytes; algbw and the
    # time agree with count x 4, which is the message
    log = ncclt.parse((DATA / "nccl340-2080ti-nvlink-bridge.log").read_text(), "all_reduce")
    r = log.rows[-1]
    assert (r.nbytes, r.count) == (67108864, 16777216)
    assert abs(r.nbytes / (r.time_us * 1e3) - r.algbw) / r.algbw < 0.02
    # a current log whose size is count x element size is read as printed
    row = ncclt.parse("  8388608  2097152  float  sum  -1  900.0  9.32  16.31  0  901.0  9.31  16.30  0\n").rows[0]
    assert row.nbytes == 8388608


@pytest.mark.xfail(strict=True, reason="issue 45's target needs >= 8 published logs; 1 usable log was found in "
                                       "the stored threads (docs/doctor.md, Published logs)")
def test_target_first_answer_right_in_6_of_8():
    right = sum(_ranked(c)[0] == c["true_variant"] for c in CASES)
    assert len(CASES) >= 8 and right >= 6


def test_variants_scale_the_link_specs_a_topology_file_carries():
    # the case's topology file embeds its link specs (as `interlink topo --save` writes them); the variants must
    # scale those, or every link variant would price the cluster as given
    t = str(DATA / "topo-2x2080ti-nvlink-bridge.json")
    assert "specs" in json.loads(Path(t).read_text())
    by = {v.name: v for v in ncclt.variants()}
    bw = {name: next(l.spec for l in ncclt._topology(t, by[name]).links if l.spec.kind == "nvlink").effective_gbps
          for name in ("as specified", "NVLink at half rate")}
    assert bw["NVLink at half rate"] == bw["as specified"] / 2
