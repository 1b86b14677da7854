"""`interlink doctor perf`: every measured point explained within the model's error, or flagged with the term
its gap comes from."""

from __future__ import annotations

import json

from interlink.cli.main import main
from interlink.doctor import perf


def _rows(times: dict[int, float], pred_us: dict[int, float], factor: float = 1.0) -> list[dict]:
    rows = []
    for size, t in times.items():
        algbw = size / (t * 1e-6)
        rows.append({"size": size, "algorithm": "fast", "oop_time_us": t, "oop_algbw": algbw,
                     "oop_busbw": algbw * factor, "pred_busbw": size / (pred_us[size] * 1e-6) * factor})
    return rows


PRED = {8: 5.0, 1 << 10: 6.0, 1 << 20: 200.0, 1 << 24: 3000.0}
LAT = lambda algorithm: 5.0  # noqa: E731 - the model's per-call term


def test_points_within_the_tolerance_are_explained():
    pts = perf.explain_rows(_rows({s: t * 1.2 for s, t in PRED.items()}, PRED), "all_reduce", 2, 2, "shm", LAT)
    assert [p.verdict for p in pts] == ["explained"] * 4
    assert all(abs(p.ratio - 1.2) < 1e-9 for p in pts)


def test_each_gap_is_named_by_the_term_that_dominates_it():
    slow = {8: 20.0, 1 << 10: 24.0, 1 << 20: 210.0, 1 << 24: 9000.0}
    pts = perf.explain_rows(_rows(slow, PRED, 2.0), "all_reduce", 2, 4, "shm", LAT, load=0.5)
    assert [(p.verdict, p.term) for p in pts] == [("slower", "latency"), ("slower", "latency"), ("explained", ""),
                                                  ("slower", "bandwidth or reduction")]
    assert perf.explain_rows(_rows(slow, PRED), "all_gather", 2, 4, "shm", LAT)[3].term == "bandwidth"
    # more ranks than cores: the per-call gaps are the cores' sharing
    assert perf.explain_rows(_rows(slow, PRED), "all_reduce", 4, 2, "shm", LAT)[0].term == "ranks sharing cores"
    assert perf.explain_rows(_rows(slow, PRED), "all_reduce", 2, 4, "tcp", LAT)[0].term == "loopback TCP"
    busy = perf.explain_rows(_rows(slow, PRED), "all_reduce", 2, 2, "shm", LAT, load=9.0)[0]
    assert busy.term == "a busy host (latency term)" and "load average 9.0" in busy.advice
    fast = perf.explain_rows(_rows({8: 1.0}, {8: 5.0}), "all_reduce", 2, 4, "shm", LAT)[0]
    assert (fast.verdict, fast.term) == ("faster", "faster than the model")
    text = perf.report("all_reduce", 2, pts)
    assert "1 of 4 sizes within x1.25 of the model; 3 flagged" in text and "latency:" in text


def test_the_command_on_this_host(capsys):
    assert main(["doctor", "perf", "--ops", "all_gather", "-e", "4K", "-f", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [c] = out["collectives"]
    assert c["collective"] == "all_gather" and c["ranks"] == 2 and [p["size"] for p in c["points"]] == [8, 256]
    for p in c["points"]:
        assert p["verdict"] in ("explained", "slower", "faster", "not priced")
        assert p["predicted_us"] and p["measured_us"] > 0
        assert (p["verdict"] == "explained") == (p["term"] == "")


def test_the_table_has_units_and_the_sweep_reports_progress(capsys):
    """The table's time columns say their unit (us a call), its lines fit 100 columns, and the command says on
    stderr which collective it measures, k of n, with the time left from the second on."""
    assert main(["doctor", "perf", "--ops", "all_reduce,broadcast", "-e", "4K", "-f", "32"]) == 0
    cap = capsys.readouterr()
    assert "measured us" in cap.out and "model us" in cap.out
    assert all(len(ln) <= 100 for ln in cap.out.splitlines())
    prog = [ln for ln in cap.err.splitlines() if ln.startswith("interlink doctor perf: [")]
    assert len(prog) == 2 and "[1/2] all_reduce on 2 ranks" in prog[0] and "s left)" in prog[1]
