"""The latency path (FastPath.hot): synchronous small calls on numpy arrays of an all-local world.

Its views and signatures are cached by the call's shape, so these tests go after what a cache can get
wrong: N-d and 1-element shapes, every dtype and op of reduce_scatter and all_reduce (AVG included),
read-only inputs where the call only reads, shapes that alternate call by call (both slot parities
with different views), hot calls interleaved with regular-path and async calls, and bad input that
must still raise before any byte moves. Every result is compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from interlink.ops import ReduceOp, numeric_dtypes, numpy_reduce, ops_for_dtype
from mp import run_ranks
from test_runtime_collectives import _eq, data


class Checks:
    """Counts checks and collects a line per result that differs from numpy's."""

    def __init__(self, rank: int) -> None:
        self.rank, self.count, self.fails = rank, 0, []

    def __call__(self, name: str, got, exp) -> None:
        self.count += 1
        g, e = np.asarray(got), np.asarray(exp)
        if not _eq(g, e):
            where = ""
            if g.shape == e.shape:  # which elements (a wrong slice or piece shows in its first and last index)
                gf, ef = g.ravel(), e.ravel()
                bad = np.nonzero(~((gf == ef) | ((gf != gf) & (ef != ef))))[0]
                if bad.size:
                    i = int(bad[0])
                    where = (f" ({bad.size} of {gf.size} wrong, indices {i}..{int(bad[-1])}: got {gf[i]} expected "
                             f"{ef[i]}; buffer at {g.ctypes.data % 4096} mod 4 KiB)")
            try:  # the path the last call took (its flight record)
                from interlink.runtime import api

                where += f" [{api._world().recorder[-1].plan.sigb.decode()}]"
            except Exception:  # noqa: BLE001 - a diagnostic only
                pass
            self.fails.append(f"rank {self.rank} {name}: got {g.ravel()[:6]} expected {e.ravel()[:6]}{where}")


def hot_suite(rank: int, world: int) -> tuple[int, list[str], int]:
    import interlink as dist
    from interlink.runtime import api
    from interlink.runtime.fastpath import Small

    dist.init(timeout=60)
    p = world
    check = Checks(rank)
    case = 0


    # reduce_scatter and all_reduce: every dtype x op, tiny sizes (a block of 1 and of 3 per rank)
    for dt in numeric_dtypes():
        for op in ops_for_dtype(dt):
            for n in (1, 3):
                case += 1
                ins = [data(r, case, n * p, dt, op) for r in range(p)]
                out = np.empty(n, dtype=dt)
                dist.reduce_scatter_tensor(out, ins[rank], op=op)
                check(f"reduce_scatter {dt} {op.name} n={n}", out, numpy_reduce(op, ins)[rank * n:(rank + 1) * n])
                a = ins[rank].copy().reshape(p, n)  # N-d, reduced in place
                dist.all_reduce(a, op=op)
                check(f"all_reduce 2-D {dt} {op.name}", a, numpy_reduce(op, ins).reshape(p, n))

    # shapes alternating call by call: each parity sees different cached views
    for it in range(6):
        for shape in ((5,), (2, 3), (7, 1, 2), (1,)):
            case += 1
            n = int(np.prod(shape))
            ins = [data(r, case, n, np.float64) for r in range(p)]
            a = ins[rank].copy().reshape(shape)
            dist.all_reduce(a, op="avg" if it % 2 else ReduceOp.SUM)
            exp = numpy_reduce(ReduceOp.AVG if it % 2 else ReduceOp.SUM, ins).reshape(shape)
            check(f"all_reduce shape={shape} it={it}", a, exp)
            root = (it + n) % p
            b = ins[rank].copy().reshape(shape)
            dist.broadcast(b, src=root)
            check(f"broadcast shape={shape} root={root}", b, ins[root].reshape(shape))
            x = ins[rank].reshape(shape)
            x.flags.writeable = False  # all_gather and reduce_scatter only read their input
            out = np.empty((p,) + shape, dtype=np.float64)
            dist.all_gather_into_tensor(out, x)
            check(f"all_gather shape={shape}", out, np.stack([i.reshape(shape) for i in ins]))
            rs_in = np.concatenate(ins).reshape((p * shape[0],) + shape[1:])
            rs_in.flags.writeable = False
            rs_out = np.empty(shape, dtype=np.float64)
            dist.reduce_scatter_tensor(rs_out, rs_in)
            check(f"reduce_scatter shape={shape}", rs_out, (np.float64(p) * np.concatenate(ins)).reshape(
                (p * shape[0],) + shape[1:])[rank * shape[0]:(rank + 1) * shape[0]])
            dist.barrier()
        # interleaved: a regular-path call (explicit algorithm), an async one, a large one
        case += 1
        ins = [data(r, case, 11, np.int32) for r in range(p)]
        a = ins[rank].copy()
        dist.all_reduce(a, algorithm="ring")
        check("all_reduce ring between hot calls", a, numpy_reduce(ReduceOp.SUM, ins))
        a = ins[rank].copy()
        dist.all_reduce(a, async_op=True).wait(timeout=30)
        check("async all_reduce between hot calls", a, numpy_reduce(ReduceOp.SUM, ins))
        big = [data(r, case, 70_001, np.float32) for r in range(p)]
        a = big[rank].copy()
        dist.all_reduce(a)
        check("large all_reduce between hot calls", a, numpy_reduce(ReduceOp.SUM, big))

    # bad input still raises before any byte moves, and the job goes on
    for bad, exc in ((np.ones(6)[::2], ValueError), (np.ones(3, dtype=object), TypeError)):
        try:
            dist.all_reduce(bad)
            check.fails.append(f"rank {rank}: all_reduce of a bad array did not raise")
        except exc:
            check.count += 1
    ro = np.ones(3)
    ro.flags.writeable = False
    try:
        dist.all_reduce(ro)
        check.fails.append(f"rank {rank}: all_reduce of a read-only array did not raise")
    except ValueError:
        check.count += 1
    try:
        dist.all_reduce(np.ones(3, dtype=np.complex64), op="max")
        check.fails.append(f"rank {rank}: MAX on complex did not raise")
    except TypeError:
        check.count += 1
    a = np.full(4, rank + 1.0)
    dist.all_reduce(a)
    check("all_reduce after refused calls", a, np.full(4, p * (p + 1) / 2))

    fast = api._WORLD._fast
    hot = sum(isinstance(v, Small) for v in fast.shapes.values()) if fast else 0
    once = sum(isinstance(v, Small) and v.res is not None for v in fast.shapes.values()) if fast else 0
    # and the flight recorder names the Schedule each took
    named = sum(isinstance(v, Small) and v.sigb.startswith(b"all_reduce:slots_once ") for v in fast.shapes.values()) \
        if fast else 0
    assert named == once, (named, once)
    dist.destroy()
    return check.count, check.fails, hot, once


