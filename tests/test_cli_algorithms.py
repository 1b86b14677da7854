"""The ``interlink algorithms`` command and the verification API behind it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from interlink.algorithms import registry
from interlink.algorithms.registry import get_schedule
from interlink.algorithms.schedule import Builder, Schedule, inp, out
from interlink.algorithms.verify import counts_for, roots_for, verify_all, verify_pair
from interlink.cli.main import main

BROKEN = "_broken_for_test"


def test_list_names_ring_all_reduce(capsys):
    assert main(["algorithms"]) == 0
    text = capsys.readouterr().out
    assert "all_reduce" in text and "ring" in text


def test_list_plain_without_rich(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rich", None)  # import rich -> ImportError
    monkeypatch.setitem(sys.modules, "rich.console", None)
    monkeypatch.setitem(sys.modules, "rich.table", None)
    assert main(["algorithms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["collective", "algorithm", "summary"]
    assert any(ln.split()[:2] == ["all_reduce", "ring"] for ln in lines)


def test_list_json(capsys):
    assert main(["algorithms", "--json", "--collective", "all_reduce"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"collective": "all_reduce", "algorithm": "ring"}.items() <= next(
        r for r in rows if r["algorithm"] == "ring").items()
    assert all(r["collective"] == "all_reduce" for r in rows)


def test_verify_json_ring_passes(capsys):
    rc = main(["algorithms", "--verify", "--max-ranks", "5", "--json", "--algorithm", "ring"])
    captured = capsys.readouterr()
    results = json.loads(captured.out)
    assert rc == 0, captured.err
    got = {r["collective"] for r in results}
    assert {"all_reduce", "all_gather", "reduce_scatter", "broadcast"} <= got
    for r in results:
        assert set(r) == {"collective", "algorithm", "cases", "failures"}
        assert r["algorithm"] == "ring" and r["failures"] == [] and r["cases"] > 0


def test_verify_console_script_exit_code():
    proc = subprocess.run(
        [sys.executable, "-m", "interlink", "algorithms", "--verify", "--max-ranks", "3",
         "--collective", "all_reduce", "--algorithm", "ring"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all_reduce/ring" in proc.stdout and "all passed" in proc.stdout


@pytest.mark.parametrize("args,total", [
    (["--algorithm", "pairwise_v"], 1),  # built per rank, not in the registry: verified after it, counted too
    (["--algorithm", "ring", "--collective", "all_reduce"], 1),
    (["--algorithm", "ring", "--algorithm", "pairwise_v", "--collective", "all_to_all"], 1),  # no ring all_to_all
])
def test_verify_counts_what_it_verifies(capsys, args, total):
    """The announced count is the number of lines that follow, numbered [k/total]; no estimate of the whole
    registry's time for a filtered run."""
    assert main(["algorithms", "--verify", "--max-ranks", "4", *args]) == 0
    cap = capsys.readouterr()
    assert f"verifying {total} (collective, algorithm) pairs" in cap.err and "about 25 s" not in cap.err
    lines = [ln for ln in cap.out.splitlines() if ln.startswith("ok ")]
    assert len(lines) == total and f"[{total}/{total}]" in lines[-1], cap.out


def test_case_matrix():
    assert counts_for("all_reduce", 4) == [0, 1, 3, 5, 11, 61]
    assert counts_for("all_reduce", 1) == [0, 1, 2, 5, 61]
    assert counts_for("barrier", 9) == [0]
    assert roots_for("broadcast", 5) == [0, 4]
    assert roots_for("broadcast", 1) == [0]
    assert roots_for("all_gather", 5) == [0]
    res = verify_pair("broadcast", "ring", max_ranks=3)
    # nranks 1: counts {0,1,2,5,61} x root {0}; 2: {0,1,3,7,61} x {0,1}; 3: {0,1,2,4,9,61} x {0,2};
    # each with params {}, channels=2 and channels=3 (rail-aligned channels need hosts of 2 or 3 ranks
    # and more than one host: none up to 3 ranks)
    assert res == {"collective": "broadcast", "algorithm": "ring", "cases": 3 * (5 + 10 + 12), "failures": []}


@pytest.fixture
def broken_algorithm():
    """An all_reduce that forgets to reduce (each rank keeps its own input), and one that raises
    for nranks > 2; removed from the registry afterwards."""

    @registry.register("all_reduce", BROKEN, summary="deliberately wrong")
    def broken(nranks: int, count: int, root: int = 0) -> Schedule:
        b = Builder("all_reduce", BROKEN, nranks, count, root)
        for r in range(nranks):
            b.copy(0, r, inp(0, count), out(0, count))
        return b.build()

    @registry.register("all_gather", BROKEN, summary="raises")
    def raising(nranks: int, count: int, root: int = 0) -> Schedule:
        if nranks > 2:
            raise RuntimeError("builder exploded")
        b = Builder("all_gather", BROKEN, nranks, count, root)
        for r in range(nranks):
            b.copy(0, r, inp(0, count), out(r * count, count))
            for j in range(nranks):
                if j != r:
                    b.transfer(0, r, j, inp(0, count), out(r * count, count))
        return b.build()

    yield
    registry._REGISTRY.pop(("all_reduce", BROKEN), None)
    registry._REGISTRY.pop(("all_gather", BROKEN), None)


