"""interlink as a torch.distributed backend: init_process_group(backend="interlink") in code that never
imports interlink (torch's backend autoload finds it), every torch.distributed call compared with gloo
in the same run (a gloo group over the same ranks), subgroups, and DDP training that ends with the same
parameters as under gloo."""

from __future__ import annotations

import numpy as np
import pytest

from mp import need_torch_entry_point, run_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():  # pragma: no cover
    pytest.skip("torch without distributed", allow_module_level=True)


def _calls(rank: int, world: int) -> dict:
    import sys

    import torch
    import torch.distributed as dist

    dist.init_process_group("interlink")  # no import of interlink here: the entry point registers it
    autoloaded = "interlink" in sys.modules
    from interlink.backends.torch import cores_scarce
    from interlink.runtime import api
    from interlink.runtime.group import Group

    real, async_ops = Group.all_reduce, []

    def spy(self, *args, **kw):  # the backend passes async_op third: True on the runner, False inline
        async_ops.append(bool(args[2]) if len(args) > 2 else bool(kw.get("async_op")))
        return real(self, *args, **kw)

    Group.all_reduce = spy
    eng = api._CTX.engine
    scarce = cores_scarce(eng.ncpu, eng.nlocal)
    gloo = dist.new_group(backend="gloo")
    fails = []
    checks = 0

    def same(what, run):
        nonlocal checks
        a, b = run(None), run(gloo)
        for x, y in zip(a, b):
            checks += 1
            if not torch.equal(x, y):
                fails.append(f"rank {rank}: {what}: interlink {x.flatten()[:6].tolist()} gloo {y.flatten()[:6].tolist()}")

    def data_of(r, n, dtype=torch.float32, salt=0):
        return (torch.arange(n, dtype=torch.int64) * (r + 2) % 7 + salt + r).to(dtype)

    def data(n, dtype=torch.float32, salt=0):
        return data_of(rank, n, dtype, salt)

    for n in (0, 1, 13, 1000, 70001):
        for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT):
                def ar(g, dtype=dtype, op=op):
                    t = data(n, dtype)
                    dist.all_reduce(t, op=op, group=g)
                    return [t]
                same(f"all_reduce {dtype} {op} n={n}", ar)
        if n:
            def avg(g):
                t = data(n, torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.AVG, group=g)
                return [t]
            same(f"all_reduce avg n={n}", avg)

        def bc(g):
            t = data(n)
            dist.broadcast(t, src=world - 1, group=g)
            return [t]
        same(f"broadcast n={n}", bc)

        def red(g):
            t = data(n)
            dist.reduce(t, dst=0, group=g)
            return [t] if rank == 0 else []
        same(f"reduce n={n}", red)

        def ag(g):
            out = torch.zeros(n * world)
            dist.all_gather_into_tensor(out, data(n), group=g)
            lst = [torch.zeros(n) for _ in range(world)]
            dist.all_gather(lst, data(n, salt=3), group=g)
            return [out, *lst]
        same(f"all_gather n={n}", ag)

        def rs(g):
            out = torch.zeros(n)
            dist.reduce_scatter_tensor(out, data(n * world), group=g)
            out2 = torch.zeros(n)
            dist.reduce_scatter(out2, [data(n, salt=r) for r in range(world)], group=g)
            return [out, out2]
        same(f"reduce_scatter n={n}", rs)

        def a2a(g):
            out = torch.zeros(n * world)
            dist.all_to_all_single(out, data(n * world), group=g)
            ins = [data(3, salt=r) for r in range(world)]  # gloo's list form takes equal sizes only
            outs = [torch.zeros(3) for _ in range(world)]
            dist.all_to_all(outs, ins, group=g)
            return [out, *outs]
        same(f"all_to_all n={n}", a2a)

        def gs(g):
            lst = [torch.zeros(n) for _ in range(world)] if rank == 1 % world else None
            dist.gather(data(n), lst, dst=1 % world, group=g)
            out = torch.zeros(n)
            dist.scatter(out, [data(n, salt=r) for r in range(world)] if rank == 0 else None, src=0, group=g)
            return [*(lst or []), out]
        same(f"gather/scatter n={n}", gs)

    if world > 1:
        def p2p(g):
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            buf = torch.zeros(17)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, data(17), nxt, g),
                                           dist.P2POp(dist.irecv, buf, prv, g)])
            for r in reqs:
                r.wait()
            return [buf]
        same("batch_isend_irecv", p2p)

    def objs(g):
        got = [None] * world
        dist.all_gather_object(got, {"rank": rank, "x": list(range(rank))}, group=g)
        lst = [f"obj {rank}"]
        dist.broadcast_object_list(lst, src=0, group=g)
        return [torch.tensor([len(str(got)), len(lst[0])])]
    same("object collectives", objs)
    def more_objs(g):
        got = [None] * world if rank == 0 else None
        dist.gather_object({"r": rank}, got, dst=0, group=g)
        out = [None]
        dist.scatter_object_list(out, [f"to {r}" * (r + 1) for r in range(world)] if rank == 0 else None, src=0,
                                 group=g)
        res = [torch.tensor([len(str(got)), len(out[0])])]
        if world > 1:
            lst = [None, None]
            if rank == 0:
                dist.send_object_list([{"k": 1}, "two"], dst=1, group=g)
            elif rank == 1:
                dist.recv_object_list(lst, src=0, group=g)
                res.append(torch.tensor([len(str(lst))]))
        return res
    same("more object collectives", more_objs)

    # asynchronous calls: several in flight at once, a synchronous one behind them, waited in reverse order
    def in_flight(g):
        a, b, c, d, e = data(1001, torch.float64), data(37), torch.zeros(13 * world), torch.zeros(5), data(7)
        ws = [dist.all_reduce(a, group=g, async_op=True),
              dist.broadcast(b, src=world - 1, group=g, async_op=True),
              dist.all_gather_into_tensor(c, data(13), group=g, async_op=True),
              dist.reduce_scatter_tensor(d, data(5 * world), group=g, async_op=True)]
        dist.all_reduce(e, op=dist.ReduceOp.MAX, group=g)
        for w in reversed(ws):
            w.wait()
        f = data(70001, torch.float64)
        fut = dist.all_reduce(f, group=g, async_op=True).get_future()
        return [a, b, c, d, e, fut.wait()[0], f]
    same("async calls in flight", in_flight)

    # a future's then-callback that issues another collective and waits for it (PowerSGD's pattern)
    def chain(g):
        a, b = data(100, torch.float64), data(50, torch.float64)

        def cb(f):
            dist.all_reduce(b, group=g, async_op=True).get_future().wait()
            return f.value()[0] * 2
        out = dist.all_reduce(a, group=g, async_op=True).get_future().then(cb).wait()
        c = data(9)
        dist.all_reduce(c, group=g)  # after the chain, in the same place on every rank
        return [out, b, c]
    same("future callbacks", chain)

    # torch's coalescing manager: one packed all_reduce / all_gather for the list
    def coalesced(g):
        ts = [data(5), data(70001), data(1)]
        with dist._coalescing_manager(group=g):
            for t in ts:
                dist.all_reduce(t, group=g)
        outs = [torch.zeros(3 * world), torch.zeros(11 * world)]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            dist.all_gather_into_tensor(outs[0], data(3), group=g)
            dist.all_gather_into_tensor(outs[1], data(11), group=g)
        cm.wait()
        rs = [torch.zeros(4), torch.zeros(6)]
        with dist._coalescing_manager(group=g):
            dist.reduce_scatter_tensor(rs[0], data(4 * world), group=g)
            dist.reduce_scatter_tensor(rs[1], data(6 * world, salt=1), group=g)
        return ts + outs + rs
    same("coalescing manager", coalesced)

    # PREMUL_SUM (FSDP's gradient pre-division; gloo has none): against the inputs summed here
    for factor in (2.5, torch.tensor([0.25], dtype=torch.float64)):
        f = float(factor) if not torch.is_tensor(factor) else float(factor.item())
        n = 1001
        want = sum(data_of(r, n, torch.float64) for r in range(world)) * f
        for asy in (False, True):
            t = data(n, torch.float64)
            w = dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor), async_op=asy)
            if asy:
                w.wait()
            checks += 1
            if not torch.allclose(t, want, rtol=1e-15, atol=0):
                fails.append(f"rank {rank}: premul_sum all_reduce factor {f} async {asy}")
        inp = data(n * world, torch.float64)
        out = torch.zeros(n, dtype=torch.float64)
        dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(factor))
        full = sum(data_of(r, n * world, torch.float64) for r in range(world)) * f
        checks += 2
        if not torch.allclose(out, full[rank * n:(rank + 1) * n], rtol=1e-15, atol=0):
            fails.append(f"rank {rank}: premul_sum reduce_scatter factor {f}")
        if not torch.equal(inp, data(n * world, torch.float64)):
            fails.append(f"rank {rank}: premul_sum reduce_scatter wrote its input")
        t = data(n, torch.float64)
        dist.reduce(t, dst=world - 1, op=dist._make_nccl_premul_sum(factor))
        checks += 1
        if rank == world - 1 and not torch.allclose(t, want, rtol=1e-15, atol=0):
            fails.append(f"rank {rank}: premul_sum reduce factor {f}")
        if rank != world - 1 and not torch.equal(t, data(n, torch.float64)):
            fails.append(f"rank {rank}: premul_sum reduce wrote a non-root's input")
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0))
        fails.append(f"rank {rank}: premul_sum on int32 did not raise")
    except TypeError as e:
        checks += 1
        if "floating-point" not in str(e):
            fails.append(f"rank {rank}: premul_sum on int32: {e}")

    # recv without src: rank 0 takes every other rank's message in whatever order they come
    if world > 1:
        if rank == 0:
            got = {}
            for _ in range(world - 1):
                buf = torch.zeros(70001 if world == 2 else 13, dtype=torch.float64)
                src = dist.recv(buf, tag=5)
                got[src] = buf[0].item()
            checks += 1
            if got != {r: float(r) for r in range(1, world)}:
                fails.append(f"rank 0: recv from any source got {got}")
            w = dist.irecv(buf, tag=6)
            w.wait()
            checks += 1
            if w._source_rank() != world - 1 or buf[0].item() != 6.0:
                fails.append(f"rank 0: irecv from any source: {w._source_rank()} {buf[0].item()}")
        else:
            dist.send(torch.full((70001 if world == 2 else 13,), float(rank), dtype=torch.float64), dst=0, tag=5)
            if rank == world - 1:
                dist.send(torch.full((70001 if world == 2 else 13,), 6.0, dtype=torch.float64), dst=0, tag=6)

    # a 2-D DeviceMesh: its sub-groups are interlink groups
    from torch.distributed.device_mesh import init_device_mesh

    shape = (2, world // 2) if world % 2 == 0 else (world, 1)
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        sub_pg = mesh[dim].get_group()
        members = dist.get_process_group_ranks(sub_pg)
        t = torch.full((3,), float(rank + 1))
        dist.all_reduce(t, group=sub_pg)
        checks += 1
        if t.tolist() != [float(sum(r + 1 for r in members))] * 3 or dist.get_backend(sub_pg) != "interlink":
            fails.append(f"rank {rank}: mesh {dim} {members}: {t.tolist()} {dist.get_backend(sub_pg)}")
    dist.barrier()
    # a subgroup of interlink
    sub = dist.new_group([r for r in range(world) if r % 2 == 0], group_desc="evens")
    if rank % 2 == 0:
        checks += 1
        if sub.group_desc != "evens" or not sub.group_name or dist.group.WORLD.group_desc != "default_pg":
            fails.append(f"rank {rank}: group description {sub.group_desc!r} name {sub.group_name!r}")
        t = torch.full((5,), float(rank))
        dist.all_reduce(t, group=sub)
        checks += 1
        if t[0].item() != float(sum(r for r in range(world) if r % 2 == 0)):
            fails.append(f"rank {rank}: subgroup all_reduce {t.tolist()}")
    backend = dist.get_backend()
    dist.destroy_process_group()
    Group.all_reduce = real
    return {"fails": fails, "checks": checks, "autoloaded": autoloaded, "backend": backend,
            "runner": any(async_ops), "scarce": scarce}


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_call_matches_gloo(nranks: int) -> None:
    need_torch_entry_point()
    # 2 ranks: every call the caller lets overlap goes to interlink's runner; 3 ranks: the default, which
    # on a host with fewer than two cores a rank runs CPU calls inline (cores_scarce)
    env = {"INTERLINK_TORCH_ASYNC": "1"} if nranks == 2 else {}
    res = run_ranks(nranks, _calls, timeout=300, env=env)
    for out in res:
        assert out["backend"] == "interlink" and out["autoloaded"], out
        # INTERLINK_TORCH_ASYNC=1 (2 ranks): the async calls went to the runner; auto (3 ranks): inline
        # exactly where the host has fewer than two cores a rank
        assert out["runner"] == (nranks == 2 or not out["scarce"]), out
        assert out["checks"] > 100 and out["fails"] == [], out["fails"][:5]


# DDP (every option and comm hook), FSDP1, FSDP2 and DTensor train as on gloo: test_backend_torch_training.py


def _device_map(rank: int, world: int) -> dict:
    import torch
    import torch.distributed as dist

    dist.init_process_group("cpu:interlink,cuda:gloo")
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    import interlink.runtime.api as api

    calls = api._WORLD.seq if api._WORLD is not None else 0
    dist.destroy_process_group()
    return {"t": t.tolist(), "calls": calls}


def test_device_map_sends_cpu_tensors_through_interlink() -> None:
    need_torch_entry_point()
    res = run_ranks(2, _device_map, timeout=120)
    for out in res:
        assert out["t"] == [3.0] * 4 and out["calls"] >= 1, out


# ---- failures surface in every rank, as torch users expect ------------------------------------------

def _dead_peer(rank: int, world: int, asy: bool) -> dict:
    import datetime
    import os
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("interlink", timeout=datetime.timedelta(seconds=60))
    t = torch.ones(1000)
    dist.all_reduce(t)
    if rank == world - 1:
        os._exit(3)  # dies without a word
    t0 = time.monotonic()
    try:
        w = dist.all_reduce(t, async_op=asy)
        if asy:
            w.wait()
        return {"raised": None}
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "msg": str(e), "secs": time.monotonic() - t0,
                "runtime_error": isinstance(e, RuntimeError)}