@pytest.mark.parametrize("nranks,once", [(1, ""), (2, ""), (3, ""), (5, ""), (2, "1"), (3, "1"), (5, "0")])
def test_hot_path_against_numpy(nranks: int, once: str) -> None:
    # once="1": the small all_reduce is reduced by one rank for everyone (the path of hosts with more
    # than two ranks a core), "0": every rank reduces every slot; "": the default for this machine
    env = {"INTERLINK_FAST_REDUCE_ONCE": once} if once else {}
    res = run_ranks(nranks, hot_suite, env=env, timeout=300)
    fails = [f for _, fl, _, _ in res for f in fl]
    assert not fails, "\n".join(fails[:20])
    assert all(checks > 100 for checks, _, _, _ in res)
    # the hot path really ran: dozens of call shapes cached on every rank (one rank has no shared page)
    assert all(hot > 30 if nranks > 1 else hot == 0 for _, _, hot, _ in res), [r[2] for r in res]
    if once:  # the all_reduce shapes took the path asked for
        assert all((n > 10) == (once == "1") for _, _, _, n in res), [r[3] for r in res]


def stream_suite(rank: int, world: int, sizes: tuple, shared: bool = False) -> tuple[int, list[str], int]:
    """Large broadcast / all_gather / reduce_scatter stream through the slots in chunks, or (larger than a
    slot) readers copy straight from the writers' buffers; the test shrinks the one-shot size to 1 KiB and
    a chunk to 4 KiB, so a few thousand elements make many chunks and pieces and a ragged last one.
    shared: even ranks' inputs live in interlink.empty arrays (read in place by the peers), odd ranks'
    in plain numpy arrays, so every call mixes both kinds of writer."""
    import interlink as dist
    from interlink.runtime import api

    def inp(x: np.ndarray) -> np.ndarray:
        if not (shared and rank % 2 == 0):
            return x
        y = dist.empty(x.shape, x.dtype)
        y[...] = x
        return y

    dist.init(timeout=60)
    p = world
    check = Checks(rank)
    case = 0
    # every dtype on 2 and 3 ranks; on 5, one of each width and kind (the suite's 15 minutes on 2 cores)
    dtypes = numeric_dtypes() if p < 5 else [d for d in numeric_dtypes() if d.name in (
        "int8", "uint32", "int64", "float16", "float32", "float64", "bfloat16", "complex128")]

    for n in sizes:  # primes: blocks and chunks never divide evenly
        for dt in (np.float32, np.int16, np.complex128, np.uint8):
            for root in sorted({0, p - 1, p // 2}):
                case += 1
                ins = [data(r, case, n, dt) for r in range(p)]
                a = inp(ins[rank].copy())
                dist.broadcast(a, src=root)
                check(f"streamed broadcast {np.dtype(dt)} n={n} root={root}", a, ins[root])
            case += 1
            ins = [data(r, case, n, dt) for r in range(p)]
            out = np.empty(n * p, dtype=dt)
            dist.all_gather_into_tensor(out, inp(ins[rank]))
            check(f"streamed all_gather {np.dtype(dt)} n={n}", out, np.concatenate(ins))
            inplace = inp(np.zeros(n * p, dtype=dt))  # the input is this rank's block of the output
            inplace[rank * n:(rank + 1) * n] = ins[rank]
            dist.all_gather_into_tensor(inplace, inplace[rank * n:(rank + 1) * n])
            check(f"streamed all_gather in place {np.dtype(dt)} n={n}", inplace, np.concatenate(ins))
        for dt in dtypes:
            for op in ops_for_dtype(dt):
                case += 1
                ins = [data(r, case, n * p, dt, op) for r in range(p)]
                out = np.empty(n, dtype=dt)
                dist.reduce_scatter_tensor(out, inp(ins[rank]), op=op)
                check(f"streamed reduce_scatter {dt} {op.name} n={n}", out,
                      numpy_reduce(op, ins)[rank * n:(rank + 1) * n])
        for dt in dtypes:  # all_reduce from the ranks' own buffers (direct variant)
            for op in ops_for_dtype(dt):
                case += 1
                ins = [data(r, case, n, dt, op) for r in range(p)]
                a = inp(ins[rank].copy())
                dist.all_reduce(a, op=op)
                check(f"all_reduce {dt} {op.name} n={n}", a, numpy_reduce(op, ins))
        # the regular entry (async) takes the same slots
        case += 1
        ins = [data(r, case, n, np.float64) for r in range(p)]
        a = ins[rank].copy()
        dist.broadcast(a, src=p - 1, async_op=True).wait(timeout=30)
        check(f"async streamed broadcast n={n}", a, ins[p - 1])
    fast = api._WORLD._fast
    # arenas are mapped only where the ranks may read each other's memory (cross-memory attach works)
    mapped = len(fast.arenas._maps) if fast.cma else -1
    dist.destroy()
    return check.count, check.fails, mapped


# every path on 2, 3 and 5 ranks; the shared-input variants (interlink.empty) on 2 and 3 (the suite's 15
# minutes on 2 cores: 5 ranks of them took 14 s)
_PATHS = [(p, path) for p in (2, 3, 5) for path in ("streamed", "direct", "streamed-shared", "direct-shared")
          if not (p == 5 and path.endswith("-shared"))]


@pytest.mark.parametrize("nranks,path", _PATHS, ids=[f"{path}-{p}" for p, path in _PATHS])
def test_streamed_and_direct_paths_against_numpy(nranks: int, path: str) -> None:
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": "1024",
           "INTERLINK_FAST_CHUNK_BYTES": "4096",
           "INTERLINK_SHM_DIRECT_MAX_BYTES": str(1 << 20)}
    sizes: tuple = (1021, 4099, 9001)
    if path.startswith("direct"):  # slots of 2 KiB: larger goes by cross-memory attach, 256 KiB a read
        env["INTERLINK_SHM_DIRECT_MAX_BYTES"] = "2048"
        env["INTERLINK_SHM_AR_DIRECT_MIN_BYTES"] = "2048"
        sizes = (1021, 9001, 70001)
    shared = path.endswith("shared")
    res = run_ranks(nranks, stream_suite, sizes, shared, env=env, timeout=300)
    fails = [f for _, fl, _ in res for f in fl]
    assert not fails, "\n".join(fails[:20])
    assert all(checks > 100 for checks, _, _ in res)
    # with shared inputs every rank has read rank 0's arrays in place (its own are not mapped)
    mapped = [m for _, _, m in res]
    if mapped[0] >= 0:  # -1: this machine forbids cross-memory attach, so nothing is read in place
        assert (all(m > 0 for r, m in enumerate(mapped) if r != 0) if shared else not any(mapped)), mapped


# ---- the host paths are the Schedules of algorithms/hostpage.py ------------------------------------------

def _uneven_split_suite(rank: int, world: int, sizes: tuple) -> dict:
    """two_phase and peer_buffers all_reduce, and the peer_buffers broadcast, with their builders swapped for variants that
    split the buffer otherwise (rank 0's slice twice the others'; the broadcast's root pushing nothing):
    the executor must take the split from the Schedule and still compute the right sums."""
    import interlink as dist
    from interlink.algorithms import hostpage, registry
    from interlink.algorithms.schedule import Builder, inp, out

    def split0(n: int, p: int) -> list:
        w = [2] + [1] * (p - 1)
        edges = [n * sum(w[:i]) // sum(w) for i in range(p + 1)]
        return [(edges[i], edges[i + 1] - edges[i]) for i in range(p)]

    def two_phase(nranks, count, root=0):
        return hostpage.two_phase("two_phase", nranks, count, root, split0(count, nranks))

    def peer_buffers(nranks, count, root=0):
        return hostpage.reduce_push("peer_buffers", nranks, count, root, split0(count, nranks))

    def bc_pull_all(nranks, count, root=0):
        b = Builder("broadcast", "peer_buffers", nranks, count, root)
        b.copy(0, root, inp(0, count), out(0, count))
        for r in range(nranks):
            if r != root:
                b.get(0, r, root, inp(0, count), out(0, count))
        return b.build()

    fn_of = {("all_reduce", "two_phase"): two_phase, ("all_reduce", "peer_buffers"): peer_buffers, ("broadcast", "peer_buffers"): bc_pull_all}
    for (coll, algo), fn in ((("all_reduce", "two_phase"), two_phase), (("all_reduce", "peer_buffers"), peer_buffers),
                             (("broadcast", "peer_buffers"), bc_pull_all)):
        e = registry.get_entry(coll, algo)
        registry._REGISTRY[(coll, algo)] = registry.Entry(coll, algo, fn, e.summary, e.params)
    registry._cached.cache_clear()
    g = dist.init(timeout=60)
    fails, splits = [], {}
    for n in sizes:
        xs = [np.arange(n, dtype=np.float64) * (r + 1) + r for r in range(world)]
        a = xs[rank].copy()
        dist.all_reduce(a)
        if not np.array_equal(a, sum(xs)):
            fails.append(f"rank {rank}: all_reduce n={n}: {np.flatnonzero(a != sum(xs))[:5]}")
        b = xs[rank].copy()
        dist.broadcast(b, src=world - 1)
        if not np.array_equal(b, xs[-1]):
            fails.append(f"rank {rank}: broadcast n={n}")
    from interlink.runtime.pageplan import compile_page

    for key, sc in g._fast.shapes.items():
        if sc and sc.schedule is not None:
            # peer_buffers runs the program of the registered (here: swapped) builder's Schedule
            built = fn_of.get((sc.schedule.collective, sc.schedule.algorithm), registry.get_schedule)
            args = (world, sc.schedule.count, sc.schedule.root)
            if sc.program is not None and sc.program != compile_page(
                    built(*args) if built is not registry.get_schedule else built(
                        sc.schedule.collective, sc.schedule.algorithm, *args), rank):
                fails.append(f"rank {rank}: {sc.sigb!r} does not run its Schedule's steps")
            splits[sc.sigb.decode().split()[0] + f" n={sc.count}"] = (None, sc.program)
    dist.destroy()
    return {"fails": fails, "splits": splits, "hostpage": hostpage.HOST_PAGE}


@pytest.mark.parametrize("nranks", [3, 4])
def test_host_paths_follow_their_schedules(nranks: int) -> None:
    """The runtime's host-page executor takes its plan from the registered Schedule: builders that split
    the buffer otherwise change what it does (and it stays right)."""
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": "1024",
           "INTERLINK_SHM_DIRECT_MAX_BYTES": "65536",
           "INTERLINK_SHM_AR_DIRECT_MIN_BYTES": "65536",
           # the limits' paths on every call (a broadcast of 120 KB is in its measured band: slots_pipelined on
           # probe calls, checked in tests/test_runtime_autotune.py)
           "INTERLINK_AUTOTUNE": "0"}
    sizes = (1001, 30011)  # 8 KB: two_phase in the slots; 240 KB: peer_buffers from the ranks' own buffers
    res = run_ranks(nranks, _uneven_split_suite, sizes, env=env, timeout=300)
    for out in res:
        assert out["fails"] == [], out["fails"][:5]
    sp = res[0]["splits"]
    want = lambda n: [n * sum(([2] + [1] * (nranks - 1))[:i]) // (nranks + 1) for i in range(nranks)] + [n]  # noqa: E731
    # two_phase: rank 0 reduces its (doubled) slice from the peers' slots, then writes it back into its own
    chain = sp["all_reduce:two_phase n=1001"][1].rounds[1].ops[0]
    assert (chain.off, chain.count) == (0, want(1001)[1]) and all(x.reduce for x in chain.srcs[1:]), sp
    if "all_reduce:peer_buffers n=30011" in sp:  # peer_buffers needs cross-memory attach between the ranks
        # rank 0 reduces its (doubled) slice and pushes it into every peer's output as it goes
        prog = sp["all_reduce:peer_buffers n=30011"][1]
        ((own,),) = [rnd.ops for rnd in prog.rounds]
        assert [peer for peer, _ in own.pushes] == list(range(1, nranks)), prog
        assert (own.off, own.count) == (0, want(30011)[1]), prog
        # the variant's receivers pull everything (rank 0 is one: the root is the last rank)
        (pull,) = sp["broadcast:peer_buffers n=30011"][1].rounds[0].ops
        assert (pull.off, pull.count) == (0, 30011), sp


def _bits_suite(rank: int, world: int, sizes: tuple) -> list:
    """Random float32 calls through every page-program path (two_phase and peer_buffers all_reduce, streamed and
    peer_buffers reduce_scatter, all_gather, broadcast; plain arrays and interlink.empty arenas; reduce_scatter
    and all_gather in place and out of place): every rank's
    result must be the reference interpreter's result for the Schedule the call ran, bit for bit (the
    same operations in the same order), not merely close to numpy's sum."""
    import interlink as dist
    from interlink.algorithms import reference

    g = dist.init(timeout=60)
    fails = []
    for n in sizes:
        for shared in (False, True):
            ins = [np.random.default_rng([n, r, shared]).standard_normal(n).astype(np.float32) for r in range(world)]
            m = n - n % world
            calls = [("all_reduce", n, False), ("reduce_scatter", m, False), ("reduce_scatter", m, True),
                     ("all_gather", n, False), ("all_gather", n, True), ("broadcast", n, False)]
            for coll, cnt, inplace in calls:
                x = dist.empty(cnt, np.float32) if shared else np.empty(cnt, np.float32)
                x[...] = ins[rank][:cnt]
                if coll == "all_reduce":
                    dist.all_reduce(x)
                    got = x
                elif coll == "reduce_scatter":  # in place: the output is this rank's block of the input
                    b = cnt // world
                    got = x[rank * b:(rank + 1) * b] if inplace else np.empty(b, np.float32)
                    dist.reduce_scatter_tensor(got, x)
                elif coll == "all_gather":  # in place: the input is this rank's block of the output
                    got = dist.empty(cnt * world, np.float32) if shared else np.empty(cnt * world, np.float32)
                    if inplace:
                        got[rank * cnt:(rank + 1) * cnt] = x
                        x = got[rank * cnt:(rank + 1) * cnt]
                    dist.all_gather_into_tensor(got, x)
                else:
                    dist.broadcast(x, src=world - 1)
                    got = x
                sc = [s for s in g._fast.shapes.values()
                      if s and s.schedule is not None and s.schedule.collective == coll and s.count == cnt]
                if not sc:
                    fails.append(f"rank {rank}: {coll} n={cnt} did not take the host page")
                    continue
                s = sc[-1].schedule
                want = reference.run_numeric(s, [i[:cnt] for i in ins])[rank]["output"][:got.size]
                if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
                    fails.append(f"rank {rank}: {coll}:{s.algorithm} n={cnt} shared={shared} in place={inplace}: "
                                 f"{bad.size} elements "
                                 f"differ from the reference run of its Schedule, first {bad[:4]}")
    # the one-shot path (inlined, not a program): every slot reduced in rank order, the same bits everywhere,
    # which is what its Schedule says
    n = 101
    ins = [np.random.default_rng([n, r]).standard_normal(n).astype(np.float32) for r in range(world)]
    want = ins[0].copy()
    for r in range(1, world):
        want += ins[r]
    x = ins[rank].copy()
    dist.all_reduce(x)
    sc = [s for s in g._fast.shapes.values() if s and s.schedule is not None and s.count == n]
    if not sc or sc[-1].program is not None or sc[-1].schedule.algorithm not in ("slots", "slots_once"):
        fails.append(f"rank {rank}: all_reduce n={n} did not take the one-shot path")
    elif not np.array_equal(x.view(np.uint32), want.view(np.uint32)):
        fails.append(f"rank {rank}: one-shot all_reduce n={n}: not the rank-order sum, bit for bit")
    elif not np.array_equal(x.view(np.uint32), reference.run_numeric(sc[-1].schedule, ins)[rank]["output"].view(
            np.uint32)):  # its Schedule says that order too (its own slot inline, in its place)
        fails.append(f"rank {rank}: one-shot all_reduce n={n}: not its Schedule's bits")
    dist.destroy()
    return fails


@pytest.mark.parametrize("nranks", [3, 4])
def test_host_programs_compute_the_bits_of_their_schedule(nranks: int) -> None:
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": "1024",
           "INTERLINK_SHM_DIRECT_MAX_BYTES": "65536",
           "INTERLINK_SHM_AR_DIRECT_MIN_BYTES": "65536", "INTERLINK_FAST_CHUNK_BYTES": "4096",
           "INTERLINK_AUTOTUNE": "0"}  # the limits' paths (the measured band: tests/test_runtime_autotune.py)
    # 4 KB: two_phase and the streamed slot paths (chains in 8 KB pieces); 120 KB: peer_buffers from the own buffers
    res = run_ranks(nranks, _bits_suite, (1009, 30011), env=env, timeout=300)
    fails = [f for r in res for f in r]
    assert not fails, "\n".join(fails[:10])


def _explicit_suite(rank: int, world: int) -> list:
    """Every all_reduce and reduce_scatter Schedule asked for by name (algorithm=...) runs through the host
    executor (two-sided; in-switch steps lowered), and computes the bits the reference interpreter
    computes for the Schedule it ran (the flight recorder's plan): rounds with inline local steps, a plain
    receive heading reducing ones, or several receives reducing into one chunk apply in the listed order,
    never in arrival order. The inputs span seven decades, so that another order shows in the last bits."""
    import interlink as dist
    from interlink.algorithms import reference, registry
    from interlink.runtime import api

    dist.init(timeout=60)
    g = api._world()
    fails = []

    def data(n: int, salt: int) -> list:
        return [(np.random.default_rng([n, q, salt]).standard_normal(n) *
                 10.0 ** np.random.default_rng([n, q]).integers(-3, 4, n)).astype(np.float32) for q in range(world)]

    for algo in registry.algorithms_for("all_reduce"):
        for n in (1, 7, 1001):
            ins = data(n, 3)
            x = ins[rank].copy()
            dist.all_reduce(x, algorithm=algo)
            ran = g.recorder[-1].plan.schedule
            want = reference.run_numeric(ran, ins)[rank]["output"]
            if ran.algorithm != algo or not np.array_equal(x.view(np.uint32), want.view(np.uint32)):
                fails.append(f"rank {rank}: all_reduce {algo} ({ran.algorithm}) n={n}: not the Schedule's bits, "
                             f"{int(np.count_nonzero(x != want))} elements differ")
    for algo in registry.algorithms_for("reduce_scatter"):
        for m in (1, 5, 333):
            ins = data(m * world, 4)
            o = np.empty(m, np.float32)
            dist.reduce_scatter_tensor(o, ins[rank].copy(), algorithm=algo)
            ran = g.recorder[-1].plan.schedule
            want = reference.run_numeric(ran, ins)[rank]["output"]
            if ran.algorithm != algo or not np.array_equal(o.view(np.uint32), want.view(np.uint32)):
                fails.append(f"rank {rank}: reduce_scatter {algo} m={m}: not the Schedule's bits, "
                             f"{int(np.count_nonzero(o != want))} elements differ")
    dist.destroy()
    return fails


@pytest.mark.parametrize("nranks", [3, 4])
def test_schedules_by_name_compute_the_bits_of_what_ran(nranks: int) -> None:
    res = run_ranks(nranks, _explicit_suite, timeout=120)
    fails = [f for r in res for f in r]
    assert not fails, "\n".join(fails[:10])


def _all_gather_leaves_slots_suite(rank: int, world: int) -> tuple[list[str], list[tuple[str, int, str]]]:
    """all_gather and broadcast on both sides of the slot limits (all_gather's own, lower), against
    numpy, in and out of place; which Schedule each call ran (the flight recorder)."""
    import interlink as dist
    from interlink.runtime import api

    g = dist.init(timeout=30)
    fp = api._world()._fast
    fails: list[str] = []
    ran: list[tuple[str, int, str]] = []
    for n in (1000, 3000, 9000):  # float32: 4, 12, 36 KB per rank
        blocks = [((np.arange(n) * (q + 2)) % 251).astype(np.float32) for q in range(world)]
        out = np.full(n * world, -1, np.float32)
        dist.all_gather_into_tensor(out, blocks[rank].copy())
        ran.append(("all_gather", n, g.recorder[-1].plan.schedule.algorithm))
        if not np.array_equal(out, np.concatenate(blocks)):
            fails.append(f"rank {rank}: all_gather n={n}")
        buf = np.zeros(n * world, np.float32)  # in place: my block already in the output
        buf[rank * n:(rank + 1) * n] = blocks[rank]
        dist.all_gather_into_tensor(buf, buf[rank * n:(rank + 1) * n])
        if not np.array_equal(buf, np.concatenate(blocks)):
            fails.append(f"rank {rank}: all_gather in place n={n}")
        x = blocks[0].copy() if rank == 0 else np.zeros(n, np.float32)
        dist.broadcast(x, src=0)
        ran.append(("broadcast", n, g.recorder[-1].plan.schedule.algorithm))
        if not np.array_equal(x, blocks[0]):
            fails.append(f"rank {rank}: broadcast n={n}")
    ran.append(("cma", int(fp.cma), ""))
    dist.destroy()
    return fails, ran


@pytest.mark.parametrize("world", [2, 3])
def test_all_gather_leaves_the_slots_before_broadcast_does(world: int) -> None:
    """all_gather reads the peers' inputs by cross-memory attach (peer_buffers) above its own limit (2 ranks:
    INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG, below INTERLINK_SHM_SLOTS_MAX_BYTES_2; 3+ ranks:
    INTERLINK_SHM_SLOTS_MAX_BYTES_AG, below the slot size that broadcast and reduce_scatter keep): here 8 KB
    and 32 KB. Every result against numpy; without cross-memory attach both stay in the slots."""
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": "1024",
           "INTERLINK_FAST_CHUNK_BYTES": "4096"}
    if world == 2:
        env.update(INTERLINK_SHM_SLOTS_MAX_BYTES_2=str(32 << 10), INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG=str(8 << 10))
    else:
        env.update(INTERLINK_SHM_DIRECT_MAX_BYTES=str(32 << 10), INTERLINK_SHM_SLOTS_MAX_BYTES_AG=str(8 << 10))
    res = run_ranks(world, _all_gather_leaves_slots_suite, env=env, timeout=120)
    fails = [f for fl, _ in res for f in fl]
    assert not fails, fails
    for _, ran in res:
        cma = ran[-1][1] == 1
        got = {(c, n): a for c, n, a in ran[:-1]}
        assert got[("all_gather", 1000)] == "slots" and got[("broadcast", 1000)] == "slots", got
        assert got[("all_gather", 3000)] == ("peer_buffers" if cma else "slots"), got  # 12 KB: above 8 KB
        assert got[("broadcast", 3000)] == "slots", got  # below 32 KB: still the slots
        assert got[("all_gather", 9000)] == ("peer_buffers" if cma else "slots") and got[("broadcast", 9000)] == \
            ("peer_buffers" if cma else "slots"), got


