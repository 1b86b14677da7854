"""The reference executor: runs a Schedule in one process, numerically (numpy) and symbolically.

* :func:`run_numeric` executes the steps on numpy arrays, with the exact round semantics of
  :mod:`interlink.algorithms.schedule` (sends read a snapshot, receives land after, then locals).
* :func:`run_symbolic` executes the same steps on *contribution vectors*: every element carries how
  many times each rank's input contributed to it and which input index it came from. It proves that
  every output element holds exactly the right contributions (none missing, none twice), whatever
  the reduce op, and that a barrier makes every rank wait for every other.
* :func:`expected` computes the collective's required result directly with numpy, independently of
  any Schedule, and :func:`verify_schedule` compares the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import VerificationError
from ..ops import ReduceOp, finish_avg, numpy_reduce, ops_for_dtype, reduce_into
from .schedule import Copy, Get, Multicast, Put, Recv, Reduce, Schedule, Send, SwitchReduce, Wait

UNDEFINED = -1  # element never written
POISON = -2  # element combined from mismatched or undefined sources


# ---- numeric ----------------------------------------------------------------------------------


def _alloc(s: Schedule, dtype: np.dtype, fill) -> dict[str, np.ndarray]:
    bufs = {}
    for name, size in s.buffers.items():
        a = np.empty(size, dtype=dtype)
        a[...] = fill
        bufs[name] = a
    return bufs


def run_numeric(s: Schedule, inputs: Sequence[np.ndarray], op: ReduceOp | str = ReduceOp.SUM,
                garbage=7) -> list[dict[str, np.ndarray]]:
    """Execute the Schedule; returns every rank's buffers. ``inputs[r]`` is rank r's input."""
    rop = ReduceOp.parse(op)
    p = s.nranks
    if len(inputs) != p:
        raise ValueError(f"{len(inputs)} inputs for {p} ranks")
    dtype = np.asarray(inputs[0]).dtype
    state = []
    for r in range(p):
        bufs = _alloc(s, dtype, garbage)
        src = np.ascontiguousarray(inputs[r], dtype=dtype).reshape(-1)
        if src.size != s.buffers["input"]:
            raise ValueError(f"rank {r} input has {src.size} elements, schedule expects {s.buffers['input']}")
        bufs["input"][...] = src
        state.append(bufs)

    def view(r: int, c) -> np.ndarray:
        return state[r][c.buffer][c.offset:c.end]

    def local(r: int, st) -> None:
        if isinstance(st, Copy):
            view(r, st.dst)[...] = view(r, st.src).copy()
        else:
            reduce_into(rop, view(r, st.dst), view(r, st.src).copy())

    for k in range(s.nrounds):
        # 1. snapshot every send
        inflight: dict[tuple[int, int], list[np.ndarray]] = {}
        got: dict[int, list[np.ndarray]] = {}  # one-sided reads, by reader, in step order
        for r in range(p):
            for st in s.ranks[r][k].steps:
                if isinstance(st, Send):
                    inflight.setdefault((r, st.peer), []).append(view(r, st.src).copy())
                elif isinstance(st, Get):  # the peer's chunk as it is at the start of the round
                    got.setdefault(r, []).append(view(st.peer, st.src).copy())
                elif isinstance(st, SwitchReduce):  # the switch reduces the members' chunks as they are now
                    acc = view(st.group[0], st.src).copy()
                    for g in st.group[1:]:
                        reduce_into(rop, acc, view(g, st.src).copy())
                    got.setdefault(r, []).append(acc)
                elif isinstance(st, (Multicast, Put)):
                    got.setdefault(r, []).append(view(r, st.src).copy())
        # 2. deliver
        for r in range(p):
            for st in s.ranks[r][k].steps:
                if isinstance(st, (Recv, Get)):
                    data = inflight[(st.peer, r)].pop(0) if isinstance(st, Recv) else got[r].pop(0)
                    dst = view(r, st.dst)
                    if st.reduce:
                        reduce_into(rop, dst, data)
                    else:
                        dst[...] = data
                elif isinstance(st, SwitchReduce):
                    view(r, st.dst)[...] = got[r].pop(0)
                elif isinstance(st, Multicast):
                    data = got[r].pop(0)
                    for g in st.group:
                        view(g, st.dst)[...] = data
                elif isinstance(st, Put):
                    view(st.peer, st.dst)[...] = got[r].pop(0)
                elif isinstance(st, (Copy, Reduce)) and st.inline:  # at its place among the deliveries
                    local(r, st)
        # 3. local steps
        for r in range(p):
            for st in s.ranks[r][k].steps:
                if isinstance(st, (Copy, Reduce)) and not st.inline:
                    local(r, st)
    if rop is ReduceOp.AVG:
        for r in range(p):
            finish_avg(state[r]["output"], p)
    return state


def expected(collective: str, inputs: Sequence[np.ndarray], op: ReduceOp | str = ReduceOp.SUM,
             root: int = 0) -> list[np.ndarray | None]:
    """The required output of every rank, computed with numpy alone (None: not defined there)."""
    rop = ReduceOp.parse(op)
    p = len(inputs)
    flat = [np.asarray(a).reshape(-1) for a in inputs]
    if collective == "all_reduce":
        red = numpy_reduce(rop, flat)
        return [red.copy() for _ in range(p)]
    if collective == "reduce":
        red = numpy_reduce(rop, flat)
        return [red if r == root else None for r in range(p)]
    if collective == "broadcast":
        return [flat[root].copy() for _ in range(p)]
    if collective == "all_gather":
        cat = np.concatenate(flat) if flat else np.empty(0)
        return [cat.copy() for _ in range(p)]
    if collective == "gather":
        return [np.concatenate(flat) if r == root else None for r in range(p)]
    if collective == "reduce_scatter":
        red = numpy_reduce(rop, flat)
        n = red.size // p
        return [red[r * n:(r + 1) * n].copy() for r in range(p)]
    if collective == "scatter":
        n = flat[root].size // p
        return [flat[root][r * n:(r + 1) * n].copy() for r in range(p)]
    if collective == "all_to_all":
        n = flat[0].size // p
        return [np.concatenate([flat[src][dst * n:(dst + 1) * n] for src in range(p)]) for dst in range(p)]
    if collective == "barrier":
        return [None] * p
    raise ValueError(f"unknown collective {collective!r}")


# ---- symbolic ---------------------------------------------------------------------------------


@dataclass
class _Sym:
    counts: np.ndarray  # [len, nranks] how many times rank j's input is in this element
    origin: np.ndarray  # [len] index in the contributors' input, UNDEFINED or POISON


def run_symbolic(s: Schedule) -> tuple[list[dict[str, _Sym]], list[np.ndarray]]:
    """Execute on contribution vectors; also returns each rank's 'knows-arrived' set (for barrier)."""
    p = s.nranks
    state: list[dict[str, _Sym]] = []
    for r in range(p):
        bufs = {}
        for name, size in s.buffers.items():
            counts = np.zeros((size, p), dtype=np.int32)
            origin = np.full(size, UNDEFINED, dtype=np.int64)
            if name == "input":
                counts[:, r] = 1
                origin[:] = np.arange(size)
            bufs[name] = _Sym(counts, origin)
        state.append(bufs)
    knows = [np.eye(p, dtype=bool)[r] for r in range(p)]

    def get(r, c) -> _Sym:
        b = state[r][c.buffer]
        return _Sym(b.counts[c.offset:c.end], b.origin[c.offset:c.end])

    def store(r: int, c, counts: np.ndarray, origin: np.ndarray) -> None:
        d = get(r, c)
        d.counts[...] = counts
        d.origin[...] = origin

    def combine(dst: _Sym, src_counts: np.ndarray, src_origin: np.ndarray) -> None:
        bad = (dst.origin < 0) | (src_origin < 0) | (dst.origin != src_origin)
        dst.counts += src_counts
        dst.origin[...] = np.where(bad, POISON, dst.origin)

    def local(r: int, st) -> None:
        v = get(r, st.src)
        if isinstance(st, Copy):
            store(r, st.dst, v.counts.copy(), v.origin.copy())
        else:
            combine(get(r, st.dst), v.counts.copy(), v.origin.copy())

    for k in range(s.nrounds):
        inflight: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = {}
        got: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        snapshot_knows = [kn.copy() for kn in knows]
        for r in range(p):
            for st in s.ranks[r][k].steps:
                if isinstance(st, Send):
                    v = get(r, st.src)
                    inflight.setdefault((r, st.peer), []).append((v.counts.copy(), v.origin.copy()))
                elif isinstance(st, Get):
                    v = get(st.peer, st.src)
                    got.setdefault(r, []).append((v.counts.copy(), v.origin.copy()))
                elif isinstance(st, SwitchReduce):
                    v = get(st.group[0], st.src)
                    acc = _Sym(v.counts.copy(), v.origin.copy())
                    for g in st.group[1:]:
                        w = get(g, st.src)
                        combine(acc, w.counts.copy(), w.origin.copy())
                    got.setdefault(r, []).append((acc.counts, acc.origin))
                elif isinstance(st, (Multicast, Put)):
                    v = get(r, st.src)
                    got.setdefault(r, []).append((v.counts.copy(), v.origin.copy()))
        for r in range(p):
            for st in s.ranks[r][k].steps:
                if isinstance(st, (Recv, Get)):
                    c, o = inflight[(st.peer, r)].pop(0) if isinstance(st, Recv) else got[r].pop(0)
                    knows[r] |= snapshot_knows[st.peer]
                    if st.reduce:
                        combine(get(r, st.dst), c, o)
                    else:
                        store(r, st.dst, c, o)
                elif isinstance(st, SwitchReduce):
                    c, o = got[r].pop(0)
                    for g in st.group:
                        knows[r] |= snapshot_knows[g]
                    store(r, st.dst, c, o)
                elif isinstance(st, Multicast):
                    c, o = got[r].pop(0)
                    for g in st.group:
                        knows[g] |= snapshot_knows[r]
                        store(g, st.dst, c, o)
                elif isinstance(st, Put):
                    c, o = got[r].pop(0)
                    store(st.peer, st.dst, c, o)
                elif isinstance(st, Wait):  # what the signaller knew reaches the waiter
                    knows[r] |= snapshot_knows[st.peer]
                elif isinstance(st, (Copy, Reduce)) and st.inline:  # at its place among the deliveries
                    local(r, st)
        for r in range(p):
            for st in s.ranks[r][k].steps:
                if isinstance(st, (Copy, Reduce)) and not st.inline:
                    local(r, st)
    return state, knows


