"""Device arrays through the staged path (device -> host -> transports -> host -> device), on a fake
device: every call of the API takes them, results land on the device, inputs are not written back,
bad device arrays are refused before any byte moves. Real GPUs: the gpu-marked test below (staged) and
tests/test_runtime_gpu.py (cuda-ipc)."""

from __future__ import annotations

import numpy as np
import pytest

from mp import run_ranks


def _kind(kind: str):
    """(make(numpy array, contiguous=True) -> device array, to_numpy(device array), counts?) for a device kind."""
    if kind == "fake":
        import fakedev

        fakedev.install()
        return (lambda a, contiguous=True: fakedev.FakeDeviceArray(a, contiguous)), (lambda x: x.numpy()), True
    if kind == "torch":
        import torch

        def make_t(a, contiguous=True):
            t = torch.from_numpy(np.ascontiguousarray(a)).to("cuda")
            return t if contiguous else torch.stack([t, t], 1)[:, 0]
        return make_t, (lambda t: t.cpu().numpy()), False
    if kind == "cupy":
        import cupy

        def make_c(a, contiguous=True):
            c = cupy.asarray(a)
            return c if contiguous else cupy.stack([c, c], 1)[:, 0]
        return make_c, (lambda c: cupy.asnumpy(c)), False
    raise ValueError(kind)


def device_suite(rank: int, world: int, kind: str = "fake") -> dict:
    import interlink as dist

    make, to_np, counted = _kind(kind)

    class D:  # a device array of this kind, with the fake device's counters where it has them
        def __new__(cls, a, contiguous=True):
            return make(a, contiguous)

    dist.init(timeout=60)
    p = world
    fails: list[str] = []
    checks = 0

    def check(what: str, got: np.ndarray, want: np.ndarray) -> None:
        nonlocal checks
        checks += 1
        if got.shape != want.shape or not np.array_equal(got, want):
            fails.append(f"rank {rank}: {what}: got {got.ravel()[:6]}, want {want.ravel()[:6]}")

    def data(r: int, n: int, dt=np.float32, salt: int = 0) -> np.ndarray:
        return (np.arange(n, dtype=np.int64) * (r + 3) + salt + r).astype(dt)

    for n in (0, 1, 7, 1009, 70001):  # 70001: beyond the one-shot shared page, the Schedule path
        # all_reduce, sync and async
        x = D(data(rank, n))
        dist.all_reduce(x)
        check(f"all_reduce n={n}", to_np(x), sum(data(r, n) for r in range(p)) if n else data(rank, n))
        assert not counted or (x.downloads == 1 and x.uploads == 1), (x.downloads, x.uploads)
        x = D(data(rank, n, np.int64))
        w = dist.all_reduce(x, op="max", async_op=True)
        w.wait()
        check(f"all_reduce async max n={n}", to_np(x), data(p - 1, n, np.int64))
        # broadcast from the last rank: non-roots are not downloaded
        x = D(data(rank, n, np.float64))
        dist.broadcast(x, src=p - 1)
        check(f"broadcast n={n}", to_np(x), data(p - 1, n, np.float64))
        assert not counted or x.downloads == (1 if rank == p - 1 else 0)
        # reduce to rank 0: the others' arrays stay untouched (no upload)
        x = D(data(rank, n))
        dist.reduce(x, dst=0)
        check(f"reduce n={n}", to_np(x), sum(data(r, n) for r in range(p)) if rank == 0 else data(rank, n))
        assert not counted or x.uploads == (1 if rank == 0 else 0)
        # all_gather_into_tensor: the input is read, never written back
        inp, out = D(data(rank, n)), D(np.zeros(n * p, np.float32))
        dist.all_gather_into_tensor(out, inp)
        check(f"all_gather_into_tensor n={n}", to_np(out), np.concatenate([data(r, n) for r in range(p)]))
        assert not counted or (inp.uploads == 0 and out.downloads == 0 and out.uploads == 1)
        # all_gather (list form)
        lst = [D(np.zeros(n, np.float32)) for _ in range(p)]
        dist.all_gather(lst, D(data(rank, n)))
        for r in range(p):
            check(f"all_gather[{r}] n={n}", to_np(lst[r]), data(r, n))
        # reduce_scatter_tensor
        inp, out = D(data(rank, n * p)), D(np.zeros(n, np.float32))
        dist.reduce_scatter_tensor(out, inp)
        total = sum(data(r, n * p) for r in range(p))
        check(f"reduce_scatter n={n}", to_np(out), total[rank * n:(rank + 1) * n])
        # gather / scatter at a middle root
        root = p // 2
        g = [D(np.zeros(n, np.float32)) for _ in range(p)] if rank == root else None
        dist.gather(D(data(rank, n)), g, dst=root)
        if rank == root:
            for r in range(p):
                check(f"gather[{r}] n={n}", to_np(g[r]), data(r, n))
        out = D(np.zeros(n, np.float32))
        dist.scatter(out, [D(data(r, n, salt=7)) for r in range(p)] if rank == root else None, src=root)
        check(f"scatter n={n}", to_np(out), data(rank, n, salt=7))
        # all_to_all_single
        inp, out = D(data(rank, n * p)), D(np.zeros(n * p, np.float32))
        dist.all_to_all_single(out, inp)
        check(f"all_to_all n={n}", to_np(out),
              np.concatenate([data(r, n * p)[rank * n:(rank + 1) * n] for r in range(p)]))
    # point to point around a ring, a device array on both ends
    if p > 1:
        nxt, prv = (rank + 1) % p, (rank - 1) % p
        buf = D(np.zeros(1009, np.float32))
        r = dist.irecv(buf, prv)
        s = dist.isend(D(data(rank, 1009)), nxt)
        s.wait()
        r.wait()
        check("isend/irecv", to_np(buf), data(prv, 1009))
        assert not counted or buf.uploads == 1
    # bad device arrays are refused before any byte moves (the call after them still matches)
    try:
        dist.all_reduce(D(np.ones(10, np.float32), False))
        fails.append("non-contiguous device array accepted")
    except ValueError as e:
        if "contiguous" not in str(e):
            fails.append(f"unexpected message: {e}")
    try:
        dist.all_reduce(D(np.ones(10, np.float32)), op="band")
        fails.append("band on float32 accepted")
    except (TypeError, ValueError):
        pass
    x = D(np.ones(5, np.float32))
    dist.all_reduce(x)
    check("after refused calls", to_np(x), np.full(5, p, np.float32))
    dist.destroy()
    return {"checks": checks, "fails": fails}


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_device_arrays_in_every_call(nranks: int, transport: str) -> None:
    res = run_ranks(nranks, device_suite, env={"INTERLINK_TRANSPORT": transport}, timeout=180)
    for out in res:
        assert out["checks"] > 50 and out["fails"] == [], out["fails"][:5]


