"""Lanes: one TCP connection per NIC. 2 emulated hosts x 2 ranks, shaped links, --nics 1 vs --nics 2.

    sudo -E env PATH="$PATH" python benchmarks/lanes.py [--rate 1gbit] [--size 16M] [--runs 5] [--json out.json]

For each algorithm (ring, and the tuner's default choice) runs `interlink bench all_reduce -b SIZE -e SIZE
--emulate-hosts 2 --nproc-per-host 2 --link-rate RATE --nics K` RUNS times per K, alternating K = 1, 2, and
prints the median busbw (in place and out of place), the 2-NIC/1-NIC ratio, and what `interlink predict`
and `interlink simulate` give for the same topology (2xcpu-host:ranks=2,cores=C,net=RATE,nics=K, the
model column of `interlink bench --emulate-hosts`) with their error against the median.
Needs root and iproute2 (network namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def parse_size(s: str) -> int:
    s = s.strip().upper().removesuffix("B")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


def bench(size: int, rate: str, nics: int, algorithm: str | None, iters: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "b.json")
        cmd = [sys.executable, "-m", "interlink", "bench", "all_reduce", "-b", str(size), "-e", str(size),
               "--iters", str(iters), "-w", "2", "--emulate-hosts", "2", "--nproc-per-host", "2", "--link-rate", rate,
               "--nics", str(nics), "--json", out]
        if algorithm:
            cmd += ["--algorithm", algorithm]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        with open(out) as f:
            doc = json.load(f)
    row = doc["rows"][0]
    assert doc["wrong"] == 0, doc
    return {"algorithm": row["algorithm"], "oop_busbw": row["oop_busbw"] / 1e9, "ip_busbw": row["ip_busbw"] / 1e9,
            "oop_us": row["oop_time_us"], "ip_us": row["ip_time_us"],
            "pred_busbw": (row.get("pred_busbw") or 0) / 1e9}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--size", default="16M")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--algorithms", default="ring,default")
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args()
    size = parse_size(args.size)

    from interlink.model.cost import predict
    from interlink.sim.engine import simulate_collective

    cores = max(1, (os.cpu_count() or 1) // 2)
    results = []
    for algo in args.algorithms.split(","):
        user = None if algo == "default" else algo
        runs: dict[int, list[dict]] = {1: [], 2: []}
        for _ in range(args.runs):
            for k in (1, 2):
                runs[k].append(bench(size, args.rate, k, user, args.iters))
        for k in (1, 2):
            rs = runs[k]
            chosen = sorted({r["algorithm"] for r in rs})
            spec = f"2xcpu-host:ranks=2,cores={cores},net={args.rate},nics={k}"
            name = chosen[0]
            m = predict("all_reduce", size, spec, algorithm=name)
            s = simulate_collective("all_reduce", size, spec, algorithm=name)
            busbw = lambda t_us: size / (t_us * 1e-6) * 2 * 3 / 4 / 1e9  # noqa: E731
            med_t = statistics.median([min(r["oop_us"], r["ip_us"]) for r in rs])
            results.append({
                "algorithm": algo, "ran": chosen, "nics": k, "runs": len(rs),
                "oop_busbw": [round(r["oop_busbw"], 4) for r in rs], "ip_busbw": [round(r["ip_busbw"], 4) for r in rs],
                "median_oop_busbw": statistics.median(r["oop_busbw"] for r in rs),
                "median_ip_busbw": statistics.median(r["ip_busbw"] for r in rs),
                "median_time_us": med_t,
                "model_us": m.time_us, "model_busbw": busbw(m.time_us),
                "sim_us": s.time_us, "sim_busbw": busbw(s.time_us), "topology": spec,
            })
    print(f"# all_reduce {size} B float32, 2 emulated hosts x 2 ranks, {args.rate} per NIC, medians of {args.runs} runs "
          f"(busbw GB/s; model/sim error against the median of the better of in/out of place)")
    print(f"{'algorithm':>10} {'ran':>14} {'nics':>4} {'oop':>7} {'ip':>7} {'time ms':>8} {'model ms':>9} {'err':>6} "
          f"{'sim ms':>8} {'err':>6}")
    for r in results:
        t = r["median_time_us"]
        print(f"{r['algorithm']:>10} {','.join(r['ran']):>14} {r['nics']:>4} {r['median_oop_busbw']:7.3f} "
              f"{r['median_ip_busbw']:7.3f} {t / 1e3:8.1f} {r['model_us'] / 1e3:9.1f} "
              f"{(r['model_us'] - t) / t * 100:+5.1f}% {r['sim_us'] / 1e3:8.1f} {(r['sim_us'] - t) / t * 100:+5.1f}%")
    for algo in args.algorithms.split(","):
        one, two = [r for r in results if r["algorithm"] == algo]
        print(f"# {algo}: 2 NICs / 1 NIC busbw = {two['median_oop_busbw'] / one['median_oop_busbw']:.2f}x out of place, "
              f"{two['median_ip_busbw'] / one['median_ip_busbw']:.2f}x in place")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"size": size, "rate": args.rate, "runs": args.runs, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
