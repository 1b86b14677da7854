"""``interlink topo``: show, save and draw a topology (this machine by default).

    interlink topo                                   discover this machine: devices, links, path types
    interlink topo --topology dgx-h100               a preset; 16xdgx-h100:oversub=2 a cluster; or a file
    interlink topo --topology 16xdgx-h100 --json     the topology (schema of interlink.topology.io) as JSON
    interlink topo --save topo.yaml --draw topo.png  save it; draw it (matplotlib, networkx if present)
    interlink topo --links my-links.yaml             override link catalog entries (YAML or JSON)
    interlink topo --measure                         put this host's measured memcpy bandwidth into shm

``--save x.yaml`` needs PyYAML (``pip install 'interlink[topology]'``): without it the command refuses
before writing anything (``.json`` always works). ``--draw`` without matplotlib prints the topology,
then says what to install and exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

_MAX_TABLE_DEVICES = 120
_MAX_MATRIX = 16

#: the topology's links table: per link its effective bandwidth (what the model uses) and its line rate,
#: both GB/s per direction, as `interlink topo --list` lists the catalog (line rate / effective)
LINKS_TITLE = "links (GB/s per direction; effective: what the model uses, line: the link's line rate)"
LINK_COLUMNS = ("#", "a", "b", "spec", "count", "effective GB/s", "line GB/s", "latency us")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "topo",
        help="show, save and draw the hardware topology (this machine or a preset)",
        description="Print the devices and links of a topology and the path type between ranks (like "
                    "`nvidia-smi topo -m`). Without --topology, this machine is discovered.",
    )
    p.add_argument("--topology", "-t", metavar="SPEC",
                   help="preset (dgx-h100, ...), cluster (16xdgx-h100:oversub=2) or a .yaml/.json file; "
                        "default: discover this machine")
    p.add_argument("--links", metavar="FILE", help="YAML/JSON file overriding link catalog entries")
    p.add_argument("--measure", action="store_true", help="discovery: measure memcpy bandwidth for shm links")
    p.add_argument("--json", action="store_true", help="print JSON (topology, summary, path matrix, notes)")
    p.add_argument("--save", metavar="FILE",
                   help="write the topology to FILE (.yaml/.yml: needs PyYAML, pip install 'interlink[topology]'; "
                        "or .json)")
    p.add_argument("--draw", metavar="FILE",
                   help="draw the topology to an image FILE (needs matplotlib: pip install 'interlink[plot]')")
    p.add_argument("--full", action="store_true", help="list every device and link, however many")
    p.add_argument("--list", action="store_true", help="list presets and link catalog names, then exit")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from ..topology import TopologyError

    try:
        return _run(args)
    except TopologyError as exc:
        print(f"interlink topo: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from ..topology import CATALOG, PRESETS, discover, load_catalog, parse_topology
    from ..topology.io import require_yaml, save_topology

    if args.save and not args.list:
        require_yaml(args.save)  # before discovery and before anything is written
    catalog = load_catalog(args.links) if args.links else None
    if args.list:
        import shutil
        import textwrap

        width = max(60, shutil.get_terminal_size((100, 24)).columns)  # piped: COLUMNS, else 100

        def row(head: str, text: str) -> None:  # the text wrapped under itself: every word kept, the width kept
            print(textwrap.fill(head + text, width=width, subsequent_indent=" " * len(head),
                                break_long_words=False, break_on_hyphens=False))

        print("presets:")
        for name, p in PRESETS.items():
            row(f"  {name:<12} ", p.description)
        print("links (GB/s per direction: line rate / effective, the bandwidth the model uses; latency us):")
        for name, s in (catalog or CATALOG).items():
            row(f"  {name:<14} {s.line_gbps:>8.2f} / {s.effective_gbps:>7.2f}  {s.latency_us:>5.2f}  ", s.source)
        return 0
    notes: list[str] = []
    if args.topology:
        topo = parse_topology(args.topology, catalog=catalog)
    else:
        d = discover(measure=args.measure, catalog=catalog)
        topo, notes = d.topology, d.notes
    if args.save:
        save_topology(topo, args.save, json_fallback=False)
    draw_error = None
    if args.draw:
        try:
            draw(topo, args.draw)
        except ImportError as exc:  # the topology is still printed; then the error, exit status 1
            draw_error = f"--draw needs matplotlib (pip install 'interlink[plot]'): {exc}"
    if args.json:
        from ..topology import topology_to_dict

        labels, rows = _matrix(topo)
        out = {"summary": topo.summary(), "notes": notes, "matrix": {"labels": labels, "rows": rows},
               "examples": [_path_json(topo, a, b) for a, b in _example_pairs(topo)],
               "topology": topology_to_dict(topo)}
        json.dump(out, sys.stdout, indent=1, default=str)
        print()
    else:
        _print(topo, notes, args.full)
    if args.save and not args.json:
        print(f"saved {args.save}")
    if args.draw and not args.json and draw_error is None:
        print(f"drew {args.draw}")
    if draw_error is not None:
        sys.stdout.flush()
        print(f"interlink topo: {draw_error}; nothing was drawn", file=sys.stderr)
        return 1
    return 0


# ---- text ---------------------------------------------------------------------------------------


def _fmt_bw(x: float) -> str:
    return "inf" if x == math.inf else f"{x:.1f}"


def _shown(topo, full: bool):
    if full or len(topo.devices) <= _MAX_TABLE_DEVICES:
        return list(topo.devices), list(topo.links), ""
    h0 = topo.hosts[0] if topo.hosts else None
    devs = [d for d in topo.devices if d.host == h0]
    fabric = [d for d in topo.devices if d.host is None]
    devs += fabric[:8]
    ids = {d.id for d in devs}
    links = [ln for ln in topo.links if ln.a in ids and ln.b in ids]
    more = (f"showing host {h0} and {min(8, len(fabric))} of {len(fabric)} fabric devices "
            f"({len(devs)} of {len(topo.devices)} devices, {len(links)} of {len(topo.links)} links; --full for all)")
    return devs, links, more


def _attrs(d) -> str:
    return " ".join(f"{k}={v}" for k, v in d.attrs.items() if k not in ("index",))


def _matrix(topo) -> tuple[list[str], list[list[str]]]:
    """Path types from the ranks of the first host (at most 16) to those ranks and that host's NICs."""
    if not topo.nranks:
        return [], []
    h = topo.device(0).host
    ranks = topo.ranks_on_host(h)[:_MAX_MATRIX] if h is not None else [0]
    nics = [d.id for d in topo.devices if d.kind == "nic" and d.host == h and not d.attrs.get("loopback")][:_MAX_MATRIX]
    cols: list[str | int] = [*ranks, *nics]
    labels = [topo.device_of(r) for r in ranks] + nics
    rows = []
    for r in ranks:
        row = []
        for c in cols:
            p = topo.path(r, c)
            if p.path_type.value == "LOC":
                row.append("X")
            elif p.path_type.value == "NVL":
                n = min(topo.links[lid].count for lid in p.hops)
                row.append(f"NV{n}")
            else:
                row.append(p.path_type.value)
        rows.append(row)
    return labels, rows


