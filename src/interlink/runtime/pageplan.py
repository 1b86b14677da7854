"""A host-page Schedule compiled for one rank into the program the host-page executor runs step by step.

The ``peer_buffers`` Schedules of algorithms/hostpage.py (one-sided steps on the ranks' own buffers) are not
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

from dataclasses import dataclass, replace
from typing import Union

from ..algorithms.schedule import Chunk, Copy, Get, Put, Reduce, Schedule, Signal, Wait
from ..errors import ScheduleError

LOCAL = -1  # a Src of this rank
IN, OUT, SCR = 0, 1, 2
_BUF = {"input": IN, "output": OUT, "scratch": SCR}
#: the progress word holds ROUND_STRIDE * call + rounds finished: a Schedule has at most this many - 1 rounds
#: (16: a ``slots_pipelined`` broadcast's PIPE_CHUNKS + 1; the words are 64 bits)
ROUND_STRIDE = 16


@dataclass(frozen=True, slots=True)
class Src:
    peer: int  # LOCAL, or the rank whose buffer is read
    buf: int  # IN, OUT or SCR (a rank's scratch is its slot on the host page)
    off: int
    reduce: bool
    alt: int = -1  # a peer's SCR chunk that is a copy of its input from here: read there when it is mapped


@dataclass(frozen=True, slots=True)
class Move:
    """dst chunk of this rank <- srcs in order (each copied, or reduced into what is there). ``elide``: a
    copy of this rank's input into its slot that peers may read from the input itself instead (when the
    input lives in an interlink.empty arena the peers map): skipped then."""

    buf: int
    off: int
    count: int
    srcs: tuple[Src, ...]
    elide: bool = False
    noop: bool = False  # a copy of the input onto the output chunk it is when the call runs in place
    hazard: bool = False  # a local source may overlap the destination (same buffer, or in place)
    #: (peer, offset in its output): the PutOps of the same round that write this destination chunk, as it
    #: is once the chain is done, into peers' outputs; the executor pushes each piece as soon as it is final
    pushes: tuple[tuple[int, int], ...] = ()


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
    """Rounds first..end-1 of the Schedule, run as one sequence (the later ones need nothing new)."""

    first: int
    end: int
    before: tuple[tuple[int, int], ...]  # (peer, rounds it must have finished) first
    early: tuple[Op, ...]  # local steps that may run before the peers have arrived (first round only)
    ops: tuple[Op, ...]
    waits: tuple[int, ...]  # peers whose puts of round end - 1 must have landed (their Signal)
    publish: bool = True  # some peer waits for this rank to finish these rounds: publish the end


@dataclass(frozen=True, slots=True)
class PageProgram:
    collective: str
    algorithm: str
    rank: int
    rounds: tuple[PageRound, ...]
    readers: tuple[int, ...]  # peers that read this rank's input or output: it returns after them
    maps: tuple[int, ...]  # peers whose input this rank may read in place (mapped when shared)
    slot_readers: tuple[int, ...]  # peers that read this rank's slot where it may elide its copy there
    scratch: int  # elements of the slot this program uses (0: none)
    out_addr: bool = False  # peers write into this rank's output or read it (its address is published)
    noops: bool = False  # some copy is a no-op when the call runs in place


def _chunk_buf(c: Chunk, where: str) -> int:
    b = _BUF.get(c.buffer)
    if b is None:
        raise ScheduleError(f"{where}: the host-page program runs on the ranks' input, output and slot, "
                            f"not {c.buffer!r}", op=where)
    return b


def _writes(step) -> Chunk | None:
    """The chunk of its own rank a step writes (None: none)."""
    return step.dst if isinstance(step, (Get, Copy, Reduce)) else None


def _last_write(prog, c: Chunk, before: int) -> int:
    """The last round < before in which a rank's program writes chunk c, or puts land in it (its Wait);
    -1 when none does."""
    for k in range(min(before, len(prog)) - 1, -1, -1):
        for st in prog[k].steps:
            w = _writes(st)
            if (w is not None and w.overlaps(c)) or (isinstance(st, Wait) and c.buffer == "output"):
                return k
    return -1


def _elidable(s: Schedule, rank: int) -> dict[tuple[int, int], int]:
    """This rank's round-0 copies of its input into its slot that nothing but the peers' reads of the
    slot uses (no later write of the slot there, no local read of it): (slot offset, count) -> input
    offset. A peer reads such a chunk from the input itself when the input is mapped, and the copy is
    skipped."""
    prog = s.ranks[rank]
    out: dict[tuple[int, int], int] = {}
    if not prog:
        return out
    for st in prog[0].steps:
        if isinstance(st, Copy) and st.src.buffer == "input" and st.dst.buffer == "scratch":
            c = st.dst
            clash = any((_writes(x) is not None and _writes(x).overlaps(c) and x is not st) or
                        (isinstance(x, (Copy, Reduce)) and x.src.overlaps(c)) or
                        (isinstance(x, Put) and x.src.overlaps(c))
                        for rnd in prog for x in rnd.steps)
            if not clash:
                out[(c.offset, c.count)] = st.src.offset
    return out


def _alias(s: Schedule, rank: int, c: Chunk) -> Chunk | None:
    """The chunk that ``c`` (of the input or the output) is when the call runs in place: all_reduce and
    broadcast here always do (input is output); all_gather's input may be its block of the output, a
    reduce_scatter's output its block of the input."""
    coll, n = s.collective, s.count
    delta = {"all_reduce": 0, "broadcast": 0, "all_gather": rank * n, "reduce_scatter": -rank * n}.get(coll)
    if delta is None or c.buffer not in ("input", "output"):
        return None
    if c.buffer == "input":
        return Chunk("output", c.offset + delta, c.count)
    return Chunk("input", c.offset - delta, c.count)


