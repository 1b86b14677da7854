"""The runtime executor: runs this rank's part of a Schedule over the transports.

A Schedule is first *compiled* for one rank, dtype, op and aliasing pattern into a :class:`Plan`:
flat tuples of (peer, buffer, byte range, mode) per round, so that a call does no analysis, only
slicing and posting. Plans are cached by the communicator.

Round by round: post every Send and Recv of the round, let the engine progress them concurrently
(the transports chunk and pipeline large messages), then apply deferred reductions and the local steps.
Each step goes on lane ``channel % lanes(peer)`` of its peer (a TCP pair may have several connections,
one per NIC: runtime/engine.py), posted in (channel, step) order on both sides, so the messages of one
lane are matched in order: the i-th send and the i-th receive of a channel between two ranks in a round
(what Schedule.validate guarantees) are the i-th of their lane.
Round semantics follow :mod:`interlink.algorithms.schedule`: a reducing receive whose destination
overlaps a send of the same round is staged and reduced only after the sends are done.
When input and output share memory (in-place calls), the input is snapshotted unless a static check
proves the schedule never reads an input element after writing its aliased output element.
"""

from __future__ import annotations

import functools
import os
from time import perf_counter
from typing import Any, Callable, Optional

import numpy as np

from ..algorithms.schedule import Chunk, Copy, Recv, Reduce, Schedule, Send
from ..errors import ScheduleError
from ..ops import ReduceOp, finish_avg, ufunc
from ..transport.base import Op, encode_sig
from .engine import Engine
from .policy import cma_threshold

IN, OUT, SCR = 0, 1, 2
_BUF = {"input": IN, "output": OUT, "scratch": SCR}
PLAIN, REDUCE, DEFERRED, ORDERED = 0, 1, 2, 3
_U8 = np.dtype(np.uint8)
_EMPTY = np.empty(0, dtype=np.uint8)
# Scratch and input copies come from buffers kept between calls (calls run one at a time: the runner's
# lock): fresh pages cost a fault each, which is more than the copy itself (reduce_scatter 1 MiB out of
# place on 2 ranks: 190 -> 140 us). Up to this many bytes per buffer are kept; larger ones are per call.
_KEEP = int(os.environ.get("INTERLINK_SCRATCH_KEEP_BYTES", 256 * 2**20))
_kept: list[np.ndarray] = [_EMPTY, _EMPTY]  # scratch, input copy


def _buffer(which: int, count: int, dtype: np.dtype) -> np.ndarray:
    nbytes = count * dtype.itemsize
    if nbytes > _KEEP:
        return np.empty(count, dtype=dtype)
    buf = _kept[which]
    if buf.nbytes < nbytes:
        buf = _kept[which] = np.empty(max(nbytes, 2 * buf.nbytes) if nbytes * 2 <= _KEEP else nbytes, dtype=_U8)
    return buf[:nbytes].view(dtype)


@functools.lru_cache(maxsize=256)
def inplace_safe(schedule: Schedule, rank: int, delta: int) -> bool:
    """True if, with input[i] aliasing output[i + delta], the schedule of ``rank`` never reads an
    input element after writing the output element it aliases (so no snapshot is needed)."""
    size = schedule.buffers["output"]
    dirty = np.zeros(size, dtype=bool)

    def out_range(c: Chunk) -> Optional[slice]:
        if c.buffer == "output":
            return slice(c.offset, c.end)
        if c.buffer == "input":
            lo, hi = max(0, c.offset + delta), min(size, c.end + delta)
            return slice(lo, hi) if lo < hi else None
        return None

    def reads_ok(c: Chunk) -> bool:
        if c.buffer != "input":
            return True
        sl = out_range(c)
        return sl is None or not dirty[sl].any()

    def write(c: Chunk) -> None:  # a write into the input (a schedule's working space) lands there too
        sl = out_range(c)
        if sl is not None:
            dirty[sl] = True

    for rnd in schedule.ranks[rank]:
        sent = np.zeros(size, dtype=bool)  # what this round's sends read, in the output's index space
        for s in rnd.steps:
            if isinstance(s, Send):
                if not reads_ok(s.src):
                    return False
                sl = out_range(s.src)
                if sl is not None:
                    sent[sl] = True
        for s in rnd.steps:
            if isinstance(s, Recv):
                # a plain receive into memory a send of the same round reads: the transports move both
                # at once (a peer may read the send's bytes in place), so the input must be snapshotted
                sl = out_range(s.dst)
                if not s.reduce and sl is not None and sent[sl].any():
                    return False
                write(s.dst)
        for s in rnd.steps:
            if isinstance(s, (Copy, Reduce)):
                if not reads_ok(s.src):
                    return False
                if isinstance(s, Copy) and s.src.buffer == "input" and s.dst.buffer == "output" \
                        and s.dst.offset == s.src.offset + delta:
                    continue  # aliased copy is a no-op
                write(s.dst)
    return True