def _example_pairs(topo) -> list[tuple[int, int]]:
    pairs = []
    if topo.nranks > 1:
        pairs.append((0, 1))
    hs = sorted({topo.device(r).host for r in range(topo.nranks)} - {None}) if topo.nranks else []
    if len(hs) > 1:
        pairs.append((0, topo.ranks_on_host(hs[1])[0]))
        last = topo.ranks_on_host(hs[-1])[-1]
        if last != pairs[-1][1]:
            pairs.append((0, last))
    return pairs


def _path_json(topo, a: int, b: int) -> dict[str, Any]:
    p = topo.path(a, b)
    return {"src_rank": a, "dst_rank": b, "src": p.src, "dst": p.dst, "path_type": p.path_type.value,
            "bottleneck_gbps": p.bottleneck_gbps, "line_gbps": p.line_gbps, "latency_us": p.latency_us,
            "devices": list(p.devices)}


def _print(topo, notes: list[str], full: bool) -> None:
    s = topo.summary()
    kinds = ", ".join(f"{n} {k}" for k, n in s["devices"].items())
    head = (f"topology {topo.name or '(unnamed)'}: {s['hosts']} host(s); {kinds}; {s['links']} links; "
            f"{topo.nranks} ranks ({topo.ranks_per_host} per host)")
    extra = {k: v for k, v in topo.meta.items() if k in ("network", "oversubscription", "hosts_per_leaf", "leaves")}
    devs, links, more = _shown(topo, full)
    dev_rows = [(d.id, d.kind, "-" if d.host is None else str(d.host), d.name, _attrs(d)) for d in devs]
    link_rows = [(str(ln.id), ln.a, ln.b, ln.spec.name, str(ln.count) + ("" if ln.factor == 1 else f" x{ln.factor:g}"),
                  _fmt_bw(ln.gbps), _fmt_bw(ln.line_gbps), f"{ln.latency_us:g}") for ln in links]
    labels, rows = _matrix(topo)
    examples = [topo.path(a, b) for a, b in _example_pairs(topo)]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        Console = None  # type: ignore[assignment]
    if Console is not None and sys.stdout.isatty():  # piped: the plain table below, never cut at 80 columns
        con = Console()
        con.print(f"[bold]{head}[/bold]")
        if extra:
            con.print("network: " + ", ".join(f"{k}={v}" for k, v in extra.items()))
        for n in notes:
            con.print(f"[yellow]note:[/yellow] {n}")
        t = Table(title="devices", title_justify="left")
        for c in ("id", "kind", "host", "name", "attrs"):
            t.add_column(c, no_wrap=c != "attrs")
        for r in dev_rows:
            t.add_row(*r)
        con.print(t)
        t = Table(title=LINKS_TITLE, title_justify="left")
        for c in LINK_COLUMNS:
            t.add_column(c, no_wrap=True, justify="left" if c in ("a", "b", "spec") else "right")
        for r in link_rows:
            t.add_row(*r)
        con.print(t)
        if more:
            con.print(more)
    else:
        from .text import note

        print(note("", head).replace("\n", "\n  "))
        if extra:
            print("network: " + ", ".join(f"{k}={v}" for k, v in extra.items()))
        for n in notes:
            print(f"note: {n}")
        _plain("devices", ("id", "kind", "host", "name", "attrs"), dev_rows)
        _plain(LINKS_TITLE, LINK_COLUMNS, link_rows)
        if more:
            print(more)
    if labels:
        short = [lab.split("/")[-1] for lab in labels]
        _plain("path types from the ranks of the first host (like nvidia-smi topo -m)", ["", *short],
               [(short[i], *row) for i, row in enumerate(rows)])
    for p in examples:
        print(f"path {p.src} -> {p.dst}: {p.path_type.value}, {_fmt_bw(p.bottleneck_gbps)} GB/s per direction, "
              f"{p.latency_us:.2f} us, via {' > '.join(p.devices)}")
    from .text import note

    print(note("legend: ", "X self; NV# NVLink (# links, possibly via NVSwitch; NVL in a path line); C2C "
                           "NVLink-C2C; PIX one PCIe switch; PXB several PCIe switches; PHB through a CPU / host "
                           "memory; SYS across CPU sockets; NET network"))