def compile_page(s: Schedule, rank: int) -> PageProgram:
    """This rank's program of a one-sided Schedule on the ranks' own buffers and their slots (see the
    module docstring). ScheduleError, before any byte moves, for a step the host page cannot run (a
    send/receive, the switch's steps, a put into a peer's input or slot), for a peer that overwrites a
    chunk in the same round another rank reads it, or for more rounds than the progress word holds.

    Dependencies are per chunk: a read of a peer's output or slot waits until the peer has finished the
    round that last wrote it (inputs are read-only for the whole call; a put waits for the peer's previous
    round); a rank that overwrites a chunk a peer read in an earlier round waits until that peer has
    finished it. A round that needs nothing beyond what the previous one waited for runs on from it
    (unless that one ends in a Wait), so the steps of both into one chunk fuse."""
    where = f"{s.collective}/{s.algorithm}"
    if s.nrounds >= ROUND_STRIDE:
        raise ScheduleError(f"{where}: {s.nrounds} rounds, the host page runs at most {ROUND_STRIDE - 1}", op=where)
    elide = {j: _elidable(s, j) for j in range(s.nranks)}
    def parse(r: int) -> tuple[list, set]:
        """Rank r's rounds: (needs {peer: rounds}, remote items, local items, waits), and the peers whose
        input it may read in place."""
        parsed: list = []
        maps: set[int] = set()
        for k, rnd in enumerate(s.ranks[r]):
            remote, local, waits, needs = [], [], [], {}

            def need(j: int, e: int) -> None:
                if e > 0:
                    needs[j] = max(needs.get(j, 0), e)

            for st in rnd.steps:
                if isinstance(st, Get):
                    buf = _chunk_buf(st.src, where)
                    alt = -1
                    if buf == IN:
                        maps.add(st.peer)
                    else:
                        need(st.peer, _last_write(s.ranks[st.peer], st.src, k) + 1)
                        if buf == SCR:
                            for (o, c), io in elide[st.peer].items():
                                if o <= st.src.offset and st.src.end <= o + c:
                                    alt = io + st.src.offset - o
                                    maps.add(st.peer)
                    remote.append((st.dst, Src(st.peer, buf, st.src.offset, st.reduce, alt)))
                elif isinstance(st, Put):
                    if st.dst.buffer != "output":
                        raise ScheduleError(f"{where}: rank {r} round {k}: a put into a peer's {st.dst.buffer}; "
                                            "the host page writes only into outputs", op=where, ranks=[r, st.peer])
                    remote.append(PutOp(st.peer, _chunk_buf(st.src, where), st.src.offset, st.src.count, st.dst.offset))
                    _put_needs(s, r, k, st, need, where)
                elif isinstance(st, (Copy, Reduce)):  # inline: in its place among the round's reads
                    (remote if st.inline else local).append(
                        (st.dst, Src(LOCAL, _chunk_buf(st.src, where), st.src.offset, isinstance(st, Reduce))))
                elif isinstance(st, Wait):
                    waits.append(st.peer)
                elif not isinstance(st, Signal):  # a Signal is the end of the round's puts: the progress word
                    raise ScheduleError(f"{where}: rank {r} round {k} has a {type(st).__name__} step; the "
                                        "host page runs Get, Put, Signal, Wait, Copy and Reduce", op=where, ranks=[r])
                w = _writes(st)
                if isinstance(st, Copy) and _alias(s, r, st.src) == st.dst:
                    w = None  # input onto the output it aliases in place: nothing moves
                if w is not None:  # a chunk peers read in this or an earlier round: after they have
                    ws = [w] + [c for c in (_alias(s, r, w),) if c is not None]
                    for i in range(s.nranks):
                        if i == r:
                            continue
                        for kk, rr in enumerate(s.ranks[i][:k + 1]):
                            if any(isinstance(g, Get) and g.peer == r and any(g.src.overlaps(c) for c in ws)
                                   for g in rr.steps):
                                if kk == k:
                                    raise ScheduleError(f"{where}: rank {r} round {k} overwrites {w} while rank "
                                                        f"{i} reads it in the same round", op=where, ranks=[r, i])
                                need(i, kk + 1)
            parsed.append((needs, remote, local, tuple(waits)))
        return parsed, maps

    parsed, maps = parse(rank)
    slot_readers: set[int] = set()
    # the rounds whose end some peer waits for: only those are published (a publish may wake a peer)
    wanted: set[int] = set()
    for j in range(s.nranks):
        if j != rank:
            for k, (nd, _, _, wt) in enumerate(parse(j)[0]):
                if rank in nd:
                    wanted.add(nd[rank])
                if rank in wt:
                    wanted.add(k + 1)
    for j in range(s.nranks):  # who reads a slot chunk this rank may elide
        if j != rank:
            for rnd in s.ranks[j]:
                for st in rnd.steps:
                    if isinstance(st, Get) and st.peer == rank and st.src.buffer == "scratch" and any(
                            o <= st.src.offset and st.src.end <= o + c for (o, c) in elide[rank]):
                        slot_readers.add(j)
    mine_elide = elide[rank]
    rounds: list[PageRound] = []
    k = 0
    while k < len(parsed):
        needs, remote, local, waits = parsed[k]
        items = remote + local
        early: tuple = ()
        if k == 0 and local:
            # local steps that touch no chunk of this round's one-sided steps commute with them
            lops = _fuse(local, where, mine_elide)
            written = [x[0] for x in remote if not isinstance(x, PutOp)]  # by the round's reads
            read = written + [Chunk(_NAME[x.buf], x.off, x.count) for x in remote if isinstance(x, PutOp)]
            if not any(Chunk(_NAME[op.buf], op.off, op.count).overlaps(c) for op in lops for c in read) and \
                    not any(Chunk(_NAME[x.buf], x.off, op.count).overlaps(c) for op in lops for x in op.srcs
                            for c in written):
                early, items = lops, list(remote)
        waited = dict(needs)
        end = k + 1
        while end < len(parsed) and not waits and all(waited.get(j, 0) >= e for j, e in parsed[end][0].items()):
            _, r2, l2, waits = parsed[end]
            items += r2 + l2
            end += 1
        rounds.append(PageRound(k, end, tuple(sorted(needs.items())), early, _fuse(items, where, mine_elide),
                                waits))
        k = end
    rounds = [PageRound(r.first, r.end, r.before, *_push(s, rank, _flag(s, rank, r.early), _flag(s, rank, r.ops)), r.waits,
                        any(r.first < e <= r.end for e in wanted))
              for r in _sink(s, rank, rounds)]
    readers = set()
    for j in range(s.nranks):
        if j != rank:
            for rnd in s.ranks[j]:
                if any(isinstance(st, Get) and st.peer == rank and st.src.buffer != "scratch" for st in rnd.steps):
                    readers.add(j)
    out_addr = any((isinstance(st, Put) and st.peer == rank) or (isinstance(st, Get) and st.peer == rank and
                                                                 st.src.buffer == "output")
                   for j in range(s.nranks) if j != rank for rnd in s.ranks[j] for st in rnd.steps)
    noops = any(isinstance(op, Move) and op.noop for r in rounds for op in r.early + r.ops)
    return PageProgram(s.collective, s.algorithm, rank, tuple(rounds), tuple(sorted(readers)),
                       tuple(sorted(maps)), tuple(sorted(slot_readers)), s.buffers.get("scratch", 0), out_addr, noops)


