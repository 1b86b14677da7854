"""`interlink doctor nccl-tests` on nccl-tests logs published in issue threads whose cause was later found.

tests/data/nccl_tests/cases.json lists each log (rows as printed in the thread), its source, the hardware,
the cause in the thread's words, the cluster to pass with -t, and which of the doctor's variants is that
cause. Per case the rank of the answer naming the true cause is asserted as found (a change that moves it shows
here); the target of issue 45 (the cause named first in >= 6 of >= 8 cases) is asserted as well, and fails as
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


def _answers(case: dict) -> list[list[str]]:
    """The doctor's answers for a case, best first, each the causes it names (variants of one predicted curve)."""
    log = ncclt.parse((DATA / case["file"]).read_text(), case.get("collective"))
    topo = case["topology"]
    spec = str(DATA / topo) if topo.endswith((".json", ".yaml", ".yml")) else topo
    _, fits = ncclt.explain(log, spec)
    return [ncclt.names(f) for f in fits]


def _rank(case: dict) -> int:
    answers = _answers(case)
    return next((i for i, a in enumerate(answers, 1) if case["true_variant"] in a), 0)


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_rank_of_the_true_cause(case):
    answers = _answers(case)
    assert any(case["true_variant"] in a for a in answers), "the cause is not among the doctor's variants"
    assert _rank(case) == case["true_rank"]
    assert answers[0][0] == case["first_answer"]


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


RIGHT = sum(_rank(c) == 1 for c in CASES) if CASES else 0


@pytest.mark.xfail(strict=True, reason=f"issue 45's target needs >= 8 published logs with the cause named first in "
                                       f">= 6; {len(CASES)} usable log(s) found in the stored threads, the cause named "
                                       f"first in {RIGHT} (docs/doctor.md, Published logs)")
def test_target_first_answer_right_in_6_of_8():
    right = sum(_rank(c) == 1 for c in CASES)
    assert len(CASES) >= 8 and right >= 6