def _expected_symbolic(s: Schedule, r: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Required (counts, origin) of rank r's output, or None if the output is not defined there."""
    p, n, root, coll = s.nranks, s.count, s.root, s.collective
    size = s.buffers["output"]
    counts = np.zeros((size, p), dtype=np.int32)
    origin = np.zeros(size, dtype=np.int64)
    if coll in ("all_reduce", "reduce"):
        if coll == "reduce" and r != root:
            return None
        counts[:] = 1
        origin[:] = np.arange(n)
    elif coll == "broadcast":
        counts[:, root] = 1
        origin[:] = np.arange(n)
    elif coll in ("all_gather", "gather"):
        if coll == "gather" and r != root:
            return None
        for j in range(p):
            counts[j * n:(j + 1) * n, j] = 1
            origin[j * n:(j + 1) * n] = np.arange(n)
    elif coll == "reduce_scatter":
        counts[:] = 1
        origin[:] = np.arange(r * n, (r + 1) * n)
    elif coll == "scatter":
        counts[:, root] = 1
        origin[:] = np.arange(r * n, (r + 1) * n)
    elif coll == "all_to_all":
        for j in range(p):
            counts[j * n:(j + 1) * n, j] = 1
            origin[j * n:(j + 1) * n] = np.arange(r * n, (r + 1) * n)
    elif coll == "barrier":
        return None
    else:
        raise ValueError(f"unknown collective {coll!r}")
    return counts, origin


def check_symbolic(s: Schedule) -> None:
    """Raise VerificationError naming rank and element if any output element is wrong."""
    state, knows = run_symbolic(s)
    where = dict(op=f"{s.collective}/{s.algorithm}")
    for r in range(s.nranks):
        exp = _expected_symbolic(s, r)
        if exp is not None:
            counts, origin = exp
            got = state[r]["output"]
            bad = np.flatnonzero((got.counts != counts).any(axis=1) | (got.origin != origin))
            if bad.size:
                i = int(bad[0])
                raise VerificationError(
                    f"nranks={s.nranks} count={s.count} root={s.root}: rank {r} output[{i}] holds "
                    f"contributions {got.counts[i].tolist()} from index {int(got.origin[i])}, expected "
                    f"{counts[i].tolist()} from index {int(origin[i])} ({bad.size} wrong elements)",
                    ranks=[r],
                    **where,
                )
        if s.collective == "barrier" and not knows[r].all():
            missing = np.flatnonzero(~knows[r]).tolist()
            raise VerificationError(
                f"nranks={s.nranks}: rank {r} can leave the barrier before ranks {missing} arrive",
                ranks=[r] + missing,
                **where,
            )


# ---- numeric verification ---------------------------------------------------------------------


def make_inputs(s: Schedule, dtype, op: ReduceOp, seed: int = 0) -> list[np.ndarray]:
    """Inputs whose reductions are exact in every dtype, so results compare bit for bit:
    small integers for SUM/AVG/MIN/MAX, {1, 2, -1} for PRODUCT, random bits for bitwise ops."""
    rng = np.random.default_rng(seed + 7919 * s.nranks + s.count)
    dt = np.dtype(dtype)
    size = s.buffers["input"]
    out = []
    for _ in range(s.nranks):
        if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR):
            raw = rng.integers(0, 256, size=size * dt.itemsize, dtype=np.uint8)
            a = raw.view(dt).copy()
        elif op is ReduceOp.PRODUCT:
            vals = np.array([1, 2, -1] if dt.kind != "u" else [1, 2, 3])
            a = rng.choice(vals, size=size).astype(dt)
        else:
            lo = 0 if dt.kind == "u" else -8
            a = rng.integers(lo, 9, size=size).astype(dt)
        out.append(a)
    return out


