"""The compiled core of the host page's one-shot path (runtime/_hotcore.c, runtime/ccore.py) against numpy,
with the core and without it (INTERLINK_NO_CCORE=1, which the spawned ranks read): every dtype and op it
takes for all_reduce and reduce_scatter, broadcast from every root, all_gather, all_to_all; sizes 0, 1, odd and the
one-shot limit; 1, 2, 3 and 5 ranks; in place and out of place; shapes alternating call by call; then a
signature mismatch (the same error text on both paths), a dead peer and a timeout. Where the core is
built and on, the tests assert that it ran the calls (Core.calls)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from interlink.runtime import ccore
from mp import run_ranks

PATHS = ["core", "python", "core-streamed"]
_DTYPES = ("float32", "float64", "int32", "int64", "float16", "uint8")  # the last two: the Python path's
_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG")


def _env(path: str) -> dict:
    """core: the compiled core (its copies into the slots as measured); core-streamed: every copy into a slot
    of a byte or more with streaming stores (INTERLINK_SLOT_STREAM=1: odd heads and tails of every size);
    python: the pure-Python path."""
    if path.startswith("core") and not ccore.built():
        pytest.skip("the compiled core is not built in this install (no C compiler at install time)")
    env = {"INTERLINK_NO_CCORE": "1" if path == "python" else "0", "INTERLINK_TRANSPORT": "shm"}
    if path == "core-streamed":
        from interlink.transport import stream

        if not stream.available:
            pytest.skip("no streaming copy on this machine (transport/stream.py)")
        env.update(INTERLINK_SLOT_STREAM="1", INTERLINK_SLOT_STREAM_MIN_BYTES="1")
    return env


def _data(rank: int, dt: str, n: int, op: str) -> np.ndarray:
    rng = np.random.default_rng(1000 * rank + n)
    if dt.startswith("float"):
        x = rng.standard_normal(n).astype(dt)
        if op == "PRODUCT":
            x = (1.0 + x / 8).astype(dt)
        if n > 3:  # NaN and signed zeros take numpy's rules (min/max: a NaN wins, ties give the second)
            x[1] = np.nan if rank == 1 else x[1]
            x[2] = -0.0 if rank % 2 else 0.0
        return x
    hi = 3 if op == "PRODUCT" else 1000
    return rng.integers(-hi if dt.startswith("int") else 0, hi, n).astype(dt)


def _ref(op: str, xs: list) -> np.ndarray:
    """The rank-order reduction every rank must get, bit for bit."""
    from interlink.ops import ReduceOp, finish_avg, ufunc

    fn = ufunc(ReduceOp.SUM if op == "AVG" else ReduceOp[op], xs[0].dtype)
    acc = xs[0].copy()
    with np.errstate(all="ignore"):
        for x in xs[1:]:
            fn(acc, x, acc)
        if op == "AVG":
            finish_avg(acc, len(xs))
    return acc


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def matrix(rank: int, world: int) -> dict:
    import interlink as dist
    from interlink.ops import ReduceOp
    from interlink.runtime import api

    dist.init(timeout=60)
    fast = api._world()._fast
    limit = fast.max if fast is not None else 4096  # the one-shot path's limit (bytes)
    # the one-shot all_reduce's own (above it two_phase: test_page_programs_through_the_slots_against_numpy)
    ar_limit = fast.limits.all_reduce_oneshot(fast.n, fast.once) if fast is not None else 4096
    fails, checks = [], 0
    with np.errstate(all="ignore"):
        for dt in _DTYPES:
            item = np.dtype(dt).itemsize
            sizes = sorted({0, 1, 7, 33, world * 5, limit // item, limit // item - world + 1,
                            ar_limit // item, ar_limit // item - world + 1})
            for op in _OPS:
                if dt == "uint8" and op == "AVG":
                    continue
                for n in sizes:
                    if n < 0:
                        continue
                    xs = [_data(r, dt, n, op) for r in range(world)]
                    if n <= ar_limit // item:
                        x = xs[rank].copy()
                        dist.all_reduce(x, ReduceOp[op])
                        checks += 1
                        if not _same(x, _ref(op, xs)):
                            fails.append(f"all_reduce {dt} {op} n={n}")
                    m = n - n % world
                    if m:  # reduce_scatter, out of place
                        out = np.empty(m // world, dt)
                        dist.reduce_scatter_tensor(out, xs[rank][:m].copy(), ReduceOp[op])
                        checks += 1
                        exp = _ref(op, [v[:m] for v in xs])[rank * (m // world):(rank + 1) * (m // world)]
                        if not _same(out, exp):
                            fails.append(f"reduce_scatter {dt} {op} n={m}")
            for n in sizes:
                if n == 0:
                    continue
                xs = [_data(r, dt, n, "SUM") for r in range(world)]
                for root in range(world):
                    x = xs[rank].copy()
                    dist.broadcast(x, root)
                    checks += 1
                    if not _same(x, xs[root]):
                        fails.append(f"broadcast {dt} n={n} root={root}")
                out = np.empty(n * world, dt)
                dist.all_gather_into_tensor(out, xs[rank])
                checks += 1
                if not _same(out, np.concatenate(xs)):
                    fails.append(f"all_gather {dt} n={n}")
                m = n - n % world
                if m:  # all_to_all: block j of rank r's input lands in block r of rank j's output
                    out = np.empty(m, dt)
                    dist.all_to_all_single(out, xs[rank][:m].copy())
                    checks += 1
                    b = m // world
                    exp = np.concatenate([xs[r][rank * b:(rank + 1) * b] for r in range(world)])
                    if not _same(out, exp):
                        fails.append(f"all_to_all {dt} n={m}")
        # two shapes alternating call by call (both parities, both Smalls), a 2-d array
        a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(5, dtype=np.int64)
        for i in range(20):
            x, y = a + rank + i, b * (rank + 1) + i
            dist.all_reduce(x)
            dist.all_reduce(y, ReduceOp.MAX)
            checks += 2
            if not _same(x, sum(a + r + i for r in range(world)).astype(np.float32)) or \
                    not _same(y, b * world + i):
                fails.append(f"alternating shapes, call {i}")
    core = getattr(fast, "core", None) if fast is not None else None
    calls = core.calls if core is not None else None
    streamed = core.stream_calls if core is not None else None
    dist.destroy()
    return {"fails": fails, "checks": checks, "core_calls": calls, "fast": fast is not None, "streamed": streamed}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("world", [1, 2, 3, pytest.param(5, marks=pytest.mark.slow)])  # 1-3: 4 s a path on 2 cores
def test_small_call_matrix_against_numpy(path: str, world: int) -> None:
    res = run_ranks(world, matrix, env=_env(path), timeout=240)
    for r in res:
        assert not r["fails"], r["fails"][:10]
        assert r["checks"] > 300
        if world == 1:
            continue
        assert r["fast"]
        if path.startswith("core"):
            # the calls ran in C (not all: a call whose spin ran out on a loaded machine goes on in Python, and
            # 5 ranks on 2 cores reduce the all_reduce once, in Python)
            assert r["core_calls"] and r["core_calls"] > 50, r
            if path == "core-streamed":  # and their copies into the slots streamed
                assert r["streamed"] and r["streamed"] > 50, r
        else:
            assert r["core_calls"] is None, r


def matrix_mixed(rank: int, world: int) -> dict:
    """The matrix with every other rank on the Python path: both paths speak the same protocol to each other
    (a rank falls back to Python for a call the core does not take while its peers run it in C)."""
    import os

    os.environ["INTERLINK_NO_CCORE"] = "1" if rank % 2 else "0"
    return matrix(rank, world)


@pytest.mark.skipif(not ccore.built(), reason="the compiled core is not built here")
def test_core_and_python_ranks_in_one_job() -> None:
    res = run_ranks(3, matrix_mixed, env={"INTERLINK_TRANSPORT": "shm"}, timeout=240)
    for rank, r in enumerate(res):
        assert not r["fails"], r["fails"][:10]
        assert r["checks"] > 300
        if rank % 2:
            assert r["core_calls"] is None, r
        else:
            assert r["core_calls"] and r["core_calls"] > 50, r


def mismatch(rank: int, world: int) -> dict:
    import interlink as dist

    dist.init(timeout=30)
    dist.all_reduce(np.ones(3, np.float32))  # one call that matches
    try:
        dist.all_reduce(np.ones(4 if rank == 0 else 5, np.float32))
    except Exception as e:  # noqa: BLE001 - reported to the test
        return {"type": type(e).__name__, "msg": str(e)}
    return {"type": None}


def test_mismatch_raises_the_same_error_on_both_paths() -> None:
    got = {}
    for path in ("python", "core") if ccore.built() else ("python",):
        res = run_ranks(2, mismatch, env=_env(path), timeout=60)
        assert all(r["type"] == "CollectiveMismatchError" for r in res), res
        got[path] = [r["msg"] for r in res]
        assert "all_reduce:slots float32 n=4" in got[path][0] and "n=5" in got[path][0], got
    if len(got) == 2:
        assert got["core"] == got["python"]


def dead_or_late(rank: int, world: int, what: str) -> dict:
    import interlink as dist

    dist.init(timeout=3 if what == "late" else 30)
    x = np.ones(8, np.float32)
    dist.all_reduce(x)
    if rank == 1:
        if what == "dead":
            os.kill(os.getpid(), signal.SIGKILL)
        # past rank 0's timeout and its probe of this rank (about 3 s more, unanswered while this rank sleeps):
        # leaving at 6 s raced that probe, and rank 0 then read 'left the job' instead of its timeout
        time.sleep(10)
        return {"type": "slept"}
    t = time.monotonic()
    try:
        for _ in range(3):
            dist.all_reduce(x)
    except Exception as e:  # noqa: BLE001 - reported to the test
        return {"type": type(e).__name__, "msg": str(e), "elapsed": time.monotonic() - t,
                "ranks": list(getattr(e, "ranks", ()))}
    return {"type": None}


@pytest.mark.parametrize("path", PATHS)
def test_dead_peer_raises(path: str) -> None:
    res = run_ranks(2, dead_or_late, "dead", env=_env(path), timeout=60, expect_dead=(1,))
    assert res[0]["type"] == "PeerLostError", res[0]
    assert res[0]["elapsed"] < 20, res[0]


@pytest.mark.parametrize("path", PATHS)
def test_timeout_names_the_late_rank(path: str) -> None:
    res = run_ranks(2, dead_or_late, "late", env=_env(path), timeout=60)
    assert res[0]["type"] == "CommTimeoutError", res[0]
    assert 1 in res[0]["ranks"], res[0]
    assert 2 < res[0]["elapsed"] < 20, res[0]  # the 3 s timeout (then the abort's handshake, slower under load)


def read_only(rank: int, world: int) -> dict:
    import interlink as dist

    dist.init(timeout=30)
    got = {}
    x = np.arange(4, dtype=np.float32) + rank
    x.flags.writeable = False
    for name, call in (("broadcast", lambda: dist.broadcast(x, 0)), ("all_reduce", lambda: dist.all_reduce(x))):
        try:
            call()
            got[name] = "ok"
        except Exception as e:  # noqa: BLE001 - reported to the test
            got[name] = type(e).__name__
    out = np.empty(4 * world, np.float32)
    dist.all_gather_into_tensor(out, x)  # a read-only input the call only reads
    got["all_gather"] = out.tolist()
    return got


def test_read_only_inputs_behave_alike_on_both_paths() -> None:
    got = {path: run_ranks(2, read_only, env=_env(path), timeout=60)
           for path in (("python", "core") if ccore.built() else ("python",))}
    assert got["python"][0]["all_gather"] == [0, 1, 2, 3, 1, 2, 3, 4]
    if "core" in got:
        assert got["core"] == got["python"]


# ---- the copy into the slots, measured (runtime/_hotcore.c slot_lead, runtime/policy.py slot_stream) ---------


def measured_copies(rank: int, world: int) -> dict:
    """Shapes whose copy into the slot is 8 KiB or more, 120 calls each with new data every call: the host's
    first rank measures plain against streaming copies (its first blocks run both) and the others follow it
    (a broadcast: its first reader measures, its root follows); every result checked against numpy."""
    import interlink as dist
    from interlink.runtime import api

    dist.init(timeout=60)
    fast = api._world()._fast
    fails, checks = [], 0
    n = 8192 * world  # float32: 32 KiB a rank's block times world
    # the one-shot all_reduce's largest (hostpath all_reduce_oneshot_max_2: 8 KiB on 2 ranks; 32 KiB on more),
    # measured like the others (the core measures its copies into the slot from SLOT_STREAM_MIN_BYTES, 4 KiB)
    na = min(8192, fast.limits.all_reduce_oneshot(fast.n, fast.once) // 4)
    for i in range(120):
        xs = [np.arange(n, dtype=np.float32) * (r + 1) + i for r in range(world)]
        x = xs[rank][:na].copy()
        dist.all_reduce(x)
        checks += 1
        if not _same(x, _ref("SUM", [v[:na] for v in xs])):
            fails.append(f"all_reduce call {i}")
        x = xs[rank].copy()  # above it: the two-phase all_reduce, a page program in the core (Core.prog)
        dist.all_reduce(x)
        checks += 1
        if not np.allclose(x, _ref("SUM", xs), rtol=1e-6):
            fails.append(f"two-phase all_reduce call {i}")
        out = np.empty(n, np.float32)
        dist.all_to_all_single(out, xs[rank])
        b = n // world
        checks += 1
        if not _same(out, np.concatenate([xs[r][rank * b:(rank + 1) * b] for r in range(world)])):
            fails.append(f"all_to_all call {i}")
        g = np.empty(b * world, np.float32)
        dist.all_gather_into_tensor(g, xs[rank][:b] + 1)
        checks += 1
        if not _same(g, np.concatenate([v[:b] + 1 for v in xs])):
            fails.append(f"all_gather call {i}")
        for root in (0, world - 1):  # a broadcast: its first reader decides, its root follows
            y = xs[rank].copy()
            dist.broadcast(y, root)
            checks += 1
            if not _same(y, xs[root]):
                fails.append(f"broadcast root {root} call {i}")
    core = fast.core
    # per call shape (kind, root): calls that streamed their copy into the slot, calls rank 0 counted
    shapes = {(sc.kind, sc.root): (sc.ccore.streamed, sc.ccore.ncalls)
              for sc in fast.shapes.values() if sc and getattr(sc, "ccore", None) is not None}
    progs = {sc.kind: (sc.cprog.streamed, sc.cprog.ncalls, sc.cprog.measured)
             for sc in fast.shapes.values() if sc and getattr(sc, "cprog", None) is not None}
    out = {"fails": fails, "checks": checks, "calls": core.calls, "streamed": core.stream_calls,
           "mode": core.slot_stream_mode, "shapes": shapes, "progs": progs, "prog_calls": core.prog_calls}
    dist.destroy()
    return out


@pytest.mark.skipif(not ccore.built(), reason="the compiled core is not built here")
@pytest.mark.parametrize("world,mode", [(2, "auto"), (2, "0"), (3, "auto")])
def test_the_copy_into_the_slots_is_measured_and_every_rank_follows_the_first(world: int, mode: str) -> None:
    from interlink.transport import stream

    res = run_ranks(world, measured_copies, env={"INTERLINK_TRANSPORT": "shm", "INTERLINK_NO_CCORE": "0",
                                                 "INTERLINK_SLOT_STREAM": mode}, timeout=240)
    for r in res:
        assert not r["fails"], r["fails"][:10]
        assert r["checks"] == 720, r
    if mode == "0" or not stream.available:
        assert all(r["streamed"] == 0 for r in res), res
        return
    assert all(r["mode"] == 2 for r in res), res
    if world > 2:  # 3 ranks on 2 cores: calls whose spin runs out go on in Python; the results are the check
        return
    # every shape but the broadcasts: rank 0 ran both copies (its first blocks: 12 streaming calls of 120),
    # and rank 1 made the copy rank 0 made in their last call of that shape: the same count, a call late at
    # each switch. A broadcast: its reader decides (counted there), its root streams as that reader chose, a
    # few calls late (it runs ahead of its reader)
    # On a loaded machine a call whose spin runs out goes on in Python (a plain copy), and the core is asked
    # again for a call it handed back: a rank's counts may move by as many calls as the core did not finish.
    assert all(r["calls"] > 500 for r in res), res
    s0, s1 = res[0]["shapes"], res[1]["shapes"]
    slack = sum(600 - r["calls"] for r in res)
    from interlink.runtime.pageproto import BC

    for key, (streamed, ncalls) in s0.items():
        if key[0] == BC:
            root, reader = key[1], 1 - key[1]
            assert res[reader]["shapes"][key][1] >= 120, (key, res)  # the reader measured
            assert res[root]["shapes"][key][0] >= 6 - slack, (key, res)  # the root followed its streaming blocks
            continue
        assert ncalls >= 120 and 12 - slack <= streamed <= ncalls - 12, (key, s0)
        assert abs(s1[key][0] - streamed) <= 6 + slack, (key, s0, s1)
    # the two-phase all_reduce in the core measures its copies into the slot the same way (Prog, not a shape the
    # Python executor measures: 128 KiB of outputs on the host), rank 1 following rank 0
    slack = sum(120 - r["prog_calls"] for r in res)
    (streamed, ncalls, measured), (streamed1, _, _) = res[0]["progs"][0], res[1]["progs"][0]
    assert measured and ncalls >= 120 and 12 - slack <= streamed <= ncalls - 12, res[0]["progs"]
    assert abs(streamed1 - streamed) <= 6 + slack, (res[0]["progs"], res[1]["progs"])


def late_root_broadcasts(rank: int, world: int) -> dict:
    """A 64 KiB broadcast whose root comes 5 ms late to every call (it sleeps first): its reader, which
    measures the copy into the slot (slot_leader), waits past its spin each time and finishes the call in
    Python (Core.hot's code 2, Core.finish); then calls whose root is on time, which finish in the core and
    carry the root's copy time in its header. Every result checked against numpy."""
    import interlink as dist
    from interlink.runtime import api

    dist.init(timeout=60)
    fast = api._world()._fast
    n, fails, late_costs = 16384, [], None
    for i in range(90):
        if i == 60:  # the late calls are over: the reader's costs so far
            sc = next(sc for sc in fast.shapes.values() if sc and getattr(sc, "ccore", None) is not None)
            late_costs = (sc.ccore.cost_plain, sc.ccore.cost_streamed, sc.ccore.ncalls)
            dist.barrier()
        if rank == 0 and i < 60:
            time.sleep(0.005)
        ref = np.arange(n, dtype=np.float32) + i
        y = ref.copy() if rank == 0 else np.full(n, -1, np.float32)
        dist.broadcast(y, 0)
        if not _same(y, ref):
            fails.append(f"call {i}")
    core = fast.core
    out = {"fails": fails, "late": late_costs, "root_copy_ns": core.root_copy_ns, "mode": core.slot_stream_mode}
    dist.destroy()
    return out


@pytest.mark.skipif(not ccore.built(), reason="the compiled core is not built here")
def test_a_broadcast_reader_times_the_calls_it_finishes_in_python_and_the_roots_copy() -> None:
    """The reader that decides a broadcast's copy into the slot counts every call it times to the call's end,
    also a call the core handed to Python because the root was late (without Core.finish such calls were never
    timed: costs measured only on calls that found the root's payload there), and adds the root's copy, which
    the root times and writes into its header (the root runs ahead, so the reader's own time does not show it)."""
    from interlink.transport import stream

    if not stream.available:
        pytest.skip("no streaming copy on this machine: the copy into the slot is not measured")
    res = run_ranks(2, late_root_broadcasts, env={"INTERLINK_TRANSPORT": "shm", "INTERLINK_NO_CCORE": "0",
                                                  "INTERLINK_SLOT_STREAM": "auto"}, timeout=240)
    for r in res:
        assert not r["fails"], r["fails"][:10]
        assert r["mode"] == 2, r
    plain, streamed, ncalls = res[1]["late"]
    assert ncalls >= 55, res[1]
    # both copies' costs come from late calls: each waited about the root's 5 ms
    assert plain > 2e6 and streamed > 2e6, res[1]
    # the reader's last call finished in the core: the root's copy time read from its header
    assert 0 < res[1]["root_copy_ns"] < 1e9, res[1]
    assert res[0]["root_copy_ns"] == 0, res[0]  # the root reads no root's header


def test_slot_stream_setting() -> None:
    from interlink.runtime import policy
    from interlink.transport import stream

    env = dict(os.environ)
    try:
        for raw, mode in (("", 2), ("auto", 2), ("0", 0), ("never", 0), ("1", 1), ("always", 1)):
            os.environ["INTERLINK_SLOT_STREAM"] = raw
            assert policy.slot_stream() == (policy.SLOT_STREAM_MIN_BYTES, mode if stream.available else 0)
        os.environ["INTERLINK_SLOT_STREAM_MIN_BYTES"] = "0"
        assert policy.slot_stream()[1] == 0
        os.environ["INTERLINK_SLOT_STREAM"] = "sometimes"
        with pytest.raises(ValueError, match="INTERLINK_SLOT_STREAM must be auto, 0 or 1"):
            policy.slot_stream()
    finally:
        os.environ.clear()
        os.environ.update(env)


# ---- page programs through the slots in the compiled core (ccore.make_prog) ----------------------------------

#: small limits so that page programs run from 4 KiB: the two-phase all_reduce from 4 KiB to the slot (64 KiB;
#: on 2 ranks to peer_buffers's 32 KiB), `slots` step by step for broadcast, all_gather, reduce_scatter and
#: all_to_all from 4 KiB to the slots' limit; above, peer_buffers (Python)
_PROG_ENV = {"INTERLINK_FAST_MAX_BYTES": "4096", "INTERLINK_FAST_INLINE_MAX_BYTES": "4096",
             "INTERLINK_SHM_DIRECT_MAX_BYTES": "65536", "INTERLINK_SHM_AR_DIRECT_MIN_BYTES": "32768",
             "INTERLINK_SHM_SLOTS_MAX_BYTES_2": "65536", "INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG": "65536",
             "INTERLINK_SHM_SLOTS_MAX_BYTES_AG": "65536", "INTERLINK_SHM_SLOTS_MAX_BYTES_A2A": "65536",
             "INTERLINK_AUTOTUNE": "0"}


def program_matrix(rank: int, world: int, delays: bool) -> dict:
    """Every dtype and op of all_reduce and reduce_scatter, broadcast from every root, all_gather and all_to_all,
    sizes on both sides of the one-shot limit and of the slots' limit, against numpy; each rank's results
    returned for the test to compare across ranks. delays: rank 1 sleeps now and then before a call (its peers'
    waits run past the core's spin: the call goes on in Python)."""
    import time as _t

    import interlink as dist
    from interlink.ops import ReduceOp
    from interlink.runtime import api

    dist.init(timeout=60)
    fast = api._world()._fast
    fails, checks, results = [], 0, []
    rng = np.random.default_rng(7)

    def nap() -> None:  # long enough to outlast a peer's wake-up on a loaded machine (25 ms naps did not there)
        if delays and rank == 1 and rng.random() < 0.05:
            _t.sleep(0.1)

    def close(got: np.ndarray, exp: np.ndarray) -> bool:
        if got.dtype.kind == "f":  # blocks are reduced by their owner in its order: rounding may differ
            tol = 2e-2 if got.dtype == np.float16 else 1e-4
            return got.shape == exp.shape and bool(np.allclose(got, exp, rtol=tol, atol=tol, equal_nan=True))
        return _same(got, exp)

    with np.errstate(all="ignore"):
        for dt in ("float32", "float64", "int32", "int64", "float16"):
            item = np.dtype(dt).itemsize
            sizes = sorted({4096 // item + 1, 4096 // item + world, 6007, 32768 // item - 1, 32768 // item + 3,
                            65536 // item - world})
            for op in _OPS if dt != "float16" else ("SUM",):
                for n in sizes:
                    xs = [_data(r, dt, n, op) for r in range(world)]
                    x = xs[rank].copy()
                    nap()
                    dist.all_reduce(x, ReduceOp[op])
                    checks += 1
                    results.append(x)
                    if not close(x, _ref(op, xs)):
                        fails.append(f"all_reduce {dt} {op} n={n}")
                    m = n - n % world
                    out = np.empty(m // world, dt)
                    nap()
                    dist.reduce_scatter_tensor(out, xs[rank][:m].copy(), ReduceOp[op])
                    checks += 1
                    results.append(out)
                    exp = _ref(op, [v[:m] for v in xs])[rank * (m // world):(rank + 1) * (m // world)]
                    if not close(out, exp):
                        fails.append(f"reduce_scatter {dt} {op} n={m}")
            for n in sizes:
                xs = [_data(r, dt, n, "SUM") for r in range(world)]
                for root in range(world):
                    x = xs[rank].copy()
                    nap()
                    dist.broadcast(x, root)
                    checks += 1
                    if not _same(x, xs[root]):
                        fails.append(f"broadcast {dt} n={n} root={root}")
                m = max(world, (n // world) // world * world)
                out = np.empty(m * world, dt)
                nap()
                dist.all_gather_into_tensor(out, xs[rank][:m])
                checks += 1
                if not _same(out, np.concatenate([v[:m] for v in xs])):
                    fails.append(f"all_gather {dt} n={m}")
                m = n - n % world
                out = np.empty(m, dt)
                nap()
                dist.all_to_all_single(out, xs[rank][:m].copy())
                checks += 1
                b = m // world
                if not _same(out, np.concatenate([xs[r][rank * b:(rank + 1) * b] for r in range(world)])):
                    fails.append(f"all_to_all {dt} n={m}")
    core = getattr(fast, "core", None)
    res = {"fails": fails, "checks": checks, "results": results,
           "prog_calls": core.prog_calls if core is not None else None, "resumes": list(fast.resumes)}
    dist.destroy()
    return res


@pytest.mark.parametrize("path", ["core", "python"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_page_programs_through_the_slots_against_numpy(path: str, world: int) -> None:
    """The page programs the core runs (ccore.make_prog: two_phase, `slots` step by step) give numpy's results,
    the same bits on every rank, on the core and on the Python path; with the core, it ran them."""
    res = run_ranks(world, program_matrix, False, env={**_env(path), **_PROG_ENV}, timeout=300)
    for r in res:
        assert not r["fails"], r["fails"][:10]
        assert r["checks"] > 150
        if path == "core":
            assert r["prog_calls"] and r["prog_calls"] > 100, r["prog_calls"]
        else:
            assert r["prog_calls"] is None
    for k in range(len(res[0]["results"])):  # every rank the same bits (all_reduce; reduce_scatter: its block)
        if k % 2:
            continue
        assert all(_same(r["results"][k], res[0]["results"][k]) for r in res[1:]), k


def program_matrix_late_python(rank: int, world: int) -> dict:
    """program_matrix with rank 1 on the Python path (its executor takes tens of microseconds between the rounds
    of a call where the core takes one or two) and late before some calls: its peers' cores find it not yet
    there, at the headers and between rounds."""
    import os

    os.environ["INTERLINK_NO_CCORE"] = "1" if rank == 1 else "0"
    return program_matrix(rank, world, True)


@pytest.mark.skipif(not ccore.built(), reason="the compiled core is not built here")
def test_page_programs_the_core_hands_back_finish_in_python() -> None:
    """With the core's spin cut to one pass (INTERLINK_SPIN=1) and a peer that is late (on the Python path, and
    asleep 100 ms before about one call in twenty), the core hands calls back at the peers' headers (stage 0,
    asserted) and, where a peer is slow between rounds, before a round (stage 1: 1-11 calls in a run on an idle
    2-core VM, none beside three CPU hogs, which stretch every step alike); Python finishes them, with the same
    results."""
    env = {"INTERLINK_TRANSPORT": "shm", **_PROG_ENV, "INTERLINK_SPIN": "1"}
    res = run_ranks(3, program_matrix_late_python, env=env, timeout=300)
    for r in res:
        assert not r["fails"], r["fails"][:10]
    core = [res[0], res[2]]
    assert sum(r["resumes"][0] for r in core) >= 3, [r["resumes"] for r in res]
    assert all(r["prog_calls"] for r in core) and res[1]["prog_calls"] is None
