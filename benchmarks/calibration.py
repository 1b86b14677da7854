"""How well the calibrated cost model predicts this host: all_reduce, measured vs predicted.

    python benchmarks/calibration.py [--calibrate] [--ranks 2,4] [--min 4K] [--max 64M] [--repeat 3]
                                     [--json benchmarks/results/calibration.json]
                                     [--plot benchmarks/results/calibration.png]

First makes sure this host has a profile (``interlink bench --calibrate``; ``--calibrate`` redoes it),
then sweeps float32 all_reduce from --min to --max (x2) on 2 and 4 local ranks over shared memory,
two ways per size:

* ``default``: ``all_reduce(x)`` as a user calls it: the runtime's own path (the one-shot shared-memory
  path for small sizes, the two-phase shared-memory all_reduce of 3+ ranks up to a few MiB, else the
  tuner's algorithm; read back from the group's flight recorder), predicted for that same path;
* ``tuned``: ``all_reduce(x, algorithm=A)`` with A the tuner's choice for the size (the Schedule path
  every group other than an all-local world group takes), predicted for A.

Each point is the median over --repeat runs (interleaved over the series, each started when the
machine is quiet: --quiet-wait) of the median of 5 repetitions (each the max over ranks).
Prints measured and predicted time and their ratio per point, the share of points within 25%, and
writes the raw figures (JSON) and a plot of both curves per rank count (PNG, matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

from interlink.bench import calibrate as cal
from interlink.model import predict
from interlink.model.params import host_profile, profile_path
from interlink.model.tuner import choose_for_group, group_topology
from interlink.algorithms import registry
from interlink.sim import simulate_collective


def parse_size(s: str) -> int:
    s = s.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def human(n: int) -> str:
    for unit, m in (("M", 2**20), ("K", 2**10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calibrate", action="store_true", help="calibrate again even if a profile exists")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--min", default="4K")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quiet-wait", type=float, default=30.0,
                    help="before each series, wait up to this many seconds for a quiet machine (default 30)")
    ap.add_argument("--json", default="benchmarks/results/calibration.json")
    ap.add_argument("--plot", default="benchmarks/results/calibration.png")
    args = ap.parse_args(argv)
    ranks = [int(r) for r in args.ranks.split(",")]
    sizes = []
    s = parse_size(args.min)
    while s <= parse_size(args.max):
        sizes.append(s)
        s *= 2

    t_start = time.time()
    prof = host_profile(reload=True)
    if prof is None or args.calibrate:
        print(f"calibrating this host (profile: {profile_path()}) ...", file=sys.stderr, flush=True)
        prof, samples = cal.calibrate(log=lambda m: print(m, file=sys.stderr, flush=True))
        print("\n".join(cal.report_lines(prof, samples)))
    from interlink.model.params import default_params, with_profile

    params = with_profile(default_params(), prof)
    print(f"# profile: {prof.path or profile_path()} ({prof.source}); fit: "
          + ", ".join(f"{k} median {100 * v['median_rel_err']:.0f}%" for k, v in sorted(prof.fits.items())))

    results: list[dict] = []
    plans: dict[tuple[int, str], list] = {}
    for p in ranks:
        plans[(p, "default")] = [("all_reduce", None, n) for n in sizes]
        plans[(p, "tuned")] = [("all_reduce", choose_for_group("all_reduce", n, p, (1, p)), n) for n in sizes]
    runs = {key: [[] for _ in sizes] for key in plans}
    waited = 0.0
    paths = {key: [""] * len(sizes) for key in plans}
    # repetitions outermost: a burst of load on a shared machine then spoils one repetition of every
    # series rather than a whole series
    for rep in range(args.repeat):
        for key, cases in plans.items():
            waited += cal.wait_quiet(args.quiet_wait)
            pts = cal.run_points(key[0], "shm", cases, cal.DEFAULT_REPS)
            for i, pt in enumerate(pts):
                runs[key][i].append(float(np.median(pt["times"])))
                paths[key][i] = pt["algorithm"]  # the path the runtime took (from its flight recorder)
    for (p, mode), cases in plans.items():
        topo = group_topology((1, p), p, int(prof.meta.get("cores") or 0) or None)
        for i, n in enumerate(sizes):
            algo = paths[(p, mode)][i] if mode == "default" else cases[i][1]
            pred = predict("all_reduce", n, topo, algorithm=algo, params=params)
            meas = float(np.median(runs[(p, mode)][i])) * 1e6
            # the simulator on the same calibrated host topology (Schedule paths only: the shared-page
            # fast paths are not Schedules)
            sim_us = None
            if algo in registry.algorithms_for("all_reduce"):
                sim_us = simulate_collective("all_reduce", n, topo, algorithm=algo, params=params).time_us
            results.append({"nranks": p, "mode": mode, "nbytes": n, "algorithm": algo,
                            "measured_us": meas, "predicted_us": pred.time_us,
                            "ratio": pred.time_us / meas, "simulated_us": sim_us,
                            "sim_ratio": None if sim_us is None else sim_us / meas,
                            "runs_us": [r * 1e6 for r in runs[(p, mode)][i]]})

    print(f"# {'ranks':>5} {'mode':>8} {'size':>6} {'path/algorithm':>18} {'measured us':>12} "
          f"{'predicted us':>12} {'pred/meas':>9} {'simulated us':>12} {'sim/meas':>8}")
    for r in results:
        flag = "" if abs(r["ratio"] - 1) <= 0.25 else "  <-- outside 25%"
        sim = (f"{r['simulated_us']:12.1f} {r['sim_ratio']:8.2f}" if r["simulated_us"] is not None
               else f"{'-':>12} {'-':>8}")
        print(f"  {r['nranks']:>5} {r['mode']:>8} {human(r['nbytes']):>6} {r['algorithm']:>18} "
              f"{r['measured_us']:12.1f} {r['predicted_us']:12.1f} {r['ratio']:9.2f} {sim}{flag}")
    within = [abs(r["ratio"] - 1) <= 0.25 for r in results]
    ratios = np.array([r["ratio"] for r in results])
    print(f"# model within 25%: {sum(within)} of {len(within)} points; ratio median {np.median(ratios):.2f}, "
          f"min {ratios.min():.2f}, max {ratios.max():.2f}; {time.time() - t_start:.0f} s "
          f"({waited:.0f} s waiting for a quiet machine)")
    big = [r for r in results if r["sim_ratio"] is not None and r["nbytes"] >= 1 << 20]
    if big:
        sw = [abs(r["sim_ratio"] - 1) <= 0.25 for r in big]
        print(f"# simulator within 25% (1 MiB and up, Schedule paths): {sum(sw)} of {len(sw)} points; "
              f"sim/meas min {min(r['sim_ratio'] for r in big):.2f}, max {max(r['sim_ratio'] for r in big):.2f}")

    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.node(),
            "cpus": os.cpu_count(), "profile": prof.to_dict(), "command": " ".join(sys.argv)}
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
        print(f"# wrote {args.json}")
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("# matplotlib is not installed: no plot", file=sys.stderr)
            return 0
        fig, axes = plt.subplots(1, len(ranks), figsize=(6 * len(ranks), 4.5), squeeze=False)
        for ax, p in zip(axes[0], ranks):
            for mode, color in (("default", "tab:blue"), ("tuned", "tab:orange")):
                rs = [r for r in results if r["nranks"] == p and r["mode"] == mode]
                x = [r["nbytes"] for r in rs]
                ax.plot(x, [r["measured_us"] for r in rs], "o-", color=color, label=f"{mode}: measured")
                ax.plot(x, [r["predicted_us"] for r in rs], "x--", color=color, label=f"{mode}: predicted")
                xs = [r["nbytes"] for r in rs if r["simulated_us"] is not None]
                ax.plot(xs, [r["simulated_us"] for r in rs if r["simulated_us"] is not None], "+:", color=color,
                        label=f"{mode}: simulated")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("all_reduce size (bytes)")
            ax.set_ylabel("time (us)")
            ax.set_title(f"{p} ranks, shared memory, {os.cpu_count()} cores")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle("interlink: measured vs calibrated-model time (median of runs)")
        fig.tight_layout()
        os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
        fig.savefig(args.plot, dpi=110)
        print(f"# wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
