"""Flight-recorder dumps: every group's last calls, written as one JSON file per rank.

Each :class:`~interlink.runtime.group.Group` keeps its last ``INTERLINK_RECORDER`` calls (default 32;
0 keeps none) as ``Record`` objects in a deque: the call's plan (its signature names the collective, the
algorithm or shared-page path, dtype, count, reduction, root and group), its ``perf_counter`` start, its
state and duration. Nothing else is recorded while a call runs: everything a dump adds (wall-clock
times, what a waiting call still owes and is owed, which round it is in) is read when the dump is
written, from what the engine and the shared-page path already hold:

- ``Engine.waiting``: the ops of the last wait that went to sleep (set only on the sleeping branch),
  each with its peer, lane, direction, size and bytes moved so far;
- ``Engine.at``: the round of the plan the executor is in;
- ``FastPath.waiting``: (call, the function naming the ranks that have not published it), set when a
  shared-page call goes to sleep.

A dump is written to ``INTERLINK_DUMP_DIR`` (no directory, no dumps) as ``interlink-rank{R}.json``
(replaced atomically, so the last one wins) when a call of this rank fails (timeout, mismatch, a
peer's abort or death), on SIGUSR1, on SIGTERM (then the process ends as SIGTERM would end it) and at
exit. ``interlink doctor hang DIR`` reads them. The format is versioned (``FORMAT``, ``VERSION``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from typing import Any, Optional

FORMAT = "interlink-flight-recorder"
VERSION = 1
RECORDER_SIZE = int(os.environ.get("INTERLINK_RECORDER", "32"))  # rounded up to a power of two, at least 1
TRACE_CALLS = 1 << 16  # calls a group keeps when INTERLINK_TRACE is set
TRACE_ROUNDS = 1 << 18  # rounds the executor keeps (the first ones) when INTERLINK_TRACE is set

# the groups a dump lists: held (the last KEEP_GROUPS made) so that the dump at exit still has the world
# group of a job that called destroy()
KEEP_GROUPS = 64
_groups: dict[int, Any] = {}
_order = 0
# (id of the group's ctx, group name, seq) -> what the failure left: pending ops, round, error
_details: dict[tuple, dict] = {}
_lock = threading.RLock()
_installed = False
_last_reason = ""


class Record:
    """One call of a group as the flight recorder holds it (a view of a CallRing slot)."""

    __slots__ = ("seq", "plan", "start", "state", "duration")

    def __init__(self, seq: int, plan: Any, start: float, state: str, duration: Optional[float]) -> None:
        self.seq = seq
        self.plan = plan  # the call's Plan (or shared-page Small): .sigb is its signature
        self.start = start  # perf_counter at the call's start
        self.state = state  # "running" | "done" | "failed"
        self.duration = duration  # seconds; None where the call path does not time its end

    @property
    def sig(self) -> str:
        return self.plan.sigb.decode(errors="replace")


class CallRing:
    """A group's last calls, in preallocated lists indexed by ``seq & mask`` (the size is a power of two,
    at least 1: the runtime's error messages and ``interlink bench`` read the last call). A call costs two
    list stores and one clock read when it starts (``plans[i]``, ``starts[i]``) and one store when it ends
    (``seqs[i] = seq``); the regular path also stores its end (``ends[i]``). A failed call's number goes
    into ``failed``. Which call a slot holds follows from the group's current number (``current()``): the
    last k <= current with k & mask == i; it is done when ``seqs[i] == k``, failed when k is in ``failed``,
    running when k is the current call, and not recorded otherwise. Reading it (``ring[-1]``, iteration)
    builds Records."""

    __slots__ = ("mask", "seqs", "plans", "starts", "ends", "failed", "current")

    def __init__(self, size: int, current: Any = None) -> None:
        if trace_dir():
            size = max(size, TRACE_CALLS)
        n = 1
        while n < max(1, size):
            n <<= 1
        self.mask = n - 1
        self.seqs = [0] * n  # the number of the call that finished in this slot
        self.plans: list = [None] * n
        self.starts = [0.0] * n
        self.ends = [0.0] * n
        self.failed: set[int] = set()
        self.current = current or (lambda: max(self.seqs))

    def records(self) -> list[Record]:
        top = int(self.current())
        out = []
        mask = self.mask
        for i, plan in enumerate(self.plans):
            if plan is None:
                continue
            k = top - ((top - i) & mask)
            if k < 1:
                continue
            if k in self.failed:
                state = "failed"
            elif self.seqs[i] == k:
                state = "done"
            elif k == top:
                state = "running"
            else:
                continue  # the slot was not written for call k
            end = self.ends[i]
            dur = end - self.starts[i] if state == "done" and end >= self.starts[i] else None
            out.append(Record(k, plan, self.starts[i], state, dur))
        out.sort(key=lambda r: r.seq)
        return out

    def __len__(self) -> int:
        return len(self.records())

    def __iter__(self) -> Any:
        return iter(self.records())

    def __getitem__(self, k: int) -> Record:
        return self.records()[k]


def trace_dir() -> Optional[str]:
    return os.environ.get("INTERLINK_TRACE", "") or None


def dump_dir() -> Optional[str]:
    """Where dumps go: INTERLINK_DUMP_DIR, else INTERLINK_TRACE's directory (a trace is a dump at exit)."""
    return os.environ.get("INTERLINK_DUMP_DIR", "") or trace_dir()


