"""GPU collectives on one host: cuda-ipc (the device executor) against the staged path and the GPU's own
copy bandwidth, measured in one run.

    python benchmarks/gpu.py --ranks 4 --collectives all_reduce,all_gather,broadcast \\
        --sizes 1M,4M,16M,64M,256M,1G --json benchmarks/results/gpu.json

Starts ``--ranks`` processes on this host (spawned; each its own CUDA context, all on GPU 0 unless
``--spread``), runs each collective at each size on torch CUDA tensors twice: over cuda-ipc
(INTERLINK_CUDA_IPC_MIN_BYTES=0) and staged (INTERLINK_CUDA_IPC=0), the two taking turns per size.
Times are the slowest rank's mean over the timed calls after warm-up (the median of ``--runs`` such
repetitions). Sizes are nccl-tests' (all_gather: the whole output), algbw = size / time, busbw =
algbw x the nccl-tests factor. ``copy`` is the device's own device-to-device copy bandwidth (a torch
copy of the same size by rank 0 while the others wait), bytes copied per second.

``model``: the time the device executor's Schedule needs on one shared GPU, priced from its steps:
every rank's pulls and local copies/reductions go through the one GPU's memory, so time =
comm_rounds x alpha + (bytes copied + 1.5 x bytes reduced, over all ranks) / copy bandwidth, with alpha
the per-round cost (a signal over the host channels plus a stream synchronisation) fitted from the
smallest size. With p ranks on one GPU every rank's output must be written once, so busbw <= copy/p
for all_gather and broadcast whatever the algorithm; the column ``of_bound`` is busbw / (copy/p).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time

import numpy as np

from interlink.cli.bench import parse_size
from interlink.launch.local import free_port



def fmt(n: int) -> str:
    for u, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{u}"
    return str(n)


def _iters(nbytes: int, path: str) -> tuple[int, int]:
    if nbytes >= 256 << 20:
        return (1, 3) if path == "staged" else (2, 5)
    if nbytes >= 16 << 20:
        return (2, 5) if path == "staged" else (3, 20)
    return (3, 20) if path == "staged" else (5, 50)


def rank_main(rank: int, world: int, env: dict, args: dict, q) -> None:
    os.environ.update(env)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)})
    import torch

    import interlink as dist

    ndev = torch.cuda.device_count()
    dev = rank % ndev if args["spread"] else 0
    torch.cuda.set_device(dev)
    g = dist.init(timeout=600)
    p = world
    rows = []
    host_t = np.zeros(1, np.float64)

    def slowest(t: float) -> float:
        host_t[0] = t
        dist.all_reduce(host_t, op="max")
        return float(host_t[0])

    for coll in args["collectives"]:
        for size in args["sizes"]:
            elt = 4
            n = size // elt
            if coll in ("all_gather", "reduce_scatter"):
                n -= n % p
            if n == 0:
                continue
            blk = n // p
            if coll == "all_gather":
                inp = torch.full((blk,), float(rank), device="cuda")
                out = torch.empty(n, device="cuda")
                call = lambda: dist.all_gather_into_tensor(out, inp)  # noqa: E731
            elif coll == "reduce_scatter":
                inp = torch.full((n,), float(rank), device="cuda")
                out = torch.empty(blk, device="cuda")
                call = lambda: dist.reduce_scatter_tensor(out, inp)  # noqa: E731
            elif coll == "broadcast":
                out = torch.full((n,), float(rank), device="cuda")
                call = lambda: dist.broadcast(out, src=0)  # noqa: E731
            else:
                out = torch.full((n,), 1.0, device="cuda")
                call = lambda: dist.all_reduce(out)  # noqa: E731
            res: dict[str, list[float]] = {"cuda-ipc": [], "staged": []}
            for _run in range(args["runs"]):
                for path in args["paths"]:
                    if path == "staged":
                        os.environ["INTERLINK_CUDA_IPC"] = "0"
                    else:
                        os.environ["INTERLINK_CUDA_IPC"] = "1"
                    warm, iters = _iters(size, path)
                    for _ in range(warm):
                        call()
                    torch.cuda.synchronize()
                    dist.barrier()
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        call()
                    torch.cuda.synchronize()
                    res[path].append(slowest((time.perf_counter() - t0) / iters))
            os.environ["INTERLINK_CUDA_IPC"] = "1"
            # the device's own copy bandwidth at this size: rank 0 copies while the others wait
            copy_bw = 0.0
            if rank == 0:
                a = torch.empty(size, dtype=torch.uint8, device="cuda")
                b = torch.empty_like(a)
                b.copy_(a)
                torch.cuda.synchronize()
                ts = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    for _ in range(10):
                        b.copy_(a)
                    torch.cuda.synchronize()
                    ts.append((time.perf_counter() - t0) / 10)
                copy_bw = size / statistics.median(ts) / 1e9
                del a, b
            dist.barrier()
            rows.append({"collective": coll, "bytes": size, "ranks": p,
                         "t_ipc": statistics.median(res["cuda-ipc"]),
                         "t_staged": statistics.median(res["staged"]) if res["staged"] else float("nan"),
                         "runs_ipc": res["cuda-ipc"], "runs_staged": res["staged"], "copy_GBps": copy_bw})
            out = inp = call = None  # noqa: F841 - free the device buffers before the next size
            torch.cuda.empty_cache()
    rec = g.flight_record()
    dist.destroy()
    q.put((rank, rows, rec))


def model_time(coll: str, p: int, size: int, copy_bw: float, alpha: float) -> float:
    """The device executor's Schedule on one shared GPU, priced from its steps (see the module doc)."""
    from interlink.algorithms import get_schedule
    from interlink.runtime.policy import DEVICE_ALGO

    elt = 4
    n = size // elt
    count = n // p if coll in ("all_gather", "reduce_scatter") else n
    s = get_schedule(coll, DEVICE_ALGO[coll], p, count, 0)
    copied = sum(s.recv_per_rank()) * elt  # every pull is one copy of the bytes received
    reduced = 0
    from interlink.algorithms.schedule import Copy, Reduce

    for prog in s.ranks:
        for rnd in prog:
            for st in rnd.steps:
                if isinstance(st, Reduce):
                    reduced += st.src.count * elt
                elif isinstance(st, Copy) and not (st.src.buffer == "input" and st.dst.buffer == "output"
                                                    and coll in ("all_reduce", "broadcast")):
                    copied += st.src.count * elt
    return s.comm_rounds * alpha + (copied + 1.5 * reduced) / (copy_bw * 1e9)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--collectives", default="all_reduce,all_gather,broadcast")
    ap.add_argument("--sizes", default="1M,4M,16M,64M,256M,1G")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--spread", action="store_true", help="one rank per GPU (round robin) instead of all on GPU 0")
    ap.add_argument("--order", choices=("host", "event"), default=None,
                    help="INTERLINK_CUDA_IPC_ORDER for the ranks (default: interlink's choice: event under MPS)")
    ap.add_argument("--no-staged", action="store_true", help="time cuda-ipc only")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu.py: needs torch with CUDA (pip install torch) and CuPy for cuda-ipc (pip install -e '.[cuda12]')",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu.py: no CUDA GPU here (torch.cuda.is_available() is False): nothing to measure", file=sys.stderr)
        return 2

    args = {"collectives": a.collectives.split(","), "sizes": [parse_size(s) for s in a.sizes.split(",")],
            "runs": a.runs, "spread": a.spread,
            "paths": ("cuda-ipc",) if a.no_staged else ("cuda-ipc", "staged")}
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "INTERLINK_SECRET": os.urandom(8).hex(),
           "INTERLINK_CUDA_IPC_MIN_BYTES": "0"}
    if a.order:
        env["INTERLINK_CUDA_IPC_ORDER"] = a.order
    from interlink.transport.cuda_ipc import mps_active

    order = a.order or "event"
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, a.ranks, env, args, q)) for r in range(a.ranks)]
    for pr in procs:
        pr.start()
    got = {}
    deadline = time.monotonic() + 3600
    while len(got) < a.ranks and time.monotonic() < deadline:
        try:
            r, rows, rec = q.get(timeout=5)
            got[r] = (rows, rec)
        except Exception:  # noqa: BLE001
            if any(pr.exitcode not in (None, 0) for pr in procs):
                print("a rank failed", [pr.exitcode for pr in procs], file=sys.stderr)
                for pr in procs:
                    pr.kill()
                return 1
    for pr in procs:
        pr.join(30)
    rows = got[0][0]
    p = a.ranks
    dev = torch.cuda.get_device_name(0)
    print(f"# interlink GPU collectives: {p} ranks on {'one ' + dev if not a.spread else dev + ' x' + str(torch.cuda.device_count())}"
          f", torch {torch.__version__}, MPS {'on' if mps_active() else 'off'}, order {order}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    # alpha: per-round cost, fitted at the smallest size of all_reduce (or of the first collective)
    first = min(rows, key=lambda r: r["bytes"])
    hdr = (f"{'collective':>12} {'size':>6} {'ipc us':>10} {'staged us':>10} {'ipc busbw':>10} {'staged':>8} "
           f"{'ipc/staged':>10} {'copy GB/s':>10} {'of copy':>8} {'of copy/p':>9} {'model us':>9}")
    print(hdr)
    alpha = 0.0
    from interlink.algorithms import get_schedule
    from interlink.runtime.policy import DEVICE_ALGO

    s0 = get_schedule(first["collective"], DEVICE_ALGO[first["collective"]], p,
                      (first["bytes"] // 4) // (p if first["collective"] in ("all_gather", "reduce_scatter") else 1))
    t_bw = model_time(first["collective"], p, first["bytes"], first["copy_GBps"], 0.0)
    alpha = max(0.0, (first["t_ipc"] - t_bw) / max(1, s0.comm_rounds))
    for r in rows:
        from interlink.algorithms.schedule import busbw_factor

        f = busbw_factor(r["collective"], p)
        bus_ipc = r["bytes"] / r["t_ipc"] / 1e9 * f
        bus_st = r["bytes"] / r["t_staged"] / 1e9 * f
        r["busbw_ipc"], r["busbw_staged"] = bus_ipc, bus_st
        r["model_t"] = model_time(r["collective"], p, r["bytes"], r["copy_GBps"], alpha)
        r["of_copy"] = bus_ipc / r["copy_GBps"]
        r["of_bound"] = bus_ipc / (r["copy_GBps"] / p)
        print(f"{r['collective']:>12} {fmt(r['bytes']):>6} {r['t_ipc'] * 1e6:>10.1f} {r['t_staged'] * 1e6:>10.1f} "
              f"{bus_ipc:>10.1f} {bus_st:>8.2f} {r['t_staged'] / r['t_ipc']:>9.1f}x {r['copy_GBps']:>10.0f} "
              f"{r['of_copy']:>7.0%} {r['of_bound']:>8.0%} {r['model_t'] * 1e6:>9.1f}")
    print(f"# alpha (per round, fitted at {fmt(first['bytes'])} {first['collective']}): {alpha * 1e6:.1f} us")
    if a.json:
        os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
        with open(a.json, "w") as fh:
            json.dump({"device": dev, "ranks": p, "spread": a.spread, "mps": mps_active(), "order": order, "host": platform.node(),
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "alpha_s": alpha,
                       "rows": rows, "flight_record_rank0": got[0][1]}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
