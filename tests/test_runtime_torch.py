"""The runtime API on torch CPU tensors, used exactly like torch.distributed functional code.

One job per (ranks, transport) runs the whole matrix inside the ranks (process start-up and the torch
import are the expensive parts). Every rank rebuilds every rank's input from a seed and checks its
result against torch computed independently of interlink (stack + sum/prod/amin/amax).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mp import run_ranks  # noqa: E402

BIG = 300_007  # crosses many shared-memory slots and TCP buffers


def _has_bf16() -> bool:
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        return False
    return True


def data(rank: int, case: int, shape: tuple, dtype, kind: str = "sum") -> "torch.Tensor":
    """Rank's input: small integers, so every reduction is exact in every dtype (bfloat16 included)."""
    rng = np.random.default_rng([case, rank, int(np.prod(shape, dtype=np.int64))])
    n = int(np.prod(shape, dtype=np.int64))
    if kind == "bits":
        vals = rng.integers(-(2**31), 2**31, size=n, dtype=np.int64)
    elif kind == "prod":
        vals = rng.choice(np.array([1, 2, -1]), size=n)
    elif kind == "bool":
        vals = rng.integers(0, 2, size=n)
    else:
        vals = rng.integers(-9, 10, size=n)
    t = torch.from_numpy(vals.astype(np.int64)).reshape(shape)
    return t.to(dtype).contiguous()


def expected(op: str, ins: list, p: int) -> "torch.Tensor":
    s = torch.stack(ins)
    dt = ins[0].dtype
    if op == "sum":
        out = s.sum(0, dtype=dt) if dt != torch.bfloat16 else s.float().sum(0).to(dt)
    elif op == "avg":
        if dt.is_floating_point:
            out = (s.double().sum(0) / p).to(dt)
        else:
            out = torch.div(s.sum(0), p, rounding_mode="trunc").to(dt)
    elif op == "prod":
        out = s.prod(0).to(dt)
    elif op == "min":
        out = s.amin(0)
    elif op == "max":
        out = s.amax(0)
    elif op in ("band", "bor", "bxor"):
        fn = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}[op]
        out = ins[0].clone()
        for x in ins[1:]:
            out = fn(out, x)
    else:
        raise AssertionError(op)
    return out.contiguous()


