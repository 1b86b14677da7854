"""The 2-rank all_reduce above the one-shot size, in one job, taking turns: the ring over the channels
against the two-phase all_reduce in the host page's slots (`fast2`).

    interlink run -n 2 benchmarks/fast2_ab.py 512K,1M,2M [--turns 6] [--arena]

Each turn sets the FastPath's ``direct_max`` (the largest all_reduce the slots take in two phases) to the
one-shot size (the ring) or to the slot size (fast2), clears the call-shape cache, and times 40 calls after
5 warm-up calls, each rank's input rewritten before every call outside the timing, max over ranks. Rank 0
prints each path's minimum and median over the turns and the median per-turn ratio ring / fast2 (> 1:
fast2 faster).
"""

from __future__ import annotations

import argparse
import host_ab

from interlink.cli.bench import parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", help="bytes per call, comma-separated (512K,1M)")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--arena", action="store_true", help="inputs in interlink.empty arrays")
    args = ap.parse_args()
    dist, r, p, fp = host_ab.start()

    def limit(lim: int):
        def apply() -> None:
            fp.direct_max = lim
        return apply

    settings = {"ring": limit(fp.max), "fast2": limit(fp.page.fast_max)}
    for nb, res, ran in host_ab.turns(dist, fp, "all_reduce", [parse_size(s) for s in args.sizes.split(",")],
                                      settings, args.turns, warm=5, calls=40, arena=args.arena):
        if r == 0:
            extra = (" arena" if args.arena else "") + f" ({', '.join(sorted(ran))})"
            print(host_ab.line("all_reduce", p, nb, res, "ring", "fast2", extra), flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
