"""`interlink doctor hang`: each verdict made to happen in a real job of 4 processes (tests/doctor_job.py),
on interlink's flight-recorder dumps and on torch's (gloo), then read back by the command."""

from __future__ import annotations

import json
import pathlib
import signal

import pytest

from doctor_launch import run_job
from interlink.cli.main import main
from interlink.doctor import dumps as dmod, hang


_RUNS: dict = {}


def _run(tmp_path_factory: pytest.TempPathFactory, scenario: str, **kw) -> pathlib.Path:
    """Each job runs once per test session (several tests read the same dumps)."""
    key = (scenario, tuple(sorted(kw.items())))
    if key not in _RUNS:
        d = tmp_path_factory.mktemp(scenario)
        run_job(scenario, d / "dumps", **kw)
        _RUNS[key] = d
    return _RUNS[key]


def _doctor(tmp: pathlib.Path, capsys: pytest.CaptureFixture, *extra: str) -> dict:
    code = main(["doctor", "hang", str(tmp / "dumps"), "--json", *extra])
    out = json.loads(capsys.readouterr().out)
    out["code"] = code
    return out


def _kinds(out: dict) -> list[str]:
    return [v["kind"] for v in out["verdicts"]]


def test_a_healthy_job_gets_no_verdict(tmp_path, capsys):
    run_job("ok", tmp_path / "dumps")
    out = _doctor(tmp_path, capsys)
    assert out["verdicts"] == [] and out["code"] == 0
    d = json.loads((tmp_path / "dumps" / "interlink-rank3.json").read_text())
    assert d["rank"] == 3 and d["world_size"] == 4 and d["reason"].startswith("exit")
    calls = d["groups"][0]["calls"]
    assert [c["seq"] for c in calls] == list(range(1, 7)) and {c["state"] for c in calls} == {"done"}
    c = calls[0]
    assert (c["op"], c["dtype"], c["count"], c["bytes"]) == ("all_reduce", "float32", 2, 8)
    # the host-page path records its start only (one clock read a call); the regular path also its end
    assert c["algorithm"] and "duration" not in c and c["start"] > 1e9  # (the path's name: the registry's)


def test_never_entered_and_a_missing_dump(tmp_path_factory, capsys):
    """Rank 2 sleeps instead of calling all_reduce #4; rank 1 runs without INTERLINK_DUMP_DIR."""
    tmp = _run(tmp_path_factory, "never_entered", no_dump=(1,))
    out = _doctor(tmp, capsys)
    v = out["verdicts"][0]
    assert _kinds(out) == ["never-entered", "missing-dump"] and out["code"] == 1
    assert v["ranks"] == [2] and v["seq"] == 4
    assert any("its last call was 3" in e and "SIGTERM" in e for e in v["evidence"])
    assert any("CommTimeoutError waiting for rank 2" in e for e in v["evidence"])
    assert out["verdicts"][1]["ranks"] == [1]


def test_mismatch(tmp_path, capsys):
    run_job("mismatch", tmp_path / "dumps")
    out = _doctor(tmp_path, capsys)
    v = out["verdicts"][0]
    assert _kinds(out) == ["mismatch"] and v["seq"] == 4 and v["ranks"] == [1]
    assert "rank 1 called broadcast" in v["summary"] and "ranks 0,2,3 called all_reduce" in v["summary"]


def test_stalled_transfer(tmp_path, capsys):
    run_job("stalled", tmp_path / "dumps")
    out = _doctor(tmp_path, capsys)
    v = out["verdicts"][0]
    assert _kinds(out) == ["stalled"] and v["ranks"] == [3] and v["seq"] == 4
    # the wait-for graph: per waiting rank, the peer, the bytes missing and the round
    edges = [e for e in v["evidence"] if " -> rank " in e]
    assert edges and all("missing" in e or "not taken" in e for e in edges)
    assert any("round" in e for e in edges)
    assert any("rank 3 was still inside call 4" in e for e in v["evidence"])


def test_straggler(tmp_path, capsys):
    run_job("straggler", tmp_path / "dumps")
    out = _doctor(tmp_path, capsys)
    v = out["verdicts"][0]
    assert _kinds(out) == ["straggler"] and v["ranks"] == [1]
    assert 30 < float(v["summary"].split("calls ")[1].split(" ms")[0]) < 200


