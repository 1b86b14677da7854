"""The device path's suite, shared by the GPU tests (torch CUDA tensors, CuPy arrays over cuda-ipc) and
the CPU ones (a host-memory fake of CUDA IPC, tests/fakeipc.py): every collective the device executor
runs, every dtype and op, in place and out of place, compared with numpy; failures."""

from __future__ import annotations

import os
import time

import numpy as np


# ---- device arrays of one kind, as numpy in and out ------------------------------------------------


class Dev:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "fake":
            import fakeipc

            fakeipc.install()
            self.fake = fakeipc
            return
        if kind == "torch":
            import torch

            self.torch = torch
        import cupy

        self.cupy = cupy

    def dtypes(self) -> list:
        base = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_,
                np.complex64]
        out = [np.dtype(d) for d in base]
        if self.kind in ("torch", "fake"):
            try:
                import ml_dtypes

                out.append(np.dtype(ml_dtypes.bfloat16))
            except ImportError:
                pass
        return out

    def put(self, a: np.ndarray):
        a = np.ascontiguousarray(a)
        if self.kind == "fake":
            return self.fake.FakeDev(a)
        if self.kind == "cupy":
            return self.cupy.asarray(a)
        torch = self.torch
        if a.dtype.name == "bfloat16":
            return torch.from_numpy(a.view(np.int16)).to("cuda").view(torch.bfloat16)
        return torch.from_numpy(a).to("cuda")

    def get(self, x) -> np.ndarray:
        if self.kind == "fake":
            return x.numpy()
        if self.kind == "cupy":
            return self.cupy.asnumpy(x)
        torch = self.torch
        if x.dtype == torch.bfloat16:
            import ml_dtypes

            return x.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
        return x.cpu().numpy()

    def empty(self, n: int, dt: np.dtype):
        return self.put(np.zeros(n, dt))


def _values(r: int, n: int, dt: np.dtype, salt: int = 0) -> np.ndarray:
    """Small values, so every op is exact in every dtype (float16, bfloat16 included)."""
    i = np.arange(n, dtype=np.int64)
    if dt == np.bool_:
        return ((i * (r + 1) + salt) % 3 == 0)
    v = (i * (r + 2) + 3 * r + salt) % 4
    if dt.kind == "i":
        v = v - 1
    return v.astype(dt)