def track(group: Any) -> None:
    """Remember a group (weakly) so a dump lists it."""
    global _order
    with _lock:
        _order += 1
        _groups[_order] = group
        if len(_groups) > KEEP_GROUPS:
            _groups.pop(next(iter(_groups)))
    if trace_dir():
        _trace_group(group)


def _trace_group(group: Any) -> None:
    """INTERLINK_TRACE: the shared-page path's calls also store their end (their call wrapped on this group
    only: nothing changes for a job without tracing), and the engine keeps each round's phases."""
    from time import perf_counter

    eng = group.ctx.engine
    if getattr(eng, "trace", None) is None:
        eng.trace = _Rounds()
    inner = group._call_small  # (only the world group of an all-local job calls it)
    ends, mask, plans = group._rends, group._rmask, group._rplans
    fast = group._fast
    if fast is None:
        def call_small(kind: int, sc: Any, a: Any, out: Any, timeout: Any) -> None:
            inner(kind, sc, a, out, timeout)
            ends[group.seq & mask] = perf_counter()
    else:
        # each host-page call is one round: its transfer phase (payload in, until the peers it reads have
        # published: OneShot.hot notes t1) and its local phase (reduce or copy out)
        fast.traced = True
        rounds, n = eng.trace, fast.n

        def call_small(kind: int, sc: Any, a: Any, out: Any, timeout: Any) -> None:
            fast.t1 = 0.0
            t0 = perf_counter()
            inner(kind, sc, a, out, timeout)
            t2 = perf_counter()
            seq = group.seq
            ends[seq & mask] = t2
            s = plans[seq & mask]
            sent, received = host_call_bytes(s.kind, s.nbytes, s.sends, n)
            rounds.append((s.sigb, seq, 0, 1, t0, fast.t1 or t2, t2, sent, received, []))

    group._call_small = call_small


def host_call_bytes(kind: int, nbytes: int, sends: bool, n: int) -> tuple[int, int]:
    """(bytes this rank writes for its peers, bytes it reads from them) in one host-page call of a payload
    of nbytes a rank (runtime/pageproto.py's kinds)."""
    from .pageproto import A2A, AG, AR, BC, RS

    sent = nbytes if sends else 0
    if kind in (AR, AG):
        return sent, nbytes * (n - 1)
    if kind == RS:
        return sent, nbytes // n * (n - 1)
    if kind == A2A:
        return sent - sent // n, nbytes // n * (n - 1)
    if kind == BC:
        return sent, 0 if sends else nbytes
    return 0, 0


class _Rounds(list):
    """The executor's round records (plan signature, seq, round, rounds, start, transfer end, end, bytes sent,
    bytes received), the first TRACE_ROUNDS of them."""

    def append(self, item: Any) -> None:
        if len(self) < TRACE_ROUNDS:
            super().append(item)