def averages(schedule: Schedule, rank: int, op: ReduceOp) -> bool:
    """Does this rank divide its result for AVG? (A reduce's non-root ranks hold none: their output is
    scratch.)"""
    return op is ReduceOp.AVG and not (schedule.collective == "reduce" and rank != schedule.root)


def aliasing(schedule: Schedule, rank: int, alias: Optional[int]
             ) -> tuple[bool, Callable[[Chunk], tuple[str, int, int]], Callable[[Chunk, Chunk], bool]]:
    """For a call whose input sits at element ``alias`` of its output (None: apart): whether the input
    must be copied first (the schedule would overwrite it before reading it), the memory a chunk really
    occupies (input chunks mapped into the output), and whether two chunks overlap in that memory."""
    copy_input = alias is not None and not inplace_safe(schedule, rank, alias)
    delta = alias if (alias is not None and not copy_input) else None

    def space(c: Chunk) -> tuple[str, int, int]:
        if delta is not None and c.buffer == "input":
            return ("output", c.offset + delta, c.end + delta)
        return (c.buffer, c.offset, c.end)

    def overlaps(a: Chunk, b: Chunk) -> bool:
        sa, sb = space(a), space(b)
        return sa[0] == sb[0] and sa[1] < sb[2] and sb[1] < sa[2] and a.count > 0 and b.count > 0

    return copy_input, space, overlaps


def make_reducer(op: ReduceOp, dtype: np.dtype) -> Callable[[np.ndarray, np.ndarray], None]:
    fn = ufunc(ReduceOp.SUM if op is ReduceOp.AVG else op, dtype)

    def reduce(dst: np.ndarray, src: np.ndarray) -> None:
        d = dst.view(dtype)
        fn(d, src.view(dtype), out=d)

    return reduce