def test_adapter_registry_and_errors() -> None:
    import fakedev

    from interlink import devices

    assert not devices.is_device_array(np.ones(3))
    assert not devices.is_device_array(bytearray(3))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:  # CPU tensors stay on the zero-copy host path
        assert not devices.is_device_array(torch.zeros(3))
    fakedev.install()
    try:
        x = fakedev.FakeDeviceArray(np.arange(4.0))
        assert devices.is_device_array(x)
        st = devices.stage(x, "x", download=False)
        assert x.downloads == 0 and st.host.size == 4
        st.download()
        assert list(st.host) == [0.0, 1.0, 2.0, 3.0]
    finally:
        devices.unregister_adapter(fakedev.ADAPTER)
    assert not devices.is_device_array(fakedev.FakeDeviceArray(np.arange(4.0)))
    with pytest.raises(TypeError, match="no device adapter"):
        devices.stage(object())


# ---- real GPUs (the device machine): several ranks on one GPU, the staged path ---------------------


def _has_cuda_torch() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _has_cupy() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy or no driver
        return False


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["torch", "cupy"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_gpu_arrays_staged_on_one_gpu(nranks: int, kind: str) -> None:
    if kind == "torch" and not _has_cuda_torch():
        pytest.skip("needs torch with CUDA and a GPU")
    if kind == "cupy" and not _has_cupy():
        pytest.skip("needs CuPy and a GPU")
    res = run_ranks(nranks, device_suite, kind, timeout=300, env={"INTERLINK_CUDA_IPC": "0"})  # the staged path
    for out in res:
        assert out["checks"] > 50 and out["fails"] == [], out["fails"][:5]