def _plain(title: str, cols, rows) -> None:
    rows = [tuple(str(x) for x in r) for r in rows]
    w = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    print(title)
    print("  ".join(c.ljust(w[i]) for i, c in enumerate(cols)).rstrip())
    for r in rows:
        print("  ".join(x.ljust(w[i]) for i, x in enumerate(r)).rstrip())


# ---- drawing ------------------------------------------------------------------------------------

_LAYER = {"net_switch": 7.0, "cpu": 4.6, "host_mem": 4.6, "pcie_switch": 3.5, "nic": 2.5, "gpu": 1.3, "nvswitch": 0.0}
_COLORS = {"gpu": "#76b900", "cpu": "#1f77b4", "host_mem": "#17becf", "nic": "#ff7f0e", "pcie_switch": "#9467bd",
           "nvswitch": "#2ca02c", "net_switch": "#d62728"}
_EDGE = {"nvlink": "#2ca02c", "c2c": "#8c564b", "pcie": "#9467bd", "smp": "#1f77b4", "shm": "#17becf",
         "tcp": "#7f7f7f", "infiniband": "#d62728", "roce": "#e377c2", "ethernet": "#bcbd22", "ipoib": "#ff9896"}


def layout(topo, max_hosts: int = 4) -> tuple[dict[str, tuple[float, float]], list[int]]:
    """Hand layout: hosts side by side, devices in layers by kind; fabric devices above/below all hosts."""
    hosts = topo.hosts[:max_hosts]
    pos: dict[str, tuple[float, float]] = {}
    x0 = 0.0
    for h in hosts:
        layers: dict[float, list[str]] = {}
        for d in topo.devices:
            if d.host == h:
                layers.setdefault(_LAYER[d.kind], []).append(d.id)
        width = max((len(v) for v in layers.values()), default=1)
        for y, ids in layers.items():
            step = width / len(ids)
            for k, i in enumerate(ids):
                pos[i] = (x0 + step * (k + 0.5), y)
        x0 += width + 1.0
    total = max(x0 - 1.0, 1.0)
    fabric: dict[float, list[str]] = {}
    for d in topo.devices:
        if d.host is None:
            y = _LAYER[d.kind] + (1.2 if d.attrs.get("tier") == "spine" else 0.0)
            if d.kind == "nvswitch":
                y = -1.0
            fabric.setdefault(y, []).append(d.id)
    for y, ids in fabric.items():
        shown = [i for i in ids if any(ln.a in pos or ln.b in pos for ln in topo.links_of(i))] or ids[:1]
        step = total / len(shown)
        for k, i in enumerate(shown):
            pos[i] = (step * (k + 0.5), y)
    return pos, hosts