def _inline_limit_suite(rank: int, world: int) -> tuple[list[str], dict]:
    """broadcast, all_gather and reduce_scatter through the slots on both sides of the inlined executor's
    limit, in place and out of place, against numpy; which executor each call shape took."""
    import interlink as dist
    from interlink.runtime import api

    dist.init(timeout=30)
    fp = api._world()._fast
    fails: list[str] = []
    for n in (1000, 5003):  # float64: 8 KB and 40 KB a rank, either side of 16 KiB
        blocks = [((np.arange(n) * (q + 3)) % 241).astype(np.float64) / (q + 1) for q in range(world)]
        out = np.full(n * world, -1.0)
        dist.all_gather_into_tensor(out, blocks[rank].copy())
        if not np.array_equal(out, np.concatenate(blocks)):
            fails.append(f"rank {rank}: all_gather n={n}")
        buf = np.zeros(n * world)
        buf[rank * n:(rank + 1) * n] = blocks[rank]
        dist.all_gather_into_tensor(buf, buf[rank * n:(rank + 1) * n])
        if not np.array_equal(buf, np.concatenate(blocks)):
            fails.append(f"rank {rank}: all_gather in place n={n}")
        x = blocks[world - 1].copy() if rank == world - 1 else np.zeros(n)
        dist.broadcast(x, src=world - 1)
        if not np.array_equal(x, blocks[world - 1]):
            fails.append(f"rank {rank}: broadcast n={n}")
        full = [np.concatenate([blocks[(q + k) % world] for k in range(world)]) for q in range(world)]
        want = full[0].copy()  # in rank order, as the Schedule reduces (bit for bit)
        for q in range(1, world):
            want = want + full[q]
        m = n
        got = np.full(m, -1.0)
        dist.reduce_scatter_tensor(got, full[rank].copy())
        if not np.array_equal(got, want[rank * m:(rank + 1) * m]):
            fails.append(f"rank {rank}: reduce_scatter n={n}")
        mine = full[rank].copy()
        dist.reduce_scatter_tensor(mine[rank * m:(rank + 1) * m], mine)
        if not np.array_equal(mine[rank * m:(rank + 1) * m], want[rank * m:(rank + 1) * m]):
            fails.append(f"rank {rank}: reduce_scatter in place n={n}")
    took = {}
    for sc in fp.shapes.values():
        if sc and getattr(sc, "tune", None) is not None:  # a measured shape (its copies): the rule's plan
            sc = sc.tune.alts[0]
        if sc and sc.schedule is not None and sc.kind != 0:
            took[(sc.sigb.decode().split()[0], sc.count)] = "program" if sc.program is not None else "inline"
    dist.destroy()
    return fails, took


