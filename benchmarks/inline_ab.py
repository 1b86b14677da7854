"""The slots' two executors of the same `fast` Schedule, in one job, taking turns: inlined against step by step.

    interlink run -n 2 benchmarks/inline_ab.py broadcast 128K,256K,512K,1M [--turns 6] [--arena]

Each turn sets the FastPath's ``inline_max`` (policy ``INTERLINK_FAST_INLINE_MAX_BYTES``) above the size
(the inlined executor, FastPath.hot) or to the one-shot size (the step-by-step executor, FastPath._program),
clears the call-shape cache, and times 40 calls after 5 warm-up calls, each rank's input rewritten before
every call outside the timing (as an application's is), max over ranks. Rank 0 prints each executor's
minimum and median over the turns and the median of the per-turn ratio program / inline (> 1: inline
faster). Sizes are the largest buffer of a call (all_gather: its output), as in
benchmarks/mpich_same_process.py; they must fit the slots (2 ranks: 2 MiB, all_gather 1 MiB of input).
--arena: inputs from interlink.empty (the step-by-step executor reads them in place).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from interlink.cli.bench import parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("collective", choices=["all_gather", "reduce_scatter", "broadcast"])
    ap.add_argument("sizes", help="bytes of the largest buffer per call, comma-separated (128K,256K)")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--arena", action="store_true", help="inputs in interlink.empty arrays")
    args = ap.parse_args()
    import interlink as dist
    from interlink.runtime import api

    dist.init()
    r, p = dist.get_rank(), dist.get_world_size()
    fp = api._world()._fast
    if fp is None:
        raise SystemExit("needs ranks on one host with the host page (INTERLINK_FAST not 0, shared memory)")
    settings = {"program": fp.max, "inline": 1 << 40}
    for nb in (parse_size(s) for s in args.sizes.split(",")):
        n = max(p, nb // 4 // p * p)
        x, o, blk = np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n // p, np.float32)
        if args.arena:
            x, blk = dist.zeros(n, np.float32), dist.zeros(n // p, np.float32)
        src = blk if args.collective == "all_gather" else x
        call = {"broadcast": lambda: dist.broadcast(x, src=0),
                "all_gather": lambda: dist.all_gather_into_tensor(o, blk),
                "reduce_scatter": lambda: dist.reduce_scatter_tensor(blk, x)}[args.collective]
        res: dict[str, list[float]] = {k: [] for k in settings}
        for _ in range(args.turns):
            for name, lim in settings.items():
                fp.inline_max = lim
                fp.shapes.clear()
                for _ in range(5):
                    src += 1
                    call()
                dist.barrier()
                tot = 0.0
                for _ in range(40):
                    src += 1
                    t = time.perf_counter()
                    call()
                    tot += time.perf_counter() - t
                y = np.array([tot / 40])
                dist.all_reduce(y, op="max")
                res[name].append(float(y[0]) * 1e6)
        ran = {sc.sigb.decode().split()[0] for sc in fp.shapes.values() if sc and sc.schedule is not None}
        if r == 0:
            ratio = statistics.median(a / b for a, b in zip(res["program"], res["inline"]))
            print(f"{args.collective} {p} ranks {nb >> 10:6d} KiB{' arena' if args.arena else ''} "
                  f"({', '.join(sorted(ran))})  " + "  ".join(
                      f"{k}: min {min(v):7.1f} med {statistics.median(v):7.1f} us" for k, v in res.items())
                  + f"  program/inline {ratio:.2f}", flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
