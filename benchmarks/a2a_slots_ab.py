"""all_to_all through the slots against one put into each peer's output (fastd), in one job.

    interlink run -n 3 benchmarks/a2a_slots_ab.py 1M,2M,4M [--turns 10]

Each turn sets the FastPath's all_to_all limits (``move_max`` on 2 ranks, ``move_max_a2a`` on 3+: policy
``INTERLINK_SHM_SLOTS_MAX_BYTES_2`` / ``INTERLINK_SHM_SLOTS_MAX_BYTES_A2A``) to the slot size ("slots") or
to 1 KiB ("fastd"), clears the call-shape cache and times 60 calls after 10 warm-up calls, each rank's
input rewritten before every call outside the timing, max over ranks (benchmarks/host_ab.py). Rank 0
prints each setting's minimum and median over the turns and the median of the per-turn ratio slots /
fastd (< 1: the slots faster). Sizes are a rank's input (benchmarks/RESULTS.md section 30).
"""

from __future__ import annotations

import argparse

import host_ab

from interlink.cli.bench import parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", help="bytes of a rank's input per call, comma-separated (1M,2M)")
    ap.add_argument("--turns", type=int, default=10)
    args = ap.parse_args()
    dist, r, p, fp = host_ab.start()
    mm, mm_a2a = fp.move_max, fp.move_max_a2a

    def setting(limit: int):
        def apply() -> None:
            fp.move_max, fp.move_max_a2a = (limit, mm_a2a) if p == 2 else (mm, limit)
        return apply

    settings = {"slots": setting(fp.page.fast_max), "fastd": setting(1024)}
    for nb, res, ran in host_ab.turns(dist, fp, "all_to_all", [parse_size(s) for s in args.sizes.split(",")],
                                      settings, args.turns, warm=10, calls=60):
        if r == 0:
            print(host_ab.line("all_to_all", p, nb, res, "slots", "fastd", " touched") + f"  ran {sorted(ran)}",
                  flush=True)
    fp.move_max, fp.move_max_a2a = mm, mm_a2a
    dist.destroy()


if __name__ == "__main__":
    main()
