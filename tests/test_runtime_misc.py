"""Algorithm selection (per call, INTERLINK_ALGO), in-place aliasing patterns and transport options,
on real processes."""

from __future__ import annotations

import numpy as np
import pytest

from mp import run_ranks


def algo_choice(rank: int, world: int) -> dict:
    import interlink as dist
    from interlink.runtime import api

    g = dist.init(timeout=30)
    a = np.ones(1000, dtype=np.float32)
    dist.all_reduce(a)
    env_sig = g.recorder[-1].sig
    dist.all_reduce(a, algorithm="direct")
    call_sig = g.recorder[-1].sig
    err = None
    try:
        dist.all_reduce(a, algorithm="no_such_algorithm")
    except ValueError as e:
        err = str(e)
    b = np.full(7, float(rank))
    dist.all_reduce(b)  # still in step after the refused call
    out = {"env_sig": env_sig, "call_sig": call_sig, "err": err, "sum": b.tolist(), "a0": float(a[0])}
    assert api.is_initialized()
    dist.destroy()
    return out


def test_algorithm_from_env_and_per_call() -> None:
    res = run_ranks(3, algo_choice, env={"INTERLINK_ALGO": "all_reduce:ring,broadcast:binomial"})
    for r in res:
        assert "all_reduce:ring " in r["env_sig"], r
        assert "all_reduce:direct " in r["call_sig"], r
        assert r["err"] and "no_such_algorithm" in r["err"] and "available" in r["err"], r
        assert r["sum"] == [3.0] * 7 and r["a0"] == 9.0


def aliasing(rank: int, world: int, n: int) -> list:
    import interlink as dist

    dist.init(timeout=30)
    p = world
    fails = []
    for algo in (None, "ring", "recursive_doubling", "bruck", "direct"):
        # all_gather in place: the input is this rank's slice of the output (torch/nccl-tests style)
        out = np.zeros(n * p, dtype=np.float64)
        out[rank * n:(rank + 1) * n] = rank + 1
        try:
            dist.all_gather_into_tensor(out, out[rank * n:(rank + 1) * n], algorithm=algo)
        except ValueError:
            continue  # algorithm not registered for all_gather
        exp = np.repeat(np.arange(1, p + 1, dtype=np.float64), n)
        if not np.array_equal(out, exp):
            fails.append(f"all_gather in place {algo}: {out[:8]}")
    for algo in (None, "ring", "recursive_halving", "direct"):
        # reduce_scatter in place: the output is this rank's slice of the input
        inp = np.arange(n * p, dtype=np.float64) + rank
        exp = (np.arange(n * p, dtype=np.float64) * p + sum(range(p)))[rank * n:(rank + 1) * n]
        dist.reduce_scatter_tensor(inp[rank * n:(rank + 1) * n], inp, algorithm=algo)
        if not np.array_equal(inp[rank * n:(rank + 1) * n], exp):
            fails.append(f"reduce_scatter in place {algo}")
    dist.destroy()
    return fails


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_in_place_aliasing(nranks: int) -> None:
    res = run_ranks(nranks, aliasing, 1000)
    assert res == [[]] * nranks, res


def big_moves(rank: int, world: int) -> bool:
    import interlink as dist

    dist.init(timeout=60)
    n = 3_000_001
    a = np.arange(n, dtype=np.float32) if rank == 0 else np.zeros(n, dtype=np.float32)
    dist.broadcast(a, src=0)
    ok = bool(np.array_equal(a, np.arange(n, dtype=np.float32)))
    out = np.empty(n * world, dtype=np.float32)
    dist.all_gather_into_tensor(out, np.full(n, rank, dtype=np.float32))
    ok &= bool(np.array_equal(out, np.repeat(np.arange(world, dtype=np.float32), n)))
    # mid-size all_gather blocks (300 KiB): one-copy CMA from 256 KiB for all_gather only
    m = 77_003
    for algo in ("ring", "recursive_doubling", "bruck"):
        out = np.empty(m * world, dtype=np.float32)
        dist.all_gather_into_tensor(out, np.arange(m, dtype=np.float32) + rank, algorithm=algo)
        ok &= bool(np.array_equal(out, np.concatenate([np.arange(m, dtype=np.float32) + r for r in range(world)])))
        b = np.arange(m * 2, dtype=np.float32) + (rank + 1)  # an all_reduce of the same size stays on the ring
        dist.all_reduce(b, algorithm=algo if algo != "bruck" else "ring")
        ok &= bool(np.array_equal(b, world * np.arange(m * 2, dtype=np.float32) + sum(range(1, world + 1))))
    dist.destroy()
    return ok


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("cma", ["0", "1"])
def test_large_messages_with_and_without_cma(cma: str, nranks: int) -> None:
    assert run_ranks(nranks, big_moves, env={"INTERLINK_CMA": cma}) == [True] * nranks


def fast_then_regular(rank: int, world: int, iters: int) -> int:
    """A fast-path call (barrier, small all_reduce) followed at once by a regular-path call: a rank
    that leaves the fast call first already sends for the next one while a slower rank still waits."""
    import time

    import interlink as dist

    dist.init(timeout=60)
    if rank == world - 1:
        # this rank is descheduled between seeing "not everyone has published" and its next look:
        # by then the others have left the fast call and already send for the next one
        from interlink.runtime import fastpath

        orig = fastpath.FastPath._all_published

        def stale(self, f, q):  # type: ignore[no-untyped-def]
            ok = orig(self, f, q)
            if not ok:
                time.sleep(0.005)
            return ok

        fastpath.FastPath._all_published = stale  # type: ignore[method-assign]
    big = np.zeros(16384, dtype=np.float32)
    small = np.zeros(4, dtype=np.float32)
    for i in range(iters):
        if rank == (i % world) and i % 3 == 0:
            time.sleep(0.001)  # a late rank: the others finish the fast call before it looks again
        dist.barrier()
        big[:] = rank + i
        dist.all_reduce(big, algorithm="ring")  # an explicit algorithm: the channels, not the fast path
        assert big[0] == sum(range(world)) + world * i, (i, big[0])
        small[:] = 1
        dist.all_reduce(small)
        assert small[0] == world
    dist.destroy()
    return iters