@pytest.mark.parametrize("nranks", [2, 3])
def test_moves_through_the_slots_run_inline_up_to_their_limit(nranks: int) -> None:
    """The inlined executor runs the `slots` broadcast, all_gather and reduce_scatter up to its limit
    (INTERLINK_FAST_INLINE_MAX_BYTES, here 16 KiB, above the one-shot size of 1 KiB), the step-by-step
    executor above it; the same Schedule and the same bits either way."""
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": str(16 << 10),
           "INTERLINK_SHM_SLOTS_MAX_BYTES_2": str(1 << 20)}
    res = run_ranks(nranks, _inline_limit_suite, env=env, timeout=120)
    fails = [f for fl, _ in res for f in fl]
    assert not fails, fails
    for _, took in res:
        p = nranks
        for coll in ("broadcast:slots", "all_gather:slots"):
            assert took[(coll, 1000)] == "inline" and took[(coll, 5003)] == "program", took
        # reduce_scatter's payload is its whole input: 8 KB x p inline, 40 KB x p step by step
        assert took[("reduce_scatter:slots", 1000 * p)] == ("inline" if 8000 * p <= 16 << 10 else "program"), took
        assert took[("reduce_scatter:slots", 5003 * p)] == "program", took


def _aliased_suite(rank: int, world: int) -> tuple[list[str], list]:
    """reduce_scatter and all_gather by cross-memory attach (peer_buffers) with the output 16 bytes past the
    input modulo 4 KiB (4K aliasing: the transfers bounce, the reductions stage their pieces), against
    numpy; then the same calls in an unaliased layout."""
    import interlink as dist
    from interlink.runtime import api
    from interlink.transport import cma

    dist.init(timeout=30)
    fp = api._world()._fast
    fails: list[str] = []
    seen = []
    for layout in ("plain", "aliased"):
        for n in (20 << 10, 70 << 10):  # float32 blocks of 80 and 280 KiB a rank (4 KiB multiples)
            pool = np.zeros(3 * n * world + 8192, np.float32)
            start = (-cma.address(pool) % 4096) // 4  # page-aligned
            gap = 4 if layout == "aliased" else 1024  # the output 16 (or 4096) bytes past the input's end
            x = pool[start:start + n * world]
            o = pool[start + n * world + gap:start + n * world + gap + n]
            assert cma.aliased(cma.address(o), cma.address(x)) == (layout == "aliased")
            ins = [((np.arange(n * world) * (q + 5)) % 97).astype(np.float32) for q in range(world)]
            x[...] = ins[rank]
            dist.reduce_scatter_tensor(o, x)
            want = ins[0].copy()
            for q in range(1, world):
                want += ins[q]
            if not np.array_equal(o, want[rank * n:(rank + 1) * n]):
                fails.append(f"rank {rank}: reduce_scatter {layout} n={n}")
            blk = pool[start:start + n]
            out = pool[start + n + gap:start + n + gap + n * world]
            blk[...] = ins[rank][:n]
            dist.all_gather_into_tensor(out, blk)
            if not np.array_equal(out, np.concatenate([ins[q][:n] for q in range(world)])):
                fails.append(f"rank {rank}: all_gather {layout} n={n}")
        seen.append((layout, fp._stage is not None, api._world().recorder[-2].plan.schedule.algorithm))
    dist.destroy()
    return fails, seen