class Plan:
    """One rank's compiled program for (schedule, dtype, op, aliasing)."""

    __slots__ = ("schedule", "sigb", "rounds", "scratch", "copy_input", "op", "dtype", "reducer", "ufunc",
                 "avg", "nranks")

    def __init__(self, schedule: Schedule, rank: int, dtype: np.dtype, op: ReduceOp, alias: Optional[int],
                 global_rank: Callable[[int], int], sig: str,
                 lanes: Optional[Callable[[int], int]] = None) -> None:
        """``lanes(g)``: how many lanes this rank has to global rank g (Engine.nlanes; default one)."""
        self.schedule = schedule
        self.sigb = encode_sig(sig)
        self.dtype = dtype
        self.op = op
        self.avg = averages(schedule, rank, op)
        self.nranks = schedule.nranks
        self.reducer = make_reducer(op, dtype)
        self.ufunc = ufunc(ReduceOp.SUM if self.avg else op, dtype)
        self.scratch = schedule.buffers.get("scratch", 0)
        self.copy_input, space, overlaps = aliasing(schedule, rank, alias)
        isz = dtype.itemsize
        if any(not isinstance(st, (Send, Recv, Copy, Reduce)) for rnd in schedule.ranks[rank] for st in rnd.steps):
            # never skip a step this executor does not know (Gets and in-switch steps: two_sided first)
            raise ScheduleError(f"{schedule.collective}:{schedule.algorithm}: the host executor runs Send, Recv, "
                                f"Copy and Reduce steps only (lower the Schedule with two_sided)")
        bulk_min = max(1, cma_threshold(schedule.collective))  # one-copy transfers from this size
        nl: dict[int, int] = {}

        def lane(g: int, channel: int) -> int:
            if lanes is None or not channel:
                return 0
            n = nl.get(g)
            if n is None:
                n = nl[g] = max(1, int(lanes(g)))
            return channel % n

        rounds = []
        for k, rnd in enumerate(schedule.ranks[rank]):
            sends, recvs, locs = [], [], []
            send_chunks = [s.src for s in rnd.steps if isinstance(s, Send)]
            nth: dict[int, int] = {}
            # a round whose deliveries must apply in step order (an inline local step among them, or two
            # receives into overlapping chunks: a plain one heading reducing ones, or several reducing into
            # one chunk, whose sum in arrival order would differ from the Schedule's in the last bits):
            # every receive lands in a buffer of its own, then deliveries and inline local steps apply in
            # the listed order (``order``), as the reference interpreter applies them
            rs = [s for s in rnd.steps if isinstance(s, Recv)]
            ordered = any(isinstance(s, (Copy, Reduce)) and s.inline for s in rnd.steps) or any(
                b.dst.overlaps(a.dst) for i, a in enumerate(rs) for b in rs[i + 1:])
            order: list = []
            for j, s in enumerate(rnd.steps):
                if ordered and isinstance(s, Recv):
                    c = s.dst
                    g = global_rank(s.peer)
                    order.append(("recv", j, s.reduce, _BUF[c.buffer], c.offset * isz, c.end * isz))
                    recvs.append((s.channel, (g, _BUF[c.buffer], c.offset * isz, c.end * isz, ORDERED,
                                              lane(g, s.channel), j)))
                    continue
                if ordered and isinstance(s, (Copy, Reduce)) and s.inline:
                    a, b = s.src, s.dst
                    order.append(("local", isinstance(s, Reduce), _BUF[a.buffer], a.offset, a.end, _BUF[b.buffer],
                                  b.offset, b.end))
                    continue
                if isinstance(s, Send):
                    c = s.src
                    i = nth[s.peer] = nth.get(s.peer, -1) + 1
                    g = global_rank(s.peer)
                    sends.append((s.channel, (g, _BUF[c.buffer], c.offset * isz, c.end * isz,
                                              bulk_min if _receiver_stores(schedule, rank, s.peer, k, i) else 0,
                                              lane(g, s.channel))))
                elif isinstance(s, Recv):
                    c = s.dst
                    mode = PLAIN
                    if s.reduce:
                        mode = DEFERRED if any(overlaps(c, sc) for sc in send_chunks) else REDUCE
                    g = global_rank(s.peer)
                    recvs.append((s.channel, (g, _BUF[c.buffer], c.offset * isz, c.end * isz, mode,
                                              lane(g, s.channel), j)))
                else:
                    a, b = s.src, s.dst
                    if isinstance(s, Copy) and space(a) == space(b):
                        continue  # aliased in-place copy: nothing to do
                    locs.append((isinstance(s, Reduce), _BUF[a.buffer], a.offset, a.end,
                                 _BUF[b.buffer], b.offset, b.end))
            if sends or recvs or locs:
                # (channel, step) order: a lane carrying several channels sees them in the same order on
                # both ranks of a pair (sorted is stable: step order within a channel)
                sends.sort(key=lambda x: x[0])
                recvs.sort(key=lambda x: x[0])
                rounds.append((tuple(x[1] for x in sends), tuple(x[1] for x in recvs), tuple(locs),
                               tuple(order) if ordered else None))
        self.rounds = tuple(rounds)


def _receiver_stores(schedule: Schedule, rank: int, peer: int, k: int, i: int) -> bool:
    """Is the i-th message from rank to peer in round k received plainly (not reduced)?
    Schedules built for one rank only (e.g. all_to_all with split sizes) have no peer programs."""
    try:
        recvs = [s for s in schedule.ranks[peer][k].steps if isinstance(s, Recv) and s.peer == rank]
        return not recvs[i].reduce
    except IndexError:
        return True


