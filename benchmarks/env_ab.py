"""One setting of the runtime against its default, per collective, size and rank count: an A/B of a limit.

    python3 benchmarks/env_ab.py --env INTERLINK_FAST_INLINE_MAX_BYTES=524288 \
        --collectives all_to_all,broadcast,reduce_scatter --sizes 1M,2M --ranks 2,4 --turns 3

Each turn starts one job (``interlink run``) with the default and one with ``--env`` set, alternating, for
every rank count and collective; a job times every size as benchmarks/compare.py does with --touch (each
rank writes its input before every call, outside the timing; each call timed alone; the mean over a block
of calls, max over ranks; the median of 5 blocks). Prints, per cell, the medians over the turns in us
(default / setting) and setting / default (above 1: the setting is slower). Only the public API is used, so
any limit in docs/environment.md can be put to the test this way. ``--json FILE`` writes the runs.
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

RANK_SCRIPT = r'''
import json, os, statistics, sys, time
import numpy as np
import interlink as il
g = il.init()
n, out_rows = g.size, []
for coll in os.environ["AB_COLLECTIVES"].split(","):
    for nb in [int(s) for s in os.environ["AB_SIZES"].split(",")]:
        cnt = max(n, nb // 4 // n * n)
        a = np.zeros(cnt, np.float32)
        o = np.zeros(cnt * n if coll == "all_gather" else cnt // n if coll == "reduce_scatter" else cnt, np.float32)
        call = {"all_reduce": lambda: g.all_reduce(a), "broadcast": lambda: g.broadcast(a, src=0),
                "all_gather": lambda: g.all_gather_into_tensor(o, a),
                "reduce_scatter": lambda: g.reduce_scatter_tensor(o, a),
                "all_to_all": lambda: g.all_to_all_single(o, a)}[coll]
        iters = int(min(500, max(10, (64 << 20) // max(cnt * 4, 1))))
        for k in range(max(20, iters // 10)):
            a.fill(k % 7)
            call()
        blocks = []
        for _ in range(5):
            g.barrier()
            took = 0.0
            for k in range(iters):
                a.fill(k % 7)
                t0 = time.perf_counter()
                call()
                took += time.perf_counter() - t0
            t = np.array([took / iters])
            g.all_reduce(t, op=il.ReduceOp.MAX)
            blocks.append(float(t[0]))
        out_rows.append({"collective": coll, "bytes": cnt * 4, "us": statistics.median(blocks) * 1e6})
if g.rank == 0:
    with open(os.environ["AB_OUT"], "w") as f:
        json.dump(out_rows, f)
il.destroy()
'''


def size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def human(n: int) -> str:
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", required=True, action="append", metavar="NAME=VALUE",
                    help="the setting under test (repeat for several variables set together)")
    ap.add_argument("--collectives", default="all_reduce,broadcast,all_gather,reduce_scatter,all_to_all")
    ap.add_argument("--sizes", default="64K,1M", help="bytes of a rank's input, comma-separated (K, M suffixes)")
    ap.add_argument("--ranks", default="2", help="rank counts, comma-separated")
    ap.add_argument("--turns", type=int, default=3, help="jobs per setting and rank count (default 3)")
    ap.add_argument("--json", metavar="FILE", help="write every run's figures here")
    args = ap.parse_args()
    setting = dict(kv.split("=", 1) for kv in args.env)
    ranks = [int(r) for r in args.ranks.split(",")]
    sizes = [size(s) for s in args.sizes.split(",")]
    got: dict[tuple, dict[str, list[float]]] = {}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "rank.py")
        with open(script, "w") as f:
            f.write(RANK_SCRIPT)
        jobs = len(ranks) * args.turns * 2
        done, t0 = 0, time.monotonic()
        for turn in range(args.turns):
            for p in ranks:
                for side in ("default", "setting") if turn % 2 == 0 else ("setting", "default"):
                    env = dict(os.environ, AB_COLLECTIVES=args.collectives,
                               AB_SIZES=",".join(map(str, sizes)), AB_OUT=os.path.join(tmp, "out.json"))
                    for k in setting:
                        env.pop(k, None)
                    if side == "setting":
                        env.update(setting)
                    cmd = [sys.executable, "-m", "interlink", "run", "-n", str(p), script]
                    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    if r.returncode != 0:
                        sys.stderr.write(r.stdout + r.stderr)
                        return r.returncode
                    with open(env["AB_OUT"]) as f:
                        rows = json.load(f)
                    for row in rows:
                        got.setdefault((row["collective"], p, row["bytes"]), {}).setdefault(side, []).append(row["us"])
                    runs.append({"turn": turn, "ranks": p, "side": side, "rows": rows})
                    done += 1
                    left = (time.monotonic() - t0) / done * (jobs - done)
                    print(f"[{done}/{jobs}] {p} ranks, {side}: done; about {left:.0f} s left", file=sys.stderr,
                          flush=True)
    print(f"setting: {' '.join(args.env)}\nus per call, the median of {args.turns} jobs each; ratio: setting / "
          "default (above 1: the setting is slower)")
    head = f"{'collective':<15}{'ranks':>6}{'bytes':>8}{'default us':>13}{'setting us':>13}{'ratio':>8}"
    print(head)
    for (coll, p, nb), sides in got.items():
        d, s = statistics.median(sides["default"]), statistics.median(sides["setting"])
        print(f"{coll:<15}{p:>6}{human(nb):>8}{d:>13.1f}{s:>13.1f}{s / d:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setting": setting, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