def test_aliased_buffers_stage_and_stay_exact() -> None:
    """An output allocated right after its input (16 bytes past it modulo 4 KiB) takes the 4K-aliasing
    detours (transport/cma.py's bounce, FastPath._staging) and every result stays exact; an unaliased
    layout takes neither."""
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": "1024",
           "INTERLINK_SHM_SLOTS_MAX_BYTES_2": "8192", "INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG": "8192"}
    res = run_ranks(2, _aliased_suite, env=env, timeout=120)
    fails = [f for fl, _ in res for f in fl]
    assert not fails, fails
    for _, seen in res:
        if seen[0][2] != "peer_buffers":
            pytest.skip("no cross-memory attach here: the calls stayed in the slots")
        assert seen == [("plain", False, "peer_buffers"), ("aliased", True, "peer_buffers")], seen


def _push_suite(rank: int, world: int) -> tuple[list[str], dict]:
    """The peer_buffers all_gather (a push program) on both executors: out of place it runs inlined
    (FastPath._push), in place (this rank's input is its output's chunk) step by step (FastPath._program);
    ranks mixing the two in one call, pieces of the push walk with a ragged last one, several dtypes; each
    result against numpy, and how many calls each executor ran."""
    import interlink as dist
    from interlink.runtime import api

    dist.init(timeout=30)
    fp = api._world()._fast
    ran = {"push": 0, "program": 0}
    for name in ran:
        real = getattr(fp, "_" + name)

        def counted(*args, real=real, name=name):
            ran[name] += 1
            return real(*args)

        setattr(fp, "_" + name, counted)
    fails: list[str] = []
    for dtype, n in ((np.float64, 30011), (np.int32, 70001), (np.uint8, 300007)):  # 3-5 pieces of 64 KiB
        blocks = [((np.arange(n) * (q + 3)) % 241).astype(dtype) for q in range(world)]
        want = np.concatenate(blocks)
        for k in range(3):  # the calls rotate through both parities
            out = np.zeros(n * world, dtype)
            dist.all_gather_into_tensor(out, blocks[rank] + 0)
            if not np.array_equal(out, want):
                fails.append(f"rank {rank}: all_gather {dtype.__name__} n={n} call {k}")
            # rank 0 in place (step by step), the others out of place (inlined), in one call
            buf = np.zeros(n * world, dtype)
            if rank == 0:
                buf[:n] = blocks[0]
                dist.all_gather_into_tensor(buf, buf[:n])
            else:
                dist.all_gather_into_tensor(buf, blocks[rank] + 0)
            if not np.array_equal(buf, want):
                fails.append(f"rank {rank}: all_gather mixed {dtype.__name__} n={n} call {k}")
    paths = {sc.sigb.decode().split()[0] for sc in fp.shapes.values() if sc and sc.schedule is not None}
    dist.destroy()
    return fails, (ran, paths)


