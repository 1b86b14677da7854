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
import host_ab

from interlink.cli.bench import parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("collective", choices=["all_gather", "reduce_scatter", "broadcast"])
    ap.add_argument("sizes", help="bytes of the largest buffer per call, comma-separated (128K,256K)")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--arena", action="store_true", help="inputs in interlink.empty arrays")
    args = ap.parse_args()
    dist, r, p, fp = host_ab.start()
    one_shot = fp.max

    def limit(lim: int):
        def apply() -> None:
            fp.inline_max = lim
        return apply

    settings = {"program": limit(one_shot), "inline": limit(1 << 40)}
    for nb, res, ran in host_ab.turns(dist, fp, args.collective, [parse_size(s) for s in args.sizes.split(",")],
                                      settings, args.turns, warm=5, calls=40, arena=args.arena):
        if r == 0:
            extra = (" arena" if args.arena else "") + f" ({', '.join(sorted(ran))})"
            print(host_ab.line(args.collective, p, nb, res, "program", "inline", extra), flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