def _parse_sig(sig: str) -> dict:
    """The fields of a call signature ``collective:algorithm dtype n=count op root=R group [extra]``."""
    out: dict[str, Any] = {"sig": sig}
    parts = sig.split()
    if not parts:
        return out
    head = parts[0]
    op, _, algo = head.partition(":")
    out["op"] = op
    out["algorithm"] = algo
    rest = []
    for p in parts[1:]:
        if p.startswith("n="):
            try:
                out["count"] = int(p[2:])
            except ValueError:
                pass
        elif p.startswith("root="):
            try:
                out["root"] = int(p[5:])
            except ValueError:
                pass
        else:
            rest.append(p)
    if rest:
        out["dtype"] = rest[0]
    if len(rest) > 1 and rest[1] in ("sum", "prod", "min", "max", "avg", "band", "bor", "bxor", "premul_sum"):
        out["reduce"] = rest[1]
    return out


def _itemsize(dtype: str) -> int:
    try:
        import numpy as np

        return int(np.dtype(dtype).itemsize)
    except Exception:  # noqa: BLE001 - a dtype name numpy does not know
        return 0


_PER_RANK = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}


def _ops(ops: Any) -> list[dict]:
    """Pending engine ops as plain data: what was posted to / expected from each peer and what moved."""
    out = []
    for op in list(ops or ()):
        if getattr(op, "done", True):
            continue
        data = getattr(op, "data", None)
        out.append({"peer": int(op.peer), "kind": op.kind, "lane": int(getattr(op, "lane", 0)),
                    "bytes": int(data.size) if data is not None else 0, "done_bytes": int(op.offset),
                    "seq": int(op.seq), "tag": int(op.tag)})
    return out


def _where(group: Any, seq: int) -> dict:
    """What the engine and the shared-page path know now about the call ``seq`` still in progress."""
    ctx = group.ctx
    eng = ctx.engine
    w: dict[str, Any] = {}
    pend = [o for o in _ops(getattr(eng, "waiting", None)) if o["seq"] == seq]
    if pend:
        w["pending"] = pend
        at = getattr(eng, "at", None)
        if at is not None and at[0] == seq:
            w["round"] = at[1]
            w["rounds"] = at[2]
    fast = getattr(ctx, "fast", None)
    fw = getattr(fast, "waiting", None) if fast is not None else None
    if fw is not None and fw[0] == seq and group.name == "world":
        try:
            w["waits_for"] = sorted(int(r) for r in fw[1]())
        except Exception:  # noqa: BLE001 - the page may be gone
            pass
        w["path"] = "host page"
    return w


def failed(group: Any, seq: int, exc: BaseException, err: Any) -> None:
    """Called by Group._fail: keep what the failed call was waiting for, then write this rank's dump."""
    try:
        detail: dict[str, Any] = {"error": type(err).__name__, "message": str(getattr(err, "message", err)),
                                  "ranks": [int(r) for r in getattr(err, "ranks", ()) or ()],
                                  "failed_at": time.time()}
        detail.update(_where(group, seq))
        if isinstance(exc, TimeoutError) and exc.args and isinstance(exc.args[0], list):
            detail.setdefault("waits_for", [int(r) for r in exc.args[0]])
        peer = getattr(exc, "peer", None)
        if peer is not None:
            detail["peer"] = int(peer)
        info = getattr(exc, "info", None)
        if isinstance(info, dict):
            detail["origin"] = info.get("origin", peer)
        with _lock:
            _details[(id(group.ctx), group.name, seq)] = detail
            if len(_details) > 256:
                _details.pop(next(iter(_details)))
        if dump_dir():
            write_dump(f"{type(err).__name__} in {group.name} #{seq}", ctx=group.ctx)
    except Exception:  # noqa: BLE001 - a dump must never hide the error it is about
        pass