def suite(rank: int, world: int) -> tuple[int, list[str]]:
    import torch
    import torch.distributed as tdist

    import interlink as dist

    assert not dist.is_initialized()
    dist.init(timeout=30)
    p = world
    fails: list[str] = []
    checks = 0
    case = 0

    def check(name: str, got, exp) -> None:
        nonlocal checks
        checks += 1
        ok = (isinstance(got, torch.Tensor) and got.dtype == exp.dtype and tuple(got.shape) == tuple(exp.shape)
              and torch.equal(got, exp))
        if not ok:
            g = got.reshape(-1)[:6].tolist() if isinstance(got, torch.Tensor) else got
            fails.append(f"rank {rank} {name}: got {getattr(got, 'dtype', type(got))} "
                         f"{tuple(getattr(got, 'shape', ()))} {g}; expected {exp.dtype} {tuple(exp.shape)} "
                         f"{exp.reshape(-1)[:6].tolist()}")

    def check_true(name: str, cond: bool) -> None:
        nonlocal checks
        checks += 1
        if not cond:
            fails.append(f"rank {rank} {name}")

    check_true("get_rank", dist.get_rank() == rank)
    check_true("get_world_size", dist.get_world_size() == p)
    check_true("is_initialized", dist.is_initialized())

    float_dts = [torch.float32, torch.float64] + ([torch.bfloat16] if _has_bf16() else [])
    ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG, "band": dist.ReduceOp.BAND,
           "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}

    # ---- all_reduce: dtypes x ops x shapes ------------------------------------------------------
    for dt in float_dts + [torch.int32]:
        names = ["sum", "prod", "min", "max", "avg"] + (["band", "bor", "bxor"] if dt == torch.int32 else [])
        for name in names:
            for shape in ((0,), (1,), (3, 5), (2, 3, 4)):
                case += 1
                kind = "prod" if name == "prod" else "bits" if name in ("band", "bor", "bxor") else "sum"
                ins = [data(r, case, shape, dt, kind) for r in range(p)]
                t = ins[rank].clone()
                ret = dist.all_reduce(t, op=ops[name])
                check_true("all_reduce returns None when sync", ret is None)
                check(f"all_reduce {dt} {name} {shape}", t, expected(name, ins, p))
    # the default op, a big tensor (ring / many slots), and string ops
    case += 1
    ins = [data(r, case, (BIG,), torch.float32) for r in range(p)]
    t = ins[rank].clone()
    dist.all_reduce(t)
    check("all_reduce default op big", t, expected("sum", ins, p))
    case += 1
    ins = [data(r, case, (4, 1000), torch.int64) for r in range(p)]
    t = ins[rank].clone()
    dist.all_reduce(t, op="max")
    check("all_reduce op='max' int64", t, expected("max", ins, p))
    # torch.distributed's own ReduceOp members are accepted too
    for theirs, name in ((tdist.ReduceOp.SUM, "sum"), (tdist.ReduceOp.MAX, "max"), (tdist.ReduceOp.AVG, "avg"),
                         (tdist.ReduceOp.PRODUCT, "prod")):
        case += 1
        ins = [data(r, case, (2, 7), torch.float32, "prod" if name == "prod" else "sum") for r in range(p)]
        t = ins[rank].clone()
        dist.all_reduce(t, op=theirs)
        check(f"all_reduce torch.distributed.ReduceOp.{name}", t, expected(name, ins, p))
    # integer AVG truncates toward zero, like NCCL: [-7, 7] averaged over p
    t = torch.tensor([-7, 7, -1, 1], dtype=torch.int32) if rank == 0 else torch.zeros(4, dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    exp = torch.div(torch.tensor([-7, 7, -1, 1]), p, rounding_mode="trunc").to(torch.int32)
    check("all_reduce int AVG truncates", t, exp)
    # bool: MAX is a logical or, MIN a logical and
    case += 1
    ins = [data(r, case, (3, 4), torch.bool, "bool") for r in range(p)]
    t = ins[rank].clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check("all_reduce bool MAX", t, torch.stack(ins).any(0))
    t = ins[rank].clone()
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    check("all_reduce bool MIN", t, torch.stack(ins).all(0))

    # ---- local validation: raised before anything moves, the job stays usable ---------------------
    for bad, exc in ((torch.ones(3, requires_grad=True), ValueError), (torch.ones(4, 4).t(), ValueError),
                     (torch.ones(8)[::2], ValueError), (torch.ones(3), TypeError)):
        try:
            dist.all_reduce(bad, op=dist.ReduceOp.BAND if exc is TypeError else dist.ReduceOp.SUM)
        except exc:
            check_true("validation", True)
        except Exception as e:  # noqa: BLE001
            fails.append(f"rank {rank} validation: {type(e).__name__} {e}")
        else:
            fails.append(f"rank {rank} validation: no {exc.__name__} for {tuple(bad.shape)}")
    t = torch.full((5,), float(rank + 1))
    with torch.no_grad():
        dist.all_reduce(t)
    check("all_reduce after validation errors", t, torch.full((5,), float(p * (p + 1) // 2)))

    # ---- broadcast ------------------------------------------------------------------------------------
    for dt in float_dts + [torch.int32, torch.int64, torch.uint8, torch.bool]:
        for src in sorted({0, p - 1}):
            for shape in ((0,), (6,), (4, 3, 2)):
                case += 1
                ins = [data(r, case, shape, dt, "bool" if dt == torch.bool else "sum") for r in range(p)]
                t = ins[rank].clone()
                dist.broadcast(t, src=src)
                check(f"broadcast {dt} src={src} {shape}", t, ins[src])
    case += 1
    ins = [data(r, case, (BIG,), torch.float32) for r in range(p)]
    t = ins[rank].clone()
    dist.broadcast(t, p - 1)
    check("broadcast big", t, ins[p - 1])

    # ---- reduce ---------------------------------------------------------------------------------------
    for name in ("sum", "max", "avg"):
        for dst in sorted({0, p - 1}):
            for dt in (torch.float32, torch.int32):
                case += 1
                ins = [data(r, case, (3, 4), dt) for r in range(p)]
                t = ins[rank].clone()
                dist.reduce(t, dst=dst, op=ops[name])
                check(f"reduce {name} {dt} dst={dst}", t, expected(name, ins, p) if rank == dst else ins[rank])

    # ---- all_gather_into_tensor / all_gather ------------------------------------------------------------
    for dt in float_dts + [torch.int32]:
        for shape in ((0,), (5,), (2, 3)):
            case += 1
            ins = [data(r, case, shape, dt) for r in range(p)]
            out = torch.empty((p * shape[0],) + shape[1:], dtype=dt)  # concatenated along dim 0
            dist.all_gather_into_tensor(out, ins[rank])
            check(f"all_gather_into_tensor cat {dt} {shape}", out, torch.cat(ins))
            out2 = torch.empty((p,) + shape, dtype=dt)  # stacked
            dist.all_gather_into_tensor(out2, ins[rank])
            check(f"all_gather_into_tensor stack {dt} {shape}", out2, torch.stack(ins))
            lst = [torch.empty(shape, dtype=dt) for _ in range(p)]
            dist.all_gather(lst, ins[rank])
            for i in range(p):
                check(f"all_gather list[{i}] {dt} {shape}", lst[i], ins[i])
    case += 1
    n = BIG // p
    ins = [data(r, case, (n,), torch.float32) for r in range(p)]
    out = torch.empty(n * p)
    dist.all_gather_into_tensor(out, ins[rank])
    check("all_gather_into_tensor big", out, torch.cat(ins))

    # ---- reduce_scatter_tensor ----------------------------------------------------------------------------
    for dt in float_dts + [torch.int32]:
        for name in ("sum", "max", "avg", "prod"):
            for rows in (0, 1, 3):
                case += 1
                ins = [data(r, case, (p * rows, 4), dt, "prod" if name == "prod" else "sum") for r in range(p)]
                out = torch.empty((rows, 4), dtype=dt)
                dist.reduce_scatter_tensor(out, ins[rank], op=ops[name])
                check(f"reduce_scatter_tensor {dt} {name} rows={rows}", out,
                      expected(name, ins, p)[rank * rows:(rank + 1) * rows])
    case += 1
    n = BIG // p
    ins = [data(r, case, (n * p,), torch.float32) for r in range(p)]
    out = torch.empty(n)
    dist.reduce_scatter_tensor(out, ins[rank])
    check("reduce_scatter_tensor big", out, expected("sum", ins, p)[rank * n:(rank + 1) * n])

    # ---- all_to_all_single ---------------------------------------------------------------------------------
    for dt in (torch.float32, torch.int32) + ((torch.bfloat16,) if _has_bf16() else ()):
        case += 1
        ins = [data(r, case, (2 * p, 3), dt) for r in range(p)]
        out = torch.empty((2 * p, 3), dtype=dt)
        dist.all_to_all_single(out, ins[rank])
        exp = torch.cat([ins[s][2 * rank:2 * rank + 2] for s in range(p)])
        check(f"all_to_all_single even {dt}", out, exp)
    # uneven: split sizes count rows of a 2-D tensor; rank s sends (s + d) % 3 rows to rank d
    for cols in (1, 5):
        case += 1
        splits = [[(s + d) % 3 for d in range(p)] for s in range(p)]
        ins = [data(r, case, (sum(splits[r]), cols), torch.float64) for r in range(p)]
        osplit = [splits[s][rank] for s in range(p)]
        out = torch.empty((sum(osplit), cols), dtype=torch.float64)
        dist.all_to_all_single(out, ins[rank], output_split_sizes=osplit, input_split_sizes=splits[rank])
        exp = torch.cat([torch.split(ins[s], splits[s])[rank] for s in range(p)])
        check(f"all_to_all_single uneven rows cols={cols}", out, exp)

    # ---- gather / scatter -------------------------------------------------------------------------------------
    for root in sorted({0, p - 1}):
        for shape in ((0,), (3,), (2, 5)):
            case += 1
            ins = [data(r, case, shape, torch.float32) for r in range(p)]
            lst = [torch.empty(shape) for _ in range(p)] if rank == root else None
            dist.gather(ins[rank], gather_list=lst, dst=root)
            if rank == root:
                for i in range(p):
                    check(f"gather root={root} {shape} [{i}]", lst[i], ins[i])
            case += 1
            chunks = [data(i, case, shape, torch.int64) for i in range(p)]
            out = torch.full(shape, -1, dtype=torch.int64)
            dist.scatter(out, scatter_list=[c.clone() for c in chunks] if rank == root else None, src=root)
            check(f"scatter root={root} {shape}", out, chunks[rank])

    # ---- point to point ----------------------------------------------------------------------------------------
    for shape in ((0,), (4, 5), (BIG,)):
        case += 1
        ins = [data(r, case, shape, torch.float32) for r in range(p)]
        got = torch.empty(shape)
        ws = dist.isend(ins[rank], dst=(rank + 1) % p)
        wr = dist.irecv(got, src=(rank - 1) % p)
        wr.wait()
        ws.wait()
        check_true("isend Work completed", ws.is_completed() and wr.is_completed())
        check(f"isend/irecv ring {shape}", got, ins[(rank - 1) % p])
    case += 1
    ins = [data(r, case, (3, 3), torch.int32) for r in range(p)]
    if rank == 0:
        for src in range(1, p):
            got = torch.empty((3, 3), dtype=torch.int32)
            dist.recv(got, src=src)
            check(f"recv from {src}", got, ins[src])
    else:
        dist.send(ins[rank], dst=0)
    if _has_bf16():
        # irecv posted before isend to the same peer: both must progress (non-blocking data sockets)
        case += 1
        ins = [data(r, case, (2, 8), torch.bfloat16) for r in range(p)]
        got = torch.empty((2, 8), dtype=torch.bfloat16)
        w1 = dist.irecv(got, (rank + 1) % p, tag=7)
        w2 = dist.isend(ins[rank], (rank - 1) % p, tag=7)
        w2.wait()
        w1.wait()
        check("irecv-before-isend bf16", got, ins[(rank + 1) % p])

    # ---- async_op=True --------------------------------------------------------------------------------------------
    works, bufs, exps = [], [], []
    for i in range(4):
        case += 1
        ins = [data(r, case, (16, 16), torch.float32) for r in range(p)]
        t = ins[rank].clone()
        works.append(dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True))
        bufs.append(t)
        exps.append(expected("sum", ins, p))
    case += 1
    ins = [data(r, case, (7,), torch.int64) for r in range(p)]
    bt = ins[rank].clone()
    wb = dist.broadcast(bt, src=p - 1, async_op=True)
    case += 1
    gin = [data(r, case, (2, 2), torch.float64) for r in range(p)]
    gout = torch.empty((2 * p, 2), dtype=torch.float64)
    wg = dist.all_gather_into_tensor(gout, gin[rank], async_op=True)
    wbar = dist.barrier(async_op=True)
    for w, t, e in zip(works, bufs, exps):
        check_true("async wait returns True", w.wait() is True)
        check_true("async is_completed", w.is_completed() and w.is_success())
        check("async all_reduce", t, e)
    wb.wait()
    check("async broadcast", bt, ins[p - 1])
    wg.wait()
    check("async all_gather_into_tensor", gout, torch.cat(gin))
    wbar.wait()
    # a sync call after async ones queues behind them
    case += 1
    ins = [data(r, case, (9,), torch.float32) for r in range(p)]
    t1, t2 = ins[rank].clone(), ins[rank].clone()
    w = dist.all_reduce(t1, async_op=True)
    dist.all_reduce(t2, op=dist.ReduceOp.MAX)
    w.wait()
    check("async then sync (sum)", t1, expected("sum", ins, p))
    check("async then sync (max)", t2, expected("max", ins, p))

    # ---- a subgroup, torch-style global src ---------------------------------------------------------------------------
    members = list(range(1, p))
    g = dist.new_group(members)
    case += 1
    if rank in members:
        ins = {r: data(r, case, (2, 3), torch.float32) for r in members}
        t = ins[rank].clone()
        dist.all_reduce(t, group=g)
        check("subgroup all_reduce", t, expected("sum", list(ins.values()), len(members)))
        b = ins[rank].clone()
        dist.broadcast(b, src=members[-1], group=g)
        check("subgroup broadcast", b, ins[members[-1]])
    else:
        check_true("non-member gets NON_GROUP_MEMBER", g is dist.NON_GROUP_MEMBER)

    dist.barrier()
    dist.destroy_process_group()
    check_true("destroyed", not dist.is_initialized())
    return checks, fails


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_torch_api(nranks: int, transport: str) -> None:
    res = run_ranks(nranks, suite, env={"INTERLINK_TRANSPORT": transport}, timeout=60)
    fails = [f for _, fl in res for f in fl]
    assert not fails, f"{len(fails)} failed checks:\n" + "\n".join(fails[:25])
    assert all(checks > 300 for checks, _ in res), [c for c, _ in res]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool", "bfloat16", "complex64", "uint8"])
def test_views_leave_the_storage_resizable(dtype: str) -> None:
    """interlink reads and writes a tensor through a numpy view that neither copies nor pins it: FSDP
    frees an all-gathered parameter by resizing its storage to 0 (Tensor.numpy() would forbid that;
    FSDP1 training failed on it)."""
    from interlink import arrays

    if dtype == "bfloat16" and not _has_bf16():
        pytest.skip("ml_dtypes absent")
    t = torch.arange(11).to(getattr(torch, dtype))
    v = arrays.as_flat(t, "t", reducing=dtype not in ("bool",))
    assert v.size == 11 and v.ctypes.data == t.data_ptr()
    v[3] = v[5]  # written through the view, seen by the tensor
    assert t[3].item() == t[5].item()
    view = arrays.as_flat(t[2:7], "t")  # a contiguous slice: its own offset
    assert view.ctypes.data == t[2:7].data_ptr() and view.size == 5
    assert arrays.as_flat(torch.empty(0, dtype=t.dtype), "e").size == 0
    del v, view
    t.untyped_storage().resize_(0)  # FSDP's _free_storage
    assert t.untyped_storage().nbytes() == 0
