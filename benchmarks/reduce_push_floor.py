"""The floor of the reduce-once push all_reduce (``fastd``), written by hand: no control words, no executor.

    python benchmarks/reduce_push_floor.py --ranks 4 --bytes 84M [--piece 256K] [--calls 12] [--out-of-place]
        [--workers 2] [--sleep]

P forked processes, each with its own (private) buffer as torch or numpy gives one, reduce their 1/P slice a
piece at a time: the own piece copied into an accumulator, each peer's piece read by cross-memory attach and
added, the result written into the own buffer and pushed into every peer's by cross-memory attach, then a
spinning barrier. In place by default (what DDP's buckets are). ``--workers W`` leaves the work to W of the
ranks (one per core), the others waiting in the barrier (``--sleep``: polling with 0.2 ms sleeps instead of
sched_yield). Prints rank 0's median and minimum call time (the first tenth of the calls skipped). Compare
with ``interlink run -n P`` of an in-place all_reduce of the same size (benchmarks/RESULTS.md section 28).
"""

from __future__ import annotations

import argparse
import mmap
import os
import time

import numpy as np

from interlink.cli.bench import parse_size
from interlink.transport import cma


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--bytes", default="84M")
    ap.add_argument("--piece", default="256K")
    ap.add_argument("--calls", type=int, default=12)
    ap.add_argument("--out-of-place", action="store_true")
    ap.add_argument("--workers", type=int, default=0, help="ranks that do the work (default: all)")
    ap.add_argument("--sleep", action="store_true")
    args = ap.parse_args()
    p, n, ps = args.ranks, parse_size(args.bytes) // 4, parse_size(args.piece) // 4
    inplace = not args.out_of_place
    flags = np.frombuffer(mmap.mmap(-1, 1 << 16), np.int64)
    pids, r = [os.getpid()], 0
    for i in range(1, p):
        c = os.fork()
        if c == 0:
            r = i
            break
        pids.append(c)
    flags[512 + r] = os.getpid()
    cma.allow_peers()
    x, out = np.ones(n, np.float32), np.zeros(n, np.float32)
    flags[64 + 2 * r], flags[65 + 2 * r] = cma.address(out), cma.address(x)
    k = 0

    def barrier() -> None:
        nonlocal k
        k += 1
        flags[r] = k
        for j in range(p):
            while flags[j] < k:
                if args.sleep:
                    time.sleep(0.0002)
                else:
                    os.sched_yield()

    barrier()
    pid = [int(flags[512 + j]) for j in range(p)]
    pout = [int(flags[64 + 2 * j]) for j in range(p)]
    pin = [int(flags[65 + 2 * j]) for j in range(p)]
    w = args.workers or p
    stride = p // w
    if r % stride == 0 and r // stride < w:
        wi, sl = r // stride, n // w
        lo0, hi0 = wi * sl, ((wi + 1) * sl if wi < w - 1 else n)
    else:
        lo0 = hi0 = 0
    acc, tmp = np.empty(ps, np.float32), np.empty(ps, np.float32)
    aa, ta = cma.address(acc), cma.address(tmp)
    total = []
    for call in range(args.calls):
        if inplace:
            if call % 4 == 0:
                x.fill(1.0)  # sums stay finite
        else:
            x *= 1.0  # rewritten, as an application's input is
        barrier()
        t0 = time.perf_counter()
        for lo in range(lo0, hi0, ps):
            hi = min(hi0, lo + ps)
            m, nb = hi - lo, (hi - lo) * 4
            a = acc[:m]
            np.copyto(a, x[lo:hi])
            for d in range(1, p):
                j = (r + d) % p
                cma.read(pid[j], pin[j] + lo * 4, ta, nb)
                np.add(a, tmp[:m], out=a)
            (x if inplace else out)[lo:hi] = a
            for d in range(1, p):
                j = (r + d) % p
                cma.write(pid[j], (pin[j] if inplace else pout[j]) + lo * 4, aa, nb)
        barrier()
        total.append(time.perf_counter() - t0)
    if r == 0:
        sk = max(1, args.calls // 10)
        print(f"reduce-once push by hand, {p} ranks ({w} working), {n * 4 / 1e6:.0f} MB, "
              f"{'in place' if inplace else 'out of place'}, pieces of {ps * 4 >> 10} KiB: "
              f"median {np.median(total[sk:]) * 1e3:.1f} ms, min {min(total) * 1e3:.1f} ms")
        for c in pids[1:]:
            os.waitpid(c, 0)
    else:
        os._exit(0)


if __name__ == "__main__":
    main()
