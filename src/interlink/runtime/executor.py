"""The runtime executor: runs this rank's part of a Schedule over the transports.

Round by round: post every Send and Recv of the round, let the engine progress them concurrently
(the transports chunk and pipeline large messages), then apply deferred reductions and the local steps.
Round semantics follow :mod:`interlink.algorithms.schedule`: a reducing receive whose destination
overlaps (in memory) a send of the same round is staged and reduced only after the sends are done.
When input and output share memory (in-place calls), the input is snapshotted unless a static check
proves the schedule never reads an input element after writing its aliased output element.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import numpy as np

from ..algorithms.schedule import Chunk, Copy, Recv, Reduce, Schedule, Send
from ..ops import ReduceOp, finish_avg, ufunc
from ..transport.base import MsgHeader, Op
from .engine import Engine


def _byte_range(a: np.ndarray) -> tuple[int, int]:
    ptr = a.__array_interface__["data"][0]
    return ptr, ptr + a.nbytes


def _overlap(r1: tuple[int, int], r2: tuple[int, int]) -> bool:
    return r1[0] < r2[1] and r2[0] < r1[1] and r1[0] != r1[1] and r2[0] != r2[1]


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

    def write(c: Chunk) -> None:
        if c.buffer == "output":
            dirty[c.offset:c.end] = True

    for rnd in schedule.ranks[rank]:
        for s in rnd.steps:
            if isinstance(s, Send) and not reads_ok(s.src):
                return False
        for s in rnd.steps:
            if isinstance(s, Recv):
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


def make_reducer(op: ReduceOp, dtype: np.dtype) -> Callable[[np.ndarray, np.ndarray], None]:
    fn = ufunc(op)

    def reduce(dst: np.ndarray, src: np.ndarray) -> None:
        d = dst.view(dtype)
        fn(d, src.view(dtype), out=d)

    return reduce


def run_schedule(
    engine: Engine,
    schedule: Schedule,
    rank: int,
    buffers: dict[str, np.ndarray],
    op: ReduceOp,
    global_rank: Callable[[int], int],
    header: Callable[[int], MsgHeader],
    deadline: float,
) -> None:
    """Execute rank's steps. ``buffers`` maps 'input'/'output' to flat typed arrays (scratch is
    allocated here); ``header(nbytes)`` makes the message header of this call."""
    dtype = buffers["output"].dtype if buffers["output"].size else buffers["input"].dtype
    rop = ReduceOp.SUM if op is ReduceOp.AVG else op
    bufs = dict(buffers)
    inp, outp = bufs["input"], bufs["output"]
    if inp.size and outp.size and np.shares_memory(inp, outp):
        delta_bytes = inp.__array_interface__["data"][0] - outp.__array_interface__["data"][0]
        aligned = delta_bytes % dtype.itemsize == 0
        if not (aligned and inplace_safe(schedule, rank, delta_bytes // dtype.itemsize)):
            bufs["input"] = inp.copy()
    scratch = schedule.buffers.get("scratch", 0)
    bufs["scratch"] = np.empty(scratch, dtype=dtype)
    reducer = make_reducer(rop, dtype)
    itemsize = dtype.itemsize

    def view(c: Chunk) -> np.ndarray:
        return bufs[c.buffer][c.offset:c.end]

    for rnd in schedule.ranks[rank]:
        if rnd.has_comm:
            ops: list[Op] = []
            deferred: list[tuple[np.ndarray, np.ndarray]] = []
            send_ranges = []
            for s in rnd.steps:
                if isinstance(s, Send):
                    data = view(s.src).view(np.uint8)
                    send_ranges.append(_byte_range(data))
                    ops.append(Op("send", global_rank(s.peer), data, header(data.nbytes), itemsize=itemsize))
            for s in rnd.steps:
                if isinstance(s, Recv):
                    dst = view(s.dst)
                    data = dst.view(np.uint8)
                    if s.reduce:
                        rng = _byte_range(data)
                        if any(_overlap(rng, sr) for sr in send_ranges):
                            tmp = np.empty_like(dst)
                            deferred.append((dst, tmp))
                            ops.append(Op("recv", global_rank(s.peer), tmp.view(np.uint8), header(data.nbytes),
                                          itemsize=itemsize))
                        else:
                            ops.append(Op("recv", global_rank(s.peer), data, header(data.nbytes), reducer, itemsize))
                    else:
                        ops.append(Op("recv", global_rank(s.peer), data, header(data.nbytes), itemsize=itemsize))
            engine.run(ops, deadline)
            fn = ufunc(rop)
            for dst, tmp in deferred:
                fn(dst, tmp, out=dst)
        for s in rnd.steps:
            if isinstance(s, Copy):
                src, dst = view(s.src), view(s.dst)
                if not (src.__array_interface__["data"][0] == dst.__array_interface__["data"][0]):
                    if np.shares_memory(src, dst):
                        src = src.copy()
                    dst[...] = src
            elif isinstance(s, Reduce):
                dst = view(s.dst)
                src = view(s.src)
                if np.shares_memory(src, dst):
                    src = src.copy()
                ufunc(rop)(dst, src, out=dst)
    if op is ReduceOp.AVG:
        finish_avg(outp, schedule.nranks)