def ipc_suite(rank: int, world: int, kind: str, sizes: tuple) -> dict:
    import interlink as dist
    from interlink import devices
    from interlink.ops import numpy_reduce, ops_for_dtype

    d = Dev(kind)
    g = dist.init(timeout=60)
    p = world
    fails: list[str] = []
    checks = 0

    def no_staging(*a, **k):
        raise AssertionError("a call staged a device array through host memory")

    real_stage = devices.stage
    devices.stage = no_staging  # every call below must take cuda-ipc

    def check(what: str, got, want: np.ndarray) -> None:
        nonlocal checks
        checks += 1
        got = d.get(got)
        ok = got.shape == want.shape and np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
        if not ok:
            bad = np.flatnonzero(got.astype(np.float64) != want.astype(np.float64)) if got.shape == want.shape else []
            fails.append(f"rank {rank}: {what}: {len(bad)} wrong of {want.size}; got {got.ravel()[:6]}, want "
                         f"{want.ravel()[:6]}")

    root = p // 2
    for dt in d.dtypes():
        for n in sizes:
            xs = [_values(r, n, dt) for r in range(p)]
            for op in ops_for_dtype(dt):
                want = numpy_reduce(op, xs) if n else xs[rank][:0]
                x = d.put(xs[rank])
                dist.all_reduce(x, op=op)
                check(f"all_reduce {dt} {op.name} n={n}", x, want if n else xs[rank])
                x = d.put(xs[rank])
                dist.reduce(x, dst=root, op=op)
                check(f"reduce {dt} {op.name} n={n}", x, want if rank == root else xs[rank])
                # reduce_scatter: out of place, and in place (output = input[rank*n:(rank+1)*n])
                ys = [_values(r, n * p, dt, 1) for r in range(p)]
                full = numpy_reduce(op, ys) if n else ys[rank]
                o = d.empty(n, dt)
                dist.reduce_scatter_tensor(o, d.put(ys[rank]), op=op)
                check(f"reduce_scatter {dt} {op.name} n={n}", o, full[rank * n:(rank + 1) * n])
                big = d.put(ys[rank])
                dist.reduce_scatter_tensor(big[rank * n:(rank + 1) * n], big, op=op)
                check(f"reduce_scatter in place {dt} {op.name} n={n}", big[rank * n:(rank + 1) * n],
                      full[rank * n:(rank + 1) * n])
            # moves: broadcast, all_gather (out of place, in place), all_to_all
            x = d.put(xs[rank])
            dist.broadcast(x, src=root)
            check(f"broadcast {dt} n={n}", x, xs[root])
            o = d.empty(n * p, dt)
            dist.all_gather_into_tensor(o, d.put(xs[rank]))
            check(f"all_gather {dt} n={n}", o, np.concatenate(xs))
            o = d.put(np.zeros(n * p, dt))
            o[rank * n:(rank + 1) * n] = d.put(xs[rank])
            dist.all_gather_into_tensor(o, o[rank * n:(rank + 1) * n])
            check(f"all_gather in place {dt} n={n}", o, np.concatenate(xs))
            zs = [_values(r, n * p, dt, 2) for r in range(p)]
            o = d.empty(n * p, dt)
            dist.all_to_all_single(o, d.put(zs[rank]))
            check(f"all_to_all {dt} n={n}", o, np.concatenate([z[rank * n:(rank + 1) * n] for z in zs]))
    # async, waited out of order
    a, b = d.put(_values(rank, 1009, np.dtype(np.float32))), d.put(_values(rank, 17, np.dtype(np.int64)))
    wa = dist.all_reduce(a, async_op=True)
    wb = dist.all_reduce(b, op="max", async_op=True)
    wb.wait()
    wa.wait()
    check("async all_reduce", a, sum(_values(r, 1009, np.dtype(np.float32)) for r in range(p)))
    check("async all_reduce max", b, np.maximum.reduce([_values(r, 17, np.dtype(np.int64)) for r in range(p)]))
    # bad input is refused before any byte moves, and the next call still matches
    try:
        big = d.put(np.zeros(4 * p, np.float32))
        dist.reduce_scatter_tensor(big[1:5], big)
        fails.append("a misplaced overlap of reduce_scatter's input and output was accepted")
    except ValueError:
        pass
    try:
        dist.all_reduce(d.put(np.ones(10, np.float32)), op="band")
        fails.append("band on float32 accepted")
    except (TypeError, ValueError):
        pass
    x = d.put(np.ones(5, np.float32))
    dist.all_reduce(x)
    check("after refused calls", x, np.full(5, p, np.float32))
    devices.stage = real_stage
    rec = g.flight_record()
    dist.destroy()
    return {"checks": checks, "fails": fails, "record": rec}


def _large(rank: int, world: int, kind: str) -> dict:
    import interlink as dist

    d = Dev(kind)
    dist.init(timeout=60)
    n = (1 << 24) + 7
    fails = []
    xs = [_values(r, n, np.dtype(np.float32)) for r in range(world)]
    x = d.put(xs[rank])
    for _ in range(3):  # the same buffers again: the peers' opened handles are reused
        x = d.put(xs[rank])
        dist.all_reduce(x)
        if not np.array_equal(d.get(x), sum(xs)):
            fails.append("all_reduce 64 MiB")
    o = d.empty(n * world, np.dtype(np.float32))
    dist.all_gather_into_tensor(o, d.put(xs[rank]))
    if not np.array_equal(d.get(o), np.concatenate(xs)):
        fails.append("all_gather 64 MiB")
    dist.destroy()
    return {"fails": fails}


def _dies(rank: int, world: int, kind: str) -> dict:
    import interlink as dist

    d = Dev(kind)
    dist.init(timeout=60)
    x = d.put(np.ones(1 << 20, np.float32))
    dist.all_reduce(x)
    if rank == world - 1:
        os._exit(3)  # dies between calls: the others are inside the next one
    t = time.monotonic()
    try:
        dist.all_reduce(x)
        return {"raised": None}
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "msg": str(e), "after": time.monotonic() - t}


