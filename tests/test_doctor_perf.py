"""`interlink doctor perf`: every measured point explained within the model's error, or flagged with the term
its gap comes from."""

from __future__ import annotations

import json

import pytest

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
    """Every numeric column says its unit (bytes, us a call, the ratio as 'x model'), its lines fit 100
    columns, and the command says on stderr which collective it measures, k of n, with the time left from the
    second on, and when it is done."""
    assert main(["doctor", "perf", "--ops", "all_reduce,broadcast", "-e", "4K", "-f", "32"]) == 0
    cap = capsys.readouterr()
    head = next(ln for ln in cap.out.splitlines() if "algorithm" in ln).split()
    assert head == ["bytes", "algorithm", "measured", "us", "model", "us", "x", "model", "verdict"]
    assert all(len(ln) <= 100 for ln in cap.out.splitlines())
    prog = [ln for ln in cap.err.splitlines() if ln.startswith("interlink doctor perf: ")]
    assert len(prog) == 3 and "[1/2] all_reduce on 2 ranks" in prog[0] and "s left)" in prog[1]
    assert prog[2].startswith("interlink doctor perf: 4 of 4 sizes measured in ")


def test_a_long_sweep_says_the_sizes_done_and_the_time_left(capsys, monkeypatch):
    """Plain lines (stderr not a terminal): while a sweep runs, a line at most every 5 s with the sizes done
    and the time left (the seconds so far over the sizes done); with rich and a terminal, a bar instead."""
    from interlink.cli.doctor import _PerfProgress, _sweep_sizes

    assert _sweep_sizes(8, 4 << 20, 8) == 7 and _sweep_sizes(8, 4096, 32) == 2
    now = [0.0]
    p = _PerfProgress(["all_reduce", "broadcast"], 4, clock=lambda: now[0])
    p.sweep(0, "all_reduce", "on 2 ranks")
    for i, t in enumerate((2.0, 4.0, 6.0)):  # the third size, 6 s in: 3 of 8 sizes in 6 s, 10 s left
        now[0] = t
        p.size(i, str(8 << i))
    now[0] = 8.0
    p.size(3, "64")  # the sweep's last size: its end is the next sweep's line
    p.sweep(1, "broadcast", "on 2 ranks")
    p.close()
    err = capsys.readouterr().err.splitlines()
    assert err == ["interlink doctor perf: [1/2] all_reduce on 2 ranks (0 s so far)",
                   "interlink doctor perf: [1/2] all_reduce: 3 of 4 sizes done, 32 B last (6 s so far, about 10 s "
                   "left)",
                   "interlink doctor perf: [2/2] broadcast on 2 ranks (8 s so far, about 8 s left)",
                   "interlink doctor perf: 4 of 8 sizes measured in 8 s"]
    pytest.importorskip("rich")
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    p = _PerfProgress(["all_reduce"], 2)
    assert p.rich is not None
    p.sweep(0, "all_reduce", "on 2 ranks")
    p.size(0, "8")
    p.close()
    assert "interlink doctor perf: [" not in capsys.readouterr().err