def snapshot(reason: str, ctx: Any = None) -> dict:
    """This rank's dump as a dict (what write_dump writes)."""
    now_wall, now_pc = time.time(), time.perf_counter()
    with _lock:
        groups = [g for _, g in sorted(_groups.items())]
    if ctx is None and groups:
        ctx = groups[-1].ctx
    out: dict[str, Any] = {"format": FORMAT, "version": VERSION, "reason": reason, "time": now_wall,
                           "host": socket.gethostname(), "pid": os.getpid(),
                           "recorder_size": RECORDER_SIZE, "groups": []}
    if ctx is None:
        return out
    eng = ctx.engine
    out.update(rank=int(ctx.rank), world_size=int(ctx.world_size))
    hosts = getattr(eng, "hosts", None) or []
    if hosts:
        out["host_id"] = hosts[ctx.rank] if ctx.rank < len(hosts) else None
    out["dead"] = sorted(int(p) for p in getattr(eng, "dead", ()) or ())
    out["departed"] = sorted(int(p) for p in getattr(eng, "departed", ()) or ())
    out["transports"] = {str(k): v for k, v in (getattr(eng, "transports", None) or {}).items()}
    if ctx.broken is not None:
        b = ctx.broken
        out["broken"] = {"error": type(b).__name__, "message": getattr(b, "message", str(b)),
                         "op": getattr(b, "op", None), "group": getattr(b, "group", None),
                         "seq": getattr(b, "seq", None), "ranks": list(getattr(b, "ranks", ()) or ())}
    out["p2p"] = {"sent": {str(k): v for k, v in ctx.p2p_sent.items()},
                  "received": {str(k): v for k, v in ctx.p2p_recv.items()}}
    try:
        with ctx.runner._cv:
            queued = [j.work.desc for j in list(ctx.runner._q)]
    except Exception:  # noqa: BLE001
        queued = []
    out["queued"] = queued
    for g in groups:
        if g.ctx is not ctx:
            continue
        calls = []
        for rec in g.recorder.records():
            c = _parse_sig(rec.sig)
            c["seq"] = int(rec.seq)
            if "count" in c and "dtype" in c:
                isz = _itemsize(c["dtype"])
                c["bytes"] = c["count"] * isz * (g.size if c.get("op") in _PER_RANK else 1)
            state = rec.state
            c["state"] = "started" if state == "running" else state
            c["start"] = rec.start - now_pc + now_wall
            if state == "done":
                if rec.duration is not None:
                    c["duration"] = rec.duration
            else:
                c["elapsed"] = now_pc - rec.start
            d = _details.get((id(ctx), g.name, rec.seq))
            if d is not None:
                c.update(d)
            elif state == "running":
                c.update(_where(g, rec.seq))
            calls.append(c)
        out["groups"].append({"name": g.name, "ranks": [int(r) for r in g.ranks], "rank": int(g.rank),
                              "seq": int(g.seq), "calls": calls})
    tr = getattr(eng, "trace", None)
    if tr:
        off = now_wall - now_pc
        # each round: [sig, seq, round, rounds, start, transfer end, end, bytes sent, bytes received,
        # [[kind, peer, lane, bytes, end], ...] of its ops (wall clock)]
        out["rounds"] = [[sig.decode(errors="replace"), seq, k, n, t0 + off, t1 + off, t2 + off, sent, received,
                          [[kind, peer, lane, nb, te + off] for kind, peer, lane, nb, te in ops]]
                         for sig, seq, k, n, t0, t1, t2, sent, received, ops in list(tr)]
    return out


def write_dump(reason: str, ctx: Any = None, directory: Optional[str] = None) -> Optional[str]:
    """Write this rank's dump to ``directory`` (default INTERLINK_DUMP_DIR); returns its path."""
    global _last_reason
    d = directory or dump_dir()
    if not d:
        return None
    data = snapshot(reason, ctx)
    rank = data.get("rank", os.environ.get("RANK", "x"))
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"interlink-rank{rank}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(tmp, path)
    _last_reason = reason
    return path


