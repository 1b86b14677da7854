"""A host-page Schedule compiled for one rank into the program the host-page executor runs step by step.

The ``fastd`` Schedules of algorithms/hostpage.py (one-sided steps on the ranks' own buffers) are not
matched against a hand-written kernel: :func:`compile_page` turns this rank's steps into a program of
two kinds of operation, in the order the reference interpreter gives them (algorithms/reference.py: in
a round, the one-sided steps in step order, then the local ones):

* :class:`Move`: one destination chunk of this rank, and the chain of sources that land in it, each
  copied or reduced in turn (consecutive steps into the same chunk are fused: the executor walks the
  chunk once, a cache-sized piece at a time, through every source). A source is this rank's input or
  output, or a peer's (read in place where it lives in an ``interlink.empty`` arena, else by
  cross-memory attach);
* :class:`PutOp`: this rank's chunk written into a peer's output.

Between rounds the ranks synchronise on the Schedule's own dependencies only: before a round that
touches peer j, this rank waits until j has finished the previous round (a progress word per rank on
the host page); a :class:`~interlink.algorithms.schedule.Wait` waits until the signalling peer has
finished the round of its puts; a rank whose input or output a peer reads returns only when that peer
is done. The runtime adds nothing the Schedule does not say, except where it may start early: the local
steps of the first round that touch nothing the round's one-sided steps touch run while the peers arrive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..algorithms.schedule import Chunk, Copy, Get, Put, Reduce, Schedule, Signal, Wait
from ..errors import ScheduleError

LOCAL = -1  # a Src of this rank
IN, OUT = 0, 1
_BUF = {"input": IN, "output": OUT}
#: the progress word holds ROUND_STRIDE * call + rounds finished: a Schedule has at most this many - 1 rounds
ROUND_STRIDE = 8


@dataclass(frozen=True, slots=True)
class Src:
    peer: int  # LOCAL, or the rank whose buffer is read
    buf: int  # IN or OUT
    off: int
    reduce: bool


@dataclass(frozen=True, slots=True)
class Move:
    """dst chunk of this rank <- srcs in order (each copied, or reduced into what is there)."""

    buf: int
    off: int
    count: int
    srcs: tuple[Src, ...]


@dataclass(frozen=True, slots=True)
class PutOp:
    """This rank's chunk (buf, off, count) -> peer's output from dst_off."""

    peer: int
    buf: int
    off: int
    count: int
    dst_off: int


Op = Union[Move, PutOp]


@dataclass(frozen=True, slots=True)
class PageRound:
    """Rounds first..end-1 of the Schedule, run as one sequence (the later ones wait for nobody)."""

    first: int
    end: int
    before: tuple[int, ...]  # peers that must have finished round first - 1 (they wrote what it reads)
    early: tuple[Op, ...]  # local steps that may run before the peers have arrived (first round only)
    ops: tuple[Op, ...]
    waits: tuple[int, ...]  # peers whose puts of round end - 1 must have landed (their Signal)


@dataclass(frozen=True, slots=True)
class PageProgram:
    collective: str
    algorithm: str
    rank: int
    rounds: tuple[PageRound, ...]
    readers: tuple[int, ...]  # peers that read this rank's input or output: it returns after them
    reads_input_of: tuple[int, ...]  # peers whose input this rank reads (mapped in place when shared)


def _chunk_buf(c: Chunk, where: str) -> int:
    b = _BUF.get(c.buffer)
    if b is None:
        raise ScheduleError(f"{where}: the host-page program runs on the ranks' own input and output, "
                            f"not {c.buffer!r}", op=where)
    return b


def compile_page(s: Schedule, rank: int) -> PageProgram:
    """This rank's program of a one-sided Schedule on the ranks' own buffers (see the module docstring).
    ScheduleError, before any byte moves, for a step the host page cannot run (a send/receive, the
    switch's steps, scratch, a put into a peer's input) or for more rounds than the progress word holds.

    A round waits for a peer's previous round only where it reads that peer's output or puts into it
    (inputs are read-only for the whole call); a round that waits for nobody runs on from the previous
    one without a pause (unless that one ends in a Wait), so the steps of both into one chunk fuse."""
    where = f"{s.collective}/{s.algorithm}"
    if s.nrounds >= ROUND_STRIDE:
        raise ScheduleError(f"{where}: {s.nrounds} rounds, the host page runs at most {ROUND_STRIDE - 1}", op=where)
    parsed = []  # per round: (before, remote items, local items, waits)
    reads_input: set[int] = set()
    for k, rnd in enumerate(s.ranks[rank]):
        remote, local, waits, before = [], [], [], set()
        for st in rnd.steps:
            if isinstance(st, Get):
                src = Src(st.peer, _chunk_buf(st.src, where), st.src.offset, st.reduce)
                if src.buf == IN:
                    reads_input.add(st.peer)
                else:
                    before.add(st.peer)
                remote.append((st.dst, src))
            elif isinstance(st, Put):
                if st.dst.buffer != "output":
                    raise ScheduleError(f"{where}: rank {rank} round {k}: a put into a peer's {st.dst.buffer}; "
                                        "the host page writes only into outputs", op=where, ranks=[rank, st.peer])
                remote.append(PutOp(st.peer, _chunk_buf(st.src, where), st.src.offset, st.src.count, st.dst.offset))
                before.add(st.peer)
            elif isinstance(st, (Copy, Reduce)):
                local.append((st.dst, Src(LOCAL, _chunk_buf(st.src, where), st.src.offset, isinstance(st, Reduce))))
            elif isinstance(st, Wait):
                waits.append(st.peer)
            elif not isinstance(st, Signal):  # a Signal is the end of the round's puts: the progress word
                raise ScheduleError(f"{where}: rank {rank} round {k} has a {type(st).__name__} step; the "
                                    "host page runs Get, Put, Signal, Wait, Copy and Reduce", op=where, ranks=[rank])
        parsed.append((tuple(sorted(before)) if k else (), remote, local, tuple(waits)))
    rounds: list[PageRound] = []
    k = 0
    while k < len(parsed):
        before, remote, local, waits = parsed[k]
        items = remote + local
        early: tuple = ()
        if k == 0 and local:
            # local steps that touch no chunk of this round's one-sided steps commute with them
            lops = _fuse(local, where)
            written = [_chunk3(x[0]) for x in remote if not isinstance(x, PutOp)]  # by the round's reads
            read = written + [(x.buf, x.off, x.count) for x in remote if isinstance(x, PutOp)]  # or puts
            if not any(_overlap((op.buf, op.off, op.count), c) for op in lops for c in read) and \
                    not any(_overlap(a, c) for op in lops for a in _chunks_of(op)[1:] for c in written):
                early, items = lops, list(remote)
        end = k + 1
        while end < len(parsed) and not waits and not parsed[end][0]:
            _, r2, l2, waits = parsed[end]
            items += r2 + l2
            end += 1
        rounds.append(PageRound(k, end, before, early, _fuse(items, where), waits))
        k = end
    readers = set()
    for j in range(s.nranks):
        if j != rank:
            for rnd in s.ranks[j]:
                if any(isinstance(st, Get) and st.peer == rank for st in rnd.steps):
                    readers.add(j)
    return PageProgram(s.collective, s.algorithm, rank, tuple(rounds), tuple(sorted(readers)),
                       tuple(sorted(reads_input)))


def _chunk3(c: Chunk) -> tuple[int, int, int]:
    return (_BUF.get(c.buffer, -2), c.offset, c.count)


def _chunks_of(op: Op) -> list[tuple[int, int, int]]:
    if isinstance(op, PutOp):
        return [(op.buf, op.off, op.count)]
    return [(op.buf, op.off, op.count)] + [(s.buf, s.off, op.count) for s in op.srcs if s.peer == LOCAL]


def _overlap(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return a[0] == b[0] and a[2] > 0 and b[2] > 0 and a[1] < b[1] + b[2] and b[1] < a[1] + a[2]


def _fuse(items: list, where: str) -> tuple[Op, ...]:
    """Steps in execution order -> ops: consecutive steps into the same destination chunk become one Move."""
    ops: list[Op] = []
    for x in items:
        if isinstance(x, PutOp):
            ops.append(x)
            continue
        dst, src = x
        buf = _chunk_buf(dst, where)
        last = ops[-1] if ops else None
        if isinstance(last, Move) and (last.buf, last.off, last.count) == (buf, dst.offset, dst.count):
            ops[-1] = Move(buf, dst.offset, dst.count, last.srcs + (src,))
        else:
            ops.append(Move(buf, dst.offset, dst.count, (src,)))
    return tuple(ops)
