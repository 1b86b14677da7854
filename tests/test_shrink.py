"""A job survives a lost rank: the survivors of a SIGKILLed rank shrink the group (interlink.shrink,
Group.shrink, torch.distributed.shrink_group) and their next collectives are correct (against numpy) within
5 s of the death, rank 0 (which hosts the rendezvous store) included; a rank lost during the agreement
raises on every survivor and a second shrink then succeeds; a live rank left out is told; a rank that does
not join is named; nothing of the old communicator stays open; a DDP job that loses a rank mid-backward
goes on with the survivors (its data resharded) and ends with the parameters of a reference trained
without failures."""

from __future__ import annotations

import os
import signal
import tempfile
import time

import numpy as np
import pytest

from mp import run_ranks


def _kill_when_ready(rank: int, world: int, flags: str, dead: int) -> None:
    """Rank ``dead`` waits until every other rank has passed the warm-up call, writes the time and dies
    (SIGKILL: no goodbye, no ABORT); the others mark that they are ready."""
    if rank == dead:
        deadline = time.monotonic() + 30
        while len([f for f in os.listdir(flags) if f.isdigit()]) < world - 1 and time.monotonic() < deadline:
            time.sleep(0.002)
        with open(os.path.join(flags, "killed"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    open(os.path.join(flags, str(rank)), "w").close()


def _resources() -> dict:
    import gc
    import threading

    gc.collect()
    with open("/proc/self/maps") as f:
        memfd = sum(1 for line in f if "memfd:" in line and "arena" not in line)
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": threading.active_count(), "memfd": memfd}


def _check_collectives(g, old_ranks: list) -> None:
    """all_reduce (hot path and a 1 MiB program), all_gather, broadcast from the last rank, reduce_scatter,
    each against numpy, on the shrunk group ``g`` whose rank i was rank old_ranks[i]."""
    n, r = g.size, g.rank
    for count in (7, 1 << 17):
        x = np.arange(count, dtype=np.float64) * (old_ranks[r] + 1)
        g.all_reduce(x)
        np.testing.assert_array_equal(x, np.arange(count, dtype=np.float64) * sum(o + 1 for o in old_ranks))
    a = np.full(5, float(old_ranks[r]), dtype=np.float32)
    out = np.empty(5 * n, dtype=np.float32)
    g.all_gather_into_tensor(out, a)
    np.testing.assert_array_equal(out, np.repeat(np.array(old_ranks, dtype=np.float32), 5))
    b = np.full(1000, float(r), dtype=np.float64)
    g.broadcast(b, n - 1)
    np.testing.assert_array_equal(b, np.full(1000, float(n - 1)))
    inp = np.arange(4 * n, dtype=np.int64) + 100 * r
    o = np.empty(4, dtype=np.int64)
    g.reduce_scatter_tensor(o, inp)
    want = (np.arange(4 * n, dtype=np.int64) * n + 100 * sum(range(n))).reshape(n, 4)[r]
    np.testing.assert_array_equal(o, want)


def survive(rank: int, world: int, dead: int, flags: str, form: str) -> dict:
    import interlink as dist
    from interlink.errors import InterlinkError, PeerLostError
    from interlink.runtime import api

    dist.init(timeout=30)
    x = np.ones(16)
    dist.all_reduce(x)
    before = _resources()
    _kill_when_ready(rank, world, flags, dead)
    err = None
    try:
        for _ in range(100000):
            dist.all_reduce(x)
    except PeerLostError as e:
        err = e
    assert err is not None
    old = api._WORLD
    g = dist.shrink() if form == "agree" else dist.shrink(exclude=[dead])
    y = np.full(1000, float(rank))
    g.all_reduce(y)
    done = time.time()
    with open(os.path.join(flags, "killed")) as f:
        killed = float(f.read())
    survivors = [r for r in range(world) if r != dead]
    assert y.tolist() == [float(sum(survivors))] * 1000
    assert (g.size, g.rank, list(g.parent_ranks), list(g.lost)) == (world - 1, survivors.index(rank), survivors, [dead])
    assert api._WORLD is g and dist.get_world_size() == world - 1 and dist.get_rank() == g.rank
    _check_collectives(g, survivors)
    z = np.full(3, 1.0)
    dist.all_reduce(z)  # the module-level calls go to the survivors' world
    assert z.tolist() == [world - 1.0] * 3
    try:
        old.all_reduce(np.ones(2))
        stale = None
    except InterlinkError as e:
        stale = str(e)
    del old
    after = _resources()
    return {"since_kill": done - killed, "err": f"{type(err).__name__}: {err}", "stale": stale,
            "before": before, "after": after}


_CASES = [(3, 1, "shm", "agree"), (3, 0, "shm", "exclude"), (4, 2, "tcp", "agree"), (4, 0, "tcp", "agree"),
          (4, 3, "shm", "exclude")]


@pytest.mark.parametrize("world,dead,transport,form", _CASES, ids=[f"{w}-kill{d}-{t}-{f}" for w, d, t, f in _CASES])
def test_survivors_shrink_and_compute_within_5s(world: int, dead: int, transport: str, form: str) -> None:
    shm_before = set(os.listdir("/dev/shm"))
    with tempfile.TemporaryDirectory() as flags:
        res = run_ranks(world, survive, dead, flags, form, env={"INTERLINK_TRANSPORT": transport},
                        expect_dead=(dead,), timeout=90)
    for r, out in enumerate(res):
        if r == dead:
            continue
        assert out["since_kill"] < 5.0, out
        assert "PeerLostError" in out["err"] and f"rank {dead}" in out["err"], out
        assert out["stale"] is not None and "shrunk" in out["stale"], out
        # the old communicator is closed: no more descriptors, threads or shared mappings than before it
        # failed (the survivors' new one has fewer peers)
        b, a = out["before"], out["after"]
        assert a["fds"] <= b["fds"] and a["threads"] <= b["threads"] and a["memfd"] <= b["memfd"], out
    assert {f for f in set(os.listdir("/dev/shm")) - shm_before if not f.startswith("sem.mp-")} == set()


# ---- a rank lost during the agreement, then a second shrink -------------------------------------


def lost_during(rank: int, world: int, flags: str) -> dict:
    """Rank 3 dies; rank 2 sends its proposal and then dies too (in the middle of the agreement): ranks 0
    and 1 raise PeerLostError naming rank 2, and their second shrink (both lost) works."""
    import interlink as dist
    from interlink.errors import PeerLostError
    from interlink.runtime import shrink as shrink_mod

    dist.init(timeout=30)
    x = np.ones(4)
    dist.all_reduce(x)
    _kill_when_ready(rank, world, flags, 3)
    try:
        for _ in range(100000):
            dist.all_reduce(x)
    except PeerLostError:
        pass
    if rank == 2:
        send = shrink_mod._Wire.send

        def send_then_die(self, peers, kind, **body):
            send(self, peers, kind, **body)
            if kind == "propose":
                os.kill(os.getpid(), signal.SIGKILL)

        shrink_mod._Wire.send = send_then_die
    t = time.monotonic()
    try:
        g = dist.shrink()
        # rank 2's death seen before the union was confirmed: the first agreement takes it in (on a loaded
        # host its connection can end that early); every survivor then has the same group of 2
        first = None
    except PeerLostError as e:
        first = {"msg": str(e), "ranks": list(e.ranks), "elapsed": time.monotonic() - t}
        g = dist.shrink()
    y = np.full(6, float(rank + 1))
    g.all_reduce(y)
    return {"first": first, "y": y.tolist(), "size": g.size, "lost": list(g.lost)}


def test_rank_lost_during_agreement_raises_then_shrink_again_works() -> None:
    with tempfile.TemporaryDirectory() as flags:
        res = run_ranks(4, lost_during, flags, expect_dead=(2, 3), timeout=90)
    # the survivors agree on the outcome: both raised (then shrank again), or both shrank at once
    assert (res[0]["first"] is None) == (res[1]["first"] is None), res
    for r in (0, 1):
        out = res[r]
        if out["first"] is not None:
            assert out["first"]["ranks"] == [2] and "during" in out["first"]["msg"], out
            assert out["first"]["elapsed"] < 5.0, out
        assert out["size"] == 2 and out["lost"] == [2, 3] and out["y"] == [3.0] * 6, out


# ---- a live rank left out; a rank that never joins ------------------------------------------------


def leave_out(rank: int, world: int) -> dict:
    import interlink as dist
    from interlink.errors import InterlinkError

    dist.init(timeout=30)
    x = np.ones(4)
    dist.all_reduce(x)
    if rank == 2:  # left out while it waits in a collective: told at once (its peers' connections end)
        t = time.monotonic()
        try:
            dist.all_reduce(x)
            return {"err": None}
        except InterlinkError as e:
            return {"err": type(e).__name__, "elapsed": time.monotonic() - t}
    g = dist.shrink(exclude=[2])
    y = np.full(5, float(rank + 1))
    g.all_reduce(y)
    return {"y": y.tolist(), "size": g.size}


def test_live_rank_excluded_is_told_and_survivors_compute() -> None:
    res = run_ranks(3, leave_out, timeout=90)
    assert res[0] == res[1] == {"y": [3.0] * 5, "size": 2}, res
    assert res[2]["err"] == "PeerLostError" and res[2]["elapsed"] < 5.0, res


def two_lost(rank: int, world: int, flags: str) -> dict:
    """Ranks 1 and 2 die; rank 0 excludes only rank 2: PeerLostError naming rank 1; excluding both leaves a
    world of one rank, which still computes."""
    import interlink as dist
    from interlink.errors import PeerLostError

    dist.init(timeout=30)
    dist.barrier()
    if rank in (1, 2):
        while not os.path.exists(os.path.join(flags, "0")):
            time.sleep(0.002)
        os.kill(os.getpid(), signal.SIGKILL)
    open(os.path.join(flags, "0"), "w").close()
    try:
        while True:
            dist.barrier()
    except PeerLostError:
        pass
    try:
        dist.shrink(exclude=[2])
        first = None
    except PeerLostError as e:
        first = {"msg": str(e), "ranks": list(e.ranks)}
    g = dist.shrink(exclude=[1, 2])
    y = np.arange(3.0)
    g.all_reduce(y)
    return {"first": first, "size": g.size, "y": y.tolist()}


def test_exclude_that_misses_a_lost_rank_names_it() -> None:
    with tempfile.TemporaryDirectory() as flags:
        res = run_ranks(3, two_lost, flags, expect_dead=(1, 2), timeout=90)
    out = res[0]
    assert out["first"] is not None and out["first"]["ranks"] == [1] and "lost too" in out["first"]["msg"], out
    assert out["size"] == 1 and out["y"] == [0.0, 1.0, 2.0], out


def subgroup(rank: int, world: int) -> dict:
    """Shrinking a subgroup of a healthy world: its survivors get a group of their own, and the world (the
    old communicator) stays usable by every rank."""
    import interlink as dist

    dist.init(timeout=30)
    sub = dist.new_group([1, 2, 3])
    out = {}
    if rank in (1, 2):
        g = sub.shrink(exclude=[2])  # group rank 2 = global rank 3, which does not call it
        y = np.full(4, float(rank))
        g.all_reduce(y)
        out = {"y": y.tolist(), "size": g.size, "parent": list(g.parent_ranks)}
    w = np.full(3, float(rank))
    dist.all_reduce(w)
    out["world"] = w.tolist()
    return out


def test_shrinking_a_subgroup_leaves_the_world_usable() -> None:
    res = run_ranks(4, subgroup, timeout=90)
    for r in (1, 2):
        assert res[r] == {"y": [3.0] * 4, "size": 2, "parent": [0, 1], "world": [6.0] * 3}, res
    assert res[0] == res[3] == {"world": [6.0] * 3}, res


def silent(rank: int, world: int) -> dict:
    import interlink as dist
    from interlink.errors import CommTimeoutError

    dist.init(timeout=30)
    dist.barrier()
    if rank == 2:  # alive, never calls shrink (nobody is lost: shrink without exclude waits for it)
        time.sleep(2.5)
        return {}
    t = time.monotonic()
    try:
        dist.shrink(timeout=1.0)
        return {"err": None}
    except CommTimeoutError as e:
        return {"err": str(e), "ranks": list(e.ranks), "elapsed": time.monotonic() - t}


def test_rank_that_does_not_join_is_named() -> None:
    res = run_ranks(3, silent, timeout=90)
    for r in (0, 1):
        assert res[r]["ranks"] == [2] and "did not join" in res[r]["err"] and res[r]["elapsed"] < 3.0, res


# ---- torch.distributed.shrink_group ---------------------------------------------------------------


def _torch_ok() -> None:
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not hasattr(torch.distributed, "shrink_group"):
        pytest.skip("torch without distributed.shrink_group")
    import importlib.metadata

    if not any(ep.name == "interlink" for ep in importlib.metadata.entry_points(group="torch.backends")):
        pytest.skip("interlink is not installed with its entry points (pip install -e .)")


# ---- DDP: a rank lost mid-backward, the survivors go on -------------------------------------------

STEPS, BATCH, LR = 7, 12, 0.1
KILLS = {0: 2, 2: 4}  # original rank -> the step in whose backward it dies


def _net():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 6)).double()