@pytest.mark.parametrize("nranks", [2, 3])
def test_push_programs_run_inlined_out_of_place(nranks: int) -> None:
    """The peer_buffers all_gather runs through FastPath._push out of place and FastPath._program in place, and the
    two executors agree on the protocol (ranks mixing them in one call); exact results. Fails when the
    inlined executor is not taken, or a piece lands in the wrong place."""
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": "1024",
           "INTERLINK_FAST_CHUNK_BYTES": "4096", "INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG": "16384",
           "INTERLINK_SHM_DIRECT_MAX_BYTES": str(64 << 10)}
    res = run_ranks(nranks, _push_suite, env=env, timeout=120)
    fails = [f for fl, _ in res for f in fl]
    assert not fails, fails
    for rank, (_, (ran, paths)) in enumerate(res):
        if "all_gather:peer_buffers" not in paths:
            pytest.skip("no cross-memory attach here: the calls stayed in the slots")
        # per dtype: 3 out-of-place calls, 3 mixed calls (rank 0 in place)
        assert ran == ({"push": 9, "program": 9} if rank == 0 else {"push": 18, "program": 0}), (rank, ran, paths)


def _aliased_all_reduce_suite(rank: int, world: int) -> tuple[list[str], list]:
    """The peer_buffers all_reduce in place where a reducer's destination lies 16 bytes past a peer's input mapped
    in place (modulo 4 KiB): even ranks' inputs live in interlink.empty arenas (page-aligned, mapped by the
    peers), odd ranks' 16 bytes past a page, so an odd rank's slice aliases the mapped view of every even
    rank's and stages its pieces (FastPath._staging); its own contribution is in its destination already
    (in place), not in a source. Every dtype's sum against numpy; whether this rank staged."""
    import interlink as dist
    from interlink.runtime import api
    from interlink.transport import cma

    dist.init(timeout=30)
    fp = api._world()._fast
    fails: list[str] = []
    for dt, n in ((np.int64, 30011), (np.float64, 20011), (np.int32, 70001), (np.float32, 40009)):
        ins = [((np.arange(n) * (q + 5) + 3 * q) % 1013).astype(dt) for q in range(world)]
        if rank % 2 == 0:
            a = dist.empty(n, dt)
        else:
            isz = np.dtype(dt).itemsize
            pool = np.zeros(n + 8192 // isz, dt)
            start = (-cma.address(pool) % 4096 + 16) // isz  # 16 bytes past a page
            a = pool[start:start + n]
        a[...] = ins[rank]
        dist.all_reduce(a)
        want = ins[0].copy()
        for q in range(1, world):
            want += ins[q]
        if not np.array_equal(a, want):
            bad = np.nonzero(a != want)[0]
            fails.append(f"rank {rank}: all_reduce {np.dtype(dt)} n={n}: {bad.size} wrong, {bad[0]}..{bad[-1]}")
    staged = fp._stage is not None
    path = api._world().recorder[-1].plan.sigb.decode().split()[0]
    dist.destroy()
    return fails, [staged, path, fp.cma]


@pytest.mark.parametrize("nranks", [2, 3])
def test_staged_reductions_keep_an_in_place_destination(nranks: int) -> None:
    """A staged piece of the peer_buffers all_reduce starts from what its destination holds (the rank's own
    input, in place): fails when the staging buffer is reduced into without it (the sums then lack the
    reducer's own input, and every rank receives them)."""
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": "1024",
           "INTERLINK_SHM_DIRECT_MAX_BYTES": "2048", "INTERLINK_SHM_AR_DIRECT_MIN_BYTES": "2048"}
    res = run_ranks(nranks, _aliased_all_reduce_suite, env=env, timeout=120)
    fails = [f for fl, _ in res for f in fl]
    assert not fails, fails
    for rank, (_, (staged, path, cma_ok)) in enumerate(res):
        if not cma_ok:
            pytest.skip("no cross-memory attach here: arenas are not mapped")
        assert path == "all_reduce:peer_buffers", path
        assert staged == (rank % 2 == 1), (rank, staged)


