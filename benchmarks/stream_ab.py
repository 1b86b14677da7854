"""Streaming stores for copies out of the slots into large outputs, against plain copies, in one job.

    interlink run -n 4 benchmarks/stream_ab.py all_gather 2M,4M,8M,16M [--turns 8] [--fastd]
    interlink run -n 2 benchmarks/stream_ab.py broadcast 2M,4M
    interlink run -n 4 benchmarks/stream_ab.py broadcast 4M,8M --measured

Each turn sets the FastPath's ``stream_min`` (policy ``INTERLINK_STREAM_MIN_BYTES``) to its default
("stream": copies out of the slots into an output of at least that many bytes use transport/stream.py) or
to never ("plain": numpy's copy), and with ``--fastd`` a third setting runs the call by one cross-memory
copy (``fastd``, the slots' limit set to 64 KiB); ``--slots`` lifts the slots' limit to the slot size for
the first two (where fastd would otherwise take the larger sizes). ``--measured`` adds the runtime's own
choice near the threshold ("measured": policy.stream_band, the probe of FastPath.pick re-run every turn, 40
warm-up calls instead of 10 so that the probe ends before the timing) and prints rule / measured ("stream"
is the rule where the outputs reach the threshold, "plain" below it). It clears the call-shape cache and times
60 calls after 10 warm-up calls, each rank's input rewritten before every call outside the timing, max over
ranks (benchmarks/host_ab.py). Rank 0 prints each setting's minimum and median over the turns and the
median of the per-turn ratio plain / stream (> 1: streaming faster). Sizes are the largest buffer of a call
(all_gather: its output).
"""

from __future__ import annotations

import argparse
import statistics
import host_ab

from interlink.cli.bench import parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("collective", choices=["all_gather", "reduce_scatter", "broadcast", "all_reduce"])
    ap.add_argument("sizes", help="bytes of the largest buffer per call, comma-separated (2M,4M)")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--fastd", action="store_true", help="a third setting: one cross-memory copy (fastd)")
    ap.add_argument("--slots", action="store_true", help="stream and plain run the slots up to the slot size")
    ap.add_argument("--measured", action="store_true",
                    help="a third setting: the runtime measures streaming against plain copies (policy.stream_band)")
    args = ap.parse_args()
    dist, r, p, fp = host_ab.start()
    stream_min, mm, mm_ag = fp.stream_min, fp.move_max, fp.move_max_ag
    if args.slots:
        mm = mm_ag = fp.page.fast_max

    def setting(smin: int, limit: int, limit_ag: int, measured: bool = False):
        def apply() -> None:
            fp.stream_min, fp.move_max, fp.move_max_ag = smin, limit, limit_ag
            fp.autotune_stream = measured
            if measured:
                fp.tuning.clear()  # measured again in this turn
        return apply

    settings = {"stream": setting(stream_min, mm, mm_ag), "plain": setting(1 << 62, mm, mm_ag)}
    if args.fastd:
        settings["fastd"] = setting(stream_min, 64 << 10, 64 << 10)
    if args.measured:
        settings["measured"] = setting(stream_min, mm, mm_ag, True)
    for nb, res, ran in host_ab.turns(dist, fp, args.collective, [parse_size(s) for s in args.sizes.split(",")],
                                      settings, args.turns, warm=40 if args.measured else 10, calls=60):
        if r == 0:
            extra = ""
            if args.measured:  # the rule: streaming where the host's outputs reach the threshold
                outs = nb if args.collective == "reduce_scatter" else nb * p  # (sizes: the largest buffer)
                rule = "stream" if outs >= stream_min else "plain"
                extra = "  rule/measured {:.2f} (rule: {})".format(
                    statistics.median(a / b for a, b in zip(res[rule], res["measured"])), rule)
            print(host_ab.line(args.collective, p, nb, res, "plain", "stream", " touched") + extra
                  + f"  ran {sorted(ran)}", flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
