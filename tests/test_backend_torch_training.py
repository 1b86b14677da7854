"""Training code on backend="interlink", unchanged, against gloo in the same kind of run: DDP with its
options and comm hooks (gradient_as_bucket_view, static_graph, find_unused_parameters, no_sync, fp16
compression, PowerSGD), FSDP1, FSDP2 (fully_shard), DTensor and functional collectives. Trained parameters must equal gloo's
(float64: within 1e-9; fp16-compressed gradients: within fp16's rounding).

One launch per (rank count, backend) runs all of it in one world group (the three workloads used to take
a launch each, FSDP2 and plain DDP two more: 16 launches, 152 s of the default suite on 2 cores; 4 launches
now); each workload's check
says which failed."""

from __future__ import annotations

import numpy as np
import pytest

from mp import need_torch_entry_point, run_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():  # pragma: no cover
    pytest.skip("torch without distributed", allow_module_level=True)


# ---- DDP: every option and hook -------------------------------------------------------------------

class _Net(torch.nn.Module):
    """Two heads; the second is used only when ``use_b`` (find_unused_parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(24, 40)
        self.b = torch.nn.Linear(40, 40)
        self.c = torch.nn.Linear(40, 6)
        self.use_b = True

    def forward(self, x):
        h = torch.relu(self.a(x))
        if self.use_b:
            h = torch.relu(self.b(h))
        return self.c(h)


def _ddp_variant(rank: int, world: int, backend: str, variant: str, pg) -> list:
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    net = _Net().double()
    # several buckets; one for PowerSGD, whose callbacks wait for collectives inside callbacks: gloo runs
    # them on its two worker threads and deadlocks when two buckets' callbacks wait at once (seen here)
    kw: dict = {"process_group": pg, "bucket_cap_mb": 25 if variant == "powersgd" else 0.005}
    if variant == "bucket_view":
        kw["gradient_as_bucket_view"] = True
    elif variant == "static_graph":
        kw["static_graph"] = True
    elif variant == "unused":
        kw["find_unused_parameters"] = True
        net.use_b = False
    ddp = DDP(net, **kw)
    if variant == "fp16":
        ddp.register_comm_hook(pg, default_hooks.fp16_compress_hook)
    elif variant == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=pg, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                            min_compression_rate=0.5, use_error_feedback=True, warm_start=True,
                                            random_seed=7)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)

    def batch():
        return (torch.randn(12, 24, generator=gen, dtype=torch.float64),
                torch.randn(12, 6, generator=gen, dtype=torch.float64))

    for step in range(5):
        opt.zero_grad()
        if variant == "no_sync":
            with ddp.no_sync():  # accumulate locally, reduce with the next backward
                x, y = batch()
                torch.nn.functional.mse_loss(ddp(x), y).backward()
        x, y = batch()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return [p.detach().numpy().copy() for p in net.parameters()]


VARIANTS = ("plain", "bucket_view", "static_graph", "unused", "no_sync", "fp16", "powersgd")


def _train_all(rank: int, world: int, backend: str) -> dict:
    """DDP (every variant), FSDP1 and DTensor with functional collectives, in one world group of
    ``backend``."""
    import gc
    from datetime import timedelta

    import torch.distributed as dist

    # gloo gets a timeout, so that a gloo call that never completes (seen once on a loaded 2-core VM: a rank
    # hung, "terminate called ... Resource deadlock avoided") fails in a minute
    dist.init_process_group(backend, **({"timeout": timedelta(seconds=60)} if backend == "gloo" else {}))
    out = {"ddp": {v: _ddp_variant(rank, world, backend, v, None) for v in VARIANTS}}
    out["fsdp1"] = _fsdp1(rank, world)
    out["fsdp2"] = _fsdp2(rank, world)
    out["dtensor"] = _dtensor(rank, world)
    gc.collect()
    _teardown()
    return out


_HELD: list = []


def _teardown() -> None:
    """destroy_process_group(), every group it drops kept referenced until the process exits. A gloo group
    whose last reference goes on one of gloo's own threads joins that thread from itself: "terminate
    called ... std::system_error: Resource deadlock avoided", rank exit code -6 after the rank's result was
    computed (caught with faulthandler: the aborting thread had no Python frame, the main thread was
    reporting the result). Seen in the gloo reference runs, 1 in 3 to 1 in 6 runs at 3 ranks."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    _HELD.extend(c10d._world.pg_map.keys())
    dist.destroy_process_group()


