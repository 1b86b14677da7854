"""``interlink simulate``: run a collective's Schedule through the flow-level simulator on a topology.

    interlink simulate all_reduce --size 1G --topology 128xdgx-h100
    interlink simulate all_reduce --size 1G --topology 16xdgx-h100:oversub=4 --algorithm ring --json
    interlink simulate all_to_all --size 256M --topology 16xdgx-h100 --algorithm pairwise --trace a2a.json
    interlink simulate all_reduce --size 1G --topology dgx-h100 --sweep-nodes 1,2,4,...,1024 --plot cliff.png

Prints the simulated time, algbw and busbw (nccl-tests definitions, GB/s = 1e9 B/s), the contention-free
time of the same rounds (each flow alone on its path) and the slowdown, the rounds and the busiest links.
``--sweep-nodes`` simulates the collective on N copies of a machine for each N (``a,b,...,z`` continues
the progression a, b, ... up to z) with ring, tree and hierarchical (or ``--algorithm A,B``) and prints
busbw and scaling efficiency (busbw / busbw on the first node count) per algorithm: the cliff from
NVLink inside a node to the network between nodes.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any

from .bench import parse_collective, parse_size
from .predict import _time

_SWEEP_DEFAULT = ("ring", "tree", "hierarchical")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "simulate",
        help="simulate a collective on a topology (flows over links, max-min fair sharing)",
        description="Simulate a collective's Schedule on a topology: every message is a flow over its path's "
                    "links, links are shared max-min fairly among concurrent flows, rounds are barriers.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Sizes take binary K/M/G suffixes (64K = 65536), as nccl-tests: the size is the bytes of the largest "
               "buffer. Topologies: a preset (dgx-h100), a cluster (16xdgx-h100:oversub=2) or a .yaml/.json file.",
    )
    p.add_argument("collective", type=parse_collective, help="all_reduce, broadcast, all_gather, all_to_all, ...")
    p.add_argument("--size", "-s", type=parse_size, required=True, metavar="BYTES",
                   help="bytes of the largest buffer (8, 64K, 1M, 1G)")
    p.add_argument("--topology", "-t", required=True, metavar="SPEC",
                   help="preset, NxPRESET[:oversub=R,net=LINK] cluster, or file; with --sweep-nodes: the machine")
    p.add_argument("--algorithm", "-a", default=None, metavar="A",
                   help="algorithm (default ring where there is one); with --sweep-nodes a comma list "
                        "(default ring,tree,hierarchical)")
    p.add_argument("--nranks", "-n", type=int, default=None, metavar="N", help="the first N ranks of the topology")
    p.add_argument("--dtype", "-d", default="float32", metavar="D", help="element type (default float32)")
    p.add_argument("--root", type=int, default=0, help="root of rooted collectives (default 0)")
    p.add_argument("--local-size", type=int, default=None, metavar="L",
                   help="hierarchical algorithms: ranks per host (default: the topology's)")
    p.add_argument("--segments", type=int, default=None, metavar="S",
                   help="pipelined algorithms (tree, broadcast ring): number of segments")
    p.add_argument("--exact", action="store_true",
                   help="simulate every distinct round (default: rounds whose sizes differ by one element "
                        "are simulated once, at the larger size)")
    p.add_argument("--sweep-nodes", default=None, metavar="LIST",
                   help="node counts, e.g. 1,2,4,...,1024: simulate on N copies of --topology for each")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--trace", default=None, metavar="FILE", help="write a Chrome/Perfetto trace (JSON)")
    p.add_argument("--trace-all", action="store_true", help="trace every rank, link and round (large)")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="draw the rank timeline and link load (or, with --sweep-nodes, busbw vs nodes)")
    p.set_defaults(func=run)
    return p


def parse_nodes(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; 'a,b,...,z' continues a, b with b/a as ratio (or b-a as step) up to z."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    out: list[int] = []
    i = 0
    try:
        while i < len(items):
            if items[i] in ("...", "..", "\u2026"):
                if len(out) < 2 or i + 1 >= len(items):
                    raise ValueError
                a, b, end = out[-2], out[-1], int(items[i + 1])
                if b > a and b % a == 0 and b // a > 1 and a > 0:
                    nxt = b * (b // a)
                    while nxt < end:
                        out.append(nxt)
                        nxt *= b // a
                else:
                    step = b - a
                    if step <= 0:
                        raise ValueError
                    nxt = b + step
                    while nxt < end:
                        out.append(nxt)
                        nxt += step
                i += 1
                continue
            out.append(int(items[i]))
            i += 1
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad node list {text!r}: expected e.g. 1,2,4,8 or 1,2,4,...,1024") from None
    if not out or any(n < 1 for n in out):
        raise argparse.ArgumentTypeError(f"bad node list {text!r}: node counts must be >= 1")
    return sorted(set(out))


def run(args: argparse.Namespace) -> int:
    from ..algorithms.schedule import COLLECTIVES
    from ..sim import SimError
    from ..topology import TopologyError

    if args.collective not in COLLECTIVES:
        print(f"interlink simulate: {args.collective} is not a collective", file=sys.stderr)
        return 2
    try:
        if args.sweep_nodes:
            return _sweep(args)
        return _single(args)
    except argparse.ArgumentTypeError as exc:
        print(f"interlink simulate: {exc}", file=sys.stderr)
        return 2
    except (SimError, TopologyError, ValueError) as exc:
        print(f"interlink simulate: {exc}", file=sys.stderr)
        return 2


def _itemsize(dtype: str) -> int:
    from ..model.cost import itemsize_of

    return itemsize_of(dtype)


def _kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"itemsize": _itemsize(args.dtype), "root": args.root, "local_size": args.local_size,
            "segments": args.segments, "merge_tolerance": 0 if args.exact else 1}


def _single(args: argparse.Namespace) -> int:
    from ..sim import simulate_collective, write_trace

    res = simulate_collective(args.collective, args.size, args.topology, algorithm=args.algorithm,
                              nranks=args.nranks, **_kwargs(args))
    if args.trace:
        write_trace(res, args.trace, trace_all=args.trace_all)
    if args.plot:
        plot_result(res, args.plot)
    if args.json:
        d = res.to_dict()
        if args.trace:
            d["trace"] = args.trace
        if args.plot:
            d["plot"] = args.plot
        print(json.dumps(d, indent=2))
        return 0
    print(f"# {res.collective} of {res.nbytes} bytes with {res.algorithm} on {res.topology_name} "
          f"({res.nranks} ranks, {res.rounds} rounds, model: {res.model})")
    print(f"time     {_time(res.time_us)}")
    print(f"algbw    {res.algbw_gbps:.2f} GB/s")
    print(f"busbw    {res.busbw_gbps:.2f} GB/s")
    print(f"no-contention time {_time(res.ideal_us)}  (slowdown x{res.slowdown:.3f})")
    busy = res.rank_busy_us
    if busy.size and res.time_us > 0:
        print(f"ranks busy {100 * busy.mean() / res.time_us:.1f}% on average "
              f"(min {100 * busy.min() / res.time_us:.1f}%, max {100 * busy.max() / res.time_us:.1f}%)")
    top = res.top_links(5)
    if top:
        print("busiest links:")
        for row in top:
            name = f"{row.get('from', row['link'])} -> {row.get('to', '')}"
            print(f"  {name:<40} {row.get('kind', ''):<10} {row['bytes'] / 1e9:10.3f} GB  "
                  f"util {100 * row['util']:5.1f}%  ({row['gbps']:g} GB/s)")
    for n in res.notes:
        print(f"note: {n}")
    print(f"simulated in {res.wall_s:.2f} s")
    if args.trace:
        print(f"trace: {args.trace}")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from ..algorithms import registry
    from ..sim import simulate_collective

    nodes = parse_nodes(args.sweep_nodes)
    machine, _, opts = args.topology.partition(":")
    machine = re.sub(r"^\s*\d+\s*[xX*]\s*", "", machine).strip()  # '16xdgx-h100' sweeps dgx-h100
    have = registry.algorithms_for(args.collective)
    algos = [a.strip() for a in args.algorithm.split(",")] if args.algorithm else \
        [a for a in _SWEEP_DEFAULT if a in have] or have[:1]
    for a in algos:
        if a not in have:
            raise ValueError(f"no algorithm {a!r} for {args.collective}; available: {have}")
    kw = _kwargs(args)
    rows: list[dict[str, Any]] = []
    for n in nodes:
        spec = f"{n}x{machine}" + (f":{opts}" if opts else "")
        row: dict[str, Any] = {"nodes": n, "topology": spec}
        for a in algos:
            try:
                r = simulate_collective(args.collective, args.size, spec, algorithm=a, **kw)
            except (ValueError, MemoryError) as exc:
                row[a] = {"error": str(exc)}
                continue
            row["nranks"] = r.nranks
            row[a] = {"time_us": r.time_us, "algbw_gbps": r.algbw_gbps, "busbw_gbps": r.busbw_gbps,
                      "ideal_us": r.ideal_us, "wall_s": r.wall_s}
        rows.append(row)
    for a in algos:
        base = next((row[a]["busbw_gbps"] for row in rows if "busbw_gbps" in row.get(a, {})), None)
        for row in rows:
            cell = row.get(a, {})
            if base and "busbw_gbps" in cell:
                cell["efficiency"] = cell["busbw_gbps"] / base
    if args.plot:
        plot_sweep(rows, algos, args, args.plot)
    if args.json:
        print(json.dumps({"collective": args.collective, "nbytes": args.size, "machine": machine,
                          "options": opts, "algorithms": algos, "rows": rows,
                          **({"plot": args.plot} if args.plot else {})}, indent=2))
        return 0
    print(f"# {args.collective} of {args.size} bytes on N x {machine}{':' + opts if opts else ''}: simulated busbw "
          f"(GB/s) and scaling efficiency (busbw / busbw at {nodes[0]} node{'s' if nodes[0] > 1 else ''})")
    head = f"{'nodes':>6} {'ranks':>7}" + "".join(f" {a + ' busbw':>18} {'eff':>6}" for a in algos)
    print(head)
    for row in rows:
        line = f"{row['nodes']:>6} {row.get('nranks', 0):>7}"
        for a in algos:
            cell = row.get(a, {})
            if "busbw_gbps" in cell:
                line += f" {cell['busbw_gbps']:>18.2f} {100 * cell.get('efficiency', 0):>5.1f}%"
            else:
                line += f" {'-':>18} {'-':>6}"
        print(line)
    walls = sum(c.get("wall_s", 0.0) for row in rows for a in algos if isinstance(c := row.get(a), dict))
    print(f"simulated {len(rows) * len(algos)} runs in {walls:.1f} s")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


# ---- pictures (matplotlib, imported lazily) ------------------------------------------------------------


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib (pip install 'interlink[plot]')") from None
    return plt


def plot_result(res: Any, path: str, max_ranks: int = 32) -> None:
    """Top: per-rank timeline (busy part of every round; runs of identical rounds as one bar each round
    drawn up to 64 times); bottom: utilisation of every directed link that carried data, by link kind."""
    import numpy as np

    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7), gridspec_kw={"height_ratios": [3, 2]})
    nr = min(res.nranks, max_ranks)
    unit, scale = ("ms", 1e-3) if res.time_us >= 1e3 else ("us", 1.0)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    phases = res.phases
    if len(phases) > 400:  # many distinct rounds (an exact uneven ring): draw every k-th
        phases = phases[:: math.ceil(len(phases) / 400)]
    for ph in phases:
        if ph.rank_busy_us.size == 0:  # past the simulation's max_detail
            continue
        reps = min(ph.repeat, 64)
        step = ph.repeat / reps  # a long run of identical rounds: each bar stands for `step` rounds
        starts = (ph.start_us + np.floor(np.arange(reps) * step) * ph.round_us) * scale
        for r in range(nr):
            b = float(ph.rank_busy_us[r])
            if b > 0 and ph.round_us > 0:
                w = step * ph.round_us * (b / ph.round_us) * scale
                ax1.broken_barh([(float(t), w) for t in starts], (r - 0.4, 0.8),
                                color=colors[ph.index % len(colors)], linewidth=0)
    ax1.set_ylim(nr - 0.5, -0.5)
    ax1.set_xlim(0, res.time_us * scale)
    ax1.set_xlabel(f"time ({unit})")
    ax1.set_ylabel("rank")
    ax1.set_title(f"{res.collective}/{res.algorithm}, {res.nbytes} B on {res.topology_name} ({res.nranks} ranks): "
                  f"{res.time_us * scale:.3g} {unit}, busbw {res.busbw_gbps:.1f} GB/s "
                  f"(no contention: {res.ideal_us * scale:.3g} {unit})", fontsize=9)
    util = res.link_util
    if util.size and res.topology is not None:
        kinds = np.array([res.topology.links[int(r) // 2].spec.kind for r in res.link_res])
        order = np.lexsort((-util, kinds))
        x = np.arange(util.size)
        for i, k in enumerate(sorted(set(kinds.tolist()))):
            m = kinds[order] == k
            xs, ys = x[m], 100 * util[order][m]
            ax2.fill_between(np.append(xs, xs[-1] + 1), np.append(ys, ys[-1]), step="post",
                             color=colors[i % len(colors)], label=f"{k} ({int(m.sum())})", linewidth=0)
        ax2.set_xlim(0, util.size)
        ax2.legend(fontsize=8, loc="upper right")
    ax2.set_xlabel("directed links that carried data (grouped by kind, busiest first)")
    ax2.set_ylabel("average utilisation (%)")
    ax2.set_ylim(0, 105)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(rows: list[dict[str, Any]], algos: list[str], args: argparse.Namespace, path: str) -> None:
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    for a in algos:
        pts = [(row["nodes"], row[a]["busbw_gbps"], row[a].get("efficiency", math.nan))
               for row in rows if "busbw_gbps" in row.get(a, {})]
        if not pts:
            continue
        xs, bw, eff = zip(*pts)
        ax1.plot(xs, bw, marker="o", label=a)
        ax2.plot(xs, [100 * e for e in eff], marker="o", label=a)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nodes")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax1.set_ylabel("busbw (GB/s)")
    ax1.set_yscale("log")
    ax2.set_ylabel("scaling efficiency (% of busbw on the first node count)")
    fig.suptitle(f"simulated {args.collective} of {args.size} B on N x {args.topology}: "
                 "the intra-node to inter-node cliff")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