_NAME = {IN: "input", OUT: "output", SCR: "scratch"}


def _put_needs(s: Schedule, rank: int, k: int, st: Put, need, where: str) -> None:
    """What a put of ``rank`` in round k into chunk d of peer j's output waits for: j must have finished
    the last earlier round in which it touches d (or the input chunk d is in place); every other rank that
    reads d from j in an earlier round must have finished that round. ScheduleError for another rank that
    reads d from j in the same round (the put would race its read). The putting rank's own reads of d come
    before its put in program order. Nothing else: a put into a chunk that nobody touches before it waits
    only for j to have joined the call (its header, with its output's address)."""
    j = st.peer
    ds = [st.dst] + [c for c in (_alias(s, j, st.dst),) if c is not None]
    hit = lambda c: any(c.overlaps(x) for x in ds)  # noqa: E731
    for kk in range(min(k, len(s.ranks[j])) - 1, -1, -1):
        if any((isinstance(x, (Get, Copy, Reduce)) and hit(x.dst)) or (isinstance(x, (Copy, Reduce, Put)) and hit(x.src))
               or isinstance(x, Wait) for x in s.ranks[j][kk].steps):
            need(j, kk + 1)
            break
    for i in range(s.nranks):
        if i in (rank, j):
            continue
        for kk, rr in enumerate(s.ranks[i][:k + 1]):
            if any(isinstance(g, Get) and g.peer == j and hit(g.src) for g in rr.steps):
                if kk == k:
                    raise ScheduleError(f"{where}: rank {rank} round {k} puts into {st.dst} of rank {j} while rank "
                                        f"{i} reads it in the same round", op=where, ranks=[rank, i])
                need(i, kk + 1)


