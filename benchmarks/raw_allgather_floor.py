"""The floor of a 2-process all_gather by cross-memory attach: what MPICH does, without a library around it.

    python benchmarks/raw_allgather_floor.py [push|pull] [--bytes 1M] [--calls 2000]

Two processes (fork) share one page of flags; each allocates its output and its block, publishes their
addresses, and then, between two spin barriers, copies its block into its own output and moves it into
the peer's output by one process_vm_writev (push) or reads the peer's block by one process_vm_readv
(pull). Rank 0 prints the median and minimum per call and the medians of the two parts. interlink's
`fastd` all_gather does the same two copies plus its control words (benchmarks/RESULTS.md section 25).
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
    ap.add_argument("mode", nargs="?", default="push", choices=["push", "pull"])
    ap.add_argument("--bytes", default="1M", help="the all_gather's output (two blocks)")
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    n = parse_size(args.bytes) // 4
    flags = np.frombuffer(mmap.mmap(-1, 4096), np.int64)
    parent = os.getpid()
    child = os.fork()
    r = 0 if child else 1
    peer = child if r == 0 else parent
    cma.allow_peers()
    out, blk = np.zeros(n, np.float32), np.zeros(n // 2, np.float32)
    flags[8 + 2 * r], flags[9 + 2 * r] = cma.address(out), cma.address(blk)
    k = 0

    def barrier() -> None:
        nonlocal k
        k += 1
        flags[r] = k
        while flags[1 - r] < k:
            pass

    barrier()
    p_out, p_blk = int(flags[8 + 2 * (1 - r)]), int(flags[9 + 2 * (1 - r)])
    total, parts = [], []
    for _ in range(args.calls):
        blk += 1
        barrier()
        t0 = time.perf_counter()
        out[r * blk.size:(r + 1) * blk.size] = blk
        t1 = time.perf_counter()
        if args.mode == "push":
            cma.write(peer, p_out + r * blk.nbytes, cma.address(blk), blk.nbytes)
        else:
            cma.read(peer, p_blk, cma.address(out) + (1 - r) * blk.nbytes, blk.nbytes)
        t2 = time.perf_counter()
        barrier()
        total.append(time.perf_counter() - t0)
        parts.append((t1 - t0, t2 - t1))
    if r == 0:
        skip = args.calls // 10
        local, move = np.median(np.array(parts[skip:]), axis=0) * 1e6
        print(f"{args.mode} {args.bytes}: {np.median(total[skip:]) * 1e6:.1f} us median, {min(total) * 1e6:.1f} min; "
              f"local copy {local:.1f} us, cross-memory {move:.1f} us (medians)")
        os.waitpid(child, 0)
    else:
        os._exit(0)


if __name__ == "__main__":
    main()