@pytest.mark.parametrize("nranks", [4, 8])
def test_fast_path_call_then_regular_call_is_not_a_mismatch(nranks: int) -> None:
    # more ranks than cores, INTERLINK_SPIN=1: a waiting rank is often descheduled and looks at its
    # channels at once (where the bug showed: a peer already sending for the next call was a "mismatch")
    res = run_ranks(nranks, fast_then_regular, 100, env={"INTERLINK_SPIN": "1"}, timeout=120)
    assert res == [100] * nranks


def algo_env_scope(rank: int, world: int) -> dict:
    import interlink as dist

    g = dist.init(timeout=30)
    a = np.ones(256, dtype=np.float32)
    dist.all_reduce(a)
    ar = g.recorder[-1].sig
    dist.broadcast(a, src=0)
    bc = g.recorder[-1].sig
    dist.destroy()
    return {"ar": ar, "bc": bc}


def test_algo_env_touches_only_the_named_collective() -> None:
    """INTERLINK_ALGO=all_reduce:ring runs all_reduce's ring Schedule; broadcast keeps its shared-page path."""
    res = run_ranks(2, algo_env_scope, env={"INTERLINK_ALGO": "all_reduce:ring"})
    for r in res:
        assert "all_reduce:ring " in r["ar"], r
        assert r["bc"].startswith("broadcast:slots"), r


def bad_algo_env(rank: int, world: int) -> str:
    import interlink as dist

    try:
        dist.init(timeout=30)
    except ValueError as e:
        return str(e)
    dist.destroy()
    return ""


@pytest.mark.parametrize("spec,word", [("bogus", "no collective has"), ("allreduce:ring", "unknown collective"),
                                       ("all_reduce:bogus", "available")])
def test_algo_env_typos_are_errors(spec: str, word: str) -> None:
    from interlink.model.tuner import parse_algo_env

    with pytest.raises(ValueError, match=word):
        parse_algo_env(spec)
    res = run_ranks(1, bad_algo_env, env={"INTERLINK_ALGO": spec})
    assert word in res[0] and "INTERLINK_ALGO" in res[0], res


def channel_rings(rank: int, world: int) -> dict:
    """Ring Schedules of INTERLINK_CHANNELS channels, every ring collective, sizes around the channel and
    rank splits, against numpy."""
    import interlink as dist

    g = dist.init(timeout=30)
    p = world
    fails = []
    sigs = set()
    for n in (0, 1, 2, 5, 7, 13, 1031):
        x = (np.arange(n, dtype=np.float64) * (rank + 1)) % 17
        y = x.copy()
        dist.all_reduce(y, algorithm="ring")
        sigs.add(g.recorder[-1].sig.split()[0])
        if n >= 3 and g.recorder[-1].plan.schedule.channels != 3:
            fails.append(f"all_reduce n={n}: {g.recorder[-1].plan.schedule.channels} channels")
        exp = sum((np.arange(n, dtype=np.float64) * (r + 1)) % 17 for r in range(p))
        if not np.array_equal(y, exp):
            fails.append(f"all_reduce n={n}")
        out = np.zeros(n * p, dtype=np.int32)
        dist.all_gather_into_tensor(out, np.full(n, rank + 1, dtype=np.int32), algorithm="ring")
        if not np.array_equal(out, np.repeat(np.arange(1, p + 1, dtype=np.int32), n)):
            fails.append(f"all_gather n={n}")
        inp = np.arange(n * p, dtype=np.int64) + rank
        o = np.zeros(n, dtype=np.int64)
        dist.reduce_scatter_tensor(o, inp, algorithm="ring")
        if not np.array_equal(o, (np.arange(n * p, dtype=np.int64) * p + sum(range(p)))[rank * n:(rank + 1) * n]):
            fails.append(f"reduce_scatter n={n}")
        b = np.arange(n, dtype=np.float32) if rank == p - 1 else np.zeros(n, dtype=np.float32)
        dist.broadcast(b, src=p - 1, algorithm="ring")
        if not np.array_equal(b, np.arange(n, dtype=np.float32)):
            fails.append(f"broadcast n={n}")
    dist.destroy()
    return {"fails": fails, "sigs": sorted(sigs)}


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_ring_channels_run_on_real_processes(transport: str) -> None:
    res = run_ranks(3, channel_rings, env={"INTERLINK_CHANNELS": "3", "INTERLINK_TRANSPORT": transport})
    for r in res:
        assert r["fails"] == [] and r["sigs"] == ["all_reduce:ring"], r


def test_bad_channels_env_is_an_error_at_init() -> None:
    from interlink.model.tuner import env_channels, ring_channels

    import os

    old = os.environ.get("INTERLINK_CHANNELS")
    try:
        os.environ["INTERLINK_CHANNELS"] = "zero"
        with pytest.raises(ValueError, match="INTERLINK_CHANNELS"):
            env_channels()
    finally:
        if old is None:
            os.environ.pop("INTERLINK_CHANNELS", None)
        else:
            os.environ["INTERLINK_CHANNELS"] = old
    assert ring_channels(1, 2, 4) == {}
    assert ring_channels(2, 1, 4) == {"channels": 2}
    assert ring_channels(2, 2, 4) == {"channels": 2, "local_size": 4, "exits": (0, 1)}
