"""A simulation as a Chrome / Perfetto trace (JSON "Trace Event Format"; open in ui.perfetto.dev or
chrome://tracing).

    write_trace(result, "sim.json")                 first 64 ranks and the 32 busiest links
    write_trace(result, "sim.json", trace_all=True)  every rank, every link, every round

Tracks: process "ranks" has one thread per rank, with one event per round (from the round's start to
the end of the rank's last flow or reduction) and, nested in it, one event per message the rank sends
(to its end at the receiver); process "links" has one thread per directed link, with one event per
round in which the link carried data (until its last flow finished transmitting). Runs of identical
rounds are written out for their first ``max_repeats`` rounds, then as one event covering the rest
(``"rounds a..b (x k)"``), so a 16,384-rank run stays a few MB. Timestamps are microseconds.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .engine import SimResult

__all__ = ["chrome_trace", "write_trace"]

_PID_RANKS, _PID_LINKS, _PID_RUN = 1, 2, 0


def _meta(pid: int, tid: int | None, name: str, sort: int | None = None) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = []
    if tid is None:
        ev.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}})
        if sort is not None:
            ev.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": sort}})
    else:
        ev.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
        ev.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    return ev


def chrome_trace(result: SimResult, *, max_ranks: int = 64, max_links: int = 32, max_repeats: int = 4,
                 flows: bool = True, trace_all: bool = False) -> dict[str, Any]:
    """The trace as a dict ({"traceEvents": [...], "displayTimeUnit": "ns", "metadata": {...}}).

    ``max_ranks``/``max_links``: the first ranks and the busiest directed links get a track
    (``trace_all``: all of them, and every round of every repeat). ``flows``: per-message events.
    """
    p = result.nranks
    ranks = np.arange(p) if trace_all else np.arange(min(p, max_ranks))
    order = np.argsort(-result.link_bytes, kind="stable")
    links = result.link_res[order] if trace_all else result.link_res[order[:max_links]]
    reps = None if trace_all else max(1, int(max_repeats))
    rank_set = np.zeros(p, bool)
    rank_set[ranks] = True
    link_tid = {int(r): i for i, r in enumerate(links.tolist())}

    ev: list[dict[str, Any]] = []
    ev += _meta(_PID_RUN, None, f"{result.collective}/{result.algorithm} on {result.topology_name}", 0)
    ev += _meta(_PID_RANKS, None, f"ranks ({len(ranks)} of {p})", 1)
    ev += _meta(_PID_LINKS, None, f"links ({len(links)} busiest of {result.link_res.size})", 2)
    ev += _meta(_PID_RUN, 0, "rounds")
    for r in ranks.tolist():
        ev += _meta(_PID_RANKS, r, f"rank {r}")
    for res, tid in link_tid.items():
        ev += _meta(_PID_LINKS, tid, result.link_name(res))

    for ph in result.phases:
        n_out = ph.repeat if reps is None else min(ph.repeat, reps)
        label = f"phase {ph.index}: {ph.nflows} flows" + (f", x{ph.repeat}" if ph.repeat > 1 else "")
        ev.append({"ph": "X", "pid": _PID_RUN, "tid": 0, "name": label, "ts": ph.start_us,
                   "dur": ph.round_us * ph.repeat,
                   "args": {"rounds": ph.repeat, "round_us": ph.round_us, "comm_us": ph.comm_us,
                            "reduce_us": ph.reduce_us, "ideal_us": ph.ideal_us, "events": ph.events,
                            "merged_patterns": ph.merged}})
        busy = ph.rank_busy_us
        tracked = ranks.tolist() if busy.size else []  # phases past max_detail keep no per-rank detail
        sel_flows = np.flatnonzero(rank_set[ph.flow_src]) if flows and ph.nflows else np.zeros(0, np.int64)
        lk = [(tid, float(b)) for res, b in zip(ph.link_res.tolist(), ph.link_busy_us.tolist())
              if (tid := link_tid.get(res)) is not None]
        for j in range(n_out):
            t0 = ph.start_us + j * ph.round_us
            rnd = ph.first_round + j
            for r in tracked:
                d = float(busy[r])
                if d > 0:
                    ev.append({"ph": "X", "pid": _PID_RANKS, "tid": r, "name": f"round {rnd}", "ts": t0, "dur": d})
            for f in sel_flows.tolist():
                s, dst = int(ph.flow_src[f]), int(ph.flow_dst[f])
                ev.append({"ph": "X", "pid": _PID_RANKS, "tid": s, "name": f"send to {dst}", "ts": t0,
                           "dur": float(ph.flow_end_us[f]), "cat": "flow"})
            for tid, b in lk:
                if b > 0:
                    ev.append({"ph": "X", "pid": _PID_LINKS, "tid": tid, "name": f"round {rnd}", "ts": t0, "dur": b})
        if n_out < ph.repeat:
            t0 = ph.start_us + n_out * ph.round_us
            dur = ph.round_us * (ph.repeat - n_out)
            name = f"rounds {ph.first_round + n_out}..{ph.first_round + ph.repeat - 1} (x{ph.repeat - n_out})"
            for r in tracked:
                if busy[r] > 0:
                    ev.append({"ph": "X", "pid": _PID_RANKS, "tid": r, "name": name, "ts": t0, "dur": dur,
                               "cat": "compressed", "args": {"busy_per_round_us": float(busy[r])}})
            for tid, b in lk:
                if b > 0:
                    ev.append({"ph": "X", "pid": _PID_LINKS, "tid": tid, "name": name, "ts": t0, "dur": dur,
                               "cat": "compressed", "args": {"busy_per_round_us": b}})
    return {
        "traceEvents": ev,
        "displayTimeUnit": "ns",
        "metadata": {"collective": result.collective, "algorithm": result.algorithm, "nranks": p,
                     "nbytes": result.nbytes, "topology": result.topology_name, "time_us": result.time_us,
                     "busbw_gbps": result.busbw_gbps, "model": result.model,
                     "ranks_traced": int(len(ranks)), "links_traced": int(len(links))},
    }


def write_trace(result: SimResult, path: str, **kwargs: Any) -> int:
    """Write :func:`chrome_trace` to ``path``; returns the number of events."""
    tr = chrome_trace(result, **kwargs)
    with open(path, "w") as f:
        json.dump(tr, f, separators=(",", ":"))
    return len(tr["traceEvents"])
