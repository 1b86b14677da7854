"""Per-call time of one collective through the host page, for before/after comparisons of the executor.

    interlink run -n 4 benchmarks/host_calls.py all_reduce 128K,256K,1M [--iters 300] [--reps 5]

Each rank calls the collective on float32 zeros (the same buffers every call: no overflow, no page
faults; written once first, as nccl-tests does: a buffer never written is the kernel's shared zero page,
which a copy reads from cache at any size) 50 times to warm up, then ``--reps`` times ``--iters`` calls between barriers; rank 0 prints the
median and the minimum of the per-call means. For A/B runs of two checkouts, alternate them and keep
every line: on a shared VM a whole run falls into a slow mode now and then, so compare minima and
medians of minima over several alternations (benchmarks/RESULTS.md section 16).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from interlink.cli.bench import parse_size


def _zeros(n: int) -> np.ndarray:
    """n float32 zeros in pages of their own (written, not the zero page np.zeros maps)."""
    x = np.empty(n, np.float32)
    x.fill(0)
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("collective", choices=["all_reduce", "reduce_scatter", "all_gather", "broadcast"])
    ap.add_argument("sizes", help="bytes of the largest buffer per call, comma-separated (128K,1M)")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    import interlink as dist

    dist.init()
    r, p = dist.get_rank(), dist.get_world_size()
    for nb in (parse_size(x) for x in args.sizes.split(",")):
        n = max(p, nb // 4 // p * p)
        x = _zeros(n)
        if args.collective == "reduce_scatter":
            o = _zeros(n // p)
            def call(): dist.reduce_scatter_tensor(o, x)  # noqa: E704
        elif args.collective == "all_gather":
            x, o = _zeros(n // p), _zeros(n)
            def call(): dist.all_gather_into_tensor(o, x)  # noqa: E704
        elif args.collective == "broadcast":
            def call(): dist.broadcast(x, src=0)  # noqa: E704
        else:
            def call(): dist.all_reduce(x)  # noqa: E704
        for _ in range(50):
            call()
        res = []
        for _ in range(args.reps):
            dist.barrier()
            t = time.perf_counter()
            for _ in range(args.iters):
                call()
            res.append((time.perf_counter() - t) / args.iters * 1e6)
        if r == 0:
            print(f"{args.collective} {p} ranks {nb >> 10:6d} KiB  median {sorted(res)[len(res) // 2]:7.1f} us  "
                  f"min {min(res):7.1f}", flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
