"""A host-page broadcast's root returns without waiting for its receivers (runtime/oneshot.py: OneShot.hot,
_settle; runtime/_hotcore.c: run_call, settle): its receivers' headers are checked at its next call, and
its done word written then. With the compiled core and without it (INTERLINK_NO_CCORE=1):

- results against numpy while receivers lag behind a root that runs ahead (every root in turn, broadcasts
  of several sizes mixed with all_reduce, all_gather and barriers, receivers sleeping at random);
- the root did run ahead (FastPath.pend was set after a broadcast while a receiver slept);
- mismatches still raise on every rank: a receiver that called something else, ranks that each took
  themselves for the root (nobody waits: the last to publish sees it), and a mismatched last call before
  destroy (the root's destroy raises);
- a receiver that never arrives: the root's next call times out naming it.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from interlink.runtime import ccore
from mp import run_ranks

PATHS = ["core", "python"]


def _env(path: str) -> dict:
    if path == "core" and not ccore.built():
        pytest.skip("the compiled core is not built in this install (no C compiler at install time)")
    return {"INTERLINK_NO_CCORE": "0" if path == "core" else "1", "INTERLINK_TRANSPORT": "shm"}


def ahead(rank: int, world: int, calls: int) -> dict:
    import interlink as dist
    from interlink.runtime import api

    dist.init(timeout=30)
    fast = api._world()._fast
    rng = np.random.default_rng(7)  # the same sequence of calls on every rank
    wrong, pended = [], 0
    for k in range(calls):
        kind = rng.integers(0, 10)
        n = int(rng.choice([1, 2, 7, 33, 257, 1000]))
        root = int(rng.integers(0, world))
        if rng.integers(0, 4) == 0 and rank != root:
            time.sleep(0.002)  # a receiver late: the root runs ahead
        if kind < 7:
            x = (np.arange(n, dtype=np.float64) + 1000 * rank + k) if rank == root else np.full(n, -1.0)
            dist.broadcast(x, src=root)
            if not np.array_equal(x, np.arange(n, dtype=np.float64) + 1000 * root + k):
                wrong.append(("broadcast", k, root, n))
            pended += int(rank == root and fast is not None and fast.pend != 0)
        elif kind < 9:
            x = np.arange(n, dtype=np.int64) * (rank + 1) + k
            dist.all_reduce(x)
            ref = np.arange(n, dtype=np.int64) * (world * (world + 1) // 2) + world * k
            if not np.array_equal(x, ref):
                wrong.append(("all_reduce", k, n))
        else:
            dist.barrier()
    core = fast.core.calls if fast is not None and fast.core is not None else 0
    dist.destroy()
    return {"wrong": wrong, "pended": pended, "core": core}


@pytest.mark.parametrize("world", [2, 3, 5])
@pytest.mark.parametrize("path", PATHS)
def test_root_runs_ahead_results_match_numpy(path: str, world: int) -> None:
    res = run_ranks(world, ahead, 300, timeout=120, env=_env(path))
    assert all(r["wrong"] == [] for r in res), res
    # the root did return before some receiver had arrived (that receiver slept)
    assert sum(r["pended"] for r in res) > 0, res
    if path == "core":
        assert all(r["core"] > 0 for r in res), res


def mismatched(rank: int, world: int, kind: str) -> dict:
    import interlink as dist

    dist.init(timeout=10)
    out: dict = {"at": None}
    x = np.ones(16)
    try:
        if kind == "other":  # rank 0 broadcasts, the others all_reduce; rank 0 then calls a barrier
            if rank == 0:
                dist.broadcast(x, src=0)
            else:
                time.sleep(0.2)  # the root has long returned
                dist.all_reduce(x)
            out["at"] = "next"
            dist.barrier()
        elif kind == "roots":  # every rank takes itself for the root: nobody waits for anybody
            dist.broadcast(x, src=rank)
            out["at"] = "next"
            dist.barrier()
        elif kind == "last":  # the mismatched broadcast is the job's last call: the root learns at destroy
            if rank == 0:
                dist.broadcast(x, src=0)
            else:
                time.sleep(0.2)
                dist.all_reduce(x)
        out["at"] = "destroy"
        dist.destroy()
        out["error"] = None
    except Exception as e:
        out.update(error=type(e).__name__, msg=str(e))
        try:
            dist.destroy()
        except Exception:
            pass
    return out


@pytest.mark.parametrize("kind", ["other", "roots", "last"])
@pytest.mark.parametrize("path", PATHS)
def test_mismatch_with_a_root_that_ran_ahead_raises_on_every_rank(path: str, kind: str) -> None:
    res = run_ranks(2 if kind == "roots" else 3, mismatched, kind, timeout=60, env=_env(path))
    for r in res:
        assert r.get("error") in ("CollectiveMismatchError", "PeerLostError"), res
    # the detail names both calls on some rank
    assert any("CollectiveMismatchError" == r["error"] and "but rank" in r["msg"] for r in res), res


def absent(rank: int, world: int) -> dict:
    import interlink as dist

    dist.init(timeout=2)
    x = np.arange(8.0)
    if rank == 1:  # never enters the broadcast; stays alive past the root's timeout
        time.sleep(6)
        dist.destroy()
        return {"error": None}
    t0 = time.monotonic()
    try:
        dist.broadcast(x, src=0)  # returns: the root does not wait
        dist.all_reduce(x)
    except Exception as e:
        return {"error": type(e).__name__, "msg": str(e), "took": time.monotonic() - t0}
    finally:
        try:
            dist.destroy()
        except Exception:
            pass
    return {"error": None}


@pytest.mark.parametrize("path", PATHS)
def test_receiver_that_never_arrives_times_out_the_roots_next_call(path: str) -> None:
    res = run_ranks(2, absent, timeout=60, env=_env(path))
    r0 = res[0]
    assert r0["error"] == "CommTimeoutError", res
    assert "1" in r0["msg"] and r0["took"] < 8.0, res  # the 2 s timeout, then the probe of rank 1
