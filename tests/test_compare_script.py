"""benchmarks/compare.py: the medians over repeated runs, and a tiny real sweep."""

from __future__ import annotations

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "compare.py")


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("compare_script", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(system: str, t: float, size: int = 8) -> dict:
    return {"system": system, "collective": "all_reduce", "nranks": 2, "size": size, "time_us": t, "busbw": 1 / t}


def test_median_rows_takes_each_points_median_run(compare) -> None:
    runs = [[_row("mpich", 9.0), _row("interlink-shm", 1.0)],
            [_row("mpich", 2.0), _row("interlink-shm", 5.0)],
            [_row("mpich", 3.0), _row("interlink-shm", 4.0), _row("interlink-shm", 7.0, size=64)]]
    got = {(r["system"], r["size"]): r["time_us"] for r in compare.median_rows(runs)}
    assert got == {("mpich", 8): 3.0, ("interlink-shm", 8): 4.0, ("interlink-shm", 64): 7.0}
    two = compare.median_rows(runs[:2])  # an even count: the lower middle
    assert sorted(r["time_us"] for r in two) == [1.0, 2.0]


def test_repeated_sweep_keeps_every_run(compare) -> None:
    res = compare.run([2], ["all_reduce"], [8, 4096], ["interlink-shm"], runs=2)
    assert len(res["runs"]) == 2 and all(len(rows) == 2 for rows in res["runs"])
    assert sorted(r["size"] for r in res["rows"]) == [8, 4096]
    assert all(r["time_us"] > 0 for r in res["rows"])
    assert "| all_reduce | 2 | 4K |" in compare.table(res)


def test_touch_writes_the_input_before_every_call_outside_the_timing() -> None:
    import time

    import numpy as np

    from interlink.bench import peers

    inp = np.zeros(16, np.float32)
    seen: list[float] = []
    calls: list[int] = []

    def touch(k: int) -> None:
        peers.toucher(inp)(k)
        time.sleep(0.002)  # an expensive write: must not count

    def call() -> None:
        calls.append(1)
        seen.append(float(inp[0]))

    t = peers.time_loop(call, lambda: None, lambda v: v, 1 << 30, warmup=2, reps=3, touch=touch)
    assert t < 0.001, t  # the 2 ms of each touch are outside the timing
    iters = peers.iters_for(1 << 30)
    assert len(calls) == 2 + 3 * iters
    assert seen == [float(k % 7) for k in range(2)] + [float(k % 7) for _ in range(3) for k in range(iters)]
    # at the sizes where interlink measures its two paths first, the warm-up covers it (PROBE_CALLS + 1)
    from interlink.runtime.fastpath import PROBE_CALLS

    calls.clear()
    peers.time_loop(lambda: calls.append(1), lambda: None, lambda v: v, 1 << 20, warmup=2, reps=1)
    assert len(calls) == max(PROBE_CALLS + 1, peers.iters_for(1 << 20) // 10) + peers.iters_for(1 << 20)
    # without touch the loop times the whole run of calls
    slow = peers.time_loop(lambda: time.sleep(0.002), lambda: None, lambda v: v, 1 << 30, warmup=1, reps=1)
    assert slow >= 0.002


def test_touched_sweep_says_so(compare) -> None:
    res = compare.run([2], ["broadcast"], [65536], ["interlink-shm"], touch=True)
    assert res["touch"] is True and len(res["rows"]) == 1 and res["rows"][0]["time_us"] > 0
    assert "(--touch)" in compare.table(res)


def test_same_process_turns_time_both_systems_in_one_mpich_job(compare) -> None:
    """--turns same-process: interlink-shm and MPICH rows from one MPICH job (both initialised in every
    rank), per collective and size; a system other than the pair runs apart; asking for one of the pair
    alone is refused."""
    pytest.importorskip("mpi4py")
    from interlink.bench import peers

    if peers.mpiexec() is None:
        pytest.skip("mpiexec not installed (pip install -e '.[compare]')")
    res = compare.run([2], ["all_reduce", "all_gather"], [8, 4096], ["interlink-shm", "mpich"], runs=2,
                      turns="same-process")
    got = {(r["system"], r["collective"], r["size"]) for r in res["rows"]}
    assert got == {(s, c, n) for s in ("interlink-shm", "mpich") for c in ("all_reduce", "all_gather")
                   for n in (8, 4096)}, got
    assert all(r["time_us"] > 0 and r["nranks"] == 2 for r in res["rows"])
    assert "| all_gather | 2 | 4K |" in compare.table(res)
    with pytest.raises(SystemExit):
        compare.run([2], ["all_reduce"], [8], ["interlink-shm"], turns="same-process")
