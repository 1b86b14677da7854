"""The torch backend on CUDA tensors, on a real GPU (the device machine; skips cleanly elsewhere):
``init_process_group("interlink")`` and ``"cpu:interlink,cuda:interlink"`` with several ranks sharing one
GPU (each its own process and CUDA context), every torch.distributed call on CUDA tensors compared with
numpy computed here from every rank's inputs, on both device paths (cuda-ipc and staged through host
memory: sizes on both sides of the threshold), sync and async, inputs produced on a side stream, and
DDP / FSDP2 training on CUDA that ends with the parameters gloo (DDP) or a CPU run (FSDP2) gives."""

from __future__ import annotations

import numpy as np
import pytest

from mp import need_torch_entry_point, run_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():  # pragma: no cover
    pytest.skip("torch without distributed", allow_module_level=True)

pytestmark = pytest.mark.gpu


def _need() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    need_torch_entry_point()


def _ipc_available() -> bool:
    try:
        import cupy  # noqa: F401 - cuda-ipc uses CuPy's runtime API
    except ImportError:
        return False
    return True


# the two device paths: cuda-ipc from the first byte, or staged (the threshold above every size here)
PATHS = {"ipc": {"INTERLINK_CUDA_IPC_MIN_BYTES": "0"}, "staged": {"INTERLINK_CUDA_IPC_MIN_BYTES": str(1 << 40)},
         "default": {}}


def _data(r: int, n: int, salt: int = 0) -> np.ndarray:
    """Small integers: every sum, product, min, max and average below is exact in every dtype used."""
    return (np.arange(n, dtype=np.int64) * (r + 2) % 7 + salt + r + 1).astype(np.float64)