def _touched(s: Schedule, rank: int, op: Op) -> list[Chunk]:
    """The chunks of this rank an op reads or writes, and what they alias in place."""
    if isinstance(op, PutOp):
        cs = [Chunk(_NAME[op.buf], op.off, op.count)]
    else:
        cs = [Chunk(_NAME[op.buf], op.off, op.count)] + [Chunk(_NAME[x.buf], x.off, op.count)
                                                         for x in op.srcs if x.peer == LOCAL]
    return cs + [a for a in (_alias(s, rank, c) for c in cs) if a is not None]


def _sink(s: Schedule, rank: int, rounds: list[PageRound]) -> list[PageRound]:
    """A first-round local copy into a chunk whose next use is a chain reducing into it joins that chain
    (the chain then starts from the copy's source: one pass less over the chunk, and its first two sources
    combine in one operation), where nothing in between touches the chunk and no peer reads it before."""
    if not rounds:
        return rounds
    early = list(rounds[0].early)
    later = [list(r.ops) for r in rounds]
    i = 0
    while i < len(early):
        m = early[i]
        if not (isinstance(m, Move) and len(m.srcs) == 1 and m.srcs[0].peer == LOCAL and not m.srcs[0].reduce
                and not m.elide):
            i += 1
            continue
        d = Chunk(_NAME[m.buf], m.off, m.count)
        dd = [d] + [a for a in (_alias(s, rank, d),) if a is not None]
        hit = lambda op: any(c.overlaps(x) for c in _touched(s, rank, op) for x in dd)  # noqa: E731
        if any(hit(op) for op in early[i + 1:]):
            i += 1
            continue
        found = None
        for ri, ops in enumerate(later):
            for oi, op in enumerate(ops):
                if hit(op):
                    found = (ri, oi, op)
                    break
            if found:
                break
        ok = found is not None and isinstance(found[2], Move) and (found[2].buf, found[2].off, found[2].count) == \
            (m.buf, m.off, m.count) and found[2].srcs[0].reduce
        if ok:  # no peer may read the chunk before the chain has written it
            upto = rounds[found[0]].first
            ok = not any(isinstance(g, Get) and g.peer == rank and any(g.src.overlaps(x) for x in dd)
                         for j in range(s.nranks) if j != rank for rr in s.ranks[j][:upto + 1] for g in rr.steps)
        if not ok:
            i += 1
            continue
        ri, oi, c = found
        later[ri][oi] = Move(c.buf, c.off, c.count, m.srcs + c.srcs)
        del early[i]
    return [PageRound(r.first, r.end, r.before, tuple(early) if k == 0 else r.early, tuple(later[k]), r.waits)
            for k, r in enumerate(rounds)]


