"""What one host allows a copy through shared memory: the cost of writing lines another core holds.

    python benchmarks/coherence.py [--sizes 64K,256K,1M,4M] [--iters 2000]

Two processes share one buffer and take turns, as the two sides of a copy-in/copy-out path do: the
writer copies ``size`` bytes into it, the reader copies them out, again and again. Printed per size:

* local: a numpy copy between two private buffers of this process (both in its own cache);
* writer: the copy into the shared buffer, whose lines the other core has just read (each line's
  other copy must be invalidated first);
* reader: the copy out of it, whose lines the other core has just written.

A path whose bytes go through a shared slot pays writer + reader per call unless the two overlap; a
path where the receiver reads the sender's own buffer (cross-memory attach, or an ``interlink.empty``
arena mapped by the peers) pays the reader side only. benchmarks/RESULTS.md section 18 has the figures
of the project's VM.
"""

from __future__ import annotations

import argparse
import mmap
import os
import time

import numpy as np

from interlink.cli.bench import parse_size


def _pin(cpu: int) -> None:
    try:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) > 1:
            os.sched_setaffinity(0, {cpus[cpu % len(cpus)]})
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64K,256K,1M,4M")
    ap.add_argument("--iters", type=int, default=2000)
    args = ap.parse_args()
    sizes = [parse_size(x) for x in args.sizes.split(",")]
    top = max(sizes)
    mm = mmap.mmap(-1, top + 4096)
    ctl = np.frombuffer(mm, np.int64, 8, 0)  # [turn of the writer, turn of the reader, size, reader ns]
    shared = np.frombuffer(mm, np.uint8, top, 4096)
    pid = os.fork()
    if pid == 0:  # the reader
        _pin(1)
        dst = np.empty(top, np.uint8)
        dst.fill(1)
        k = 0
        while True:
            k += 1
            while ctl[0] < k:
                pass
            nb = int(ctl[2])
            if nb < 0:
                os._exit(0)
            t = time.perf_counter()
            dst[:nb] = shared[:nb]
            ctl[3] += int((time.perf_counter() - t) * 1e9)
            ctl[1] = k
    _pin(0)
    src = np.empty(top, np.uint8)
    src.fill(2)
    local = np.empty(top, np.uint8)
    local.fill(3)
    k = 0
    print("| size | local copy | writer (lines the peer read) | reader (lines the peer wrote) |")
    print("|---|---|---|---|")
    try:
        for nb in sizes:
            n = max(20, min(args.iters, (256 << 20) // nb))
            t = time.perf_counter()
            for _ in range(n):
                local[:nb] = src[:nb]
            tl = (time.perf_counter() - t) / n
            tw = 0.0
            ctl[3] = 0
            for _ in range(n):
                k += 1
                ctl[2] = nb
                t = time.perf_counter()
                shared[:nb] = src[:nb]
                tw += time.perf_counter() - t
                ctl[0] = k
                while ctl[1] < k:
                    pass
            tw /= n
            tr = ctl[3] / n / 1e9
            cell = lambda s: f"{s * 1e6:.1f} us ({nb / s / 1e9:.1f} GB/s)"  # noqa: E731
            print(f"| {nb >> 10} KiB | {cell(tl)} | {cell(tw)} | {cell(tr)} |", flush=True)
    finally:
        k += 1
        ctl[2] = -1
        ctl[0] = k
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