def _batch(step: int):
    """The global batch of ``step`` (the same whatever the world size: the ranks take equal shards)."""
    import torch

    gen = torch.Generator().manual_seed(1000 + step)
    return (torch.randn(BATCH, 24, generator=gen, dtype=torch.float64),
            torch.randn(BATCH, 6, generator=gen, dtype=torch.float64))


def ddp_survive(rank: int, world: int, flags: str) -> dict:
    import datetime
    import gc

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from interlink.backends.torch import lost_ranks

    dist.init_process_group("interlink", timeout=datetime.timedelta(seconds=30))
    net = _net()
    state = {"step": 0}
    if rank in KILLS:  # dies in the middle of a backward, with later layers' buckets in flight
        def die(grad):
            if state["step"] == KILLS[rank]:
                with open(os.path.join(flags, f"killed-{state['step']}"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            return grad

        net[0].weight.register_hook(die)
    ddp = DDP(net, bucket_cap_mb=0.002)  # several buckets
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    recoveries = []
    while state["step"] < STEPS:
        step = state["step"]
        n, r = dist.get_world_size(), dist.get_rank()
        x, y = _batch(step)
        lo, hi = r * BATCH // n, (r + 1) * BATCH // n  # this rank's shard of the global batch
        try:
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x[lo:hi]), y[lo:hi]).backward()
            opt.step()
            state["step"] += 1
        except Exception as e:  # noqa: BLE001 - a lost rank (interlink's PeerLostError through torch)
            lost = lost_ranks()
            dist.shrink_group(lost)
            check = torch.full((5,), float(rank), dtype=torch.float64)
            dist.all_reduce(check)  # the survivors' first collective: the sum of their original ranks
            first = time.time()
            del ddp
            gc.collect()
            # torchft's recovery: every survivor takes one survivor's state (DDP broadcasts the new rank 0's
            # parameters when it is built) and its step: a step some survivors completed is not redone twice
            ddp = DDP(net, bucket_cap_mb=0.002)
            st = torch.tensor([state["step"]])
            dist.broadcast(st, 0)
            state["step"] = int(st[0])
            with open(os.path.join(flags, f"killed-{step}")) as f:
                killed = float(f.read())
            recoveries.append({"at": step, "lost": lost, "err": str(e)[:300], "size": dist.get_world_size(),
                               "check": check.tolist(), "since_kill": first - killed})
    return {"params": [p.detach().numpy().copy() for p in net.parameters()], "recoveries": recoveries}


