"""`interlink plan --topology this` checked against real training on this host: DDP and FSDP2 of a small
transformer over backend="interlink" and gloo, at 2 and 4 ranks, measured next to the plan.

    python benchmarks/plan_host.py                        # 2 and 4 ranks, DDP and FSDP2, interlink and gloo
    python benchmarks/plan_host.py --ranks 2 --steps 4 --runs 3 --json out.json
    python benchmarks/plan_host.py --ranks 2 --systems fsdp --backends interlink --steps 2 --runs 1   # ~1 minute

The model is interlink.plan.host.build_gpt, the torch model the plan prices (its FLOPs are the planner's
formulas, plan/job.py): ``--model`` layers, hidden, heads, seq, vocab (default 4 layers, hidden 256,
4 heads, seq 128, vocab 2048), fp32, AdamW, ``--micro-batch`` sequences a rank (default 4). This
host's compute rates are measured again (interlink.plan.host.calibrate, with as many processes measuring
at once as the ranks compute at once, min(ranks, cores)) just before and just after each rank count's steps,
and the plan takes their mean (``--once``: before only; ``--stored``: the stored rates), so that the rates
and the steps come from the same minutes of a host whose speed drifts (20-40% within a minute on the 2-core
VM of benchmarks/RESULTS.md).
``--ranks`` processes (spawn, as benchmarks/torch_ddp.py starts them) each call
``init_process_group("interlink")`` and create a gloo group over the same ranks, one torch thread a
rank (as torchrun's OMP_NUM_THREADS=1). Copies of the model are wrapped in DDP (bucket_cap_mb 25,
torch's default) and FSDP2 (``fully_shard`` per block and on the root) once per backend, plus the bare
model ("no comm."); the systems take turns within each run (``--runs`` runs of ``--steps`` steps after a
warm-up, the order reversed every other run), so load that comes and goes on a shared machine spreads
over all of them. Reported per system: the median step (the slowest rank of each step), the plan
(:func:`interlink.plan.host.plan_host`: the same model, ranks, DDP or FSDP, backend) and its error; and,
as a second figure, the CPU-time equivalent: the median CPU time a rank spends on a step (every thread of
its process) times ranks / cores, what the step would take if the rank's work had its share of the cores
to itself. The load average is printed with the figures: the plan knows this host's cores, not what other
processes take of them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT_MODEL = "layers=4,hidden=256,heads=4,seq=128,vocab=2048"
SYSTEMS = ("ddp", "fsdp")
BACKENDS = ("interlink", "gloo")


def rank_main(rank: int, world: int, port: int, args: dict, q) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import copy

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("interlink")
    gloo = dist.new_group(backend="gloo")
    from interlink.plan.host import build_gpt

    m = args["model"]
    torch.manual_seed(0)
    base = build_gpt(m["layers"], m["hidden"], m["heads"], m["seq"], m["vocab"], m.get("ffn", 0))
    models, opts = {}, {}
    for system in args["systems"]:
        for backend in args["backends"]:
            g = gloo if backend == "gloo" else None
            net = copy.deepcopy(base)
            if system == "ddp":
                net = DDP(net, process_group=g, bucket_cap_mb=args["bucket_mb"])
            else:
                from torch.distributed.device_mesh import DeviceMesh
                from torch.distributed.fsdp import fully_shard

                mesh = DeviceMesh.from_group(g if g is not None else dist.group.WORLD, "cpu")
                for blk in net.blocks:
                    fully_shard(blk, mesh=mesh)
                fully_shard(net, mesh=mesh)
            models[f"{system}/{backend}"] = net
            opts[f"{system}/{backend}"] = torch.optim.AdamW(net.parameters(), lr=1e-4)
    local = copy.deepcopy(base)
    models["compute"] = local
    opts["compute"] = torch.optim.AdamW(local.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1 + rank)
    b, s = args["micro_batch"], m["seq"]
    idx = torch.randint(0, m["vocab"], (b, s), generator=gen)
    tgt = torch.randint(0, m["vocab"], (b, s), generator=gen)
    times = torch.zeros(2 * args["steps"], dtype=torch.float64)

    def run(name: str, steps: int) -> tuple[list[float], list[float]]:
        net, opt = models[name], opts[name]
        dist.barrier()
        wall, cpu = [], []
        for _ in range(steps):
            t0, c0 = time.perf_counter(), time.process_time()
            opt.zero_grad(set_to_none=True)
            net(idx, tgt).backward()
            opt.step()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)  # every thread of the rank (gloo's, interlink's runner)
        return wall, cpu

    for name in models:  # warm-up: buckets built, buffers touched, the runtime's first-call choices made
        run(name, 2)
    res: dict[str, list[float]] = {k: [] for k in models}
    res.update({f"{k}/cpu": [] for k in models})
    for r in range(args["runs"]):
        if rank == 0:
            print(f"plan_host.py: {world} ranks, run {r + 1} of {args['runs']}, load {os.getloadavg()[0]:.1f}",
                  file=sys.stderr, flush=True)
        order = list(models) if r % 2 == 0 else list(reversed(models))  # alternate who goes first
        for name in order:
            wall, cpu = run(name, args["steps"])
            n = len(wall)
            times[:2 * n] = torch.tensor(wall + cpu, dtype=torch.float64)
            dist.all_reduce(times, op=dist.ReduceOp.MAX)  # each step: the slowest rank
            res[name].extend(float(t) for t in times[:n])
            res[f"{name}/cpu"].extend(float(t) for t in times[n:2 * n])
    # the plan's collectives of a step alone (its sizes and calls, one after another), each backend
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    one = torch.zeros(1, dtype=torch.float64)
    for key, calls in args["collectives"].get(str(world), {}).items():
        g = gloo if key.endswith("/gloo") else None
        bufs = []
        for coll, nbytes, n in calls:
            count = nbytes // 4
            if coll == "all_reduce":  # zeros: repeated in place, ones would grow to inf (numpy's overflow warning)
                bufs.append((coll, torch.zeros(count), None, n))
            elif coll == "all_gather":
                bufs.append((coll, torch.ones(count // world), torch.empty(count // world * world), n))
            else:
                bufs.append((coll, torch.ones(count // world * world), torch.empty(count // world), n))

        def once() -> None:
            for coll, a, b, n in bufs:
                for _ in range(n):
                    if coll == "all_reduce":
                        dist.all_reduce(a, group=g)
                    elif coll == "all_gather":
                        ag(b, a, group=g)
                    else:
                        rs(b, a, group=g)

        once()
        got = []
        for _ in range(5):
            dist.barrier()
            t0 = time.perf_counter()
            once()
            one[0] = time.perf_counter() - t0
            dist.all_reduce(one, op=dist.ReduceOp.MAX)
            got.append(float(one[0]))
        res[f"alone:{key}"] = got
    dist.barrier()
    dist.destroy_process_group()
    q.put((rank, res))


def model_dict(spec: str) -> dict:
    from interlink.plan import parse_model

    mdl = parse_model(spec)
    if mdl.mlp != "gelu" or mdl.moe or mdl.kv_heads not in (0, mdl.heads) or not mdl.tied:
        raise SystemExit("plan_host.py builds GPT layers (gelu MLP, no GQA, no experts, tied output layer)")
    return {"layers": mdl.layers, "hidden": mdl.hidden, "heads": mdl.heads, "seq": mdl.seq, "vocab": mdl.vocab,
            "ffn": mdl.f}


def measure(world: int, args: dict) -> dict[str, list[float]]:
    from interlink.launch.local import free_port

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, args, q)) for r in range(world)]
    for p in procs:
        p.start()
    got = [q.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join(60)
    return sorted(got, key=lambda x: x[0])[0][1]


def mean_rates(x, y):
    """The rates of two measurements of this host (interlink.plan.host.HostCompute), each figure the mean of
    the two where both have it (numbers in the same nested places), else the first's."""
    from interlink.plan.host import HostCompute

    def mean(u, v):
        if isinstance(u, dict) and isinstance(v, dict):
            return {k: (mean(u[k], v[k]) if k in v else u[k]) for k in u}
        if isinstance(u, (int, float)) and isinstance(v, (int, float)) and not isinstance(u, bool):
            return (u + v) / 2
        return u

    d = mean(x.to_dict(), y.to_dict())
    d["meta"] = dict(x.meta, date=f"{x.meta.get('date', '?')} and {y.meta.get('date', '?')} (mean)")
    return HostCompute.from_dict(d, x.path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4", help="comma-separated rank counts (default 2,4)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"the transformer (default {DEFAULT_MODEL})")
    ap.add_argument("--micro-batch", type=int, default=4, help="sequences a rank per step (default 4)")
    ap.add_argument("--systems", default="ddp,fsdp", help="ddp, fsdp or both (default both)")
    ap.add_argument("--backends", default="interlink,gloo", help="interlink, gloo or both (default both)")
    ap.add_argument("--steps", type=int, default=4, help="timed steps a system per run (default 4)")
    ap.add_argument("--runs", type=int, default=3, help="runs; the systems take turns within each (default 3)")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (torch's default 25)")
    ap.add_argument("--stored", action="store_true",
                    help="plan with the stored compute rates of this host (default: measure them again first, a "
                         "few seconds, so that rates and steps come from the same hour of a host that changes)")
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="price the collectives with this host profile (a profile JSON, or a calibration result such "
                         "as benchmarks/results/calibration.json) instead of the one `interlink bench --calibrate` "
                         "keeps for this host")
    ap.add_argument("--once", action="store_true",
                    help="measure the rates once, before every rank count's steps (default: before and after each "
                         "rank count's steps, and plan with their mean)")
    ap.add_argument("--json", default=None, metavar="FILE", help="write the rows as JSON")
    a = ap.parse_args(argv)
    from interlink.plan import parse_model
    from interlink.plan.host import host_compute, plan_host

    mdl = parse_model(a.model)
    args = {"model": model_dict(a.model), "micro_batch": a.micro_batch, "systems": a.systems.split(","),
            "backends": a.backends.split(","), "steps": a.steps, "runs": a.runs, "bucket_mb": a.bucket_mb}
    for s in args["systems"]:
        if s not in SYSTEMS:
            ap.error(f"--systems: {s!r} is not ddp or fsdp")
    for bk in args["backends"]:
        if bk not in BACKENDS:
            ap.error(f"--backends: {bk!r} is not interlink or gloo")
    cores = len(os.sched_getaffinity(0))
    worlds = [int(x) for x in a.ranks.split(",") if x.strip()]
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()
    rows = []
    profile = None
    if a.profile:
        from interlink.model.params import Profile

        with open(a.profile) as fh:
            d = json.load(fh)
        profile = Profile.from_dict(d["meta"]["profile"] if "meta" in d and "profile" in d["meta"] else d, a.profile)

    def rates(world: int, when: str):
        print(f"plan_host.py: compute rates of this host for {world} ranks, {when} its steps "
              f"({'stored or measured' if a.stored else 'measuring'})", file=sys.stderr, flush=True)
        return host_compute(mdl, a.micro_batch, ranks=(world,), recalibrate=not a.stored,
                            progress=lambda m: print(f"plan_host.py: measuring {m}", file=sys.stderr, flush=True))

    def plan_all(world: int, hc) -> dict:
        return {(world, sy, bk): plan_host(mdl, world, system=sy, backend=bk, micro_batch=a.micro_batch,
                                           bucket_mb=a.bucket_mb, compute=hc, profile=profile)
                for sy in args["systems"] for bk in args["backends"]}

    plans: dict = {}
    args["collectives"] = {}
    for world in worlds:
        # the rates of this host just before this rank count's steps (and, unless --once, just after: the plan
        # takes their mean), so that rates and steps come from the same minutes of a host whose speed drifts
        hc = rates(world, "before")
        pw = plan_all(world, hc)  # the collectives a step calls do not depend on the rates
        args["collectives"][str(world)] = {f"{sy}/{bk}": [(c["collective"], int(c["bytes"]), int(c["per_step"]))
                                                          for c in p.collectives] for (_, sy, bk), p in pw.items()}
        t0 = time.perf_counter()
        res = measure(world, args)
        took = time.perf_counter() - t0
        if not a.once and not a.stored:
            hc = mean_rates(hc, rates(world, "after"))
        plans.update(plan_all(world, hc))
        load = os.getloadavg()
        print(f"# {world} ranks on {cores} cores, {mdl.spec()}, micro-batch {a.micro_batch}, {stamp}, "
              f"load {load[0]:.1f} (1 min) {load[1]:.1f} (5 min), {took:.0f} s")
        comp = statistics.median(res["compute"])
        comp_cpu = statistics.median(res["compute/cpu"])
        share = max(1.0, world / cores)
        print(f"# {'system':<6} {'backend':<10} {'measured':>10} {'plan':>10} {'error':>7}   {'CPU-equiv.':>10} "
              f"{'error':>7}   {'no comm.':>9} {'plan':>9}   plan's breakdown (ms)")
        for system in args["systems"]:
            for backend in args["backends"]:
                meas = statistics.median(res[f"{system}/{backend}"])
                cpu = statistics.median(res[f"{system}/{backend}/cpu"])
                p = plans[(world, system, backend)]
                err = (p.step_s - meas) / meas
                bd = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in p.breakdown.items() if v > 0)
                alone = p.stage["local_s"] / p.stage["core_share"]
                # the measured bare step is the slowest rank's: the plan's too (its slowest_rank term)
                bare = p.stage["local_s"] * p.stage.get("slowest_x", 1.0)
                equiv = cpu * share
                print(f"  {system:<6} {backend:<10} {meas * 1e3:8.1f}ms {p.step_s * 1e3:8.1f}ms {err:+7.1%}   "
                      f"{equiv * 1e3:8.1f}ms {(p.step_s - equiv) / equiv:+7.1%}   {comp * 1e3:7.1f}ms "
                      f"{bare * 1e3:7.1f}ms   {bd}")
                rows.append({"ranks": world, "cores": cores, "system": system, "backend": backend,
                             "measured_s": meas, "cpu_s": cpu, "cpu_equiv_s": equiv,
                             "cpu_equiv_error": (p.step_s - equiv) / equiv, "plan_s": p.step_s,
                             "compute_cpu_s": comp_cpu, "compute_plan_alone_s": alone, "error": err, "compute_measured_s": comp,
                             "compute_plan_s": bare, "breakdown": p.breakdown,
                             "terms": p.stage["terms"], "concurrent": p.stage["concurrent"],
                             "collectives": p.collectives, "steps": res[f"{system}/{backend}"],
                             "compute_steps": res["compute"],
                             "cpu_steps": res[f"{system}/{backend}/cpu"], "load_1min": load[0], "load_5min": load[1],
                             "date": stamp})
        print("# the plan's collectives of a step alone (sizes and calls as priced; measured: median of 5, slowest "
              "rank)")
        for system in args["systems"]:
            for backend in args["backends"]:
                p = plans[(world, system, backend)]
                meas_c = statistics.median(res[f"alone:{system}/{backend}"])
                plan_c = sum(c["time_us"] * 1e-6 * c["per_step"] for c in p.collectives)
                calls_c = p.stage["terms"].get("torch_calls", {}).get("s", 0.0)  # each call through torch's backend
                paths = ", ".join(sorted({f"{c['collective']} {c['algorithm']}" for c in p.collectives}))
                print(f"  {system:<6} {backend:<10} {meas_c * 1e3:8.1f}ms {plan_c * 1e3:8.1f}ms "
                      f"{(plan_c - meas_c) / meas_c:+7.1%}   with torch_calls {(plan_c + calls_c) * 1e3:8.1f}ms "
                      f"{(plan_c + calls_c - meas_c) / meas_c:+7.1%}   ({paths})")
                for r in rows:
                    if (r["ranks"], r["system"], r["backend"]) == (world, system, backend):
                        r["collectives_alone_s"], r["collectives_plan_s"] = meas_c, plan_c
                        r["collectives_calls_s"] = calls_c
        sys.stdout.flush()
    errs = [abs(r["error"]) for r in rows]
    if errs:
        eq = [abs(r["cpu_equiv_error"]) for r in rows]
        print(f"# |error| of the measured step: mean {statistics.mean(errs):.1%}, worst {max(errs):.1%}, "
              f"{sum(e <= 0.2 for e in errs)} of {len(errs)} within 20%; of the CPU-time equivalent: mean "
              f"{statistics.mean(eq):.1%}, worst {max(eq):.1%}; load at start {load0[0]:.1f}")
        print(f"# compute rates: {hc.source}")
        print(f"# {[n for n in plans[next(iter(plans))].notes if n.startswith('host communication')][0]}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"model": mdl.to_dict(), "micro_batch": a.micro_batch, "compute": hc.to_dict(),
                       "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