def _cuda_calls(rank: int, world: int, spec: str, sizes: tuple) -> dict:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    dist.init_process_group(spec)
    fails: list[str] = []
    checks = 0
    side = torch.cuda.Stream()  # inputs made on a side stream, as FSDP's copy-in does

    def put(a: np.ndarray, dtype) -> "torch.Tensor":
        with torch.cuda.stream(side):
            t = torch.from_numpy(np.ascontiguousarray(a)).to(dev, non_blocking=False).to(dtype)
            t.mul_(1)  # one more kernel on the side stream before the call reads it
        torch.cuda.current_stream().wait_stream(side)
        return t

    def check(what: str, got, want: np.ndarray) -> None:
        nonlocal checks
        checks += 1
        if got.device.type != "cuda":
            fails.append(f"rank {rank}: {what}: result on {got.device}")
            return
        g = got.detach().to("cpu", torch.float64).numpy()
        if g.shape != want.shape or not np.array_equal(g, want):
            bad = np.flatnonzero(g != want) if g.shape == want.shape else []
            fails.append(f"rank {rank}: {what}: {len(bad)} wrong of {want.size}; got {g.ravel()[:6]}, "
                         f"want {want.ravel()[:6]}")

    p = world
    ops = {"sum": (dist.ReduceOp.SUM, lambda xs: np.sum(xs, axis=0)),
           "max": (dist.ReduceOp.MAX, lambda xs: np.max(xs, axis=0)),
           "min": (dist.ReduceOp.MIN, lambda xs: np.min(xs, axis=0)),
           "prod": (dist.ReduceOp.PRODUCT, lambda xs: np.prod(xs, axis=0)),
           "avg": (dist.ReduceOp.AVG, lambda xs: np.sum(xs, axis=0) / p)}
    dtypes = {torch.float32: "all", torch.float64: "all", torch.int32: "int", torch.int64: "int",
              torch.float16: "sum", torch.bfloat16: "sum"}
    root = p // 2
    for n in sizes:
        xs = [_data(r, n) for r in range(p)]
        for dtype, which in dtypes.items():
            names = {"all": ops, "int": {k: v for k, v in ops.items() if k != "avg"},
                     "sum": {k: v for k, v in ops.items() if k in ("sum", "max", "min")}}[which]
            for name, (op, fn) in names.items():
                want = fn(np.stack(xs)) if n else xs[rank]
                if name == "avg" and (want != np.round(want * 8) / 8).any():
                    continue  # not exact in binary floating point: checked at float64 by the DDP test
                t = put(xs[rank], dtype)
                dist.all_reduce(t, op=op)
                check(f"all_reduce {dtype} {name} n={n}", t, want)
                t = put(xs[rank], dtype)
                dist.reduce(t, dst=root, op=op)
                check(f"reduce {dtype} {name} n={n}", t, want if rank == root else xs[rank])
                if name in ("sum", "max"):
                    ys = [_data(r, n * p, 1) for r in range(p)]
                    full = fn(np.stack(ys)) if n else ys[rank]
                    o = torch.empty(n, dtype=dtype, device=dev)
                    dist.reduce_scatter_tensor(o, put(ys[rank], dtype), op=op)
                    check(f"reduce_scatter_tensor {dtype} {name} n={n}", o, full[rank * n:(rank + 1) * n])
                    o = torch.empty(n, dtype=dtype, device=dev)
                    dist.reduce_scatter(o, [put(ys[rank][r * n:(r + 1) * n], dtype) for r in range(p)], op=op)
                    check(f"reduce_scatter list {dtype} {name} n={n}", o, full[rank * n:(rank + 1) * n])
            t = put(xs[rank], dtype)
            dist.broadcast(t, src=root)
            check(f"broadcast {dtype} n={n}", t, xs[root])
            o = torch.empty(n * p, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(o, put(xs[rank], dtype))
            check(f"all_gather_into_tensor {dtype} n={n}", o, np.concatenate(xs))
            lst = [torch.empty(n, dtype=dtype, device=dev) for _ in range(p)]
            dist.all_gather(lst, put(xs[rank], dtype))
            for r in range(p):
                check(f"all_gather list[{r}] {dtype} n={n}", lst[r], xs[r])
            zs = [_data(r, n * p, 2) for r in range(p)]
            o = torch.empty(n * p, dtype=dtype, device=dev)
            dist.all_to_all_single(o, put(zs[rank], dtype))
            check(f"all_to_all_single {dtype} n={n}", o, np.concatenate([z[rank * n:(rank + 1) * n] for z in zs]))
        # uneven all_to_all: rank s sends (s + d) % 3 + (n % 5) elements to rank d
        cnt = lambda s, d: (s + d) % 3 + n % 5  # noqa: E731
        src = [_data(s, sum(cnt(s, d) for d in range(p)), 3) for s in range(p)]
        offs = [np.concatenate([[0], np.cumsum([cnt(s, d) for d in range(p)])]) for s in range(p)]
        want = np.concatenate([src[s][offs[s][rank]:offs[s][rank + 1]] for s in range(p)])
        o = torch.empty(len(want), dtype=torch.float32, device=dev)
        dist.all_to_all_single(o, put(src[rank], torch.float32), [cnt(s, rank) for s in range(p)],
                               [cnt(rank, d) for d in range(p)])
        check(f"all_to_all_single uneven n={n}", o, want)
        outs = [torch.empty(cnt(s, rank), device=dev) for s in range(p)]
        dist.all_to_all(outs, [put(src[rank][offs[rank][d]:offs[rank][d + 1]], torch.float32) for d in range(p)])
        for s in range(p):
            check(f"all_to_all list[{s}] n={n}", outs[s], src[s][offs[s][rank]:offs[s][rank + 1]])
        gl = [torch.empty(n, device=dev) for _ in range(p)] if rank == root else None
        dist.gather(put(xs[rank], torch.float32), gl, dst=root)
        if rank == root:
            for r in range(p):
                check(f"gather[{r}] n={n}", gl[r], xs[r])
        o = torch.empty(n, device=dev)
        dist.scatter(o, [put(_data(r, n, 5), torch.float32) for r in range(p)] if rank == 0 else None, src=0)
        check(f"scatter n={n}", o, _data(rank, n, 5))
        if p > 1:
            nxt, prv = (rank + 1) % p, (rank - 1) % p
            buf = torch.empty(n, device=dev)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, put(xs[rank], torch.float32), nxt),
                                           dist.P2POp(dist.irecv, buf, prv)])
            for q in reqs:
                q.wait()
            check(f"batch_isend_irecv n={n}", buf, xs[prv])
            if rank == 0:
                dist.send(put(xs[0] * 3, torch.float64), dst=p - 1)
            elif rank == p - 1:
                b = torch.empty(n, dtype=torch.float64, device=dev)
                dist.recv(b, src=0)
                check(f"send/recv n={n}", b, xs[0] * 3)
    # asynchronous calls in flight at once, waited in reverse order; inputs from the side stream
    n = max(sizes)
    xs = [_data(r, n) for r in range(p)]
    a, b = put(xs[rank], torch.float32), put(xs[rank], torch.float64)
    c = torch.empty(n * p, device=dev)
    ws = [dist.all_reduce(a, async_op=True), dist.all_reduce(b, op=dist.ReduceOp.MAX, async_op=True),
          dist.all_gather_into_tensor(c, put(xs[rank], torch.float32), async_op=True)]
    for w in reversed(ws):
        w.wait()
    check("async all_reduce", a, np.sum(xs, axis=0))
    check("async all_reduce max", b, np.max(xs, axis=0))
    check("async all_gather", c, np.concatenate(xs))
    # PREMUL_SUM (FSDP's pre-division) on CUDA, factor a number and a CUDA tensor
    old_torch = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13)
    for factor in (0.5, torch.tensor([0.25], dtype=torch.float64, device=dev)):
        f = float(factor) if not torch.is_tensor(factor) else float(factor.item())
        t = put(xs[rank], torch.float64)
        try:
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
        except NotImplementedError:  # torch < 2.13 does not show the factor to Python: a clear refusal
            if not old_torch:
                raise
            continue
        check(f"premul_sum {f}", t, np.sum(xs, axis=0) * f)
    dist.barrier()
    objs = [None] * p
    dist.all_gather_object(objs, {"rank": rank})
    checks += 1
    if objs != [{"rank": r} for r in range(p)]:
        fails.append(f"rank {rank}: all_gather_object {objs}")
    # which path the collectives took: count the arrays staged through host memory
    from interlink import devices

    staged = [0]
    real = devices.stage

    def counting(*a, **k):
        staged[0] += 1
        return real(*a, **k)

    devices.stage = counting
    m = max(sizes)
    t = put(_data(rank, m), torch.float32)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    o = torch.empty(m * p, device=dev)
    dist.all_gather_into_tensor(o, t)
    dist.reduce_scatter_tensor(t, o)
    dist.all_to_all_single(o, o.clone())
    devices.stage = real
    dist.destroy_process_group()
    return {"checks": checks, "fails": fails, "staged": staged[0]}


