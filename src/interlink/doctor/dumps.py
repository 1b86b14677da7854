"""Flight-recorder dumps of every rank, read into one model: interlink's own (runtime/recorder.py) and
torch's (``torch._C._distributed_c10d._dump_fr_trace_json``, or the NCCL process group's
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` pickles), so the verdicts of :mod:`interlink.doctor.hang` apply to
jobs on interlink, gloo and NCCL alike.

A :class:`Call` is one collective of one rank: its sequence number in its group, what it was (op,
dtype, count, root, reduction, algorithm or path), its state (``queued``, ``started``, ``done``,
``failed``), wall-clock start and duration, and for a call not done what the rank still waited for
(``pending`` ops per peer with bytes missing, ``waits_for`` ranks, the ``round`` it was in).
"""

from __future__ import annotations

import ast
import io
import json
import math
import os
import pickle
import re
from dataclasses import dataclass, field
from typing import Any, Optional

INTERLINK_FORMAT = "interlink-flight-recorder"
TORCH_OPEN_MIN = 1.0


@dataclass
class Call:
    seq: int
    op: str
    dtype: str = ""
    count: int = -1
    nbytes: int = -1
    root: Optional[int] = None
    reduce: str = ""
    algorithm: str = ""
    state: str = "started"  # queued | started | done | failed
    start: Optional[float] = None  # wall clock, seconds
    duration: Optional[float] = None
    error: str = ""
    message: str = ""
    error_ranks: list[int] = field(default_factory=list)
    failed_at: Optional[float] = None
    pending: list[dict] = field(default_factory=list)  # {peer, kind, lane, bytes, done_bytes}
    waits_for: list[int] = field(default_factory=list)
    round: Optional[int] = None
    rounds: Optional[int] = None
    sig: str = ""

    def key(self) -> tuple:
        """What every rank must agree on for the call to match."""
        return (self.op, self.dtype, self.count, self.root if self.op in _ROOTED else None,
                self.reduce if self.op in _REDUCING else "")

    def describe(self) -> str:
        s = self.op
        if self.dtype:
            s += f" {self.dtype}"
        if self.count >= 0:
            s += f" n={self.count}"
        if self.reduce and self.op in _REDUCING:
            s += f" {self.reduce}"
        if self.root is not None and self.op in _ROOTED:
            s += f" root={self.root}"
        return s

    @property
    def entered(self) -> bool:
        return True

    @property
    def end(self) -> Optional[float]:
        if self.start is None or self.duration is None:
            return None
        return self.start + self.duration


_ROOTED = {"broadcast", "reduce", "gather", "scatter"}
_REDUCING = {"all_reduce", "reduce", "reduce_scatter", "allreduce", "reduce_scatter_tensor", "_reduce_scatter_base"}


@dataclass
class GroupView:
    name: str
    ranks: list[int]
    seq: int  # the last call this rank entered
    calls: dict[int, Call]


@dataclass
class RankDump:
    rank: int
    path: str
    source: str  # "interlink" | "torch"
    world_size: Optional[int] = None
    host: str = ""
    host_id: str = ""
    pid: Optional[int] = None
    reason: str = ""
    time: Optional[float] = None
    groups: dict[str, GroupView] = field(default_factory=dict)
    broken: Optional[dict] = None
    queued: list[str] = field(default_factory=list)
    rounds: list = field(default_factory=list)  # INTERLINK_TRACE: [sig, seq, round, rounds, t0, t1, t2, sent, received]


class DumpError(ValueError):
    pass


def load_dir(path: str) -> list[RankDump]:
    """Every dump in ``path`` (a directory, or one file), interlink's and torch's; files that are
    neither are skipped. Raises DumpError when nothing readable is there."""
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, f) for f in os.listdir(path) if not f.endswith(".tmp"))
    out = []
    for f in files:
        if not os.path.isfile(f):
            continue
        d = load_file(f)
        if d is not None:
            out.append(d)
    if not out:
        raise DumpError(f"no flight-recorder dumps in {path} (interlink writes interlink-rank<R>.json there when "
                        f"INTERLINK_DUMP_DIR={path}; torch's: _dump_fr_trace_json output, one file per rank)")
    return out


def load_file(path: str) -> Optional[RankDump]:
    with open(path, "rb") as f:
        raw = f.read()
    data: Any = None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        try:
            data = _SafeUnpickler(io.BytesIO(raw)).load()
        except Exception:  # noqa: BLE001 - not a dump
            return None
    if not isinstance(data, dict):
        return None
    if data.get("format") == INTERLINK_FORMAT:
        return _from_interlink(data, path)
    if "entries" in data and ("pg_config" in data or "version" in data):
        return _from_torch(data, path)
    return None