def _yield_rule(rank: int, world: int, cpus: int) -> tuple[bool, int, int]:
    """(oversubscribed, the engine's and the fast path's spins before yielding) of a rank that may use
    only `cpus` cores (0: as given)."""
    import os

    if cpus:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cpus]))
    import interlink as dist
    from interlink.runtime import api

    g = dist.init(timeout=30)
    eng = g.ctx.engine
    got = (eng.oversub, eng.yield_after, api._world()._fast.yield_after)
    dist.destroy()
    return got


@pytest.mark.parametrize("world,cpus", [(3, 1), (2, 0)])
def test_ranks_that_share_cores_yield_at_once(world: int, cpus: int) -> None:
    """Where a host runs more local ranks than cores, every spin of a wait yields the core (the peer that
    shares it must run to publish); elsewhere the first 16 spins do not. The engine's channel waits and
    the host page's waits follow the same rule (docs/architecture.md)."""
    import os

    res = run_ranks(world, _yield_rule, cpus, timeout=60)
    for oversub, eng_after, fast_after in res:
        if cpus or world > len(os.sched_getaffinity(0)):
            assert oversub
        assert eng_after == fast_after == (0 if oversub else 16), res


def _all_to_all_suite(rank: int, world: int) -> tuple[list[str], list[tuple[int, str]]]:
    """all_to_all_single on both sides of the slot limit (small: the slots, `slots`; larger: one put into
    each peer's output, `peer_buffers`), every dtype class, N-d, async, torch tensors and interlink.empty inputs
    (peers may read them in place), against numpy; which Schedule each call ran; an overlapping call is
    refused before any byte moves."""
    import interlink as dist

    g = dist.init(timeout=30)
    fails: list[str] = []
    ran: list[tuple[int, str]] = []

    def block(src: int, dst: int, n: int, dt) -> np.ndarray:  # what rank src sends rank dst
        return ((np.arange(n) * (src + 3) + 7 * dst + src) % 113).astype(dt)

    for n in (0, 1, 5, 700, 2049, 9001):  # elements per block: around 8 KB and 32 KB per rank below
        for dt in (np.float32, np.int8, np.float64, np.uint16):
            want = np.concatenate([block(j, rank, n, dt) for j in range(world)])
            for mode in ("plain", "nd", "async", "arena", "torch"):
                x = np.concatenate([block(rank, j, n, dt) for j in range(world)])
                if mode == "arena":
                    xa = dist.empty(x.shape, dt)
                    xa[...] = x
                    x = xa
                keep = x.copy()
                out = np.full(n * world, 99, dt)
                if mode == "nd" and n:
                    dist.all_to_all_single(out.reshape(world, n), x.reshape(world, n))
                elif mode == "async":
                    dist.all_to_all_single(out, x, async_op=True).wait()
                elif mode == "torch":
                    try:
                        import torch
                    except ImportError:
                        continue
                    if dt == np.uint16:
                        continue
                    dist.all_to_all_single(torch.from_numpy(out), torch.from_numpy(x))
                else:
                    dist.all_to_all_single(out, x)
                if n and mode == "plain":
                    ran.append((n * world * np.dtype(dt).itemsize, g.recorder[-1].plan.schedule.algorithm))
                if not np.array_equal(out, want) or not np.array_equal(x, keep):
                    fails.append(f"rank {rank}: all_to_all {mode} {np.dtype(dt)} n={n}: {out[:6]} != {want[:6]}")
    buf = np.zeros(8 * world, np.float32)
    try:
        dist.all_to_all_single(buf, buf)
        fails.append(f"rank {rank}: an in-place all_to_all was not refused")
    except ValueError as e:
        if "no in-place form" not in str(e):
            fails.append(f"rank {rank}: {e}")
    dist.destroy()
    return fails, ran


