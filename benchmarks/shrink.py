"""Shrink: how long the survivors of a SIGKILLed rank take to their first correct collective.

    python benchmarks/shrink.py [--ranks 3,4] [--transport shm,tcp] [--kill last,0] [--runs 5]
                                [--api interlink,torch] [--form agree] [--json out.json]

Per configuration (ranks x transport x killed rank x API) and run: the ranks start as real processes on
this host (like `interlink run`, but without a supervisor, which would stop the job at the first death),
join, run 200 warm-up all_reduces of 1000 float64, then the killed rank waits until every other rank is
ready, notes the time and SIGKILLs itself while the others loop on all_reduce. Each survivor notes when
its call raised (PeerLostError), shrinks (interlink: `interlink.shrink()`, the survivors agreeing on who is
gone, or `--form exclude`: `shrink(exclude=[k])`; torch: `interlink.backends.torch.lost_ranks()` then
`torch.distributed.shrink_group(lost)`), then runs an all_reduce of 1000 float64 on the new group and
checks it against numpy. Reported, median over the runs, of the slowest survivor of each run:

    detect   kill -> the survivor's failed call raised
    shrink   the shrink call itself (agreement + new mesh + host page)
    first    kill -> the first correct collective on the shrunk group returned

Times are wall-clock (time.time(), one host). Exit status 1 if a result was wrong or a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

WARMUP = 200
COUNT = 1000


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def worker(out: str, dead: int, api: str, form: str) -> None:
    import numpy as np

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if api == "torch":
        import datetime

        import torch
        import torch.distributed as dist

        from interlink.backends.torch import lost_ranks

        dist.init_process_group("interlink", timeout=datetime.timedelta(seconds=60))
        x = torch.ones(COUNT, dtype=torch.float64)
        call = lambda: dist.all_reduce(x)  # noqa: E731
    else:
        import interlink as dist

        dist.init(timeout=60)
        x = np.ones(COUNT)
        call = lambda: dist.all_reduce(x)  # noqa: E731
    for _ in range(WARMUP):
        call()
    if rank == dead:
        deadline = time.monotonic() + 60
        while len([f for f in os.listdir(out) if f.startswith("ready")]) < world - 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        with open(os.path.join(out, "killed"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    open(os.path.join(out, f"ready{rank}"), "w").close()
    try:
        for _ in range(10_000_000):
            call()
        raise SystemExit("no failure seen")
    except Exception:  # noqa: BLE001 - PeerLostError (through torch under torch)
        detected = time.time()
    t0 = time.time()
    survivors = [r for r in range(world) if r != dead]
    if api == "torch":
        lost = lost_ranks()
        dist.shrink_group(lost)
        y = torch.full((COUNT,), float(rank), dtype=torch.float64)
        shrunk = time.time()
        dist.all_reduce(y)
        ok = bool((y == float(sum(survivors))).all())
    else:
        g = dist.shrink() if form == "agree" else dist.shrink(exclude=[dead])
        shrunk = time.time()
        y = np.full(COUNT, float(rank))
        g.all_reduce(y)
        ok = bool(np.array_equal(y, np.full(COUNT, float(sum(survivors)))))
    first = time.time()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"detected": detected, "shrink_s": shrunk - t0, "first": first, "ok": ok}, f)
    if api == "torch":
        dist.destroy_process_group()


def one_run(nranks: int, transport: str, dead: int, api: str, form: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(nranks),
                   INTERLINK_SECRET=secrets.token_hex(16), INTERLINK_TRANSPORT=transport)
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", out, str(dead), api, form],
                                  env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
                 for r in range(nranks)]
        end = time.monotonic() + timeout
        logs = {}
        for r, p in enumerate(procs):
            try:
                logs[r] = p.communicate(timeout=max(0.1, end - time.monotonic()))[0].decode(errors="replace")
            except subprocess.TimeoutExpired:
                p.kill()
                logs[r] = p.communicate()[0].decode(errors="replace") + "\n(killed: timeout)"
        survivors = [r for r in range(nranks) if r != dead]
        res = {}
        for r in survivors:
            path = os.path.join(out, f"rank{r}.json")
            if procs[r].returncode != 0 or not os.path.exists(path):
                return {"error": f"rank {r} exit {procs[r].returncode}: {logs[r][-2000:]}"}
            with open(path) as f:
                res[r] = json.load(f)
        with open(os.path.join(out, "killed")) as f:
            killed = float(f.read())
    return {"ok": all(v["ok"] for v in res.values()),
            "detect": max(v["detected"] for v in res.values()) - killed,
            "shrink": max(v["shrink_s"] for v in res.values()),
            "first": max(v["first"] for v in res.values()) - killed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="3,4", help="world sizes, comma-separated (one rank is killed)")
    ap.add_argument("--transport", default="shm,tcp", help="INTERLINK_TRANSPORT values, comma-separated")
    ap.add_argument("--kill", default="last,0", help="the rank killed: 'last', 0, or a rank (comma-separated)")
    ap.add_argument("--api", default="interlink", help="interlink, torch (torch.distributed.shrink_group), or both")
    ap.add_argument("--form", default="agree", choices=("agree", "exclude"),
                    help="interlink: shrink() (the survivors agree on who is lost) or shrink(exclude=[k])")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--json", default=None, help="write every run's figures here")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        out, dead, api, form = args.worker
        worker(out, int(dead), api, form)
        return 0
    rows, bad = [], 0
    print(f"{'api':9} {'ranks':>5} {'transport':9} {'killed':>6} {'runs':>4} {'detect ms':>10} {'shrink ms':>10} "
          f"{'first ms':>9} {'max first':>9}")
    for api in args.api.split(","):
        for n in [int(x) for x in args.ranks.split(",")]:
            for tr in args.transport.split(","):
                for k in args.kill.split(","):
                    dead = n - 1 if k == "last" else int(k)
                    runs = []
                    for _ in range(args.runs):
                        r = one_run(n, tr, dead, api, args.form, args.timeout)
                        if "error" in r or not r["ok"]:
                            bad += 1
                            print(f"  run failed: {r.get('error', 'wrong result')}", file=sys.stderr)
                            continue
                        runs.append(r)
                    row = {"api": api, "ranks": n, "transport": tr, "killed": dead, "runs": runs}
                    rows.append(row)
                    if runs:
                        med = {m: statistics.median(r[m] for r in runs) * 1e3 for m in ("detect", "shrink", "first")}
                        print(f"{api:9} {n:>5} {tr:9} {dead:>6} {len(runs):>4} {med['detect']:>10.1f} "
                              f"{med['shrink']:>10.1f} {med['first']:>9.1f} {max(r['first'] for r in runs) * 1e3:>9.1f}",
                              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
