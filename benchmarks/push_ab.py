"""The fastd all_gather's two executors, in one job, taking turns: the inlined push (FastPath._push) against
the step-by-step page program (FastPath._program) that runs the same Schedule.

    interlink run -n 2 benchmarks/push_ab.py 2M,4M,16M [--turns 8] [--slots-max 64K]

Each turn routes the push program's calls to one executor, clears the call-shape cache, and times 40 calls
after 5 warm-up calls, each rank's input rewritten before every call outside the timing, max over ranks.
Sizes are the all_gather's output. --slots-max lowers the slots' all_gather limit (2 ranks:
INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG, 512 KiB of input) so that smaller sizes take fastd too. Rank 0 prints
each executor's minimum and median over the turns and the median per-turn ratio program / push (> 1: the
inlined push faster).
"""

from __future__ import annotations

import argparse
import host_ab

from interlink.cli.bench import parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", help="bytes of the all_gather's output per call, comma-separated (2M,4M)")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--slots-max", default="", help="the slots' all_gather limit (input bytes), e.g. 64K")
    args = ap.parse_args()
    dist, r, p, fp = host_ab.start()
    if args.slots_max:
        fp.move_max_ag = fp.move_max = parse_size(args.slots_max)
    inlined = type(fp)._push.__get__(fp)

    def route(fn):
        def apply() -> None:
            fp._push = fn
        return apply

    settings = {"program": route(fp._program), "push": route(inlined)}
    for nb, res, ran in host_ab.turns(dist, fp, "all_gather", [parse_size(s) for s in args.sizes.split(",")],
                                      settings, args.turns, warm=5, calls=40):
        if r == 0:
            print(host_ab.line("all_gather", p, nb, res, "program", "push", f" ({', '.join(sorted(ran))})"),
                  flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