@pytest.mark.parametrize("asy", [False, True])
def test_a_dead_rank_raises_in_every_survivor_naming_it(asy: bool) -> None:
    need_torch_entry_point()
    res = run_ranks(3, _dead_peer, asy, timeout=120, expect_dead=(2,))
    for r in (0, 1):
        out = res[r]
        assert out["raised"] is not None and out["runtime_error"], out
        assert out["secs"] < 15, out
        assert "op=all_reduce" in out["msg"] and "group=world" in out["msg"] and "seq=2" in out["msg"], out["msg"]
        assert "ranks=[2]" in out["msg"], out["msg"]


def _mismatch(rank: int, world: int) -> dict:
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("interlink", timeout=datetime.timedelta(seconds=30))
    try:
        dist.all_reduce(torch.ones(10 + rank))  # ranks disagree on the size
        return {"raised": None}
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "msg": str(e)}


def test_a_mismatched_call_raises_in_every_rank() -> None:
    need_torch_entry_point()
    res = run_ranks(2, _mismatch, timeout=120)
    for out in res:
        assert out["raised"] == "CollectiveMismatchError", out
        assert "op=all_reduce" in out["msg"] and "seq=1" in out["msg"] and "n=10" in out["msg"], out["msg"]


def _late(rank: int, world: int) -> dict:
    import datetime
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("interlink", timeout=datetime.timedelta(seconds=3))
    if rank == 1:
        time.sleep(5.5)  # never joins the all_reduce in time (the timeout is 3 s)
        return {"raised": None}
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(5))
        return {"raised": None}
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "msg": str(e), "secs": time.monotonic() - t0}