def _reference() -> list:
    import torch

    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = _batch(step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return [p.detach().numpy().copy() for p in net.parameters()]


def test_ddp_loses_ranks_mid_backward_and_matches_the_reference() -> None:
    """4 ranks under torch.distributed (backend="interlink", env:// rendezvous: rank 0 also hosts torch's
    store). Rank 0 is SIGKILLed in step 2's backward: the 3 survivors agree it is lost (lost_ranks),
    torch.distributed.shrink_group, check an all_reduce against numpy within 5 s of the death, rebuild DDP
    (the new rank 0's state) and reshard the global batch (4 rows each instead of 3); original rank 2 (then
    rank 1) dies in step 4's backward and the last 2 do it again (6 rows each). Both survivors' parameters
    equal a model trained on the whole batch in one process (float64, 1e-9)."""
    _torch_ok()
    with tempfile.TemporaryDirectory() as flags:
        res = run_ranks(4, ddp_survive, flags, expect_dead=tuple(KILLS), timeout=150)
    ref = _reference()
    for r in (1, 3):
        out = res[r]
        recs = out["recoveries"]
        assert [(c["at"], c["lost"], c["size"]) for c in recs] == [(2, [0], 3), (4, [1], 2)], recs
        assert recs[0]["check"] == [6.0] * 5 and recs[1]["check"] == [4.0] * 5, recs
        assert all("rank" in c["err"] for c in recs), recs
        assert all(c["since_kill"] < 5.0 for c in recs), recs
        for got, want in zip(out["params"], ref):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