def _mismatch(rank: int, world: int, kind: str, how: str) -> dict:
    import interlink as dist

    d = Dev(kind)
    if how == "path" and rank == 1:
        os.environ["INTERLINK_CUDA_IPC"] = "0"  # this rank stages while rank 0 takes cuda-ipc
    dist.init(timeout=20)
    x = d.put(np.ones(1 << 16, np.float32))
    t = time.monotonic()
    try:
        if how == "op" and rank == 1:
            dist.broadcast(x, src=0)
        else:
            dist.all_reduce(x)
        return {"raised": None}
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "msg": str(e), "after": time.monotonic() - t}


def _one_result(rank: int, world: int, kind: str) -> dict:
    import interlink as dist

    d = Dev(kind)
    g = dist.init(timeout=60)
    rng = np.random.default_rng(rank)
    x = d.put(rng.integers(-50, 50, 100003).astype(np.float32))
    dist.all_reduce(x)
    rec = g.flight_record()
    out = d.get(x)
    dist.destroy()
    return {"x": out, "path": "cuda-ipc" if "cuda-ipc" in rec else "staged"}


def algo_suite(rank: int, world: int, kind: str, sizes: tuple) -> dict:
    """Every registered algorithm of every collective through the device path (``algorithm=``), in place
    where the API allows, float32 SUM and int32 MAX: the lowering must hold for any Schedule, not only the
    device path's defaults (e.g. recursive doubling's reducing receives of the chunk it sends: deferred)."""
    import interlink as dist
    from interlink.algorithms import registry
    from interlink.ops import ReduceOp, numpy_reduce

    d = Dev(kind)
    dist.init(timeout=60)
    p = world
    fails: list[str] = []
    checks = 0
    root = p - 1

    def check(what: str, got, want: np.ndarray) -> None:
        nonlocal checks
        checks += 1
        g = d.get(got)
        if g.shape != want.shape or not np.array_equal(g, want):
            fails.append(f"rank {rank}: {what}: got {g.ravel()[:6]}, want {want.ravel()[:6]}")

    for coll in ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all"):
        for algo in registry.algorithms_for(coll):
            for n in sizes:
                for dt, op in ((np.dtype(np.float32), ReduceOp.SUM), (np.dtype(np.int32), ReduceOp.MAX)):
                    what = f"{coll}:{algo} {dt} n={n}"
                    xs = [_values(r, n, dt, 5) for r in range(p)]
                    if coll == "all_reduce":
                        x = d.put(xs[rank])
                        dist.all_reduce(x, op=op, algorithm=algo)
                        check(what, x, numpy_reduce(op, xs) if n else xs[rank])
                    elif coll == "broadcast":
                        x = d.put(xs[rank])
                        dist.broadcast(x, src=root, algorithm=algo)
                        check(what, x, xs[root])
                    elif coll == "reduce":
                        x = d.put(xs[rank])
                        dist.reduce(x, dst=root, op=op, algorithm=algo)
                        check(what, x, (numpy_reduce(op, xs) if n else xs[rank]) if rank == root else xs[rank])
                    elif coll == "all_gather":
                        o = d.put(np.zeros(n * p, dt))
                        o[rank * n:(rank + 1) * n] = d.put(xs[rank])
                        dist.all_gather_into_tensor(o, o[rank * n:(rank + 1) * n], algorithm=algo)
                        check(what + " in place", o, np.concatenate(xs))
                    elif coll == "reduce_scatter":
                        ys = [_values(r, n * p, dt, 6) for r in range(p)]
                        big = d.put(ys[rank])
                        dist.reduce_scatter_tensor(big[rank * n:(rank + 1) * n], big, op=op, algorithm=algo)
                        full = numpy_reduce(op, ys) if n else ys[rank]
                        check(what + " in place", big[rank * n:(rank + 1) * n], full[rank * n:(rank + 1) * n])
                    else:
                        zs = [_values(r, n * p, dt, 7) for r in range(p)]
                        o = d.empty(n * p, dt)
                        dist.all_to_all_single(o, d.put(zs[rank]), algorithm=algo)
                        check(what, o, np.concatenate([z[rank * n:(rank + 1) * n] for z in zs]))
    dist.destroy()
    return {"checks": checks, "fails": fails}