def _on_signal(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    try:
        write_dump(name)
    except Exception:  # noqa: BLE001
        pass
    if signum == signal.SIGTERM:  # then end as SIGTERM would have
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _at_exit() -> None:
    if dump_dir():
        try:
            path = write_dump("exit" if not _last_reason else f"exit after {_last_reason}")
            if trace_dir() and path:
                write_chrome_trace(path)
        except Exception:  # noqa: BLE001
            pass


def write_chrome_trace(dump_path: str) -> str:
    """This rank's Chrome / Perfetto trace (``interlink-trace-rank{R}.json`` beside its dump): a thread per
    group with one event per call, and a thread of the executor's rounds, each split into its transfer
    (sends and receives, reducing receives included) and its local steps (deferred reductions, copies).
    Timestamps are wall-clock microseconds; ``interlink doctor trace DIR`` merges the ranks."""
    with open(dump_path) as f:
        d = json.load(f)
    rank = d.get("rank", 0)
    ev: list[dict] = [{"ph": "M", "pid": rank, "name": "process_name", "args": {"name": f"rank {rank}"}}]
    for tid, g in enumerate(d.get("groups", []), 1):
        ev.append({"ph": "M", "pid": rank, "tid": tid, "name": "thread_name", "args": {"name": f"calls of {g['name']}"}})
        for c in g.get("calls", []):
            dur = c.get("duration")
            e = {"pid": rank, "tid": tid, "ts": c["start"] * 1e6, "name": f"#{c['seq']} {c.get('op')}:{c.get('algorithm')}",
                 "args": {k: c.get(k) for k in ("seq", "dtype", "count", "bytes", "state")}}
            e.update({"ph": "X", "dur": dur * 1e6} if dur is not None else {"ph": "i", "s": "t"})
            ev.append(e)
    rt = len(d.get("groups", [])) + 1
    ev.append({"ph": "M", "pid": rank, "tid": rt, "name": "thread_name", "args": {"name": "rounds"}})
    lane_tids: dict = {}
    for sig, seq, k, n, t0, t1, t2, sent, received, *more in d.get("rounds", []):
        args = {"call": sig, "seq": seq, "round": k, "rounds": n, "bytes_sent": sent, "bytes_received": received}
        for kind, peer, lane, nb, te in (more[0] if more else ()):  # the transfer per peer and lane
            name = f"{kind} {'to' if kind == 'send' else 'from'} rank {peer} lane {lane}"
            tid = lane_tids.get(name)
            if tid is None:
                tid = lane_tids[name] = rt + 1 + len(lane_tids)
                ev.append({"ph": "M", "pid": rank, "tid": tid, "name": "thread_name", "args": {"name": name}})
            ev.append({"ph": "X", "pid": rank, "tid": tid, "ts": t0 * 1e6, "dur": max(0.0, te - t0) * 1e6,
                       "name": f"round {k + 1}/{n} of #{seq}: {nb} B", "args": {**args, "bytes": nb}})
        ev.append({"ph": "X", "pid": rank, "tid": rt, "ts": t0 * 1e6, "dur": (t2 - t0) * 1e6,
                   "name": f"#{seq} round {k + 1}/{n}", "args": args})
        if t1 > t0:
            ev.append({"ph": "X", "pid": rank, "tid": rt, "ts": t0 * 1e6, "dur": (t1 - t0) * 1e6, "name": "transfer",
                       "args": args})
        if t2 > t1:
            ev.append({"ph": "X", "pid": rank, "tid": rt, "ts": t1 * 1e6, "dur": (t2 - t1) * 1e6, "name": "local",
                       "args": args})
    path = os.path.join(os.path.dirname(dump_path), f"interlink-trace-rank{rank}.json")
    with open(path, "w") as f:
        json.dump({"traceEvents": ev, "displayTimeUnit": "ns"}, f)
    return path


def install() -> None:
    """At init, when INTERLINK_DUMP_DIR is set: dump at exit, on SIGUSR1, and on SIGTERM (if nothing else
    handles it). Signal handlers are set from the main thread only."""
    global _installed
    if _installed or not dump_dir():
        return
    _installed = True
    import atexit

    atexit.register(_at_exit)  # registered after the API's destroy: runs before it
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGUSR1, _on_signal)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_signal)
    except (ValueError, OSError):  # pragma: no cover - not the main thread of the main interpreter
        pass