def test_trace_of_the_straggler_job(tmp_path_factory, tmp_path, capsys):
    """`interlink doctor trace`: every rank's calls on one timeline, and per call the model's time from the
    moment the last rank entered: the straggler is the last to enter, 40 ms after the first."""
    tmp = _run(tmp_path_factory, "straggler")
    out = tmp_path / "t.json"
    assert main(["doctor", "trace", str(tmp / "dumps"), "-o", str(out)]) == 0
    ev = json.loads(out.read_text())["traceEvents"]
    measured = [e for e in ev if e.get("pid") == 1 and e["ph"] in ("X", "i")]
    model = [e for e in ev if e.get("pid") == 2 and e["ph"] == "X"]
    assert sorted({e["tid"] for e in measured}) == [0, 1, 2, 3] and len(measured) == 4 * 13
    assert len(model) == 13 and all(e["dur"] > 0 for e in model)
    # rank 1 sleeps 40 ms before 8 of the calls (on a loaded host another rank may also be late once)
    late = [e for e in model if e["args"]["entry_spread_us"] > 30e3 and e["args"]["last_entered"] == 1]
    assert len(late) >= 6
    for e in late:  # the model's event starts when rank 1 entered that call
        k = e["name"].split("#")[1].split()[0]
        r1 = next(m for m in measured if m["tid"] == 1 and m["args"]["seq"] == int(k))
        assert abs(e["ts"] - r1["ts"]) < 1e-6


def test_interlink_trace(tmp_path_factory, tmp_path, capsys):
    """INTERLINK_TRACE=DIR: a Chrome trace per rank (every call a span, the host page's calls too; each round of
    the ring split into its transfer and local phases), merged by `interlink doctor trace`."""
    tmp = _run(tmp_path_factory, "traced", env_name="INTERLINK_TRACE")
    d = tmp / "dumps"
    for r in range(4):
        ev = json.loads((d / f"interlink-trace-rank{r}.json").read_text())["traceEvents"]
        calls = [e for e in ev if e.get("name", "").startswith("#") and "round" not in e["name"]]
        assert len(calls) == 7 and all(e["ph"] == "X" and e["dur"] > 0 for e in calls)
        rounds = [e for e in ev if " round " in e.get("name", "")]
        assert sorted({e["args"]["seq"] for e in rounds}) == [1, 2, 3, 4, 5, 6, 7]
        ring = [e for e in rounds if e["args"]["seq"] in (4, 5)]
        assert len(ring) == 2 * 6 and all(e["args"]["rounds"] == 6 for e in ring)  # ring: 2(p-1) rounds
        assert sum(e["args"]["bytes_sent"] for e in ring) == 2 * 6 * (1 << 20) // 4
        # the host page's calls (8-byte all_reduces): one round each, its transfer (payload in, until the
        # peers have published) and local phase (the reduction); 8 bytes written, 3 x 8 read
        host = [e for e in rounds if e["args"]["seq"] not in (4, 5)]
        assert len(host) == 5 and all(e["args"]["rounds"] == 1 for e in host), host
        assert all((e["args"]["bytes_sent"], e["args"]["bytes_received"]) == (8, 24) for e in host), host
        transfer = [e for e in ev if e.get("name") == "transfer"]
        assert len(transfer) == 12 + 5 and all(e["dur"] > 0 for e in transfer)
        assert len([e for e in ev if e.get("name") == "local"]) == 12 + 5
        # each round's transfer per peer and lane: a ring round sends to the next rank, receives from the last
        names = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
        ops = [e for e in ev if e["ph"] == "X" and names.get(e["tid"], "").startswith(("send ", "recv "))]
        assert {names[e["tid"]] for e in ops} == {f"send to rank {(r + 1) % 4} lane 0",
                                                  f"recv from rank {(r - 1) % 4} lane 0"}
        assert len(ops) == 2 * 12 and all(e["args"]["bytes"] == (1 << 20) // 4 for e in ops)  # a quarter of 1 MiB
    out = tmp_path / "t.json"
    assert main(["doctor", "trace", str(d), "-o", str(out), "--no-model"]) == 0
    merged = json.loads(out.read_text())["traceEvents"]
    assert len([e for e in merged if e.get("name") == "transfer"]) == 4 * (12 + 5)
    assert {e["tid"] for e in merged if e.get("name") == "local"} == {1000, 1001, 1002, 1003}
    assert len([e for e in merged if e["ph"] == "X" and e["name"].startswith(("send to", "recv from"))]) == 4 * 24
    # with the model: the simulator's rounds of the same ring Schedule beside the measured ones, each round
    # with the slowest rank's measured time of it
    assert main(["doctor", "trace", str(d), "-o", str(out)]) == 0
    merged = json.loads(out.read_text())["traceEvents"]
    sim = [e for e in merged if e.get("pid") == 2 and e.get("tid") == 1 and e["ph"] == "X"]
    ring = [e for e in sim if e["args"]["rounds"] == 6]
    assert len(ring) == 2 * 6 and all(e["dur"] > 0 for e in ring)
    # the host page's calls: their one-round `slots` Schedule simulated beside each
    host = [e for e in sim if e["args"]["rounds"] == 1]
    assert len(host) == 5 and all(e["dur"] > 0 for e in host) and len(sim) == 12 + 5
    assert all(e["args"]["measured_us"] > 0 and e["args"]["measured_over_simulated"] > 0 for e in sim)
    for seq in (4, 5):  # the rounds follow each other from the moment the last rank entered the call
        mine = sorted((e for e in sim if f"#{seq} " in e["name"]), key=lambda e: e["ts"])
        assert [e["args"]["round"] for e in mine] == list(range(6))
        assert all(b["ts"] >= a["ts"] + a["dur"] - 1e-6 for a, b in zip(mine, mine[1:]))


def test_dead_rank(tmp_path_factory, capsys):
    out = _doctor(_run(tmp_path_factory, "dead"), capsys)
    assert _kinds(out) == ["dead"] and out["verdicts"][0]["ranks"] == [2]


def test_text_report_names_missing_ranks(tmp_path_factory, capsys):
    tmp = _run(tmp_path_factory, "dead")
    assert main(["doctor", "hang", str(tmp / "dumps"), "--ranks", "5"]) == 1
    text = capsys.readouterr().out
    assert "read 3 dump(s) of 5 rank(s)" in text and "[dead] rank 2 died" in text
    assert "[missing-dump] rank 4 left no dump" in text


# ---- torch's flight recorder (gloo records calls with TORCH_FR_BUFFER_SIZE set) -----------------------

torch = pytest.importorskip("torch")


@pytest.fixture
def fr_env(monkeypatch):
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "64")