@pytest.mark.parametrize("world", [2, 3, 5])
def test_all_to_all_through_the_host_page_against_numpy(world: int) -> None:
    """all_to_all_single of an all-local world runs the host page's Schedules: `slots` (each rank copies
    its peers' blocks into its slot once, each reads its block out of every slot) up to the slot limit,
    `peer_buffers` (each rank puts block j of its input into rank j's output by cross-memory attach) above it;
    here the limits are 16 KB (2 ranks: INTERLINK_SHM_SLOTS_MAX_BYTES_2) and 8 KB (3+ ranks:
    INTERLINK_SHM_SLOTS_MAX_BYTES_A2A, below the slot size, INTERLINK_SHM_DIRECT_MAX_BYTES, 16 KB), and the
    slots run inlined up to 4 KB (INTERLINK_FAST_INLINE_MAX_BYTES), step by step above. Without
    cross-memory attach every size stays in the slots."""
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_FAST_INLINE_MAX_BYTES": "4096",
           "INTERLINK_FAST_CHUNK_BYTES": "4096",
           "INTERLINK_SHM_SLOTS_MAX_BYTES_2": str(16 << 10), "INTERLINK_SHM_DIRECT_MAX_BYTES": str(16 << 10),
           "INTERLINK_SHM_SLOTS_MAX_BYTES_A2A": str(8 << 10)}
    res = run_ranks(world, _all_to_all_suite, env=env, timeout=240)
    fails = [f for fl, _ in res for f in fl]
    assert not fails, "\n".join(fails[:10])
    import interlink.transport.cma as cma

    limit = (16 if world == 2 else 8) << 10
    for _, ran in res:
        for nbytes, algo in ran:
            want = "slots" if nbytes <= limit or not cma.available else "peer_buffers"
            assert algo == want, (nbytes, algo, ran)
        assert {a for _, a in ran} == ({"slots", "peer_buffers"} if cma.available else {"slots"}), ran


def _own_block_order_suite(rank: int, world: int) -> tuple[list[str], list[bool], list[str]]:
    """all_to_all through the ranks' own buffers (peer_buffers): whether this rank's own block of its output was
    still unwritten when it published its header (FastPath._announce), call by call, and every result against
    numpy."""
    import interlink as dist
    from interlink.runtime import api

    g = dist.init(timeout=30)
    fast = api._world()._fast
    n = 6000  # elements per block: 48 KB of float32 a rank on 2 ranks, above the 16 KB slot limit below
    out = np.full(n * world, -1.0, np.float32)
    seen: list[bool] = []
    announce = fast._announce

    def spy(*args, **kw):
        seen.append(bool((out[rank * n:(rank + 1) * n] == -1.0).all()))
        return announce(*args, **kw)

    fast._announce = spy
    fails: list[str] = []
    ran: list[str] = []
    for i in range(6):
        x = np.concatenate([np.arange(n, dtype=np.float32) + 1000 * rank + 10 * j + i for j in range(world)])
        out[...] = -1.0
        dist.all_to_all_single(out, x)
        ran.append(g.recorder[-1].plan.schedule.algorithm)
        want = np.concatenate([np.arange(n, dtype=np.float32) + 1000 * j + 10 * rank + i for j in range(world)])
        if not np.array_equal(out, want):
            fails.append(f"rank {rank} call {i}: {out[:4]} != {want[:4]}")
    dist.destroy()
    return fails, seen, ran


@pytest.mark.parametrize("world", [2, 3])
def test_all_to_all_through_own_buffers_publishes_before_its_own_block(world: int) -> None:
    """An all_to_all through the ranks' own buffers publishes its header (what its peers wait for before they
    put into its output) before it copies its own block, which no peer reads: the copy runs while the peers
    publish (runtime/pageexec.py). Every call's result against numpy."""
    import interlink.transport.cma as cma

    if not cma.available:
        pytest.skip("no cross-memory attach here: every all_to_all stays in the slots")
    env = {"INTERLINK_FAST_MAX_BYTES": "1024", "INTERLINK_SHM_SLOTS_MAX_BYTES_2": str(16 << 10),
           "INTERLINK_SHM_DIRECT_MAX_BYTES": str(16 << 10), "INTERLINK_SHM_SLOTS_MAX_BYTES_A2A": str(8 << 10),
           "INTERLINK_AUTOTUNE": "0"}
    res = run_ranks(world, _own_block_order_suite, env=env, timeout=120)
    fails = [f for fl, _, _ in res for f in fl]
    assert not fails, "\n".join(fails[:10])
    for _, seen, ran in res:
        assert ran == ["peer_buffers"] * 6, ran
        assert len(seen) == 6 and all(seen), seen
