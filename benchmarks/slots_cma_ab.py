"""The host page's slots against one cross-memory copy (``fastd``), in one job, taking turns.

    interlink run -n 2 benchmarks/slots_cma_ab.py all_gather 1M,2M,4M [--turns 8]
    interlink run -n 4 benchmarks/slots_cma_ab.py all_gather 4M,8M,16M

Each turn sets the FastPath's ``move_max`` and ``move_max_ag`` (the limits of the slots: on 2 ranks policy
``INTERLINK_SHM_SLOTS_MAX_BYTES_2`` and ``..._2_AG``, on 3+ the slot size and ``..._AG``) to the first's
default (on 2 ranks the slots up to 2 MiB, on 3+ up to the slot size) or to 64 KiB (``fastd`` above it), clears
the call-shape cache, and times 60 calls after 10 warm-up calls, each rank's input rewritten before every
call outside the timing (as an application's is), max over ranks. Rank 0 prints each setting's minimum
and median over the turns and the median of the per-turn ratio slots / fastd (> 1: fastd faster).
Sizes are the largest buffer of a call (all_gather: its output), as in benchmarks/mpich_same_process.py.
"""

from __future__ import annotations

import argparse
import host_ab

from interlink.cli.bench import parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("collective", choices=["all_gather", "reduce_scatter", "broadcast"])
    ap.add_argument("sizes", help="bytes of the largest buffer per call, comma-separated (1M,2M,4M)")
    ap.add_argument("--turns", type=int, default=8)
    args = ap.parse_args()
    dist, r, p, fp = host_ab.start()
    slots = fp.move_max  # the slots up to their limit (2 ranks: 2 MiB; 3+: the slot size), or fastd above 64 KiB

    def limit(mm: int):
        def apply() -> None:
            fp.move_max = fp.move_max_ag = mm
        return apply

    settings = {"slots": limit(slots), "fastd": limit(64 << 10)}
    for nb, res, _ in host_ab.turns(dist, fp, args.collective, [parse_size(s) for s in args.sizes.split(",")],
                                    settings, args.turns, warm=10, calls=60):
        if r == 0:
            print(host_ab.line(args.collective, p, nb, res, "slots", "fastd", " touched"), flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
