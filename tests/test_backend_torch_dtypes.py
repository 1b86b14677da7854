"""The torch backend with torch alone (no ml_dtypes): bfloat16 and float16 reductions, a bfloat16 DDP step,
and the argument forms gloo accepts that interlink used to refuse (torch's list form of reduce_scatter with
blocks of different sizes on different ranks, non-contiguous tensors), each compared with gloo in the same
run. Each rank makes ``import ml_dtypes`` fail before it imports torch, as on ``pip install interlink torch``.

Two ranks compare bit for bit (a bfloat16 or float16 sum of two values is one rounding, whatever the order);
three ranks use values whose sums are exact in every order."""

from __future__ import annotations

import pytest

from mp import need_torch_entry_point, run_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():  # pragma: no cover
    pytest.skip("torch without distributed", allow_module_level=True)


def _no_ml_dtypes() -> bool:
    """Make ``import ml_dtypes`` raise ImportError in this process; True if it then does."""
    import sys

    sys.modules["ml_dtypes"] = None  # type: ignore[assignment]
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        return True
    return False


def _same(x, y) -> bool:
    """Equal values, NaN equal to NaN (its bits may differ: torch's vector and scalar kernels disagree)."""
    if x.is_floating_point():
        return torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(), y.nan_to_num())
    return torch.equal(x, y)


def _half_calls(rank: int, world: int) -> dict:
    blocked = _no_ml_dtypes()
    import torch
    import torch.distributed as dist

    dist.init_process_group("interlink")
    gloo = dist.new_group(backend="gloo")
    fails, checks = [], 0
    gen = torch.Generator().manual_seed(rank)

    def data(n, dt):
        t = torch.randn(n, generator=gen, dtype=torch.float32) * 3
        if n > 4:  # the edges: infinities, NaN, the largest finite values (their sum overflows)
            t[:4] = torch.tensor([float("inf"), float("nan"), 3.3e38, -1e-40])
        return t.to(dt)

    def same(what, run):
        nonlocal checks
        a, b = run(None), run(gloo)
        for x, y in zip(a, b):
            checks += 1
            if not _same(x, y):
                bad = (x != y).nonzero()[:3].flatten().tolist()
                fails.append(f"rank {rank}: {what}: at {bad} interlink {x[bad].tolist()} gloo {y[bad].tolist()}")

    for dt in (torch.bfloat16, torch.float16):
        for n in (1, 1000, 70001):
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT):
                src = data(n, dt)

                def ar(g, src=src, op=op):
                    t = src.clone()
                    dist.all_reduce(t, op=op, group=g)
                    return [t]
                same(f"all_reduce {dt} {op} n={n}", ar)
            src = data(n, dt)

            def red(g, src=src):
                t = src.clone()
                dist.reduce(t, dst=1, group=g)
                return [t] if rank == 1 else []
            same(f"reduce {dt} n={n}", red)
            ins = [data(n, dt) for _ in range(world)]

            def rs(g, ins=ins):
                out, out2 = torch.zeros(n, dtype=dt), torch.zeros(n, dtype=dt)
                dist.reduce_scatter_tensor(out, torch.cat(ins), group=g)
                dist.reduce_scatter(out2, [t.clone() for t in ins], group=g)
                return [out, out2]
            same(f"reduce_scatter {dt} n={n}", rs)
        parts = [data(5, dt), data(3000, dt)]

        def coalesced(g, parts=parts):
            ts = [t.clone() for t in parts]
            with dist._coalescing_manager(group=g):
                for t in ts:
                    dist.all_reduce(t, group=g)
            return ts
        same(f"coalesced all_reduce {dt}", coalesced)
        # AVG (gloo has none): the sum, then divided, each rounded to the dtype, as torch computes it
        src = data(1001, dt)
        t = src.clone()
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        s = src.clone()
        dist.all_reduce(s, group=gloo)
        checks += 1
        if not _same(t, s / world):
            fails.append(f"rank {rank}: all_reduce AVG {dt}")
    dist.destroy_process_group()
    return {"blocked": blocked, "fails": fails, "checks": checks}