def _flag(s: Schedule, rank: int, ops: tuple) -> tuple:
    """Mark each Move's in-place no-op copy and whether a local source may overlap its destination."""
    res = []
    for op in ops:
        if isinstance(op, Move):
            dst = Chunk(_NAME[op.buf], op.off, op.count)
            first = op.srcs[0]
            if s.collective in ("all_reduce", "broadcast") and len(op.srcs) > 1 and first.peer == LOCAL and \
                    not first.reduce and _alias(s, rank, Chunk(_NAME[first.buf], first.off, op.count)) == dst:
                # these always run in place: the chain starts from what the destination already holds
                op = Move(op.buf, op.off, op.count, op.srcs[1:], op.elide)
            locs = [Chunk(_NAME[x.buf], x.off, op.count) for x in op.srcs if x.peer == LOCAL]
            noop = len(op.srcs) == 1 and bool(locs) and not op.srcs[0].reduce and _alias(s, rank, locs[0]) == dst
            hazard = any(c.overlaps(dst) or (_alias(s, rank, c) is not None and _alias(s, rank, c).overlaps(dst))
                         for c in locs)
            op = Move(op.buf, op.off, op.count, op.srcs, op.elide, noop, hazard and not noop)
        res.append(op)
    return tuple(res)


def _copy_of(m: Move) -> tuple | None:
    """(buf, off, count) of a Move's one local source, when it is a plain copy of it."""
    if len(m.srcs) == 1 and m.srcs[0].peer == LOCAL and not m.srcs[0].reduce and not m.elide:
        return (m.srcs[0].buf, m.srcs[0].off, m.count)
    return None


def _push(s: Schedule, rank: int, early: tuple, ops: tuple) -> tuple[tuple, tuple]:
    """PutOps that write what a Move has just made into peers' outputs become that Move's pushes: the
    executor writes each piece out as soon as it is final, while it is in cache, instead of reading the
    chunk again. Two forms: the PutOps right after a Move that read its destination chunk (the Schedule's
    order: the puts read it after the chain has written it), and the PutOps of a round that read the same
    chunk as an early local copy (an all_gather's block, copied into the own output and put into every
    peer's): that copy moves from the early steps to just before the puts (it commutes with the round's
    one-sided steps, which is why it was early; it is not moved past a later early step that touches what
    it touches) and the copied pieces are pushed."""
    early, ops = list(early), list(ops)
    i = 0
    while i < len(ops):
        op = ops[i]
        if isinstance(op, PutOp) and op.count:
            for e, m in enumerate(early):
                if isinstance(m, Move) and _copy_of(m) == (op.buf, op.off, op.count):
                    mine = _touched(s, rank, m)
                    if not any(c.overlaps(x) for later in early[e + 1:] for c in _touched(s, rank, later)
                               for x in mine):
                        ops.insert(i, early.pop(e))
                        i += 1
                    break
        i += 1
    res: list = []
    for op in ops:
        last = res[-1] if res else None
        if isinstance(op, PutOp) and isinstance(last, Move) and op.count and (
                (op.buf, op.off, op.count) == (last.buf, last.off, last.count) or
                _copy_of(last) == (op.buf, op.off, op.count)):
            res[-1] = replace(last, pushes=last.pushes + ((op.peer, op.dst_off),))
        else:
            res.append(op)
    return tuple(early), tuple(res)


def _fuse(items: list, where: str, elide: dict | None = None) -> tuple[Op, ...]:
    """Steps in execution order -> ops: consecutive steps into the same destination chunk become one
    Move; a copy of the input into the slot that peers may read from the input instead is marked."""
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
            el = bool(elide) and src.peer == LOCAL and src.buf == IN and buf == SCR and \
                elide.get((dst.offset, dst.count)) == src.off
            ops.append(Move(buf, dst.offset, dst.count, (src,), el))
    return tuple(ops)