def test_the_process_group_timeout_applies() -> None:
    need_torch_entry_point()
    res = run_ranks(2, _late, timeout=120)
    assert res[0]["raised"] == "CommTimeoutError" and res[0]["secs"] < 7, res[0]
    assert "op=all_reduce" in res[0]["msg"] and "ranks=[1]" in res[0]["msg"], res[0]["msg"]


# ---- under torchrun, as users launch it ---------------------------------------------------------------

_TORCHRUN_SCRIPT = '''
import json, os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

backend = sys.argv[2]
dist.init_process_group(backend)  # this script never imports interlink
rank, world = dist.get_rank(), dist.get_world_size()
out = {"autoloaded": "interlink" in sys.modules, "backend": dist.get_backend(), "world": world}
t = torch.arange(10, dtype=torch.float64) * (rank + 1)
dist.all_reduce(t)
out["all_reduce"] = t.tolist()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).double()
ddp = DDP(model, bucket_cap_mb=0.001)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(rank)
for _ in range(4):
    opt.zero_grad()
    x = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    ddp(x).pow(2).mean().backward()
    opt.step()
out["params"] = [p.detach().clone().reshape(-1).tolist() for p in model.parameters()]
with open(os.path.join(sys.argv[1], f"{backend}{rank}.json"), "w") as f:
    json.dump(out, f)
dist.destroy_process_group()  # the model and its optimizer stay alive past it, as in users' scripts
'''


