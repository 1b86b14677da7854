"""The intra-host vs inter-host cliff, and hierarchical vs flat ring across emulated hosts.

    sudo python benchmarks/emulated_hosts.py [--rate 1gbit] [--sizes 1M,4M,16M] [--plot cliff.png] [--json out.json]

Runs all_reduce (float32) with INTERLINK_ALGO=ring and =hierarchical on
  (a) 1 host x 4 ranks (shared memory), and
  (b) 2 emulated hosts x 2 ranks joined by a shaped link (`interlink run --emulate-hosts 2 ...`),
and prints time and busbw per size, the hierarchical/ring speed-up and, where the cost model can
describe the emulated topology, interlink's prediction next to the measurement.
Needs root and iproute2 for (b) (network namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def parse_size(s: str) -> int:
    s = s.strip().upper().removesuffix("B")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


# ---- inside every rank -------------------------------------------------------------------------

def worker(sizes: list[int], algos: list[str], out: str) -> None:
    import numpy as np

    import interlink as dist

    g = dist.init(timeout=600)
    rows = []
    for nbytes in sizes:
        a = np.zeros(nbytes // 4, dtype=np.float32)
        for algo in algos:
            iters = max(2, min(10, (64 << 20) // max(nbytes, 1)))
            dist.all_reduce(a, algorithm=algo)  # warm-up (and plan)
            ts = []
            for _ in range(3):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(a, algorithm=algo)
                t = np.array([(time.perf_counter() - t0) / iters])
                dist.all_reduce(t, op="max")
                ts.append(float(t[0]))
            t = statistics.median(ts)
            p = dist.get_world_size()
            rows.append({"size": nbytes, "algorithm": algo, "time_us": t * 1e6, "nranks": p,
                         "layout": list(g.host_layout()),
                         "busbw_gbps": nbytes / t / 1e9 * 2 * (p - 1) / p})
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy()


# ---- the driver --------------------------------------------------------------------------------

def run_case(launch: list[str], sizes: list[int], algos: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        cmd = [sys.executable, "-m", "interlink", "run", *launch, HERE, "--worker", "--out", out,
               "--sizes", ",".join(map(str, sizes)), "--algos", ",".join(algos)]
        subprocess.run(cmd, check=True, timeout=1800)
        with open(out) as f:
            return json.load(f)


def topology_spec(layout: tuple[int, int], rate: str) -> str:
    """interlink's topology spec for a layout of (hosts, ranks per host): one CPU host, or H emulated
    hosts sharing this machine's cores (each gets cores / H), joined by a ``rate`` link."""
    hosts, per = layout
    cores = os.cpu_count() or 1
    if hosts <= 1:
        return f"1xcpu-host:ranks={per},cores={cores}"
    return f"{hosts}xcpu-host:ranks={per},cores={max(1, cores // hosts)},net={rate}"


def predict_rows(rows: list[dict], rate: str) -> None:
    """Add the cost model's prediction for the row's topology and algorithm (built-in host parameters
    plus this host's calibrated profile, if any)."""
    from interlink.model import predict

    for r in rows:
        spec = topology_spec(tuple(r["layout"]), rate)
        try:
            pr = predict("all_reduce", r["size"], spec, algorithm=r["algorithm"])
            r["pred_us"] = pr.time_us
            r["topology"] = spec
        except Exception as e:  # the model does not know this case: say so, measure anyway
            r["pred_note"] = str(e)[:80]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--algos", default="ring,hierarchical")
    ap.add_argument("--sizes", default="1M,4M,16M")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None)
    a = ap.parse_args(argv)
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    algos = a.algos.split(",")
    if a.worker:
        worker(sizes, algos, a.out)
        return 0
    from interlink.launch.netns import parse_rate

    parse_rate(a.rate)  # a bad --rate fails here, before anything runs
    one = run_case(["-n", "4"], sizes, algos)
    two = run_case(["--emulate-hosts", "2", "--nproc-per-host", "2", "--link-rate", a.rate], sizes, algos)
    predict_rows(one, a.rate)
    predict_rows(two, a.rate)
    print(f"# all_reduce float32, 4 ranks: 1 host x 4 (shm) vs 2 emulated hosts x 2 over {a.rate} "
          f"({time.strftime('%Y-%m-%d %H:%M')})")
    print("| layout | size | algorithm | time (ms) | busbw (GB/s) | predicted (ms) | measured/predicted |")
    print("|---|---|---|---|---|---|---|")
    for rows in (one, two):
        for r in rows:
            pred = r.get("pred_us")
            print(f"| {r['layout'][0]}x{r['layout'][1]} | {r['size'] >> 20} MiB | {r['algorithm']} | "
                  f"{r['time_us'] / 1e3:.2f} | {r['busbw_gbps']:.3f} | "
                  f"{pred / 1e3:.2f} | {r['time_us'] / pred:.2f} |" if pred else
                  f"| {r['layout'][0]}x{r['layout'][1]} | {r['size'] >> 20} MiB | {r['algorithm']} | "
                  f"{r['time_us'] / 1e3:.2f} | {r['busbw_gbps']:.3f} | - | - |")
    for nbytes in sizes:
        t = {r["algorithm"]: r["time_us"] for r in two if r["size"] == nbytes}
        if "ring" in t and "hierarchical" in t:
            print(f"# 2 hosts, {nbytes >> 20} MiB: hierarchical is {t['ring'] / t['hierarchical']:.2f}x faster "
                  f"than ring (ideal 1.5x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"one_host": one, "two_hosts": two, "rate": a.rate}, f, indent=1)
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for rows, label in ((one, "1 host x 4 ranks (shm)"), (two, f"2 hosts x 2 ranks ({a.rate})")):
            for algo in algos:
                pts = sorted((r["size"], r["busbw_gbps"]) for r in rows if r["algorithm"] == algo)
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=f"{label}, {algo}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("all_reduce busbw (GB/s)")
        ax.set_title("the intra-host to inter-host cliff")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