#: drawings with more devices than this get no per-device labels (the title says so)
MAX_LABELLED = 160
#: smallest label font (points); where labels would need smaller, they are left out (the title says so)
MIN_LABEL_FONT = 4.0
_MAX_LABEL_FONT = 6.5
_NODE_PT = 19.5  # node marker diameter (points) where there is room


def figure_width(pos: dict[str, tuple[float, float]]) -> float:
    """Inches: about 0.9 per layout unit, between 8 and 30."""
    xs = [p[0] for p in pos.values()] or [0.0]
    return max(8.0, min(30.0, (max(xs) - min(xs) + 2) * 0.9))


def label_plan(pos: dict[str, tuple[float, float]], labels: dict[str, str], width_in: float,
               max_labelled: int = MAX_LABELLED) -> tuple[float, float, str]:
    """(label font in points, 0 for no labels; node diameter in points; a note for the title, '' if none).

    Labels go under their node and must fit the horizontal gap to the next node of the same row
    (about 0.6 em a character): the font shrinks to fit, down to :data:`MIN_LABEL_FONT`; below that, or
    with more than ``max_labelled`` devices drawn, there are no per-device labels and the note says so."""
    xs = [p[0] for p in pos.values()] or [0.0]
    pt_per_unit = width_in * 72 * 0.8 / (max(xs) - min(xs) + 2)  # the axes take ~80% of the figure
    rows: dict[float, list[float]] = {}
    for x, y in pos.values():
        rows.setdefault(round(y, 3), []).append(x)
    gaps = [b - a for v in rows.values() for a, b in zip(sorted(v), sorted(v)[1:]) if b > a]
    gap_pt = (min(gaps) if gaps else 2.0) * pt_per_unit
    node = max(4.0, min(_NODE_PT, 0.75 * gap_pt))
    longest = max((len(lab) for lab in labels.values()), default=1)
    font = min(_MAX_LABEL_FONT, 0.9 * gap_pt / (0.6 * max(1, longest)))
    if len(pos) > max_labelled:
        return 0.0, node, f"device labels left out: {len(pos)} devices drawn (more than {max_labelled})"
    if font < MIN_LABEL_FONT:
        return 0.0, node, f"device labels left out: {len(pos)} devices too close for {MIN_LABEL_FONT:g} pt text"
    return font, node, ""