def _torchrun(script, nranks: int, outdir, backend: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={nranks}", str(script), str(outdir), backend],
                          capture_output=True, text=True, timeout=120)


# 3 ranks in the default suite; 2 with the slow tests (`pytest -m slow`): every 2-rank call against gloo is
# test_every_call_matches_gloo[2]
@pytest.mark.parametrize("nranks", [pytest.param(2, marks=pytest.mark.slow), 3])
def test_torchrun_runs_unmodified_ddp_on_interlink(nranks: int, tmp_path) -> None:
    """``torchrun --standalone --nproc-per-node N script.py``: the script's init_process_group("interlink")
    finds the backend by autoload, rendezvous goes through torchrun's store, DDP trains as on gloo (the same
    script with "gloo", a job of its own: a gloo group in the same processes brought gloo's own rare exit
    abort into this test: a gloo worker thread ending in interpreter finalization, benchmarks/RESULTS.md
    section 32; gloo's job is judged by the results it wrote). The interlink job, its DDP model alive past
    destroy_process_group as in users' scripts, must exit cleanly."""
    need_torch_entry_point()
    import json

    script = tmp_path / "train.py"
    script.write_text(_TORCHRUN_SCRIPT)
    proc = _torchrun(script, nranks, tmp_path, "interlink")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = _torchrun(script, nranks, tmp_path, "gloo")
    outs = [json.loads((tmp_path / f"interlink{r}.json").read_text()) for r in range(nranks)]
    try:
        gloo = [json.loads((tmp_path / f"gloo{r}.json").read_text()) for r in range(nranks)]
    except FileNotFoundError:
        raise AssertionError(f"gloo's job wrote no results: {ref.stderr[-3000:]}") from None
    total = [float(i * sum(r + 1 for r in range(nranks))) for i in range(10)]
    for out, g in zip(outs, gloo):
        assert out["autoloaded"] and out["backend"] == "interlink" and out["world"] == nranks, out
        assert out["all_reduce"] == total == g["all_reduce"]
        for a, b in zip(out["params"], g["params"]):
            assert np.allclose(a, b, rtol=0, atol=1e-9)
        assert out["params"] == outs[0]["params"]  # replicas agree


def test_async_mode_runs_cpu_calls_inline_where_cores_are_scarce() -> None:
    """INTERLINK_TORCH_ASYNC: 0 inline, 1 on the runner, auto (the default) inline for CPU tensors on a
    host with fewer than two cores a local rank. What real ranks choose is checked in
    test_every_call_matches_gloo (2 ranks with 1, 3 ranks with auto)."""
    from interlink.backends import torch as tb

    assert tb._async_mode(None) is None and tb._async_mode("auto") is None
    assert tb._async_mode("0") is False and tb._async_mode("1") is True
    with pytest.raises(ValueError, match="0, 1 or auto"):
        tb._async_mode("yes")
    assert tb.cores_scarce(2, 2) and tb.cores_scarce(3, 2) and not tb.cores_scarce(4, 2)
    assert tb._on_cpu([[torch.ones(1)]]) and tb._on_cpu([]) and tb._on_cpu(torch.ones(1))
    meta = torch.empty(1, device="meta")
    assert not tb._on_cpu([meta])