def check_numeric(s: Schedule, dtype, op: ReduceOp | str) -> None:
    rop = ReduceOp.parse(op)
    inputs = make_inputs(s, dtype, rop)
    state = run_numeric(s, inputs, rop)
    exp = expected(s.collective, inputs, rop, s.root)
    for r in range(s.nranks):
        if exp[r] is None:
            continue
        got = state[r]["output"]
        ok = got.shape == exp[r].shape and bool(np.all((got == exp[r]) | (np.isnan(got) & np.isnan(exp[r]))
                                                       if np.dtype(dtype).kind in "fc" else got == exp[r]))
        if not ok:
            bad = np.flatnonzero(got != exp[r]) if got.shape == exp[r].shape else np.array([0])
            i = int(bad[0]) if bad.size else 0
            raise VerificationError(
                f"nranks={s.nranks} count={s.count} root={s.root} dtype={np.dtype(dtype)} op={rop.name}: "
                f"rank {r} output[{i}] = {got[i] if got.size > i else 'missing'}, expected "
                f"{exp[r][i] if exp[r].size > i else 'missing'}",
                ranks=[r],
                op=f"{s.collective}/{s.algorithm}",
            )


def verify_schedule(s: Schedule, dtypes: Sequence = (np.float32,), ops: Sequence[ReduceOp] | None = None,
                    symbolic: bool = True, validate: bool = True) -> int:
    """Validate structure, prove contributions symbolically, and compare numerics against numpy for
    every (dtype, op) given (ops default to all valid ops of each dtype for reducing collectives).
    ``validate=False``: the caller has just validated ``s`` (a Schedule that :func:`one_sided` or
    :func:`two_sided` returns is validated as it is made). Returns the number of numeric cases checked;
    raises ScheduleError/VerificationError."""
    from .schedule import REDUCING

    if validate:
        s.validate()
    if symbolic:
        check_symbolic(s)
    cases = 0
    if s.collective == "barrier":
        return cases
    for dt in dtypes:
        valid = ops_for_dtype(dt)
        todo = (ops if ops is not None else valid) if s.collective in REDUCING else (ReduceOp.SUM,)
        for op in todo:
            if op not in valid:
                continue
            check_numeric(s, dt, op)
            cases += 1
    return cases