def draw(topo, path: str, max_hosts: int = 4) -> None:
    """Draw ``topo`` to an image file: hosts side by side, devices layered by kind, links coloured by
    kind with width growing with bandwidth. Clusters show their first ``max_hosts`` hosts; labels shrink
    to fit, and are left out (the title says so) where they cannot (:func:`label_plan`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    pos, hosts = layout(topo, max_hosts)
    edges = [ln for ln in topo.links if ln.a in pos and ln.b in pos]
    width_in = figure_width(pos)
    fig, ax = plt.subplots(figsize=(width_in, 7.5))
    widths = [0.6 + 1.2 * math.log10(1 + ln.gbps) for ln in edges]
    colors = [_EDGE.get(ln.spec.kind, "#333333") for ln in edges]
    nodes = [d for d in topo.devices if d.id in pos]
    labels = {d.id: d.id.split("/")[-1] for d in nodes}
    font, node_pt, label_note = label_plan(pos, labels, width_in)
    try:
        import networkx as nx
    except ImportError:
        nx = None
    if nx is not None:
        g = nx.Graph()
        for d in nodes:
            g.add_node(d.id)
        for ln in edges:
            g.add_edge(ln.a, ln.b)
        nx.draw_networkx_edges(g, pos, ax=ax, edgelist=[(ln.a, ln.b) for ln in edges], width=widths,
                               edge_color=colors, alpha=0.8)
        nx.draw_networkx_nodes(g, pos, ax=ax, nodelist=[d.id for d in nodes],
                               node_color=[_COLORS[d.kind] for d in nodes], node_size=node_pt ** 2,
                               edgecolors="black")
    else:
        for ln, w, c in zip(edges, widths, colors):
            (xa, ya), (xb, yb) = pos[ln.a], pos[ln.b]
            ax.plot([xa, xb], [ya, yb], color=c, linewidth=w, alpha=0.8, zorder=1)
        for d in nodes:
            x, y = pos[d.id]
            ax.scatter([x], [y], s=node_pt ** 2, c=_COLORS[d.kind], edgecolors="black", zorder=2)
    if font > 0:  # under the node, on a white ground: never wider than the gap to the next node
        for d in nodes:
            ax.annotate(labels[d.id], pos[d.id], xytext=(0, -node_pt / 2 - 1), textcoords="offset points",
                        fontsize=font, ha="center", va="top", zorder=4,
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none",
                              "alpha": 0.8})
    kinds_used = sorted({ln.spec.kind for ln in edges})
    handles = [Line2D([0], [0], color=_EDGE.get(k, "#333333"), lw=3, label=k) for k in kinds_used]
    handles += [Line2D([0], [0], marker="o", color="w", markerfacecolor=_COLORS[k], markeredgecolor="black",
                       markersize=9, label=k) for k in _COLORS if any(d.kind == k for d in nodes)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    shown = f" (first {len(hosts)} of {len(topo.hosts)} hosts)" if len(topo.hosts) > len(hosts) else ""
    title = f"{topo.name}{shown}: {topo.nranks} ranks, links coloured by kind, width ~ log GB/s"
    if label_note:
        title += f"\n{label_note}; `interlink topo` lists every device"
    ax.set_title(title, fontsize=10)
    ax.set_axis_off()
    ax.margins(0.03, 0.08)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