def alias_delta(inp: np.ndarray, out: np.ndarray) -> Optional[int]:
    """Element offset of input within output's index space if they share memory, else None.
    A misaligned overlap is reported as a huge delta, which forces a snapshot."""
    if inp is out:
        return 0 if inp.size else None
    if inp.size == 0 or out.size == 0 or not np.may_share_memory(inp, out):
        return None
    d = inp.__array_interface__["data"][0] - out.__array_interface__["data"][0]
    if d % inp.dtype.itemsize:
        return 1 << 62
    return d // inp.dtype.itemsize


def _local(T: tuple, fn: Any, is_reduce: bool, sb: int, slo: int, shi: int, db: int, dlo: int, dhi: int) -> None:
    """A local step on the call's typed buffers: dst = src, or dst = dst (op) src."""
    dst = T[db][dlo:dhi]
    if is_reduce:
        fn(dst, T[sb][slo:shi], out=dst)
    else:
        dst[...] = T[sb][slo:shi]


def execute(plan: Plan, engine: Engine, inp: np.ndarray, out: np.ndarray, seq: int, deadline: float) -> None:
    """Run a compiled plan on this call's buffers (flat, typed, same dtype)."""
    dtype = plan.dtype
    if plan.copy_input:  # the input overlaps the output in a way the schedule does not allow
        src = inp
        inp = _buffer(1, src.size, dtype)
        inp[...] = src
    scratch = _buffer(0, plan.scratch, dtype) if plan.scratch else _EMPTY
    T = (inp, out, scratch)
    ob = out.view(_U8)
    B = (ob if inp is out else inp.view(_U8), ob, scratch.view(_U8) if plan.scratch else _EMPTY)
    sigb = plan.sigb
    reducer = plan.reducer
    fn = plan.ufunc
    nrounds = len(plan.rounds)
    tr = engine.trace  # INTERLINK_TRACE: each round's transfer and local phases (runtime/recorder.py); else None
    for k, (sends, recvs, locs, order) in enumerate(plan.rounds):
        landed: dict = {}
        if tr is not None:
            t0 = perf_counter()
        if sends or recvs:
            engine.at = (seq, k, nrounds)  # the flight recorder: which round a call waits in
            ops = [Op("send", peer, B[b][lo:hi], seq, 0, sigb, None, bulk, lane)
                   for peer, b, lo, hi, bulk, lane in sends]
            deferred = None
            for peer, b, lo, hi, mode, lane, j in recvs:
                if mode == ORDERED:  # applied below, in step order
                    landed[j] = np.empty(hi - lo, dtype=_U8)
                    ops.append(Op("recv", peer, landed[j], seq, 0, sigb, None, 0, lane))
                elif mode == DEFERRED:
                    tmp = np.empty(hi - lo, dtype=_U8)
                    ops.append(Op("recv", peer, tmp, seq, 0, sigb, None, 0, lane))
                    if deferred is None:
                        deferred = []
                    deferred.append((B[b][lo:hi], tmp))
                else:
                    ops.append(Op("recv", peer, B[b][lo:hi], seq, 0, sigb, reducer if mode == REDUCE else None,
                                  0, lane))
            if tr is not None:
                engine.trace_ops = tops = []
            engine.run(ops, deadline)
            if tr is not None:
                t1 = perf_counter()
                engine.trace_ops = None
            if deferred:
                for dst, tmp in deferred:
                    reducer(dst, tmp)
        for st in order or ():  # an ordered round: its deliveries and inline local steps as listed
            if st[0] == "recv":
                _, j, red, b, lo, hi = st
                if red:
                    reducer(B[b][lo:hi], landed[j])
                else:
                    B[b][lo:hi] = landed[j]
            else:
                _local(T, fn, *st[1:])
        for loc in locs:
            _local(T, fn, *loc)
        if tr is not None:
            tr.append((sigb, seq, k, nrounds, t0, t1 if sends or recvs else t0, perf_counter(),
                       sum(x[3] - x[2] for x in sends), sum(x[3] - x[2] for x in recvs),
                       tops if sends or recvs else []))
    if plan.avg:
        finish_avg(out, plan.nranks)
