"""The slots' rotation on and off, in one job, taking turns (benchmarks/RESULTS.md section 19).

    interlink run -n 2 benchmarks/slot_rotation_ab.py broadcast 32K,64K,128K,256K,1M [--turns 8]

A whole run on a shared VM falls into a slow mode now and then, which makes two separate runs hard to
compare. So both settings run inside one job: the FastPath's rotation (``rot_bytes``: 0 = off, 2 MiB)
is switched and its call-shape cache cleared between turns. Each turn is 40 warm-up calls and 150 timed
calls, max over ranks. Rank 0 prints each setting's minimum and median over the turns. Buffers are
written once before timing (not the zero page). Rotation is forced on, even where ranks share cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from interlink.cli.bench import parse_size


def _filled(n: int) -> np.ndarray:
    x = np.empty(n, np.float32)
    x.fill(0)
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("collective", choices=["all_reduce", "reduce_scatter", "all_gather", "broadcast"])
    ap.add_argument("sizes", help="bytes of the largest buffer per call, comma-separated (64K,256K)")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--rotation-bytes", type=int, default=2 << 20)
    args = ap.parse_args()
    os.environ.setdefault("INTERLINK_SLOT_ROTATE", "1")
    import interlink as dist
    from interlink.runtime import api

    dist.init()
    r, p = dist.get_rank(), dist.get_world_size()
    fp = api._world()._fast
    if fp is None:
        raise SystemExit("no host page here (one host, INTERLINK_FAST not 0, shared memory)")
    settings = {"off": 0, "on": args.rotation_bytes}
    for nb in (parse_size(s) for s in args.sizes.split(",")):
        n = max(p, nb // 4 // p * p)
        x, o, blk = _filled(n), _filled(n), _filled(n // p)
        call = {"broadcast": lambda: dist.broadcast(x, src=0),
                "all_reduce": lambda: dist.all_reduce(x),
                "all_gather": lambda: dist.all_gather_into_tensor(o, blk),
                "reduce_scatter": lambda: dist.reduce_scatter_tensor(blk, x)}[args.collective]
        res: dict[str, list[float]] = {k: [] for k in settings}
        for _ in range(args.turns):
            for name, rb in settings.items():
                fp.rot_bytes = rb
                fp.shapes.clear()
                for _ in range(40):
                    call()
                dist.barrier()
                t = time.perf_counter()
                for _ in range(150):
                    call()
                y = np.array([(time.perf_counter() - t) / 150])
                dist.all_reduce(y, op="max")
                res[name].append(float(y[0]) * 1e6)
        if r == 0:
            print(f"{args.collective} {p} ranks {nb >> 10:6d} KiB  " + "  ".join(
                f"{k}: min {min(v):7.1f} med {statistics.median(v):7.1f} us" for k, v in res.items()), flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
