"""Every rank's flight-recorder calls on one Chrome / Perfetto timeline, beside what the model says each
call should take.

Process "measured": one thread per rank, one event per recorded call (from its start to its end; a call
of the shared-page path, which records no end, is an instant; a call not done lasts until the dump). Clocks
are aligned as :func:`interlink.doctor.hang.clock_offsets` aligns them. Process "model": for each call
every rank entered, one event from the moment the last rank entered (when the collective can start) for
the time the cost model predicts for that call (``interlink.model.predict``: the same collective, bytes,
ranks and algorithm on the given topology, default this host). A measured call much longer than the
model's, after the last rank entered, is where reality departs from the algorithm; a call that waits for a
late rank shows as the gap before the model's event. Open the file in ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Optional

from .dumps import RankDump
from .hang import clock_offsets

_PID_MEASURED, _PID_MODEL = 1, 2
_ROUNDS = 1000  # thread ids of the ranks' round tracks: 1000 + rank
_LANES = 2000  # thread ids of their transfers per peer and lane: 2000 + 100 * rank + k


def _predict_us(op: str, nbytes: int, nranks: int, algorithm: str, topology: Optional[str],
                cache: dict) -> Optional[tuple[float, str]]:
    key = (op, nbytes, nranks, algorithm, topology)
    if key in cache:
        return cache[key]
    from ..model import predict

    got = None
    for algo in (algorithm or None, None):
        try:
            p = predict(op, max(0, nbytes), topology, nranks=nranks, algorithm=algo)
            got = (p.time_us, f"{p.algorithm}/{p.protocol}")
            break
        except Exception:  # noqa: BLE001 - an algorithm the model does not price here: its own choice
            continue
    cache[key] = got
    return got


def _simulate_rounds(op: str, nbytes: int, nranks: int, algorithm: str, topology: Optional[str],
                     cache: dict) -> Optional[list[tuple[float, float]]]:
    """(start, duration) in us of every round the simulator plays for the call's Schedule (the same
    collective, bytes, ranks and algorithm on ``topology``, default this host), or None where it has none."""
    key = (op, nbytes, nranks, algorithm, topology)
    if key not in cache:
        from ..sim.engine import simulate_collective

        got = None
        try:
            r = simulate_collective(op, max(0, nbytes), topology or "this", algorithm=algorithm or None,
                                    nranks=nranks)
            got = [(ph.start_us + k * ph.round_us, ph.round_us) for ph in r.phases for k in range(ph.repeat)]
        except Exception:  # noqa: BLE001 - a path the simulator has no Schedule for (the host page's)
            got = None
        cache[key] = got
    return cache[key]


def _simulated_rounds(ev: list, dumps: list[RankDump], entered: dict, info: dict, offs: dict, t0: float,
                      topology: Optional[str]) -> None:
    """Process "model", thread "simulated rounds": for each call whose rounds were traced (INTERLINK_TRACE)
    and that every rank entered, the simulator's rounds of its Schedule from the moment the last rank
    entered, each with the slowest rank's measured time of the same round beside it (``measured_us``) and
    their ratio: the round where the run departs from the algorithm is the one whose ratio stands out."""
    measured: dict[tuple, dict[int, float]] = defaultdict(dict)  # (call signature's group, seq) -> round -> us
    by_seq: dict[int, list[tuple]] = defaultdict(list)  # seq -> the (group, seq) keys of the recorded calls
    for key in info:
        by_seq[key[1]].append(key)
    for d in dumps:
        for sig, seq, k, n, r0, _r1, r2, _s, _r, *_ops in d.rounds or ():
            words = str(sig).split()
            for key in by_seq.get(seq, ()):
                if key[0] in words:
                    measured[key][k] = max(measured[key].get(k, 0.0), (r2 - r0) * 1e6)
                    break
    if not measured:
        return
    ev.append({"ph": "M", "pid": _PID_MODEL, "tid": 1, "name": "thread_name", "args": {"name": "simulated rounds"}})
    cache: dict = {}
    for key, rounds in sorted(measured.items(), key=lambda kv: max(entered[kv[0]].values())):
        c, n = info[key]
        ts = entered[key]
        if len(ts) < n or c.nbytes < 0:
            continue
        sim = _simulate_rounds(c.op, c.nbytes, n, c.algorithm, topology, cache)
        if not sim:
            continue
        start = max(ts.values())
        for k, (s0, dur) in enumerate(sim):
            m = rounds.get(k)
            args = {"round": k, "rounds": len(sim), "simulated_us": dur}
            if m is not None:
                args.update(measured_us=m, measured_over_simulated=(m / dur) if dur > 0 else None)
            ev.append({"ph": "X", "pid": _PID_MODEL, "tid": 1, "ts": start + s0, "dur": dur,
                       "name": f"{key[0]} #{key[1]} round {k + 1}/{len(sim)} (simulated)", "args": args})


def chrome_trace(dumps: list[RankDump], topology: Optional[str] = None, model: bool = True) -> dict[str, Any]:
    offs = clock_offsets(dumps)
    starts = [c.start - offs.get(d.rank, 0.0) for d in dumps for g in d.groups.values() for c in g.calls.values()
              if c.start is not None]
    t0 = min(starts) if starts else 0.0
    ev: list[dict[str, Any]] = [
        {"ph": "M", "pid": _PID_MEASURED, "name": "process_name", "args": {"name": "measured (flight recorder)"}},
        {"ph": "M", "pid": _PID_MODEL, "name": "process_name", "args": {"name": "model"}},
    ]
    entered: dict[tuple, dict[int, float]] = defaultdict(dict)
    info: dict[tuple, Any] = {}
    for d in sorted(dumps, key=lambda d: d.rank):
        ev.append({"ph": "M", "pid": _PID_MEASURED, "tid": d.rank, "name": "thread_name",
                   "args": {"name": f"rank {d.rank}"}})
        for g in d.groups.values():
            for c in sorted(g.calls.values(), key=lambda c: c.seq):
                if c.start is None:
                    continue
                ts = (c.start - offs.get(d.rank, 0.0) - t0) * 1e6
                args = {"group": g.name, "seq": c.seq, "op": c.op, "algorithm": c.algorithm, "dtype": c.dtype,
                        "count": c.count, "bytes": c.nbytes, "state": c.state}
                name = f"{g.name} #{c.seq} {c.op}" + (f":{c.algorithm}" if c.algorithm else "")
                dur = c.duration
                if dur is None and c.failed_at is not None:
                    dur = c.failed_at - c.start
                if dur is None and c.state != "done" and d.time is not None:
                    dur = d.time - c.start
                if dur is None:
                    ev.append({"ph": "i", "s": "t", "pid": _PID_MEASURED, "tid": d.rank, "ts": ts, "name": name,
                               "args": args})
                else:
                    ev.append({"ph": "X", "pid": _PID_MEASURED, "tid": d.rank, "ts": ts, "dur": dur * 1e6,
                               "name": name, "args": args})
                entered[(g.name, c.seq)][d.rank] = ts
                info[(g.name, c.seq)] = (c, len(g.ranks) or len(dumps))
    for d in dumps:  # INTERLINK_TRACE: each round of the executor, its transfer and local phases
        if not d.rounds:
            continue
        tid = _ROUNDS + d.rank
        ev.append({"ph": "M", "pid": _PID_MEASURED, "tid": tid, "name": "thread_name",
                   "args": {"name": f"rank {d.rank} rounds"}})
        off = offs.get(d.rank, 0.0)
        lane_tids: dict = {}
        for sig, seq, k, n, r0, r1, r2, sent, received, *more in d.rounds:
            args = {"call": sig, "seq": seq, "round": k, "rounds": n, "bytes_sent": sent, "bytes_received": received}
            for kind, peer, lane, nb, te in (more[0] if more else ()):  # each op of the round: peer and lane
                lname = f"rank {d.rank} {kind} {'to' if kind == 'send' else 'from'} rank {peer} lane {lane}"
                ltid = lane_tids.get(lname)
                if ltid is None:  # a thread per (rank, direction, peer, lane)
                    ltid = lane_tids[lname] = _LANES + 100 * d.rank + len(lane_tids)
                    ev.append({"ph": "M", "pid": _PID_MEASURED, "tid": ltid, "name": "thread_name",
                               "args": {"name": lname}})
                ev.append({"ph": "X", "pid": _PID_MEASURED, "tid": ltid, "ts": (r0 - off - t0) * 1e6,
                           "dur": max(0.0, te - r0) * 1e6,
                           "name": f"{kind} {'to' if kind == 'send' else 'from'} rank {peer} lane {lane}",
                           "args": {**args, "bytes": nb}})
            base = (r0 - off - t0) * 1e6
            ev.append({"ph": "X", "pid": _PID_MEASURED, "tid": tid, "ts": base, "dur": (r2 - r0) * 1e6,
                       "name": f"#{seq} round {k + 1}/{n}", "args": args})
            for name, a, b in (("transfer", r0, r1), ("local", r1, r2)):
                if b > a:
                    ev.append({"ph": "X", "pid": _PID_MEASURED, "tid": tid, "ts": (a - off - t0) * 1e6,
                               "dur": (b - a) * 1e6, "name": name, "args": args})
    if model:
        _simulated_rounds(ev, dumps, entered, info, offs, t0, topology)
        ev.append({"ph": "M", "pid": _PID_MODEL, "tid": 0, "name": "thread_name", "args": {"name": "predicted"}})
        cache: dict = {}
        for key, ts in sorted(entered.items(), key=lambda kv: max(kv[1].values())):
            c, n = info[key]
            if len(ts) < n or c.nbytes < 0:
                continue  # not every rank entered it (or its size is unknown): nothing to predict from
            got = _predict_us(c.op, c.nbytes, n, c.algorithm, topology, cache)
            if got is None:
                continue
            us, how = got
            ev.append({"ph": "X", "pid": _PID_MODEL, "tid": 0, "ts": max(ts.values()), "dur": us,
                       "name": f"{key[0]} #{key[1]} {c.op} (model: {how})",
                       "args": {"predicted_us": us, "last_entered": max(ts, key=ts.get),
                                "entry_spread_us": max(ts.values()) - min(ts.values())}})
    return {"traceEvents": ev, "displayTimeUnit": "ns",
            "otherData": {"ranks": sorted(d.rank for d in dumps), "clock_offsets_s": offs}}


def write_trace(dumps: list[RankDump], path: str, topology: Optional[str] = None, model: bool = True) -> int:
    tr = chrome_trace(dumps, topology, model)
    with open(path, "w") as f:
        json.dump(tr, f)
    return len(tr["traceEvents"])
