"""2 ranks: the host page's slots against one cross-memory copy (``fastd``), in one job, taking turns.

    interlink run -n 2 benchmarks/slots_cma_ab.py all_gather 1M,2M,4M [--turns 8]

Each turn sets the FastPath's ``move_max`` and ``move_max_ag`` (the 2-rank limits of the slots, policy
``INTERLINK_SHM_SLOTS_MAX_BYTES_2`` and ``..._2_AG``) to the first's default (the slots up to 2 MiB) or to
64 KiB (``fastd`` above it), clears
the call-shape cache, and times 60 calls after 10 warm-up calls, each rank's input rewritten before every
call outside the timing (as an application's is), max over ranks. Rank 0 prints each setting's minimum
and median over the turns and the median of the per-turn ratio slots / fastd (> 1: fastd faster).
Sizes are the largest buffer of a call (all_gather: its output), as in benchmarks/mpich_same_process.py.
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
    ap.add_argument("sizes", help="bytes of the largest buffer per call, comma-separated (1M,2M,4M)")
    ap.add_argument("--turns", type=int, default=8)
    args = ap.parse_args()
    import interlink as dist
    from interlink.runtime import api

    dist.init()
    r, p = dist.get_rank(), dist.get_world_size()
    fp = api._world()._fast
    if fp is None or p != 2:
        raise SystemExit("needs 2 ranks on one host with the host page (INTERLINK_FAST not 0, shared memory)")
    settings = {"slots": fp.move_max, "fastd": 64 << 10}  # slots up to 2 MiB (by default), or fastd
    for nb in (parse_size(s) for s in args.sizes.split(",")):
        n = max(p, nb // 4 // p * p)
        x, o, blk = np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n // p, np.float32)
        src = blk if args.collective == "all_gather" else x
        call = {"broadcast": lambda: dist.broadcast(x, src=0),
                "all_gather": lambda: dist.all_gather_into_tensor(o, blk),
                "reduce_scatter": lambda: dist.reduce_scatter_tensor(blk, x)}[args.collective]
        res: dict[str, list[float]] = {k: [] for k in settings}
        for _ in range(args.turns):
            for name, mm in settings.items():
                fp.move_max = fp.move_max_ag = mm
                fp.shapes.clear()
                for _ in range(10):
                    src += 1
                    call()
                dist.barrier()
                tot = 0.0
                for _ in range(60):
                    src += 1
                    t = time.perf_counter()
                    call()
                    tot += time.perf_counter() - t
                y = np.array([tot / 60])
                dist.all_reduce(y, op="max")
                res[name].append(float(y[0]) * 1e6)
        if r == 0:
            ratio = statistics.median(a / b for a, b in zip(res["slots"], res["fastd"]))
            print(f"{args.collective} 2 ranks {nb >> 10:6d} KiB touched  " + "  ".join(
                f"{k}: min {min(v):7.1f} med {statistics.median(v):7.1f} us" for k, v in res.items())
                + f"  slots/fastd {ratio:.2f}", flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