@pytest.mark.parametrize("path", ["ipc", "staged"])
@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_every_call_on_cuda_tensors(nranks: int, path: str) -> None:
    _need()
    if path == "ipc" and not _ipc_available():
        pytest.skip("cuda-ipc needs CuPy")
    res = run_ranks(nranks, _cuda_calls, "interlink", (0, 1, 13, 1031), env=PATHS[path], timeout=600)
    for out in res:
        assert out["checks"] > 300 and out["fails"] == [], out["fails"][:8]
        # the device collectives took the path asked for: none staged on cuda-ipc, all staged otherwise
        assert (out["staged"] == 0) if path == "ipc" else (out["staged"] >= 5), out["staged"]


def test_device_map_across_the_threshold() -> None:
    """``cpu:interlink,cuda:interlink`` with the default threshold: sizes below it (staged) and above it
    (cuda-ipc where CuPy is there), 3 ranks on one GPU."""
    _need()
    res = run_ranks(3, _cuda_calls, "cpu:interlink,cuda:interlink", (7, 3 << 20), env=PATHS["default"],
                    timeout=600)
    for out in res:
        assert out["checks"] > 100 and out["fails"] == [], out["fails"][:8]
        if _ipc_available():  # 3 Mi float32 = 12 MiB: above the 8 MiB default, so cuda-ipc
            assert out["staged"] == 0, out["staged"]


# ---- training on CUDA -------------------------------------------------------------------------------

def _ddp_cuda(rank: int, world: int, backend: str, bucket_view: bool) -> list:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    dist.init_process_group(backend)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(24, 300), torch.nn.ReLU(), torch.nn.Linear(300, 300),
                              torch.nn.ReLU(), torch.nn.Linear(300, 6)).double().to(dev)
    ddp = DDP(net, device_ids=[0], bucket_cap_mb=0.1, gradient_as_bucket_view=bucket_view)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(5):
        x = torch.randn(12, 24, generator=gen, dtype=torch.float64).to(dev)
        y = torch.randn(12, 6, generator=gen, dtype=torch.float64).to(dev)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    out = [p.detach().cpu().numpy().copy() for p in net.parameters()]
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("bucket_view", [False, True])
@pytest.mark.parametrize("nranks", [2, 3])
def test_ddp_on_cuda_trains_as_gloo(nranks: int, bucket_view: bool) -> None:
    _need()
    a = run_ranks(nranks, _ddp_cuda, "interlink", bucket_view, timeout=300)
    b = run_ranks(nranks, _ddp_cuda, "gloo", bucket_view, timeout=300)
    for r in range(nranks):
        for x, y in zip(a[r], b[r]):
            assert np.allclose(x, y, rtol=0, atol=1e-9), (r, np.abs(x - y).max())
    for x, y in zip(a[0], a[-1]):
        assert np.array_equal(x, y)


def _fsdp2(rank: int, world: int, device: str) -> list:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    import os

    from torch.distributed.device_mesh import init_device_mesh

    os.environ["LOCAL_RANK"] = "0"  # every rank on the one GPU (DeviceMesh takes LOCAL_RANK as the device)
    if device == "cuda":
        torch.cuda.set_device(0)
    dev = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
    dist.init_process_group("interlink")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 5)).double().to(dev)
    mesh = init_device_mesh(device, (world,))  # explicit: FSDP2's default mesh is CUDA's on a GPU machine
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(10 + rank)
    for _ in range(4):
        x = torch.randn(8, 16, generator=gen, dtype=torch.float64).to(dev)
        y = torch.randn(8, 5, generator=gen, dtype=torch.float64).to(dev)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    full = [p.full_tensor().detach().cpu().numpy().copy() for p in model.parameters()]
    dist.destroy_process_group()
    return full


@pytest.mark.parametrize("nranks", [2, 3])
def test_fsdp2_on_cuda_trains_as_on_cpu(nranks: int) -> None:
    """FSDP2 (fully_shard) on CUDA parameters: its all-gathers and reduce-scatters run on its own streams;
    the parameters must equal a CPU run's (which tests/test_backend_torch.py holds equal to gloo's)."""
    _need()
    a = run_ranks(nranks, _fsdp2, "cuda", timeout=300)
    b = run_ranks(nranks, _fsdp2, "cpu", timeout=300)
    for r in range(nranks):
        for x, y in zip(a[r], b[r]):
            assert x.shape == y.shape and np.allclose(x, y, rtol=0, atol=1e-9), (r, np.abs(x - y).max())