def _labelled(fn, what: str, *args, **kw):
    """fn(*args, **kw), its failure saying which run failed."""
    try:
        return fn(*args, **kw)
    except Exception as e:
        raise AssertionError(f"{what} failed: {e}") from e


def _check_ddp(a: dict, b: dict, nranks: int) -> None:
    torch.manual_seed(0)
    start = [p.detach().numpy().copy() for p in _Net().double().parameters()]
    for v in VARIANTS:
        tol = 2e-3 if v == "fp16" else 1e-9  # fp16 sums of 3 ranks may round in another order than gloo's
        for r in range(nranks):
            for x, y in zip(a[r][v], b[r][v]):
                assert np.allclose(x, y, rtol=0, atol=tol), (v, r, np.abs(x - y).max())
        for x, y in zip(a[0][v], a[-1][v]):  # replicas agree
            assert np.array_equal(x, y), v
        # training moved every used parameter (a hook that dropped gradients would leave them at their start)
        moved = [not np.allclose(x, y, rtol=0, atol=1e-6) for x, y in zip(a[0][v], start)]
        assert moved == ([True, True, False, False, True, True] if v == "unused" else [True] * 6), (v, moved)


# ---- FSDP1 ------------------------------------------------------------------------------------------

def _sgd_steps(module, rank: int, nout: int):
    """Three SGD steps of ``module`` (16 inputs, ``nout`` outputs) on this rank's own batches; returns the
    optimizer (for the caller to drop)."""
    import torch

    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(10 + rank)
    for _ in range(3):
        x = torch.randn(8, 16, generator=gen, dtype=torch.float64)
        y = torch.randn(8, nout, generator=gen, dtype=torch.float64)
        opt.zero_grad()
        torch.nn.functional.mse_loss(module(x), y).backward()
        opt.step()
    return opt


def _fsdp1(rank: int, world: int) -> list:
    import gc

    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5)).double()
    fsdp = FSDP(model, device_id=torch.device("cpu"), use_orig_params=True)
    opt = _sgd_steps(fsdp, rank, 5)
    with FSDP.summon_full_params(fsdp):
        full = [p.detach().clone().numpy() for p in fsdp.parameters()]  # clone: .numpy() pins the storage FSDP frees
    del fsdp, opt, model
    gc.collect()
    return full


def _check_fsdp1(a: list, b: list, nranks: int) -> None:
    """FSDP1 or FSDP2: the full parameters after training equal gloo's."""
    for r in range(nranks):
        for x, y in zip(a[r], b[r]):
            assert x.shape == y.shape and np.allclose(x, y, rtol=0, atol=1e-9), np.abs(x - y).max()


# ---- FSDP2 ------------------------------------------------------------------------------------------

def _fsdp2(rank: int, world: int) -> list:
    """fully_shard over a DeviceMesh: sharded parameters all-gathered, gradients reduce-scattered through
    interlink's functional-collective path (groups found by name)."""
    import gc

    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).double()
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = _sgd_steps(model, rank, 4)
    full = [p.full_tensor().detach().numpy().copy() for p in model.parameters()]  # DTensor -> whole
    del model, opt, mesh
    gc.collect()
    return full


# ---- DTensor and functional collectives -------------------------------------------------------------

