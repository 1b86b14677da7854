"""Every call of the runtime API on real processes, over shm and TCP, against numpy.

One job per (ranks, transport) runs the whole matrix inside the ranks (process start-up is the
expensive part on 2 cores); each rank rebuilds every rank's inputs from a seed and checks its result
against numpy computed independently of interlink's algorithms.
"""

from __future__ import annotations

import numpy as np
import pytest

from interlink.ops import ReduceOp, numeric_dtypes, numpy_reduce, ops_for_dtype
from mp import run_ranks

SIZES = (0, 1, 2, 7, 13, 1009)
BIG = 300_007  # crosses many shared-memory slots and TCP buffers


def data(rank: int, case: int, size: int, dtype, op: ReduceOp = ReduceOp.SUM) -> np.ndarray:
    """Rank's input for a case: values whose reductions are exact in every dtype."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng([case, rank, size])
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR):
        return rng.integers(0, 256, size=size * dt.itemsize, dtype=np.uint8).view(dt).copy()
    if op is ReduceOp.PRODUCT:
        vals = np.array([1, 2, 3] if dt.kind == "u" else [1, 2, -1])
        return rng.choice(vals, size=size).astype(dt)
    lo = 0 if dt.kind == "u" else -9
    return rng.integers(lo, 10, size=size).astype(dt)


def _eq(got: np.ndarray, exp: np.ndarray) -> bool:
    return got.shape == exp.shape and got.dtype == exp.dtype and bool(np.array_equal(got, exp))


def suite(rank: int, world: int, part: str) -> tuple[int, list[str]]:
    import interlink as dist

    dist.init(timeout=60)
    p = world
    fails: list[str] = []
    checks = 0
    case = 0

    def check(name: str, got, exp) -> None:
        nonlocal checks
        checks += 1
        got = np.asarray(got)
        if not _eq(got, exp):
            fails.append(f"rank {rank} {name}: got {got.ravel()[:6]} expected {np.asarray(exp).ravel()[:6]}")

    if part in ("all", "reduce"):
        # all_reduce: every dtype x op
        for dt in numeric_dtypes():
            for op in ops_for_dtype(dt):
                for n in (0, 1, 7, 1009, 2503):  # 2503: above the one-shot size, the two-phase shm path
                    case += 1
                    ins = [data(r, case, n, dt, op) for r in range(p)]
                    a = ins[rank].copy()
                    dist.all_reduce(a, op=op)
                    check(f"all_reduce {dt} {op.name} n={n}", a, numpy_reduce(op, ins))
        # every registered algorithm explicitly, a few sizes
        from interlink.algorithms import algorithms_for

        for algo in algorithms_for("all_reduce"):
            for n in (1, 13, 1009, BIG):
                case += 1
                ins = [data(r, case, n, np.float32) for r in range(p)]
                a = ins[rank].copy()
                dist.all_reduce(a, algorithm=algo)
                check(f"all_reduce algo={algo} n={n}", a, numpy_reduce(ReduceOp.SUM, ins))
        for op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.AVG):
            for root in sorted({0, p - 1, p // 2}):
                for n in SIZES:
                    case += 1
                    ins = [data(r, case, n, np.float64, op) for r in range(p)]
                    a = ins[rank].copy()
                    dist.reduce(a, dst=root, op=op)
                    check(f"reduce {op.name} root={root} n={n}", a, numpy_reduce(op, ins) if rank == root else ins[rank])
        for dt in (np.float32, np.int64, np.uint8):
            for op in (ReduceOp.SUM, ReduceOp.MIN, ReduceOp.PRODUCT):
                for n in SIZES + (BIG // p,):
                    case += 1
                    ins = [data(r, case, n * p, dt, op) for r in range(p)]
                    out = np.empty(n, dtype=dt)
                    dist.reduce_scatter_tensor(out, ins[rank], op=op)
                    check(f"reduce_scatter {np.dtype(dt)} {op.name} n={n}", out,
                          numpy_reduce(op, ins)[rank * n:(rank + 1) * n])
        # async: several in flight, completed in order
        works, exps, bufs = [], [], []
        for i in range(4):
            case += 1
            ins = [data(r, case, 257, np.int32) for r in range(p)]
            a = ins[rank].copy()
            works.append(dist.all_reduce(a, async_op=True))
            bufs.append(a)
            exps.append(numpy_reduce(ReduceOp.SUM, ins))
        for w, a, e in zip(works, bufs, exps):
            w.wait(timeout=30)
            assert w.is_completed()
            check("async all_reduce", a, e)

    if part in ("all", "move"):
        for dt in (np.float32, np.int16, np.complex128, np.uint64):
            for root in sorted({0, p - 1}):
                for n in SIZES + (BIG,):
                    case += 1
                    ins = [data(r, case, n, dt) for r in range(p)]
                    a = ins[rank].copy()
                    dist.broadcast(a, src=root)
                    check(f"broadcast {np.dtype(dt)} root={root} n={n}", a, ins[root])
        # every registered broadcast and all_gather algorithm explicitly (hierarchical across hosts
        # when this suite runs on emulated hosts), a middle root
        from interlink.algorithms import algorithms_for

        for algo in algorithms_for("broadcast"):
            for n in (1, 1009, BIG):
                case += 1
                ins = [data(r, case, n, np.float32) for r in range(p)]
                a = ins[rank].copy()
                dist.broadcast(a, src=p // 2, algorithm=algo)
                check(f"broadcast algo={algo} root={p // 2} n={n}", a, ins[p // 2])
        for algo in algorithms_for("all_gather"):
            for n in (1, 1009):
                case += 1
                ins = [data(r, case, n, np.float32) for r in range(p)]
                out = np.empty(n * p, dtype=np.float32)
                dist.all_gather_into_tensor(out, ins[rank], algorithm=algo)
                check(f"all_gather algo={algo} n={n}", out, np.concatenate(ins))
        for dt in (np.float32, np.int8):
            for n in SIZES + (BIG // p,):
                case += 1
                ins = [data(r, case, n, dt) for r in range(p)]
                out = np.empty(n * p, dtype=dt)
                dist.all_gather_into_tensor(out, ins[rank])
                check(f"all_gather_into_tensor n={n}", out, np.concatenate(ins))
                lst = [np.empty(n, dtype=dt) for _ in range(p)]
                dist.all_gather(lst, ins[rank])
                check(f"all_gather list n={n}", np.concatenate(lst) if lst else np.empty(0, dt), np.concatenate(ins))
        for root in sorted({0, p - 1}):
            for n in SIZES:
                case += 1
                ins = [data(r, case, n, np.float64) for r in range(p)]
                lst = [np.empty(n) for _ in range(p)] if rank == root else None
                dist.gather(ins[rank], gather_list=lst, dst=root)
                if rank == root:
                    check(f"gather root={root} n={n}", np.concatenate(lst), np.concatenate(ins))
                case += 1
                ins = [data(r, case, n * p, np.float64) for r in range(p)]
                out = np.empty(n)
                sl = [ins[root][i * n:(i + 1) * n].copy() for i in range(p)] if rank == root else None
                dist.scatter(out, scatter_list=sl, src=root)
                check(f"scatter root={root} n={n}", out, ins[root][rank * n:(rank + 1) * n])
        for n in SIZES + (BIG // (p * p),):
            case += 1
            ins = [data(r, case, n * p, np.int32) for r in range(p)]
            out = np.empty(n * p, dtype=np.int32)
            dist.all_to_all_single(out, ins[rank])
            exp = np.concatenate([ins[s][rank * n:(rank + 1) * n] for s in range(p)])
            check(f"all_to_all_single n={n}", out, exp)
        # uneven splits: rank s sends (s + d) % 3 elements to rank d
        case += 1
        splits = [[(s + d) % 3 for d in range(p)] for s in range(p)]
        ins = [data(r, case, sum(splits[r]), np.float32) for r in range(p)]
        out = np.empty(sum(splits[s][rank] for s in range(p)), dtype=np.float32)
        dist.all_to_all_single(out, ins[rank], output_split_sizes=[splits[s][rank] for s in range(p)],
                               input_split_sizes=splits[rank])
        offs = [np.concatenate([[0], np.cumsum(splits[s])]) for s in range(p)]
        exp = np.concatenate([ins[s][offs[s][rank]:offs[s][rank + 1]] for s in range(p)])
        check("all_to_all_single uneven", out, exp)
        # point to point: a ring of isend/irecv (large, so both directions must progress together)
        if p > 1:
            for n in (0, 5, BIG):
                case += 1
                ins = [data(r, case, n, np.float32) for r in range(p)]
                got = np.empty(n, dtype=np.float32)
                ws = dist.isend(ins[rank], dst=(rank + 1) % p, tag=3)
                wr = dist.irecv(got, src=(rank - 1) % p, tag=3)
                wr.wait(timeout=30)
                ws.wait(timeout=30)
                check(f"isend/irecv ring n={n}", got, ins[(rank - 1) % p])
            case += 1
            ins = [data(r, case, 11, np.int64) for r in range(p)]
            if rank == 0:
                for src in range(1, p):
                    got = np.empty(11, dtype=np.int64)
                    dist.recv(got, src=src)
                    check(f"recv from {src}", got, ins[src])
            else:
                dist.send(ins[rank], dst=0)
        # subgroups: the even ranks, and the ranks in reverse order
        evens = list(range(0, p, 2))
        g = dist.new_group(evens)
        rev = dist.new_group(list(reversed(range(p))))
        case += 1
        if rank in evens:
            ins = {r: data(r, case, 29, np.float32) for r in evens}
            a = ins[rank].copy()
            dist.all_reduce(a, group=g)
            check("subgroup all_reduce", a, numpy_reduce(ReduceOp.SUM, list(ins.values())))
            b = ins[rank].copy()
            dist.broadcast(b, src=evens[-1], group=g)  # global rank, as in torch
            check("subgroup broadcast", b, ins[evens[-1]])
        case += 1
        ins = [data(r, case, 6, np.float32) for r in range(p)]
        out = np.empty(6 * p, dtype=np.float32)
        dist.all_gather_into_tensor(out, ins[rank], group=rev)
        check("reversed group all_gather", out, np.concatenate(ins[::-1]))
        dist.barrier()
        dist.barrier(group=rev)

    dist.destroy()
    return checks, fails


RANKS = (1, 2, 3, 5, 8)  # 4 ranks: tests/test_differential.py and test_runtime_hot.py (the suite's 15 minutes)
# every transport at 1-5 ranks; 8 ranks (4 a core here) on shared memory with its fast paths only: the
# channels and TCP at 8 ranks took 26 s of the default suite (tests/test_runtime_misc.py runs 8 ranks too)
_WORLDS = [(p, t) for p in RANKS for t in ("shm", "tcp", "shm-nofast") if p < 8 or t == "shm"]


@pytest.mark.parametrize("nranks,transport", _WORLDS, ids=[f"{p}-{t}" for p, t in _WORLDS])
@pytest.mark.parametrize("part", ["reduce", "move"])
def test_collectives(nranks: int, transport: str, part: str) -> None:
    # shm: small all_reduce/broadcast/barrier take the shared-page fast path; shm-nofast: the channels
    env = {"INTERLINK_TRANSPORT": transport.split("-")[0], "INTERLINK_FAST": "0" if "nofast" in transport else "1"}
    res = run_ranks(nranks, suite, part, env=env, timeout=300)
    fails = [f for _, fl in res for f in fl]
    assert not fails, "\n".join(fails[:20])
    assert all(checks > 20 for checks, _ in res)


def _subgroups(rank: int, world: int) -> tuple[int, list[str]]:
    """Sub-groups (a subset, a reversed subset, an unordered one, the reversed world) and the world, every
    collective at sizes on both sides of the channels' thresholds (cross-memory attach from 256 KiB for
    all_gather, 2 MiB for the rest; policy.cma_threshold), in place and out of place, each against numpy."""
    import interlink as dist
    from interlink.runtime.policy import cma_threshold

    dist.init()
    specs = [[0, 2, 4], [3, 1], [3, 0, 4], list(reversed(range(world)))]
    groups = [(s, dist.new_group(s)) for s in specs] + [(list(range(world)), None)]
    dts = (np.float32, np.int32, np.float64, np.uint8, np.int64, np.float16)
    cuts = sorted({cma_threshold("all_gather"), cma_threshold("all_reduce")})
    nbytes = [0, 4, 1021 * 4] + [c + d for c in cuts for d in (-8, 8)]
    checks, fails, k = 0, [], 0
    for coll in ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"):
        for members, g in groups:
            for nb in nbytes:
                k += 1
                dt = np.dtype(dts[k % len(dts)])
                q = len(members)
                per = coll in ("all_gather", "reduce_scatter", "all_to_all")
                n = max(0, nb // dt.itemsize // (q if per else 1))  # all_gather: nb is the output
                ops = [o for o in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN) if o in ops_for_dtype(dt)]
                op = ops[k % len(ops)]
                root = members[k % q]
                inplace = k % 2 == 0
                if rank not in members:
                    continue
                me = members.index(rank)
                kw = {} if g is None else {"group": g}
                full = n * q if per else n
                ins = {m: data(m, k, full, dt, op) for m in members}
                x = ins[rank].copy()
                if coll == "all_reduce":
                    dist.all_reduce(x, op=op.name.lower(), **kw)
                    got, exp = x, numpy_reduce(op, [ins[m] for m in members])
                elif coll == "reduce":
                    dist.reduce(x, dst=root, op=op.name.lower(), **kw)
                    got, exp = x, numpy_reduce(op, [ins[m] for m in members]) if rank == root else ins[rank]
                elif coll == "broadcast":
                    dist.broadcast(x, src=root, **kw)
                    got, exp = x, ins[root]
                elif coll == "all_gather":
                    out = np.zeros(n * q, dt)
                    if inplace:
                        out[me * n:(me + 1) * n] = x[:n]
                        dist.all_gather_into_tensor(out, out[me * n:(me + 1) * n], **kw)
                    else:
                        dist.all_gather_into_tensor(out, x[:n].copy(), **kw)
                    got, exp = out, np.concatenate([ins[m][:n] for m in members])
                elif coll == "reduce_scatter":
                    out = x[me * n:(me + 1) * n] if inplace else np.zeros(n, dt)
                    dist.reduce_scatter_tensor(out, x, op=op.name.lower(), **kw)
                    got, exp = out, numpy_reduce(op, [ins[m] for m in members])[me * n:(me + 1) * n]
                else:
                    out = np.zeros(n * q, dt)
                    dist.all_to_all_single(out, x, **kw)
                    got, exp = out, np.concatenate([ins[m][me * n:(me + 1) * n] for m in members])
                checks += 1
                if not _eq(got, exp):
                    fails.append(f"rank {rank}: {coll} group {members} {dt} n={n} {op.name} root={root} "
                                 f"inplace={inplace}: {int(np.sum(got != exp))} elements wrong")
    dist.barrier()
    dist.destroy()
    return checks, fails


def test_subgroups_against_numpy_across_the_channel_thresholds() -> None:
    """5 ranks over shared memory: every collective on sub-groups (subsets, reversed, unordered) and the
    world, on both sides of each channel threshold; exact on every rank."""
    res = run_ranks(5, _subgroups, timeout=300)
    fails = [f for _, fl in res for f in fl]
    assert not fails, "\n".join(fails[:20])
    assert all(checks >= 6 * 3 * 7 for checks, _ in res)