def test_bfloat16_and_float16_reductions_match_gloo_with_torch_alone() -> None:
    need_torch_entry_point()
    res = run_ranks(2, _half_calls, timeout=300)
    for out in res:
        assert out["blocked"], "ml_dtypes still importable in the rank"
        assert out["checks"] > 40 and out["fails"] == [], out["fails"][:5]


def _forms(rank: int, world: int) -> dict:
    _no_ml_dtypes()
    import torch
    import torch.distributed as dist

    dist.init_process_group("interlink")
    gloo = dist.new_group(backend="gloo")
    fails, checks = [], 0

    def data(n, r=rank, salt=0, dt=torch.float32):  # small integers: every sum is exact in every order
        return ((torch.arange(n) * (r + 2) + salt) % 9 - 4).to(dt)

    def same(what, run):
        nonlocal checks
        a, b = run(None), run(gloo)
        for x, y in zip(a, b):
            checks += 1
            if not torch.equal(x, y):
                fails.append(f"rank {rank}: {what}: interlink {x.flatten()[:6].tolist()} gloo {y.flatten()[:6].tolist()}")

    sizes = [3 + 2 * r for r in range(world)]  # rank r's block: different on every rank
    for dt in (torch.float32, torch.bfloat16, torch.int64):
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN):
            def rs_uneven(g, dt=dt, op=op):
                out = torch.full((sizes[rank],), 99, dtype=dt)
                dist.reduce_scatter(out, [data(sizes[k], salt=k, dt=dt) for k in range(world)], op=op, group=g)
                return [out]
            same(f"uneven list reduce_scatter {dt} {op}", rs_uneven)

        def rs_uneven_async(g, dt=dt):
            out = torch.zeros(sizes[rank], dtype=dt)
            dist.reduce_scatter(out, [data(sizes[k], salt=k, dt=dt) for k in range(world)], group=g,
                                async_op=True).wait()
            return [out]
        same(f"uneven list reduce_scatter async {dt}", rs_uneven_async)

    def noncontig(g):
        a = data(12).reshape(3, 4).t()  # a transposed view: not contiguous
        dist.all_reduce(a, group=g)
        b = data(12, salt=1).reshape(3, 4).t()
        dist.broadcast(b, src=world - 1, group=g)
        base = torch.zeros(world, 8)
        dist.all_gather([base[k, ::2] for k in range(world)], data(4, salt=2), group=g)
        return [a, b, base]
    same("non-contiguous tensors", noncontig)
    dist.destroy_process_group()
    return {"fails": fails, "checks": checks}


@pytest.mark.parametrize("nranks", [2, 3])
def test_argument_forms_gloo_accepts(nranks: int) -> None:
    need_torch_entry_point()
    res = run_ranks(nranks, _forms, timeout=240)
    for out in res:
        assert out["checks"] == 15 and out["fails"] == [], out["fails"][:5]


def _bf16_ddp(rank: int, world: int, backend: str) -> dict:
    blocked = _no_ml_dtypes()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(backend)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(torch.bfloat16)
    ddp = DDP(net, bucket_cap_mb=0.002)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(10 + rank)
    for _ in range(3):
        x = torch.randn(16, 32, generator=gen).to(torch.bfloat16)
        y = torch.randn(16, 8, generator=gen).to(torch.bfloat16)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    params = [p.detach().float().flatten().tolist() for p in net.parameters()]  # lists: tensors cross as fds
    dist.destroy_process_group()
    return {"blocked": blocked, "params": params}


def test_bfloat16_ddp_step_matches_gloo_with_torch_alone() -> None:
    need_torch_entry_point()
    ours = run_ranks(2, _bf16_ddp, "interlink", timeout=180)
    theirs = run_ranks(2, _bf16_ddp, "gloo", timeout=180)
    assert all(o["blocked"] for o in ours)
    for r in range(2):
        for k, (a, b) in enumerate(zip(ours[r]["params"], theirs[r]["params"])):
            assert a == b, f"rank {r} parameter {k}: {sum(x != y for x, y in zip(a, b))} of {len(a)} differ"
    assert ours[0]["params"] == ours[1]["params"]  # the ranks' different batches were averaged
