"""``interlink simulate``: run a collective's Schedule through the flow-level simulator on a topology.

    interlink simulate all_reduce --size 1G --topology 128xdgx-h100
    interlink simulate all_reduce --size 1G --topology 16xdgx-h100:oversub=4 --algorithm ring --json
    interlink simulate all_to_all --size 256M --topology 16xdgx-h100 --algorithm pairwise --trace a2a.json
    interlink simulate all_reduce --size 1G --topology dgx-h100 --sweep-nodes 1,2,4,...,1024 --plot cliff.png

Prints the simulated time, algbw and busbw (nccl-tests definitions, GB/s = 1e9 B/s), the contention-free
time of the same rounds (each flow alone on its path) and the slowdown, the rounds and the busiest links.
On GPU topologies without ``--algorithm`` two lines say which is which: ``best on paper`` (the model's fastest
Schedule: the run above) and ``nccl default`` (NCCL's tuner's pick, :mod:`interlink.model.nccl`, simulated too);
``--json`` has them as ``best_on_paper`` and ``nccl_default``.
``--sweep-nodes`` simulates the collective on N copies of a machine for each N (``a,b,...,z`` continues
the progression a, b, ... up to z) with ring, tree and hierarchical (or ``--algorithm A,B``) and prints
busbw and scaling efficiency (busbw / busbw on the first node count) per algorithm: the cliff from
NVLink inside a node to the network between nodes.

Sizes round down to whole elements per rank, as nccl-tests counts them; a size that gives no element
per rank (0, or 3 bytes of float32; with ``--sweep-nodes``: at the largest node count) is an error
(exit status 2) naming the smallest valid size. ``--plot`` without matplotlib still prints the result,
then says what to install and exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from typing import Any

from .bench import parse_collective, parse_size
from .predict import SIZE_EPILOG, _time, size_error

_SWEEP_DEFAULT = ("ring", "tree", "hierarchical")
CHOICE = "choice"  # --sweep-nodes without --algorithm: the model's choice at each node count, as predict picks
CHOICE_LABEL = "model's choice"  # its heading in the sweep's table


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "simulate",
        help="simulate a collective on a topology (flows over links, max-min fair sharing)",
        description="Simulate a collective's Schedule on a topology: every message is a flow over its path's "
                    "links, shared max-min fairly within a round; each rank and channel starts its next round when "
                    "its own messages are in (dependency-driven, as predict times it).",
        epilog=SIZE_EPILOG + " Topologies: a preset (dgx-h100), a cluster (16xdgx-h100:oversub=2), a "
               ".yaml/.json file, or 'this' (the default: this machine, as `interlink topo` discovers it)."
               " The algorithm is the one `interlink predict` picks unless --algorithm names one. --plot needs matplotlib (pip install 'interlink[plot]'): without it the result "
               "is printed, then the command exits 1.",
    )
    p.add_argument("collective", type=parse_collective, help="all_reduce, broadcast, all_gather, all_to_all, ...")
    p.add_argument("--size", "-s", type=parse_size, required=True, metavar="BYTES",
                   help="bytes of the largest buffer (8, 64K, 1M, 1G); at least one element per rank")
    p.add_argument("--topology", "-t", default="this", metavar="SPEC",
                   help="preset, NxPRESET[:oversub=R,net=LINK] cluster, file, or 'this' (default: this machine); "
                        "with --sweep-nodes: the machine")
    p.add_argument("--algorithm", "-a", default=None, metavar="A",
                   help="algorithm (default: the model's choice, as `interlink predict` picks it); with --sweep-nodes "
                        "a comma list "
                        "(default ring,tree,hierarchical)")
    p.add_argument("--nranks", "-n", "--ranks", type=int, default=None, metavar="N",
                   help="the first N ranks of the topology")
    p.add_argument("--dtype", "-d", default="float32", metavar="D", help="element type (default float32)")
    p.add_argument("--root", type=int, default=0, help="root of rooted collectives (default 0)")
    p.add_argument("--local-size", type=int, default=None, metavar="L",
                   help="hierarchical algorithms: ranks per host (default: the topology's)")
    p.add_argument("--segments", type=int, default=None, metavar="S",
                   help="pipelined algorithms (tree, broadcast ring): number of segments")
    p.add_argument("--heads", type=int, default=None, metavar="H",
                   help="nvls, nvls_tree: NVLS heads per NVLink domain (default every GPU of it, at most "
                        "NCCL's 32): the ranks that reduce, multicast and carry a domain's chunks across")
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
            "segments": args.segments, "heads": args.heads, "merge_tolerance": 0 if args.exact else 1}


def _single(args: argparse.Namespace) -> int:
    from ..model.cost import resolve_topology
    from ..sim import simulate_collective, write_trace

    nranks = args.nranks if args.nranks is not None else resolve_topology(args.topology).nranks
    bad = size_error(args.collective, args.size, args.dtype, nranks) if nranks >= 1 else None
    if bad:
        raise ValueError(bad)
    res = simulate_collective(args.collective, args.size, args.topology, algorithm=args.algorithm,
                              nranks=args.nranks, **_kwargs(args))
    lines = _default_lines(args, res) if args.algorithm is None else None
    if args.trace:
        write_trace(res, args.trace, trace_all=args.trace_all)
    plot_error = _try_plot(plot_result, res, args.plot) if args.plot else None
    plotted = bool(args.plot) and plot_error is None
    if args.json:
        d = res.to_dict()
        if args.trace:
            d["trace"] = args.trace
        if plotted:
            d["plot"] = args.plot
        if lines is not None:
            d["best_on_paper"], d["nccl_default"] = lines
        print(json.dumps(d, indent=2))
        return _plot_failed(plot_error)
    print(f"# {res.collective} of {res.nbytes} bytes with {res.algorithm} on {res.topology_name} "
          f"({res.nranks} ranks, {res.rounds} rounds, model: {res.model})")
    print(f"time     {_time(res.time_us)}")
    print(f"algbw    {res.algbw_gbps:.2f} GB/s")
    print(f"busbw    {res.busbw_gbps:.2f} GB/s")
    print(f"no-contention time {_time(res.ideal_us)}  (slowdown x{res.slowdown:.3f})")
    if lines is not None:
        from .text import note

        best, nccl = lines
        print(note("best on paper  ", f"{best['algorithm']}/{best['protocol']}: simulated {_time(best['time_us'])}, "
                                      f"busbw {best['busbw_gbps']:.2f} GB/s (the fastest Schedule interlink has: the "
                                      f"run above)"))
        if nccl is None:
            print(note("nccl default   ", "- (no NCCL choice to price: NCCL runs all_to_all, gather and scatter as "
                                          "grouped send/receive, and interlink has no Schedule of NCCL's ring reduce)"))
        else:
            print(note("nccl default   ", f"{nccl['algorithm']}/{nccl['protocol']}: simulated "
                                          f"{_time(nccl['time_us'])}, busbw {nccl['busbw_gbps']:.2f} GB/s (what a user "
                                          f"running NCCL gets: NCCL's tuner's pick; the model prices it "
                                          f"{_time(nccl['model_time_us'])}, nccl-tests would print "
                                          f"{_time(nccl['nccl_tests_us'])})"))
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
    from .text import note

    for n in res.notes:
        print(note("note: ", n))
    print(f"simulated in {res.wall_s:.2f} s")
    if args.trace:
        print(f"trace: {args.trace}")
    if plotted:
        print(f"plot: {args.plot}")
    return _plot_failed(plot_error)


def _default_lines(args: argparse.Namespace, res: Any) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """On GPU topologies without --algorithm: the best Schedule on paper (the run ``res``) and what a user running
    NCCL gets (NCCL's tuner's pick, :mod:`interlink.model.nccl`, simulated too), as JSON-ready dicts; None on CPU
    hosts (NCCL is for GPUs)."""
    from ..model import ModelError, predict
    from ..model.nccl import nccl_default
    from ..sim import simulate_collective

    try:
        pred = predict(args.collective, args.size, args.topology, nranks=args.nranks, dtype=args.dtype,
                       root=args.root)
    except (ModelError, ValueError):
        return None
    if pred.mode != "gpu":
        return None
    chosen = next((c for c in pred.table if c.algorithm == res.algorithm), pred.best)
    best = {"algorithm": res.algorithm, "protocol": chosen.protocol, "time_us": res.time_us,
            "algbw_gbps": res.algbw_gbps, "busbw_gbps": res.busbw_gbps,
            "what": "the fastest Schedule interlink has (the run above)"}
    try:
        nd = nccl_default(args.collective, args.size, args.topology, nranks=args.nranks, dtype=args.dtype)
    except (ModelError, ValueError):
        nd = None
    if nd is None:
        return best, None
    if (nd.algorithm, nd.protocol) == (res.algorithm, chosen.protocol):
        sim = res
    else:
        sim = simulate_collective(args.collective, args.size, args.topology, algorithm=nd.algorithm,
                                  nranks=args.nranks, protocol=nd.protocol, **_kwargs(args))
    nccl = {**nd.to_dict(), "time_us": sim.time_us, "algbw_gbps": sim.algbw_gbps, "busbw_gbps": sim.busbw_gbps,
            "model_time_us": nd.time_us,
            "what": "what a user running NCCL gets: NCCL's tuner's pick, simulated (model_time_us: the model's price)"}
    return best, nccl


def _try_plot(draw: Any, *args: Any) -> str | None:
    """Run ``draw(*args)``; None when it drew, the message saying what to install when matplotlib is missing
    (the caller prints its result first, then the message)."""
    try:
        draw(*args)
    except ImportError as exc:
        return f"{exc}" if "pip install" in str(exc) else f"{_PLOT_HINT} ({exc})"
    return None


def _plot_failed(plot_error: str | None) -> int:
    """Exit status after the result was printed: 1 (with the message on stderr) when --plot could not draw."""
    if plot_error is None:
        return 0
    sys.stdout.flush()
    print(f"interlink simulate: {plot_error}; the result above was computed, no plot was written", file=sys.stderr)
    return 1


def _sweep(args: argparse.Namespace) -> int:
    from ..algorithms import registry
    from ..model.cost import PER_RANK_SPLIT, resolve_topology
    from ..sim import simulate_collective
    from ..sim.engine import choose

    nodes = parse_nodes(args.sweep_nodes)
    machine, _, opts = args.topology.partition(":")
    machine = re.sub(r"^\s*\d+\s*[xX*]\s*", "", machine).strip()  # '16xdgx-h100' sweeps dgx-h100
    # the most ranks (the largest node count) need the largest size for one element per rank
    most = (resolve_topology(f"{nodes[-1]}x{machine}" + (f":{opts}" if opts else "")).nranks
            if args.collective in PER_RANK_SPLIT else 1)
    bad = size_error(args.collective, args.size, args.dtype, most)
    if bad:
        raise ValueError(bad + (f" (at {nodes[-1]} nodes, the largest of --sweep-nodes)"
                                if args.collective in PER_RANK_SPLIT else ""))
    have = registry.algorithms_for(args.collective)
    algos = [registry.canonical(a.strip()) for a in args.algorithm.split(",")] if args.algorithm else \
        [a for a in _SWEEP_DEFAULT if a in have] or have[:1]
    for a in algos:
        if a not in have:
            raise ValueError(f"no algorithm {a!r} for {args.collective}; available: {have}")
    if not args.algorithm:
        algos.append(CHOICE)  # the model's own pick at each node count, beside the fixed algorithms
    kw = _kwargs(args)
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    took: dict[str, list[tuple[int, float]]] = {}  # algorithm -> (nodes, seconds) of each run done

    def guess(a: str, m: int) -> float | None:
        """Seconds the run of ``a`` on ``m`` nodes takes: a power (1/2 to 2) of the nodes fitted to the last two
        runs of ``a`` (1/2 from one). The model's choice grows fastest: it prices every algorithm before it
        simulates the one it picks (at 128 x dgx-h100 about 7 of the sweep's last 8 s)."""
        h = took.get(a)
        if not h:
            return None
        (n1, t1), (n2, t2) = h[-2] if len(h) > 1 else h[-1], h[-1]
        alpha = min(2.0, max(0.5, math.log(t2 / t1) / math.log(n2 / n1))) if n2 > n1 and t1 > 0 < t2 else 0.5
        return t2 * (m / n2) ** alpha

    def left(k: int, j: int, into: float = 0.0) -> str:
        """The time the runs from the j-th algorithm of the k-th node count on take, less ``into`` s already
        spent on that run; nothing before each algorithm has run once."""
        rest = [guess(a, nodes[k]) for a in algos[j:]] + [guess(a, m) for m in nodes[k + 1:] for a in algos]
        if any(g is None for g in rest):
            return ""
        return f", about {max(0.0, sum(rest) - into):.0f} s left"  # type: ignore[arg-type]

    def say(k: int, spec: str, what: str, j: int, tail: str) -> None:
        # progress on stderr, each run (and the model's choice's two parts) as it starts
        print(f"interlink simulate: [{k + 1}/{len(nodes)}] {spec}: {what} ({j + 1} of {len(algos)}; "
              f"{time.monotonic() - t0:.0f} s so far{tail})", file=sys.stderr, flush=True)
    for k, n in enumerate(nodes):
        spec = f"{n}x{machine}" + (f":{opts}" if opts else "")
        row: dict[str, Any] = {"nodes": n, "topology": spec}
        for j, a in enumerate(algos):
            t_run = time.monotonic()
            extra: dict[str, Any] = {}
            try:
                if a == CHOICE:
                    # the model's choice in two steps, each with its line: the cost model prices every
                    # algorithm (as interlink predict), then the pick is simulated
                    say(k, spec, "the model's choice: pricing every algorithm", j, left(k, j))
                    pick, proto = choose(args.collective, args.size, spec, itemsize=kw["itemsize"],
                                         root=args.root)
                    if proto is not None:
                        extra["protocol"] = proto
                    say(k, spec, f"the model's choice: simulating {pick}" + (f"/{proto}" if proto else ""), j,
                        left(k, j, time.monotonic() - t_run))
                    r = simulate_collective(args.collective, args.size, spec, algorithm=pick, **kw, **extra)
                else:
                    say(k, spec, a, j, left(k, j))
                    r = simulate_collective(args.collective, args.size, spec, algorithm=a, **kw)
            except (ValueError, MemoryError) as exc:
                row[a] = {"error": str(exc)}
                continue
            finally:
                took.setdefault(a, []).append((n, time.monotonic() - t_run))
            row["nranks"] = r.nranks
            row[a] = {"time_us": r.time_us, "algbw_gbps": r.algbw_gbps, "busbw_gbps": r.busbw_gbps,
                      "ideal_us": r.ideal_us, "wall_s": time.monotonic() - t_run}
            if a == CHOICE:
                row[a]["algorithm"] = r.algorithm
        rows.append(row)
    print(f"interlink simulate: {len(nodes)} node counts x {len(algos)} runs in {time.monotonic() - t0:.0f} s",
          file=sys.stderr, flush=True)
    for a in algos:
        base = next((row[a]["busbw_gbps"] for row in rows if "busbw_gbps" in row.get(a, {})), None)
        for row in rows:
            cell = row.get(a, {})
            if base and "busbw_gbps" in cell:
                cell["efficiency"] = cell["busbw_gbps"] / base
    from ..model.published import for_machine

    published = [{"id": r.id, "nodes": r.nodes, "nbytes": r.nbytes, "busbw_gbps": r.busbw_gbps,
                  "algorithm": r.algorithm or "default", "source": r.source}
                 for r in for_machine(machine, args.collective) if r.nranks is None]
    plot_error = _try_plot(plot_sweep, rows, algos, args, args.plot, published) if args.plot else None
    plotted = bool(args.plot) and plot_error is None
    if args.json:
        print(json.dumps({"collective": args.collective, "nbytes": args.size, "machine": machine,
                          "options": opts, "algorithms": algos, "rows": rows, "published": published,
                          **({"plot": args.plot} if plotted else {})}, indent=2))
        return _plot_failed(plot_error)
    from .text import note

    print(note("# ", f"{args.collective} of {args.size} bytes on N x {machine}{':' + opts if opts else ''}: "
                     f"simulated busbw (GB/s) and scaling efficiency (busbw / busbw at {nodes[0]} "
                     f"node{'s' if nodes[0] > 1 else ''})"))
    for ln in sweep_table(rows, algos):
        print(ln)
    walls = sum(c.get("wall_s", 0.0) for row in rows for a in algos if isinstance(c := row.get(a), dict))
    print(f"simulated {len(rows) * len(algos)} runs in {walls:.1f} s")
    if published:
        print(f"published nccl-tests figures on N x {machine} ({args.collective}; interlink.model.published):")
        for ln in published_lines(published, args.size):
            print(ln)
    if plotted:
        print(f"plot: {args.plot}")
    return _plot_failed(plot_error)


def sweep_table(rows: list[dict[str, Any]], algos: list[str]) -> list[str]:
    """The sweep's table as plain lines whose columns line up in any terminal, piped or not: a line naming each
    algorithm over its columns, a line naming the columns, then a row per node count. Each algorithm has
    busbw (GB/s) and eff (busbw / busbw at the first node count); the model's choice also names the
    algorithm it picked, in a column of its own."""
    width = {a: max(8, len(a) - 7) for a in algos}  # busbw's width: the group (busbw, eff) fits the name
    pick = max([len("algorithm")] + [len(row[CHOICE].get("algorithm", "")) for row in rows
                                     if isinstance(row.get(CHOICE), dict)]) if CHOICE in algos else 0
    lead = f"  {'':>5} {'':>6}"
    top, names = lead, f"  {'nodes':>5} {'ranks':>6}"
    for a in algos:
        group = (pick + 1 if a == CHOICE else 0) + width[a] + 7
        top += f"  {(CHOICE_LABEL if a == CHOICE else a):^{group}}"
        names += "  " + (f"{'algorithm':<{pick}} " if a == CHOICE else "") + f"{'busbw':>{width[a]}} {'eff':>6}"
    out = ["#" + top[1:].rstrip(), "#" + names[1:]]
    for row in rows:
        line = f"  {row['nodes']:>5} {row.get('nranks', 0) or '-':>6}"
        for a in algos:
            cell = row.get(a, {})
            line += "  " + (f"{cell.get('algorithm', '-'):<{pick}} " if a == CHOICE else "")
            if "busbw_gbps" in cell:
                line += f"{cell['busbw_gbps']:>{width[a]}.2f} {100 * cell.get('efficiency', 0):>5.1f}%"
            else:
                line += f"{'-':>{width[a]}} {'-':>6}"
        out.append(line.rstrip())
    return out


def published_lines(published: list[dict[str, Any]], size: int) -> list[str]:
    """The published figures as rows whose source text wraps under its own column at the terminal's width
    (``COLUMNS`` when piped, 100 when unset), so that the id, nodes, size and busbw columns stay whole."""
    import shutil
    import textwrap

    width = max(60, shutil.get_terminal_size((100, 24)).columns)
    out = []
    for r in published:
        other = "" if r["nbytes"] == size else " (another size: not plotted)"
        sz = f"{r['nbytes'] / 2**30:g} GiB" if r["nbytes"] >= 2**30 else f"{r['nbytes'] / 2**20:g} MiB"
        head = (f"  {r['id']:>7} {r['nodes']:>4} node{'s' if r['nodes'] > 1 else ' '} {sz:>8} "
                f"{r['busbw_gbps']:>8.1f} GB/s  {r['algorithm']:<8} ")
        out.extend(textwrap.wrap(f"{r['source']}{other}", width=width, initial_indent=head,
                                 subsequent_indent=" " * len(head), break_long_words=False,
                                 break_on_hyphens=False))
    return out


# ---- pictures (matplotlib, imported lazily) ------------------------------------------------------------


_PLOT_HINT = "--plot needs matplotlib (pip install 'interlink[plot]')"


def _plt():
    """matplotlib.pyplot on the headless Agg backend; ImportError saying what to install when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(_PLOT_HINT) from None
    return plt


def timeline_caption(res: Any, max_ranks: int = 32) -> str:
    """The timeline's subtitle: which ranks it shows out of how many, and what a bar is."""
    nr = min(res.nranks, max_ranks)
    if nr < res.nranks:
        shown = f"ranks 0-{nr - 1} of {res.nranks} shown (the first {nr}; --trace FILE --trace-all traces every rank)"
    else:
        shown = f"all {res.nranks} rank{'s' if res.nranks != 1 else ''} shown"
    return f"{shown}; a bar is the busy part of a round, coloured by phase"


def _phase_label(ph: Any) -> str:
    rounds = (f"round {ph.first_round}" if ph.repeat == 1
              else f"rounds {ph.first_round}-{ph.first_round + ph.repeat - 1}")
    return f"phase {ph.index}: {rounds}, {ph.nflows} flows/round"


def plot_result(res: Any, path: str, max_ranks: int = 32, max_legend: int = 8) -> None:
    """Top: per-rank timeline of the first ``max_ranks`` ranks (busy part of every round; runs of identical
    rounds as one bar each round drawn up to 64 times), its subtitle saying which ranks are shown and a
    legend of the first ``max_legend`` phases; bottom: utilisation of every directed link that carried
    data, by link kind."""
    import numpy as np

    plt = _plt()
    from matplotlib.patches import Patch

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7.5), gridspec_kw={"height_ratios": [3, 2]})
    nr = min(res.nranks, max_ranks)
    unit, scale = ("ms", 1e-3) if res.time_us >= 1e3 else ("us", 1.0)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    phases = res.phases
    if len(phases) > 400:  # many distinct rounds (an exact uneven ring): draw every k-th
        phases = phases[:: math.ceil(len(phases) / 400)]
    drawn = []
    for ph in phases:
        if ph.rank_busy_us.size == 0:  # past the simulation's max_detail
            continue
        reps = min(ph.repeat, 64)
        step = ph.repeat / reps  # a long run of identical rounds: each bar stands for `step` rounds
        starts = (ph.start_us + np.floor(np.arange(reps) * step) * ph.round_us) * scale
        any_bar = False
        for r in range(nr):
            b = float(ph.rank_busy_us[r])
            if b > 0 and ph.round_us > 0:
                w = step * ph.round_us * (b / ph.round_us) * scale
                ax1.broken_barh([(float(t), w) for t in starts], (r - 0.4, 0.8),
                                color=colors[ph.index % len(colors)], linewidth=0)
                any_bar = True
        if any_bar:
            drawn.append(ph)
    if drawn:
        handles = [Patch(color=colors[ph.index % len(colors)], label=_phase_label(ph)) for ph in drawn[:max_legend]]
        if len(drawn) > max_legend:
            handles.append(Patch(color="white", label=f"... {len(drawn) - max_legend} more phases "
                                                      f"(colours repeat every {len(colors)})"))
        ax1.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False,
                   title="phases", title_fontsize=8)
    ax1.set_ylim(nr - 0.5, -0.5)
    ax1.set_xlim(0, res.time_us * scale)
    ax1.set_xlabel(f"time ({unit})")
    ax1.set_ylabel(f"rank (0-{nr - 1} of {res.nranks})" if nr < res.nranks else "rank")
    fig.suptitle(f"{res.collective}/{res.algorithm}, {res.nbytes} B on {res.topology_name} ({res.nranks} ranks): "
                 f"{res.time_us * scale:.3g} {unit}, busbw {res.busbw_gbps:.1f} GB/s "
                 f"(no contention: {res.ideal_us * scale:.3g} {unit})", fontsize=9)
    ax1.set_title(timeline_caption(res, max_ranks), fontsize=8)
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
        ax2.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, title="link kind (links)",
                   title_fontsize=8)
    ax2.set_xlabel("directed links that carried data (grouped by kind, busiest first)")
    ax2.set_ylabel("average utilisation (%)")
    ax2.set_ylim(0, 105)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(rows: list[dict[str, Any]], algos: list[str], args: argparse.Namespace, path: str,
               published: list[dict[str, Any]] | None = None) -> None:
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    same = [r for r in published or [] if r["nbytes"] == args.size]  # the others measured another size
    for i, r in enumerate(same):  # measured points at this sweep's size, labelled with their id
        ax1.scatter([r["nodes"]], [r["busbw_gbps"]], marker="*", s=120, color="black", zorder=5,
                    label="published (nccl-tests)" if i == 0 else None)
        ax1.annotate(f"{r['id']} {r['nbytes'] / 2**30:g}G", (r["nodes"], r["busbw_gbps"]), fontsize=7,
                     textcoords="offset points", xytext=(4, 4))
    for a in algos:
        pts = [(row["nodes"], row[a]["busbw_gbps"], row[a].get("efficiency", math.nan))
               for row in rows if "busbw_gbps" in row.get(a, {})]
        if not pts:
            continue
        xs, bw, eff = zip(*pts)
        label = "model's choice" if a == CHOICE else a
        ax1.plot(xs, bw, marker="o", label=label, **({"linestyle": "--", "color": "black"} if a == CHOICE else {}))
        ax2.plot(xs, [100 * e for e in eff], marker="o", label=label,
                 **({"linestyle": "--", "color": "black"} if a == CHOICE else {}))
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