def test_verify_all_reports_broken_builder(broken_algorithm):
    results = {r["collective"]: r for r in verify_all(max_ranks=4, algorithms=[BROKEN])}
    assert set(results) == {"all_reduce", "all_gather"}
    ar = results["all_reduce"]
    # nranks=1 is right by accident, and so are count=0 cases; everything else is wrong
    assert ar["cases"] == 5 + 5 + 6 + 6
    assert len(ar["failures"]) == ar["cases"] - 5 - 3
    assert all("VerificationError" in f for f in ar["failures"])
    assert any("nranks=4 count=61" in f for f in ar["failures"])
    ag = results["all_gather"]
    assert ag["failures"] and all("builder exploded" in f for f in ag["failures"])
    assert not any("nranks=2" in f or "nranks=1" in f for f in ag["failures"])


def test_verify_all_in_workers_reports_the_same(broken_algorithm):
    """--jobs: pairs verified in worker processes give the same results, failures and order as in one."""
    one = verify_all(max_ranks=4, algorithms=[BROKEN, "ring"], jobs=1)
    two = verify_all(max_ranks=4, algorithms=[BROKEN, "ring"], jobs=2)
    assert one == two
    assert any(r["failures"] for r in two) and any(r["algorithm"] == "ring" and not r["failures"] for r in two)


def test_verify_cli_exits_1_on_failure(broken_algorithm, capsys):
    assert main(["algorithms", "--verify", "--max-ranks", "3", "--algorithm", BROKEN]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and f"all_reduce/{BROKEN}" in text


def test_show_and_save_round_trip(tmp_path, capsys):
    path = tmp_path / "sched.json"
    rc = main(["algorithms", "--show", "all_reduce", "ring", "--nranks", "4", "--count", "10",
               "--save", str(path)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "all_reduce/ring" in text and "rank 3:" in text and "recv+reduce" in text
    loaded = Schedule.from_json(path.read_text())
    assert loaded.to_json() == get_schedule("all_reduce", "ring", 4, 10).to_json()


def test_show_rooted_with_param(capsys):
    rc = main(["algorithms", "--show", "broadcast", "ring", "--nranks", "3", "--count", "7", "--root", "2",
               "--param", "segments=2"])
    assert rc == 0
    assert "segments=2" in capsys.readouterr().out


def test_show_unknown_algorithm(capsys):
    assert main(["algorithms", "--show", "all_reduce", "nope", "--nranks", "2", "--count", "1"]) == 2
    assert "nope" in capsys.readouterr().err


def test_verify_all_survives_a_failing_registry_load(monkeypatch):
    """When the registry cannot import every family at once, the families are imported one by
    one and whatever registered is still verified."""

    def boom():
        raise ImportError("a family module is broken")

    monkeypatch.setattr(registry, "entries", boom)
    results = verify_all(max_ranks=2, collectives=["all_gather"], algorithms=["ring"])
    assert [(r["collective"], r["algorithm"], r["failures"]) for r in results] == [("all_gather", "ring", [])]


def test_split_size_all_to_all_is_verified() -> None:
    """pairwise_v (all_to_all with split sizes: the runtime builds each rank's program from its own sizes)
    is in --verify: every rank's program merged, run on distinct values two-sided and one-sided, over
    empty, one-element, uneven, one-sender and random split matrices."""
    from interlink.algorithms.verify import ALLTOALLV, verify_alltoallv

    res = verify_alltoallv(6)
    assert res["failures"] == [] and res["cases"] == 5 * 6
    got = verify_all(max_ranks=3, algorithms=["pairwise_v"])
    assert [(r["collective"], r["algorithm"], r["failures"]) for r in got] == [(*ALLTOALLV, [])]
    assert all(r["algorithm"] != "pairwise_v" for r in verify_all(max_ranks=2, collectives=["broadcast"]))


def test_a_wrong_split_size_all_to_all_fails_verification(monkeypatch) -> None:
    """The check can fail: a builder that receives each peer's block at the sender's input offset (not
    the receiver's output offset) is caught, and so is one that drops the local copy."""
    import numpy as np

    from interlink.algorithms import alltoallv as mod
    from interlink.algorithms.schedule import Builder, Chunk
    from interlink.algorithms.verify import check_alltoallv
    from interlink.errors import InterlinkError

    good = mod.alltoallv_schedule

    def wrong_offsets(p, rank, isizes, osizes, isize, osize):
        ioff = np.concatenate([[0], np.cumsum(isizes)]).astype(int)
        b = Builder("all_to_all", "pairwise_v", p, 0, 0, keep_empty=True)
        b.buffers.update({"input": isize, "output": osize})
        b.copy(0, rank, Chunk("input", int(ioff[rank]), isizes[rank]), Chunk("output", 0, osizes[rank]))
        for k in range(1, p):
            to, frm = (rank + k) % p, (rank - k) % p
            b.send(k, rank, to, Chunk("input", int(ioff[to]), isizes[to]))
            b.recv(k, rank, frm, Chunk("output", 0, osizes[frm]))
        return b.build()

    def no_copy(p, rank, isizes, osizes, isize, osize):
        s = good(p, rank, isizes, osizes, isize, osize)
        import dataclasses

        from interlink.algorithms.schedule import Copy, Round

        ranks = list(s.ranks)
        ranks[rank] = tuple(Round(tuple(st for st in rd.steps if not isinstance(st, Copy))) for rd in s.ranks[rank])
        return dataclasses.replace(s, ranks=tuple(ranks))

    m = np.array([[2, 1, 3], [0, 4, 1], [5, 2, 2]])
    check_alltoallv(m)
    for bad in (wrong_offsets, no_copy):
        monkeypatch.setattr(mod, "alltoallv_schedule", bad)
        with pytest.raises(InterlinkError):
            check_alltoallv(m)
    monkeypatch.setattr(mod, "alltoallv_schedule", good)
