"""Every rank's flight-recorder dump -> verdicts, each with its evidence.

The dumps (:mod:`interlink.doctor.dumps`) are merged into one table per group: rank x call sequence
number. Verdicts, most specific first:

- ``dead``: a rank left no dump and another rank's error says its process died (its connection closed
  while a call waited for it);
- ``never-entered``: some ranks entered call N of a group and did not finish it; a rank of the group
  never entered it (what it last did, and its state when it dumped);
- ``mismatch``: ranks entered call N with different calls (op, dtype, count, root, reduction): who
  called what;
- ``stalled``: every rank entered call N and it did not finish: the wait-for graph (who waits for
  whom, for which bytes, in which round) and the rank everyone waits for;
- ``straggler``: over the last completed calls before any call that went wrong, one rank entered last most of the time, by a margin
  (clocks aligned by the calls' ends when the ranks are on different hosts);
- ``missing-dump``: a rank of the job left no dump and nothing says why.

``analyze`` returns the verdicts; ``report`` prints them.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Optional

from .dumps import Call, RankDump

#: a straggler enters last in at least this share of at least STRAGGLER_MIN_CALLS completed calls, by at
#: least STRAGGLER_MIN_LAG seconds (median over those calls)
STRAGGLER_SHARE = 0.6
STRAGGLER_MIN_CALLS = 4
STRAGGLER_MIN_LAG = 2e-3
STRAGGLER_WINDOW = 32

ORDER = ("dead", "never-entered", "mismatch", "stalled", "straggler", "missing-dump")


@dataclass
class Verdict:
    kind: str
    summary: str
    ranks: list[int] = field(default_factory=list)
    group: str = ""
    seq: Optional[int] = None
    evidence: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "summary": self.summary, "ranks": self.ranks, "group": self.group,
                "seq": self.seq, "evidence": self.evidence}


def _ranks(rs: Any) -> str:
    rs = sorted(set(rs))
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return "ranks " + ",".join(str(r) for r in rs)


def _nbytes(n: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n / (1 << k):.1f} {unit}"
    return f"{n} B"


def expected_ranks(dumps: list[RankDump], world_size: Optional[int] = None) -> list[int]:
    n = world_size or max([d.world_size or 0 for d in dumps] + [0])
    members: set[int] = set()
    for d in dumps:
        for g in d.groups.values():
            members.update(g.ranks)
    if n:
        members.update(range(n))
    members.update(d.rank for d in dumps)
    return sorted(members)


def clock_offsets(dumps: list[RankDump]) -> dict[int, float]:
    """Per rank, seconds to subtract from its wall-clock times to put them on rank ``ref``'s clock. Ranks
    that share a host identity share a clock (0); across hosts, the median over completed calls of the
    difference of their ends (a collective ends on every rank within its last message's latency)."""
    hosts = {d.rank: d.host_id or d.host for d in dumps}
    if len(set(hosts.values())) <= 1:
        return {d.rank: 0.0 for d in dumps}
    ref = min(hosts)
    ends: dict[int, dict[tuple, float]] = defaultdict(dict)
    for d in dumps:
        for g in d.groups.values():
            for c in g.calls.values():
                if c.state == "done" and c.end is not None:
                    ends[d.rank][(g.name, c.seq)] = c.end
    out = {}
    for d in dumps:
        if hosts[d.rank] == hosts[ref]:
            out[d.rank] = 0.0
            continue
        common = [ends[d.rank][k] - ends[ref][k] for k in ends[d.rank] if k in ends[ref]]
        out[d.rank] = statistics.median(common) if common else 0.0
    return out


def analyze(dumps: list[RankDump], world_size: Optional[int] = None) -> list[Verdict]:
    by_rank = {d.rank: d for d in dumps}
    expected = expected_ranks(dumps, world_size)
    missing = [r for r in expected if r not in by_rank]
    verdicts: list[Verdict] = []
    offs = clock_offsets(dumps)

    # ---- dead ranks: named by another rank's PeerLostError (its connection closed), no dump of its own
    died: dict[int, list[str]] = defaultdict(list)
    for d in dumps:
        for g in d.groups.values():
            for c in g.calls.values():
                # what a rank saw itself (not a peer's abort passing it on)
                if c.error == "PeerLostError" and "died" in c.message and "aborted the job" not in c.message:
                    for r in c.error_ranks:
                        died[r].append(f"rank {d.rank}, {g.name} call {c.seq} ({c.describe()}): {c.message}")
    for r in sorted(died):
        if r in by_rank:
            continue  # it wrote a dump: it did not die before it
        ev = sorted(set(died[r]))
        last = _last_seen(r, dumps)
        seen = _last_call(r, dumps)
        verdicts.append(Verdict("dead", f"rank {r} died: its connection closed while other ranks waited for it, "
                                        f"and it left no dump", [r], evidence=ev[:6] + ([seen] if seen else [])))
    dead = {v.ranks[0] for v in verdicts}

    # ---- per group: the table rank x seq
    groups: dict[str, dict[int, Any]] = defaultdict(dict)
    members: dict[str, list[int]] = {}
    for d in dumps:
        for name, g in d.groups.items():
            groups[name][d.rank] = g
            if g.ranks:
                members[name] = g.ranks
    for name in sorted(groups, key=lambda n: (n != "world", n)):
        views = groups[name]
        ranks = members.get(name) or sorted(views)
        verdicts += _group_verdicts(name, ranks, views, by_rank, dead, offs)

    # ---- missing dumps nothing else explains
    for r in missing:
        if r in dead:
            continue
        waited = sorted({d.rank for d in dumps for g in d.groups.values() for c in g.calls.values()
                         if c.state != "done" and (r in c.waits_for or r in c.error_ranks
                                                   or any(p.get("peer") == r for p in c.pending))})
        ev = [f"files read: {len(dumps)} ({', '.join(sorted({d.source for d in dumps}))}); expected ranks "
              f"{expected[0]}..{expected[-1]}"]
        if waited:
            ev.append(f"{_ranks(waited)} waited for rank {r} when they dumped")
        last = _last_seen(r, dumps)
        if last:
            ev.append(last)
        verdicts.append(Verdict("missing-dump", f"rank {r} left no dump: it ran without INTERLINK_DUMP_DIR, was "
                                                f"killed (SIGKILL) or stopped, or its host is unreachable; "
                                                f"collect its dump (kill -USR1 <pid>) or check its log",
                                [r], evidence=ev))
    verdicts.sort(key=lambda v: ORDER.index(v.kind))
    return verdicts


def _last_call(r: int, dumps: list[RankDump]) -> str:
    """The call the others were in when rank r went away."""
    for d in dumps:
        for g in d.groups.values():
            if r not in g.ranks:
                continue
            bad = [c for c in g.calls.values() if c.state != "done"]
            if bad:
                c = min(bad, key=lambda c: c.seq)
                return f"the others were in call {c.seq} of {g.name} ({c.describe()})"
    return ""


def _last_seen(r: int, dumps: list[RankDump]) -> str:
    """What other ranks' dumps say of rank r: the transports' view is all there is."""
    for d in dumps:
        if r in (d.broken or {}).get("ranks", []) and d.broken:
            return f"rank {d.rank}'s communicator failed on it: {d.broken.get('error')}: {d.broken.get('message')}"
    return ""


def _group_verdicts(name: str, ranks: list[int], views: dict, by_rank: dict, dead: set,
                    offs: dict[int, float]) -> list[Verdict]:
    out: list[Verdict] = []
    present = [r for r in ranks if r in views]
    if not present:
        return out
    last = {r: views[r].seq for r in present}
    # the calls some rank entered and did not finish
    top = max(last.values())
    # (a rank behind the others' last call had not entered it when it dumped, whatever that call's state:
    # gloo marks a failed call completed)
    open_seqs = sorted({c.seq for r in present for c in views[r].calls.values() if c.state != "done"}
                       | ({min(last.values()) + 1} if min(last.values()) < top else set()))
    missing = [r for r in ranks if r not in views]

    # ---- never entered: a rank whose last call is below a call others entered and did not finish
    for k in open_seqs:
        entered = [r for r in present if last[r] >= k]
        behind = [r for r in present if last[r] < k]
        if not behind or not entered:
            continue
        calls_k = [views[r].calls[k] for r in entered if k in views[r].calls]
        what = calls_k[0].describe() if calls_k else "?"
        ev = [f"{_ranks(entered)} entered call {k} ({what})"
              + (f", states: {_states(calls_k, entered)}" if calls_k else "")]
        for r in behind:
            v, d = views[r], by_rank[r]
            lc = v.calls.get(v.seq)
            did = (f"its last call was {v.seq} ({lc.describe()}, {lc.state}"
                   + (f", ended {_ago(lc, d)}" if lc and lc.end is not None and d.time else "") + ")") if lc \
                else f"it entered no call of {name}" if v.seq == 0 else f"its last call was {v.seq}"
            now = f"; its dump was written on {d.reason}" if d.reason else ""
            q = f"; queued: {', '.join(d.queued[:3])}" if d.queued else ""
            ev.append(f"rank {r}: {did}{now}{q}")
        waits = _who_waited(k, entered, views)
        if waits:
            ev.append(waits)
        out.append(Verdict("never-entered", f"{_ranks(behind)} never entered call {k} of group {name} ({what}); "
                                            f"the other ranks wait in it", behind, name, k, ev))
        break  # the first such call explains the rest

    # ---- mismatch: the same call number, different calls
    for k in sorted({c.seq for r in present for c in views[r].calls.values()}):
        calls = {r: views[r].calls[k] for r in present if k in views[r].calls}
        keys = defaultdict(list)
        for r, c in calls.items():
            keys[c.key()].append(r)
        if len(keys) < 2:
            continue
        parts = sorted(keys.items(), key=lambda kv: -len(kv[1]))
        ev = [f"{_ranks(rs)} called {calls[rs[0]].describe()} ({_states([calls[x] for x in rs], rs)})"
              for _, rs in parts]
        for r, c in calls.items():
            if c.error == "CollectiveMismatchError" and c.message:
                ev.append(f"rank {r}'s error: {c.message}")
                break
        odd = [r for _, rs in parts[1:] for r in rs]
        out.append(Verdict("mismatch", f"call {k} of group {name} does not match: " + "; ".join(
            f"{_ranks(rs)} called {calls[rs[0]].describe()}" for _, rs in parts), odd, name, k, ev))
        break

    # ---- stalled: everyone (with a dump) entered the call, it did not finish
    if not any(v.kind in ("never-entered", "mismatch") for v in out):
        for k in open_seqs:
            calls = {r: views[r].calls[k] for r in present if k in views[r].calls}
            if len(calls) < len(present) or all(c.state == "done" for c in calls.values()):
                continue
            v = _stalled(name, k, ranks, calls, by_rank, dead, missing)
            if not (v.ranks and set(v.ranks) <= dead):  # a dead rank's verdict says it already
                out.append(v)
            break

    # ---- straggler over the completed calls before the first call that went wrong (past a mismatch the
    # ranks' call numbers no longer name the same collective, so their entry times say nothing)
    stop = min((v.seq for v in out if v.kind in ("never-entered", "mismatch") and v.seq is not None), default=None)
    s = _straggler(name, present, views, offs, stop)
    if s is not None:
        out.append(s)
    return out


def _states(calls: list[Call], ranks: list[int]) -> str:
    c = Counter(x.state for x in calls)
    return ", ".join(f"{n} {s}" for s, n in c.most_common())


def _ago(c: Call, d: RankDump) -> str:
    return f"{d.time - c.end:.2f} s before its dump"


def _who_waited(k: int, entered: list[int], views: dict) -> str:
    bits = []
    for r in entered:
        c = views[r].calls.get(k)
        if c is None:
            continue
        w = sorted(set(c.waits_for) | {p["peer"] for p in c.pending})
        if c.error:
            bits.append(f"rank {r}: {c.error}" + (f" waiting for {_ranks(w)}" if w else ""))
        elif w:
            bits.append(f"rank {r} waiting for {_ranks(w)}")
    return "; ".join(bits)


def _stalled(name: str, k: int, ranks: list[int], calls: dict[int, Call], by_rank: dict, dead: set,
             missing: list[int]) -> Verdict:
    edges: dict[int, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    ev = []
    for r, c in sorted(calls.items()):
        where = f" in round {c.round + 1} of {c.rounds}" if c.round is not None and c.rounds else ""
        for p in c.pending:
            miss = int(p.get("bytes", 0)) - int(p.get("done_bytes", 0))
            what = (f"receive from rank {p['peer']}: {_nbytes(miss)} of {_nbytes(int(p.get('bytes', 0)))} missing"
                    if p.get("kind") == "recv" else
                    f"send to rank {p['peer']}: {_nbytes(miss)} of {_nbytes(int(p.get('bytes', 0)))} not taken")
            edges[r][int(p["peer"])].append(what + (f" (lane {p['lane']})" if p.get("lane") else "") + where)
        for w in c.waits_for:
            if w not in edges[r]:
                edges[r][w].append(f"waits for rank {w}" + (" (host page)" if c.algorithm else ""))
    for r in sorted(edges):
        for p, whats in sorted(edges[r].items()):
            ev.append(f"rank {r} -> rank {p}: " + "; ".join(whats[:3]))
    # the first failure and whom it named
    failures = sorted((c.failed_at or float("inf"), r, c) for r, c in calls.items() if c.error)
    blamed: set[int] = set()
    if failures:
        t, r, c = failures[0]
        ev.insert(0, f"first failure: rank {r}, {c.error}: {c.message}")
        if c.error == "CommTimeoutError":
            blamed.update(c.error_ranks)
    # the ranks everyone waits for: reachable from every waiting rank, waiting on no one themselves
    # (or with no dump, or still inside the call without having failed)
    reach = {r: _reach(r, edges) for r in edges}
    sinks = [p for p in ranks if p not in edges or not edges[p]]
    still = [r for r, c in calls.items() if c.state == "started" and not c.error]
    culprits = set()
    for s in sinks:
        if edges and all(s in reach[r] or s == r for r in edges):
            culprits.add(s)
    if not culprits:
        culprits = blamed or set(still)
    if not culprits and missing:
        culprits = set(missing)
        ev.append(f"{_ranks(missing)} of the group left no dump: what the others wait for cannot be seen from "
                  f"theirs")
    for r in still:
        c = calls[r]
        ev.append(f"rank {r} was still inside call {k} when it dumped ({by_rank[r].reason}) without having failed "
                  f"or timed out: it stopped making progress (paused, stopped, starved of CPU, or a link stalled)")
    if still and not (culprits - set(still)):
        culprits = set(still) | (culprits & set(still))
    what = next(iter(calls.values())).describe()
    cyc = _cycle(edges)
    summary = (f"every rank entered call {k} of group {name} ({what}) and it stalled: "
               + (f"{_ranks(culprits)} is what the others wait for" if culprits else "no rank is waited for by all")
               + (f"; wait-for cycle {' -> '.join(map(str, cyc))}" if cyc and len(cyc) > 2 and not culprits else ""))
    return Verdict("stalled", summary, sorted(culprits), name, k, ev)


def _reach(r: int, edges: dict) -> set[int]:
    seen, todo = set(), [r]
    while todo:
        x = todo.pop()
        for p in edges.get(x, {}):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def _cycle(edges: dict) -> list[int]:
    for start in sorted(edges):
        path, x, seen = [start], start, {start}
        while edges.get(x):
            x = sorted(edges[x])[0]
            if x in seen:
                return path[path.index(x):] + [x]
            seen.add(x)
            path.append(x)
    return []


def _straggler(name: str, present: list[int], views: dict, offs: dict[int, float],
               stop: Optional[int] = None) -> Optional[Verdict]:
    if len(present) < 2:
        return None
    seqs = sorted({c.seq for r in present for c in views[r].calls.values()
                   if c.state == "done" and (stop is None or c.seq < stop)})
    seqs = [k for k in seqs if all(k in views[r].calls and views[r].calls[k].start is not None for r in present)]
    seqs = seqs[-STRAGGLER_WINDOW:]
    if len(seqs) < STRAGGLER_MIN_CALLS:
        return None
    last_counts: Counter = Counter()
    lags: dict[int, list[float]] = defaultdict(list)
    for k in seqs:
        starts = {r: views[r].calls[k].start - offs.get(r, 0.0) for r in present}
        late = max(starts, key=starts.get)
        others = [t for r, t in starts.items() if r != late]
        last_counts[late] += 1
        lags[late].append(starts[late] - statistics.median(others))
    r, n = last_counts.most_common(1)[0]
    lag = statistics.median(lags[r])
    if n < STRAGGLER_SHARE * len(seqs) or lag < STRAGGLER_MIN_LAG:
        return None
    durs = [views[x].calls[k].duration for x in present if x != r for k in seqs
            if views[x].calls[k].duration is not None]
    ev = [f"rank {r} entered last in {n} of the last {len(seqs)} completed calls of {name} "
          f"(calls {seqs[0]}..{seqs[-1]})",
          f"by {lag * 1e3:.1f} ms (median over those calls; max {max(lags[r]) * 1e3:.1f} ms) after the median of the "
          f"other ranks",
          ]
    if durs:
        ev.append(f"the other ranks' calls took {statistics.median(durs) * 1e3:.1f} ms (median): mostly waiting for it")
    if any(offs.values()):
        ev.append("clocks aligned across hosts by the calls' ends")
    return Verdict("straggler", f"rank {r} is a straggler in group {name}: it enters calls {lag * 1e3:.1f} ms after "
                                f"the others (the time is lost before the call: compute, data loading, a slower "
                                f"device or a busier core)", [r], name, seqs[-1], ev)


def report(verdicts: list[Verdict], dumps: list[RankDump], expected: list[int]) -> str:
    lines = [f"read {len(dumps)} dump(s) of {len(expected)} rank(s): "
             + ", ".join(f"{d.rank}" for d in sorted(dumps, key=lambda d: d.rank))
             + f" ({', '.join(sorted({d.source for d in dumps}))})"]
    if not verdicts:
        lines.append("no hang found: every rank finished every recorded call and none enters calls late")
    for i, v in enumerate(verdicts, 1):
        lines.append(f"{i}. [{v.kind}] {v.summary}")
        for e in v.evidence:
            lines.append(f"     - {e}")
    return "\n".join(lines)