class _SafeUnpickler(pickle.Unpickler):
    """torch's NCCL dumps are pickles of plain dicts and lists: nothing else is loaded."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dump")


def _from_interlink(d: dict, path: str) -> RankDump:
    rank = d.get("rank", _rank_from_name(path))
    rd = RankDump(rank=int(rank if rank is not None else -1), path=path, source="interlink",
                  world_size=d.get("world_size"), host=d.get("host", ""), host_id=d.get("host_id") or d.get("host", ""),
                  pid=d.get("pid"), reason=d.get("reason", ""), time=d.get("time"), broken=d.get("broken"),
                  queued=list(d.get("queued") or []), rounds=list(d.get("rounds") or []))
    for g in d.get("groups", []):
        calls = {}
        for c in g.get("calls", []):
            call = Call(seq=int(c["seq"]), op=c.get("op", "?"), dtype=c.get("dtype", ""), count=int(c.get("count", -1)),
                        nbytes=int(c.get("bytes", -1)), root=c.get("root"), reduce=c.get("reduce", ""),
                        algorithm=c.get("algorithm", ""), state=c.get("state", "started"), start=c.get("start"),
                        duration=c.get("duration"), error=c.get("error", ""), message=c.get("message", ""),
                        error_ranks=[int(r) for r in c.get("ranks", [])], failed_at=c.get("failed_at"),
                        pending=list(c.get("pending", [])), waits_for=[int(r) for r in c.get("waits_for", [])],
                        round=c.get("round"), rounds=c.get("rounds"), sig=c.get("sig", ""))
            calls[call.seq] = call
        rd.groups[g["name"]] = GroupView(g["name"], [int(r) for r in g.get("ranks", [])], int(g.get("seq", 0)), calls)
    return rd


def _rank_from_name(path: str) -> Optional[int]:
    m = re.search(r"(\d+)(?:\.\w+)?$", os.path.basename(path))
    return int(m.group(1)) if m else None


_TORCH_OP = re.compile(r"^(?:nccl|gloo|ucc|mpi|xccl|fake)[:_]")


def _from_torch(d: dict, path: str) -> RankDump:
    rank = d.get("rank")
    if rank is None:
        rank = _rank_from_name(path)
    if rank is None:
        raise DumpError(f"{path}: a torch flight-recorder dump without a rank; name the file with the rank at the "
                        f"end (fr_rank3.json)")
    rd = RankDump(rank=int(rank), path=path, source="torch", time=os.path.getmtime(path))
    cfg = d.get("pg_config") or {}
    status = d.get("pg_status") or {}
    names: dict[str, tuple[str, list[int]]] = {}
    for pg_id, c in cfg.items():
        ranks = c.get("ranks", [])
        if isinstance(ranks, str):
            try:
                ranks = ast.literal_eval(ranks)
            except (ValueError, SyntaxError):
                ranks = []
        names[str(pg_id)] = (c.get("name") or str(pg_id), [int(r) for r in ranks])
    for e in d.get("entries", []):
        if e.get("is_p2p"):
            continue
        pg = e.get("process_group") or [str(e.get("pg_id", 0)), ""]
        pg_name = str(pg[0])
        label, ranks = names.get(pg_name) or names.get(str(e.get("pg_id", ""))) or (
            next(iter(names.values())) if len(names) == 1 else (pg_name, []))
        label = label or pg_name
        gname = label if not pg[1] else f"{label} ({pg[1]})"
        gv = rd.groups.get(gname)
        if gv is None:
            gv = rd.groups[gname] = GroupView(gname, ranks, 0, {})
        seq = int(e.get("collective_seq_id", 0))
        sizes = (e.get("input_sizes") or [[]])
        count = math.prod(sizes[0]) if sizes and sizes[0] is not None else -1
        dtypes = e.get("input_dtypes") or [""]
        name = _TORCH_OP.sub("", e.get("profiling_name", "?"))
        st = e.get("state", "scheduled")
        pgs = status.get(str(e.get("pg_id", pg_name)), status.get(pg_name, {}))
        last_done = int(pgs.get("last_completed_collective", -1) or -1)
        if st == "completed" or e.get("retired") or (last_done >= seq > 0):
            state = "done"
        elif st == "started":
            state = "started"
        else:
            state = "queued"
        start_ns = e.get("time_discovered_started_ns") or e.get("time_created_ns")
        dur = e.get("duration_ms")
        call = Call(seq=seq, op=name, dtype=str(dtypes[0]).lower() if dtypes else "", count=int(count),
                    state=state, start=start_ns / 1e9 if start_ns else None,
                    duration=dur / 1e3 if isinstance(dur, (int, float)) else None, sig=e.get("profiling_name", ""))
        if state == "done" and call.duration is None and e.get("time_discovered_completed_ns") and start_ns:
            call.duration = (e["time_discovered_completed_ns"] - start_ns) / 1e9
        gv.calls[seq] = call
        gv.seq = max(gv.seq, seq)
    # gloo marks a call completed lazily (the last one of a healthy run is often not yet): a call that is not
    # marked done but began less than TORCH_OPEN_MIN seconds before the dump was written is taken as done
    for gv in rd.groups.values():
        for c in gv.calls.values():
            if c.state != "done" and c.start is not None and rd.time is not None and rd.time - c.start < TORCH_OPEN_MIN:
                c.state = "done"
    return rd
