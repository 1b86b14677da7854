"""The compiled core of the host page's one-shot path against the pure-Python path, in one job.

    interlink run -n 2 benchmarks/hotcore.py [--turns 15] [--block 2000]

For all_reduce (float32, sum, in place), broadcast (root 0), all_gather and all_to_all at 8 B .. 4 KiB of input
(all_to_all: per rank, at least a float32 per peer), blocks
of ``--block`` calls (each rank writes its input before every call, as benchmarks/compare.py does) run
with the core (``c``) and without it (``py``: the cached shapes' core forms set aside and the module-level
Python functions called, not their compiled entries (``__wrapped__``), whose one-entry cache would still
hold the core's form: the same calls take runtime/oneshot.py's Python path, as without the core),
alternating, every turn. Rank 0 prints the median microseconds per call
over the turns and the ratio. INTERLINK_NO_CCORE=1 (or an install without the core) leaves only ``py``.
"""

from __future__ import annotations

import argparse
import statistics
from time import perf_counter

import numpy as np

import interlink as dist


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=15)
    ap.add_argument("--block", type=int, default=2000)
    ap.add_argument("--sizes", default="8,64,512,4096")
    args = ap.parse_args()
    dist.init()
    rank, n = dist.get_rank(), dist.get_world_size()
    from interlink.runtime import api

    g = api._world()
    fast = g._fast
    has_core = fast is not None and getattr(fast, "core", None) is not None
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for name in ("all_reduce", "broadcast", "all_gather", "all_to_all"):
        for nb in sizes:
            count = max(1, nb // 4)
            if name == "all_to_all":
                count = max(n, count - count % n)
            x = np.zeros(count, np.float32)
            out = np.empty(count * (1 if name == "all_to_all" else n), np.float32)
            fns = {}
            for m in ("c", "py"):  # py: the Python function behind the compiled entry (api._entries)
                f = {"all_reduce": dist.all_reduce, "broadcast": dist.broadcast,
                     "all_to_all": dist.all_to_all_single, "all_gather": dist.all_gather_into_tensor}[name]
                fns[m] = getattr(f, "__wrapped__", f) if m == "py" else f
            if name == "all_reduce":
                calls = {m: (lambda f=f: f(x)) for m, f in fns.items()}
            elif name == "broadcast":
                calls = {m: (lambda f=f: f(x, 0)) for m, f in fns.items()}
            else:
                calls = {m: (lambda f=f: f(out, x)) for m, f in fns.items()}
            call = calls["c"]
            for _ in range(200):
                call()
            modes = ("c", "py") if has_core else ("py",)
            times = {m: [] for m in modes}
            for t in range(args.turns):
                for m in (modes if t % 2 == 0 else modes[::-1]):
                    saved = {}
                    if m == "py":
                        for k, sc in fast.shapes.items():
                            if sc and sc.ccore is not None:
                                saved[k] = sc.ccore
                                sc.ccore = None
                    call = calls[m]
                    dist.barrier()
                    t0 = perf_counter()
                    for i in range(args.block):
                        x[0] = i
                        call()
                    times[m].append((perf_counter() - t0) / args.block * 1e6)
                    for k, c in saved.items():
                        fast.shapes[k].ccore = c
            rows.append((name, nb, {m: statistics.median(v) for m, v in times.items()}))
    if rank == 0:
        calls = fast.core.calls if has_core else 0
        print(f"{n} ranks, us per call (median of {args.turns} blocks of {args.block}); core "
              f"{'on' if has_core else 'off'}, its calls on rank 0: {calls}")
        print(f"{'collective':<12}{'bytes':>7}{'c':>9}{'py':>9}{'py/c':>7}")
        for name, nb, med in rows:
            c = med.get("c")
            py = med["py"]
            print(f"{name:<12}{nb:>7}{(f'{c:.2f}' if c else '-'):>9}{py:>9.2f}"
                  f"{(f'{py / c:.2f}' if c else '-'):>7}")
    dist.destroy()


if __name__ == "__main__":
    main()