def _dtensor(rank: int, world: int) -> dict:
    import torch
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    out: dict = {}
    x = torch.arange(7 * world * 3, dtype=torch.float64).reshape(7 * world, 3) * (rank + 1)
    # functional collectives: the group found by name, the tensors waited on by wait_tensor
    out["fc_all_reduce"] = funcol.all_reduce(x, "sum", mesh).numpy().copy()
    out["fc_all_gather"] = funcol.all_gather_tensor(x, 0, mesh).numpy().copy()
    out["fc_reduce_scatter"] = funcol.reduce_scatter_tensor(x, "sum", 0, mesh).numpy().copy()
    out["fc_all_to_all"] = funcol.all_to_all_single(x, None, None, mesh).numpy().copy()
    out["fc_broadcast"] = funcol.broadcast(x, world - 1, mesh).numpy().copy()
    out["fc_max"] = funcol.all_reduce(x, "max", mesh).numpy().copy()
    # DTensor: the same global tensor on every rank, sharded, redistributed, computed on
    torch.manual_seed(3)
    g = torch.randn(5 * world + 1, 6, dtype=torch.float64)  # not divisible by the ranks
    w = torch.randn(6, 4, dtype=torch.float64)
    dg = distribute_tensor(g, mesh, [Shard(0)])
    dw = distribute_tensor(w, mesh, [Replicate()])
    out["dt_full"] = dg.full_tensor().numpy().copy()
    out["dt_matmul"] = (dg @ dw).full_tensor().numpy().copy()
    out["dt_sum"] = dg.sum().full_tensor().numpy().copy()
    out["dt_shard1"] = dg.redistribute(mesh, [Shard(1)]).to_local().numpy().copy()
    out["dt_replicate"] = dg.redistribute(mesh, [Replicate()]).to_local().numpy().copy()
    return out


def _check_dtensor(a: dict, b: dict, nranks: int) -> None:
    for r in range(nranks):
        assert a[r].keys() == b[r].keys()
        for k in a[r]:
            assert a[r][k].shape == b[r][k].shape and np.allclose(a[r][k], b[r][k], rtol=0, atol=1e-12), (k, r)
    # and against numpy, independently of both
    world = nranks
    xs = [np.arange(7 * world * 3, dtype=np.float64).reshape(7 * world, 3) * (r + 1) for r in range(world)]
    total = sum(xs)
    for r in range(world):
        assert np.array_equal(a[r]["fc_all_reduce"], total)
        assert np.array_equal(a[r]["fc_all_gather"], np.concatenate(xs))
        assert np.array_equal(a[r]["fc_reduce_scatter"], total[r * 7:(r + 1) * 7])
        assert np.array_equal(a[r]["fc_all_to_all"], np.concatenate([xs[s][r * 7:(r + 1) * 7] for s in range(world)]))
        assert np.array_equal(a[r]["fc_broadcast"], xs[-1])
        assert np.array_equal(a[r]["fc_max"], xs[-1])


# 3 ranks in the default suite (odd: ragged shards and buckets); 2 with the slow tests (`pytest -m slow`)
@pytest.mark.parametrize("nranks", [pytest.param(2, marks=pytest.mark.slow), 3])
def test_ddp_fsdp_dtensor_train_as_gloo(nranks: int) -> None:
    need_torch_entry_point()
    # 2 ranks: the async runner; 3 ranks: the default (inline on a host with fewer than 2 cores a rank)
    a = _labelled(run_ranks, "the interlink run", nranks, _train_all, "interlink", timeout=500,
                  env={"INTERLINK_TORCH_ASYNC": "1"} if nranks == 2 else {})
    b = _labelled(run_ranks, "the gloo reference run", nranks, _train_all, "gloo", timeout=500)
    for what, check in (("ddp", _check_ddp), ("fsdp1", _check_fsdp1), ("fsdp2", _check_fsdp1),
                        ("dtensor", _check_dtensor)):
        _labelled(check, f"{what} against gloo", [x[what] for x in a], [x[what] for x in b], nranks)