@pytest.mark.parametrize("scenario,kinds,ranks", [
    ("torch_never_entered", ["never-entered"], [2]),
    ("torch_mismatch", ["mismatch"], [1]),
    ("torch_straggler", ["straggler"], [1]),
])
def test_torch_gloo_dumps(tmp_path, capsys, fr_env, scenario, kinds, ranks):
    # gloo's timeout 3 s: on a loaded 2-core host the first calls of 4 torch processes may take more than 2 s
    run_job(scenario, tmp_path / "dumps", stop_signal=signal.SIGUSR1, timeout=3.0)
    ds = dmod.load_dir(str(tmp_path / "dumps"))
    assert {d.source for d in ds} == {"torch"}
    out = _doctor(tmp_path, capsys, "--ranks", "4")
    assert _kinds(out) == kinds, out
    assert out["verdicts"][0]["ranks"] == ranks


def test_clocks_aligned_across_hosts_by_the_calls_ends():
    """Ranks on two hosts whose clocks differ by 5 s: the straggler is found after alignment."""
    def dump(rank, host, skew, late):
        calls = {}
        for k in range(1, 9):
            t0 = 100.0 + k + skew + (0.05 if late else 0.0)
            end = 100.0 + k + 0.06 + skew
            calls[k] = dmod.Call(seq=k, op="all_reduce", dtype="float32", count=2, state="done", start=t0,
                                 duration=end - t0)
        return dmod.RankDump(rank=rank, path="", source="interlink", world_size=4, host_id=host,
                             groups={"world": dmod.GroupView("world", [0, 1, 2, 3], 8, calls)})
    ds = [dump(0, "a", 0.0, False), dump(1, "a", 0.0, False), dump(2, "b", 5.0, True), dump(3, "b", 5.0, False)]
    vs = hang.analyze(ds)
    assert [v.kind for v in vs] == ["straggler"] and vs[0].ranks == [2]


def test_no_straggler_past_a_mismatch():
    """Past a mismatched call the ranks' call numbers name different collectives: their entry times are not
    compared (gloo completes a mismatched pair, and a loaded host makes the odd rank late after it)."""
    def dump(rank):
        calls = {}
        for k in range(1, 7):
            late = rank == 1 and k >= 3
            op = "broadcast" if rank == 1 and k == 4 else "all_reduce"
            t0 = 100.0 + k + (0.05 if late else 0.001 * rank)
            calls[k] = dmod.Call(seq=k, op=op, dtype="float32", count=2, state="done", start=t0,
                                 duration=100.0 + k + 0.06 - t0)
        return dmod.RankDump(rank=rank, path="", source="torch", world_size=4,
                             groups={"world": dmod.GroupView("world", [0, 1, 2, 3], 6, calls)})
    vs = hang.analyze([dump(r) for r in range(4)])
    assert [v.kind for v in vs] == ["mismatch"] and vs[0].ranks == [1] and vs[0].seq == 4
