"""DDP and FSDP2 training steps on backend="interlink" against gloo, in one run.

    python benchmarks/torch_ddp.py --ranks 2,4 --params 20M --batch 8 --steps 5 --runs 3 \
        [--modes ddp,fsdp2] [--device cpu|cuda] [--json FILE]

Starts ``--ranks`` processes (spawn) that call ``init_process_group("interlink")`` and create a gloo group
over the same ranks. Copies of one MLP (``--params`` parameters, float32) are wrapped in DDP and in FSDP2
(``fully_shard`` per layer and on the root, over a DeviceMesh of each group), one per backend; the
systems take turns, ``--steps`` training steps each, ``--runs`` times. Reported per backend (medians over
runs, slowest rank):
  step      -- one training step (forward, backward with DDP's bucketed all_reduce or FSDP's all_gather /
               reduce_scatter, optimizer)
  compute   -- the same step without communication (local model)
  exposed   -- step - compute: the communication the step waits for
  DDP without communication -- DDP with a comm hook that returns each bucket as it is: DDP's own work
               (bucket copies, hooks) with no communication; gloo's step minus it is the communication's
               share of gloo's step (the issue's condition for its step-time target)
  allreduce -- one all_reduce of a buffer the size of all gradients (the collective alone)
  fsdp2 collectives alone -- (with fsdp2) per layer, an all_gather of its parameters and a reduce_scatter
               of its gradients on flat buffers, the collectives of one FSDP2 step without FSDP's own
               copies into and out of them (which the step times for both backends alike)
The interlink backend returns asynchronous Works for DDP's buckets and FSDP's prefetches, so its
communication overlaps with the backward pass; gloo's does too (its own worker threads).

``--device cuda`` puts the model, the data and the gradients on GPU 0 (every rank shares it, as on the
device machine): DDP's buckets go through interlink's device paths (cuda-ipc from 8 MiB, staged below)
and through gloo's CUDA all_reduce. DDP only: gloo has no CUDA reduce_scatter for FSDP2.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

from interlink.launch.local import free_port


def _size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def _model(params: int):
    import torch

    width = 2048
    layers = max(1, round(params / (width * width)))
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods[:-1]), width


def _no_comm(state, bucket):
    """A DDP comm hook that communicates nothing: each bucket comes back as it is."""
    import torch

    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def rank_main(rank: int, world: int, port: int, args: dict, q) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    cuda = args["device"] == "cuda"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group("interlink")
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    base, width = _model(args["params"])
    base = base.to(dev)
    nparams = sum(p.numel() for p in base.parameters())
    import copy

    models, opts = {}, {}
    for mode in args["modes"]:
        backends = (("interlink", None), ("gloo", gloo)) + ((("interlink_inline", None),) if args["inline"] else ())
        for name, g in backends:
            m = copy.deepcopy(base)
            if mode == "ddp":
                m = DDP(m, process_group=g, device_ids=[0] if cuda else None, gradient_as_bucket_view=args["bucket_view"], bucket_cap_mb=args["bucket_mb"])
            else:
                from torch.distributed.device_mesh import DeviceMesh
                from torch.distributed.fsdp import fully_shard

                mesh = DeviceMesh.from_group(g if g is not None else dist.group.WORLD, "cpu")
                for layer in m:
                    if isinstance(layer, torch.nn.Linear):
                        fully_shard(layer, mesh=mesh)
                fully_shard(m, mesh=mesh)
            models[f"{mode}_{name}"] = m
            opts[f"{mode}_{name}"] = torch.optim.SGD(m.parameters(), lr=1e-4)
        if mode == "ddp":  # DDP's own work (bucket copies, hooks) without communication: a no-op comm hook
            m = DDP(copy.deepcopy(base), device_ids=[0] if cuda else None, gradient_as_bucket_view=args["bucket_view"],
                    bucket_cap_mb=args["bucket_mb"])
            m.register_comm_hook(None, _no_comm)
            models["ddp_nocomm"] = m
            opts["ddp_nocomm"] = torch.optim.SGD(m.parameters(), lr=1e-4)
    local = copy.deepcopy(base)
    opt_local = torch.optim.SGD(local.parameters(), lr=1e-4)
    x = torch.randn(args["batch"], width, device=dev)
    y = torch.randn(args["batch"], width, device=dev)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()
    t = torch.zeros(1, dtype=torch.float64)

    def slowest(v: float) -> float:
        t[0] = v
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t[0])

    def steps(model, opt, inline: bool = False) -> float:
        import interlink.backends.torch as backend

        dist.barrier()
        backend._ASYNC = not inline  # interlink_inline: every call runs inline (no overlap), for comparison
        t0 = time.perf_counter()
        for _ in range(args["steps"]):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        sync()
        took = (time.perf_counter() - t0) / args["steps"]
        backend._ASYNC = "env"
        return slowest(took)

    fsdp = "fsdp2" in args["modes"]
    res = {k: [] for k in (*models, "compute", "ar_interlink", "ar_gloo",
                           *(("fc_interlink", "fc_gloo") if fsdp else ()))}
    buf = torch.ones(nparams, device=dev)
    # FSDP2's collectives alone: per layer, the all_gather of its parameters (forward) and the
    # reduce_scatter of its gradients (backward), on flat buffers of the sizes fully_shard uses
    layer_sizes = [sum(p.numel() for p in layer.parameters()) for layer in base if isinstance(layer, torch.nn.Linear)]
    shards = [(torch.ones(-(-n // world), device=dev), torch.ones(-(-n // world) * world, device=dev))
              for n in layer_sizes] if fsdp else []

    # (torch 2.13 names them *_single; the *_tensor names are deprecated there)
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def fsdp_collectives(g) -> None:
        for shard, full in shards:
            ag(full, shard, group=g)
        for shard, full in shards:
            rs(shard, full, group=g)
    for name, m in models.items():  # warm-up: buckets built, buffers touched
        steps(m, opts[name])
    for run in range(args["runs"]):
        if rank == 0:  # progress on stderr (stdout is the table)
            print(f"torch_ddp.py: {world} ranks, run {run + 1} of {args['runs']}", file=sys.stderr, flush=True)
        for name, m in models.items():
            res[name].append(steps(m, opts[name], name.endswith("_inline")))
        res["compute"].append(steps(local, opt_local))
        for name, g in (("ar_interlink", None), ("ar_gloo", gloo)):
            dist.all_reduce(buf, group=g)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(3):
                dist.all_reduce(buf, group=g)
            sync()
            res[name].append(slowest((time.perf_counter() - t0) / 3))
        if fsdp:
            for name, g in (("fc_interlink", None), ("fc_gloo", gloo)):
                fsdp_collectives(g)
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(3):
                    fsdp_collectives(g)
                sync()
                res[name].append(slowest((time.perf_counter() - t0) / 3))
    dist.destroy_process_group()
    q.put((rank, nparams, res))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2", help="comma-separated rank counts")
    ap.add_argument("--params", default="20M")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="ddp,fsdp2", help="ddp, fsdp2 or both")
    ap.add_argument("--bucket-view", action="store_true",
                    help="DDP(gradient_as_bucket_view=True): gradients live in the buckets (no copies)")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (torch's default: 25)")
    ap.add_argument("--inline", action="store_true",
                    help="also time interlink with every call inline (INTERLINK_TORCH_ASYNC=0): no overlap")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: model and gradients on GPU 0, shared by every rank (DDP only)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = []
    for world in [int(x) for x in a.ranks.split(",")]:
        port = free_port()
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        args = {"params": _size(a.params), "batch": a.batch, "steps": a.steps, "runs": a.runs,
                "modes": a.modes.split(","),
                "inline": a.inline, "bucket_view": a.bucket_view,
                "bucket_mb": a.bucket_mb, "device": a.device}
        if a.device == "cuda" and "fsdp2" in args["modes"]:
            ap.error("--device cuda runs DDP only (gloo has no CUDA reduce_scatter for FSDP2): --modes ddp")
        procs = [ctx.Process(target=rank_main, args=(r, world, port, args, q)) for r in range(world)]
        for p in procs:
            p.start()
        got = [q.get(timeout=3600) for _ in procs]
        for p in procs:
            p.join(60)
        _, nparams, res = sorted(got)[0]
        med = {k: statistics.median(v) for k, v in res.items()}
        row = {"ranks": world, "params": nparams, "grad_MB": nparams * 4 / 1e6, **{f"{k}_s": v for k, v in med.items()},
               "runs": res}
        print(f"# {world} ranks, {nparams / 1e6:.1f}M parameters ({row['grad_MB']:.0f} MB of gradients), "
              f"batch {a.batch}, {a.device}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print(f"  compute:   {med['compute'] * 1e3:8.1f} ms (no communication)")
        if "ddp_nocomm" in med:
            nc, gl = med["ddp_nocomm"], med["ddp_gloo"]
            row["ddp_comm_share_gloo"] = (gl - nc) / gl
            print(f"  ddp    without communication: {nc * 1e3:8.1f} ms (a no-op comm hook: DDP's own work)   "
                  f"communication's share of gloo's step: {(gl - nc) / gl:.0%}   exposed: interlink "
                  f"{(med['ddp_interlink'] - nc) * 1e3:7.1f} ms   gloo {(gl - nc) * 1e3:7.1f} ms")
        for mode in args["modes"]:
            il, gl = med[f"{mode}_interlink"], med[f"{mode}_gloo"]
            row[f"{mode}_exposed_interlink_s"] = il - med["compute"]
            row[f"{mode}_exposed_gloo_s"] = gl - med["compute"]
            print(f"  {mode:6s} step: interlink (async Works) {il * 1e3:8.1f} ms   gloo {gl * 1e3:8.1f} ms   "
                  f"gloo/interlink {gl / il:.2f}x   exposed: interlink {(il - med['compute']) * 1e3:7.1f} ms   "
                  f"gloo {(gl - med['compute']) * 1e3:7.1f} ms")
            if f"{mode}_interlink_inline" in med:
                il2 = med[f"{mode}_interlink_inline"]
                print(f"  {mode:6s} inline (no overlap): {il2 * 1e3:8.1f} ms   gloo/inline {gl / il2:.2f}x   "
                      f"exposed {(il2 - med['compute']) * 1e3:7.1f} ms")
        if a.device == "cpu":  # which of the two INTERLINK_TORCH_ASYNC unset ("auto") runs on this host
            from interlink.backends.torch import cores_scarce

            row["default"] = "inline" if cores_scarce(len(os.sched_getaffinity(0)), world) else "async"
            print(f"  default here (INTERLINK_TORCH_ASYNC unset): {row['default']} "
                  f"({len(os.sched_getaffinity(0))} cores, {world} ranks)")
        print(f"  allreduce: interlink {med['ar_interlink'] * 1e3:8.1f} ms   gloo {med['ar_gloo'] * 1e3:8.1f} ms   "
              f"gloo/interlink {med['ar_gloo'] / med['ar_interlink']:.2f}x")
        if "fc_interlink" in med:
            print(f"  fsdp2 collectives alone (per layer: all_gather of its parameters, reduce_scatter of its "
                  f"gradients): interlink {med['fc_interlink'] * 1e3:8.1f} ms   gloo {med['fc_gloo'] * 1e3:8.1f} ms   "
                  f"gloo/interlink {med['fc_gloo'] / med['fc_interlink']:.2f}x")
        out.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
