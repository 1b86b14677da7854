"""The shared-memory paths of an all-local group, as one-sided Schedules over registered memory.

The runtime's latency and one-host bandwidth paths (runtime/fastpath.py) are these Schedules: ``peer_buffers``
runs step by step (each rank's steps compiled by :func:`interlink.runtime.pageplan.compile_page`), the
slot paths from per-shape plans read off their Schedule (:func:`host_plan`); the reference interpreter
verifies them, the cost model prices them from their steps, the simulator runs them.
A rank's ``scratch`` buffer here is its *slot* on the host page (shared memory every local rank maps:
registered memory), so a peer's Get of ``scratch`` reads that slot in place; a Get of ``input`` or
``output`` reads the rank's own buffer (mapped in place when it lives in an ``interlink.empty`` arena,
else by cross-memory attach), and a Put writes into the peer's buffer the same way.

* ``slots`` (all_reduce, broadcast, all_gather, reduce_scatter, all_to_all, barrier): every writer copies its payload
  once into its slot (round 0), then every reader takes what it needs from every slot (round 1):
  all_reduce and reduce_scatter reduce the slots in rank order (identical bits on every rank: rank 0's
  chunk read plainly, every next one reduced in, a rank's own as an inline local step in its place),
  broadcast and all_gather copy. A reduce_scatter's or all_to_all's writer copies every block but its
  own (its own it reduces, or copies, straight from its input, in its place). The barrier is signals only.
* ``slots_once`` (all_reduce of an oversubscribed host, more than two local ranks a core, up to the
  one-shot size): slots written once; one rank reduces every slot, in rank order (its own inline), into a result slot
  (its ``scratch[n:2n]`` here: the host page's result slot) and the others copy it out: p times less
  arithmetic where ranks share cores. The runtime lets the last rank to publish be the reducer (its
  ``root``): every reducer's Schedule is verified and gives the same bits.
* ``two_phase`` (all_reduce, up to the slot size; 2 ranks: up to peer_buffers's 2 MiB): two phases in the slots: each rank writes the
  slices its peers reduce into its slot (round 0), reduces its 1/p slice from every slot into its output and writes it back into its own slot (round 1); then every
  rank copies the other ranks' final slices out of their slots (round 2). DeepSpeed's / vLLM's
  shared-memory all_reduce.
* ``slots_pipelined`` (broadcast, too large for a slot): the root's payload through its slot in PIPE_CHUNKS chunks,
  double-buffered (each half of the slot holds one): in round k the root copies chunk k in while every
  receiver copies chunk k - 1 out of the other half. Two user-space copies, as ``slots``, where ``peer_buffers``
  makes each receiver pin and copy the root's pages in the kernel: 4 ranks on 2 cores, 16 MiB, through
  16 MiB slots 2566 us against peer_buffers's 3401 (benchmarks/RESULTS.md).
* ``peer_buffers`` (all_reduce, broadcast, all_gather, reduce_scatter, all_to_all; too large for a slot): one copy, from
  and into the ranks' own buffers, no slot. all_reduce: each rank reduces its slice reading that slice of
  every peer's input, then puts it into every peer's output (:func:`reduce_push`; the executor pushes
  each piece as soon as it is final, while it is in cache, so no rank reads a reduced slice back from
  memory: 2 ranks, 64 MiB, 9.7 -> 8.3 ms; 4 ranks 31.7 -> 24.0 ms, against the two-phase form that
  copies the slices out of their owners' outputs). broadcast: the receivers pull the first p-1/p of the payload from the root while the
  root pushes the last 1/p into every receiver (on 2 ranks each moves half). all_gather: every rank
  pushes its block into every peer's output. reduce_scatter: every rank reads its block from every
  peer's input (the first straight into its output) and reduces its own in last. all_to_all: every rank
  puts block j of its input into rank j's output (its own block copied locally).

Where they are used (sizes, flags) is the runtime's policy (runtime/policy.py, FastPath.takes); the
tuner never picks them for a group that is not all on one host's shared page (:data:`HOST_PAGE`).
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .ring import _Phases, split_sizes
from .schedule import Builder, Schedule, inp, out, scr, split
from .traffic import RECEIVER, SENDER, Traffic, register_traffic

#: the algorithms of this module: they need every rank of the group on one host page
HOST_PAGE = frozenset({"slots", "slots_once", "two_phase", "peer_buffers", "slots_pipelined"})


def measured_band(limit: int, top: int) -> tuple[int, int]:
    """The inputs (lo, hi], in bytes, around a slots limit where the runtime measures ``slots`` against
    ``peer_buffers`` per call shape instead of trusting the limit (runtime.fastpath.FastPath.pick,
    INTERLINK_AUTOTUNE): from half the limit to 4x it, at most ``top`` (the slots' capacity for the call).
    The model names it in ``interlink predict``'s notes."""
    return limit // 2, min(4 * limit, top)


def _others(p: int, me: int) -> list[int]:
    """The peers of ``me`` in rank order."""
    return [j for j in range(p) if j != me]


# ---- fast: one write into the slot, every reader reads every slot --------------------------------------

def _rank_order(b: Builder, rnd: int, r: int, p: int, src, dst, own) -> None:
    """Rank r's dst = the reduction of every rank's chunk ``src`` of its slot in rank order (rank 0's
    first), its own (``own``: its slot or its input) in its place: an inline local step among the reads.
    Every rank that runs it computes the same bits (what the one-shot path's inlined kernel does)."""
    for j in range(p):
        if j == r:
            (b.copy if j == 0 else b.reduce)(rnd, r, own, dst, inline=True)
        else:
            b.get(rnd, r, j, src, dst, reduce=j > 0)


@register("all_reduce", "slots")
def all_reduce_fast(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange on the host page: each rank writes its input into its slot once, then reduces every slot (rank order)."""
    p, n = nranks, count
    b = Builder("all_reduce", "slots", p, n, root, scratch=n)
    for r in range(p):
        if p == 1:
            b.copy(0, r, inp(0, n), out(0, n))
            continue
        b.copy(0, r, inp(0, n), scr(0, n))
        _rank_order(b, 1, r, p, scr(0, n), out(0, n), scr(0, n))
    return b.build()


@register("all_reduce", "slots_once")
def all_reduce_fast_once(nranks: int, count: int, root: int = 0) -> Schedule:
    """2 exchanges on the host page: slots written once; one rank (root) reduces every slot into its result slot; the others copy it."""
    p, n = nranks, count
    b = Builder("all_reduce", "slots_once", p, n, root, scratch=2 * n)
    for r in range(p):
        if p > 1:
            b.copy(0, r, inp(0, n), scr(0, n))
    if p == 1:
        b.copy(0, root, inp(0, n), out(0, n))
    else:
        _rank_order(b, 1, root, p, scr(0, n), out(0, n), scr(0, n))
    if p > 1:
        b.copy(1, root, out(0, n), scr(n, n))
    for r in _others(p, root):
        b.get(2, r, root, scr(n, n), out(0, n))
    return b.build()


@register("broadcast", "slots")
def broadcast_fast(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange on the host page: the root writes its payload into its slot once; every receiver copies it out."""
    p, n = nranks, count
    b = Builder("broadcast", "slots", p, n, root, scratch=n)
    if p > 1:
        b.copy(0, root, inp(0, n), scr(0, n))
    b.copy(0, root, inp(0, n), out(0, n))
    for r in _others(p, root):
        b.get(1, r, root, scr(0, n), out(0, n))
    return b.build()


@register("all_gather", "slots")
def all_gather_fast(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange on the host page: each rank writes its block into its slot once; every rank copies every slot out."""
    p, n = nranks, count
    b = Builder("all_gather", "slots", p, n, root, scratch=n)
    for r in range(p):
        if p > 1:
            b.copy(0, r, inp(0, n), scr(0, n))
        b.copy(0, r, inp(0, n), out(r * n, n))
        for j in _others(p, r):
            b.get(1, r, j, scr(0, n), out(j * n, n))
    return b.build()


@register("reduce_scatter", "slots")
def reduce_scatter_fast(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange on the host page: each rank writes the blocks of its peers into its slot; each reduces its block from every slot."""
    p, m = nranks, count
    b = Builder("reduce_scatter", "slots", p, m, root, scratch=m * p)
    for r in range(p):
        for j in _others(p, r):
            b.copy(0, r, inp(j * m, m), scr(j * m, m))
        if p == 1:
            b.copy(0, r, inp(0, m), out(0, m))
        else:  # rank order, this rank's own block from its input in its place
            _rank_order(b, 1, r, p, scr(r * m, m), out(0, m), inp(r * m, m))
    return b.build()


@register("all_to_all", "slots")
def all_to_all_fast(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange on the host page: each rank writes the blocks of its peers into its slot; each copies its
    block out of every slot."""
    p, n = nranks, count
    b = Builder("all_to_all", "slots", p, n, root, scratch=n * p)
    for r in range(p):
        for j in _others(p, r):
            b.copy(0, r, inp(j * n, n), scr(j * n, n))
        b.copy(0, r, inp(r * n, n), out(r * n, n))
        for j in _others(p, r):
            b.get(1, r, j, scr(r * n, n), out(j * n, n))
    return b.build()


@register("barrier", "slots")
def barrier_fast(nranks: int, count: int = 0, root: int = 0) -> Schedule:
    """1 exchange on the host page: every rank signals every other (its slot's published word)."""
    p = nranks
    b = Builder("barrier", "slots", p, 0, root)
    for r in range(p):
        for j in _others(p, r):
            b.signal(0, r, j)
    return b.build()


# ---- two_phase: the two-phase all_reduce in the slots ------------------------------------------------------

def two_phase(algorithm: str, nranks: int, count: int, root: int = 0,
              blocks: list[tuple[int, int]] | None = None) -> Schedule:
    """The two-phase all_reduce on the host page over ``blocks`` (each rank's (offset, count) slice,
    tiling the buffer in rank order; even by default): each rank reduces its slice from every peer, then
    copies the other slices from their owners. ``two_phase`` reads the slots (each rank writes the slices its
    peers reduce into its slot first, and its own slice, reduced, after); ``peer_buffers`` reads the peers' own input, then output."""
    p, n = nranks, count
    blocks = split(n, p) if blocks is None else blocks
    slots = algorithm == "two_phase"
    src = scr if slots else inp
    b = Builder("all_reduce", algorithm, p, n, root, scratch=n if slots else 0)
    for r in range(p):
        ro, rn = blocks[r]
        if slots:  # only the slices the peers reduce: this rank's own is written once reduced (round 1)
            for i in _others(p, r):
                io, il = blocks[i]
                b.copy(0, r, inp(io, il), scr(io, il))
        b.copy(0, r, inp(ro, rn), out(ro, rn))
        for j in _others(p, r):
            b.get(1, r, j, src(ro, rn), out(ro, rn), reduce=True)
        if slots and p > 1:
            b.copy(1, r, out(ro, rn), scr(ro, rn))
        for i in _others(p, r):
            io, il = blocks[i]
            b.get(2, r, i, (scr if slots else out)(io, il), out(io, il))
    return b.build()


@register("all_reduce", "two_phase")
def all_reduce_fast2(nranks: int, count: int, root: int = 0) -> Schedule:
    """2 exchanges on the host page: each rank writes its peers' slices into its slot; each reduces its 1/p slice from every slot into its output and its own slot; every rank copies the other slices out."""
    return two_phase("two_phase", nranks, count, root)


# ---- peer_buffers: one copy from and into the ranks' own buffers ----------------------------------------------

@register("all_reduce", "peer_buffers")
def all_reduce_fastd(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange from and into the ranks' own buffers: each rank reduces its 1/p slice reading every peer's input, and pushes it into every peer's output."""
    return reduce_push("peer_buffers", nranks, count, root)


def reduce_push(algorithm: str, nranks: int, count: int, root: int = 0,
                blocks: list[tuple[int, int]] | None = None) -> Schedule:
    """The all_reduce that reduces each slice once and pushes it: rank r reduces its slice (its
    ``blocks[r]``, even by default) from its own input and every peer's, and puts the result into every
    peer's output (one signal each); a rank is done when every owner's put has landed. Each byte of a
    rank's output is written once, by the owner of its slice, right after that owner computed it: the
    executor pushes each cache-sized piece as soon as it is reduced (runtime/pageplan.py), so the sum is
    never read back from memory, where the two-phase form reads every owner's output again."""
    p, n = nranks, count
    blocks = split(n, p) if blocks is None else blocks
    b = Builder("all_reduce", algorithm, p, n, root)
    for r in range(p):
        ro, rn = blocks[r]
        b.copy(0, r, inp(ro, rn), out(ro, rn))
        for j in _others(p, r):
            b.get(1, r, j, inp(ro, rn), out(ro, rn), reduce=True)
        for j in _others(p, r) if rn > 0 else ():
            b.put(2, r, j, out(ro, rn), out(ro, rn))
            b.signal(2, r, j)
    return b.build()


def broadcast_cut(nranks: int, count: int) -> int:
    """Where the receivers' pull of a ``peer_buffers`` broadcast ends and the root's push begins."""
    return count - count // nranks


@register("broadcast", "peer_buffers")
def broadcast_fastd(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange from the root's own buffer: the receivers pull the first (p-1)/p, the root pushes the last 1/p into each."""
    p, n = nranks, count
    cut = broadcast_cut(p, n)
    b = Builder("broadcast", "peer_buffers", p, n, root)
    b.copy(0, root, inp(0, n), out(0, n))
    for r in _others(p, root):
        b.get(0, r, root, inp(0, cut), out(0, cut))
        if n - cut > 0:  # a signal says the put has landed: none without one
            b.put(0, root, r, inp(cut, n - cut), out(cut, n - cut))
            b.signal(0, root, r)
    return b.build()


#: chunks of a ``slots_pipelined`` broadcast (each half of the root's slot holds one: the slot must hold 2/PIPE_CHUNKS
#: of the payload; the host page's progress word allows ROUND_STRIDE - 1 = 15 rounds: PIPE_CHUNKS + 1)
PIPE_CHUNKS = 8


def pipe_scratch(count: int) -> int:
    """The slot elements a ``slots_pipelined`` broadcast of ``count`` elements needs: two of its chunks."""
    return 2 * (-(-count // PIPE_CHUNKS))


def pipe_max(slot_bytes: int) -> int:
    """The largest broadcast (bytes) ``slots_pipelined`` carries through a slot of slot_bytes: PIPE_CHUNKS / 2 slots."""
    return PIPE_CHUNKS // 2 * slot_bytes


@register("broadcast", "slots_pipelined")
def broadcast_fastp(nranks: int, count: int, root: int = 0) -> Schedule:
    """PIPE_CHUNKS + 1 exchanges through the root's slot, double-buffered: in round k the root copies chunk k into half k % 2 of its slot while every receiver copies chunk k - 1 out of the other half."""
    p, n = nranks, count
    chunks = split(n, PIPE_CHUNKS)
    half = pipe_scratch(n) // 2
    b = Builder("broadcast", "slots_pipelined", p, n, root, scratch=2 * half if p > 1 else 0)
    b.copy(0, root, inp(0, n), out(0, n))
    if p > 1:
        for k, (o, c) in enumerate(chunks):
            if c:
                b.copy(k, root, inp(o, c), scr((k % 2) * half, c))
                for r in _others(p, root):
                    b.get(k + 1, r, root, scr((k % 2) * half, c), out(o, c))
    return b.build()


@register("all_gather", "peer_buffers")
def all_gather_fastd(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange into the ranks' own buffers: every rank pushes its block into every peer's output."""
    p, n = nranks, count
    b = Builder("all_gather", "peer_buffers", p, n, root)
    for r in range(p):
        b.copy(0, r, inp(0, n), out(r * n, n))
        for j in _others(p, r) if n > 0 else ():
            b.put(0, r, j, inp(0, n), out(r * n, n))
            b.signal(0, r, j)
    return b.build()


@register("all_to_all", "peer_buffers")
def all_to_all_fastd(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange into the ranks' own buffers: every rank puts block j of its input into rank j's output,
    starting with the next rank (r+1, r+2, ...: the ranks' first puts go to different outputs; in rank
    order every rank put into rank 0's first: 4 ranks, 2 MiB, 411-413 -> 376-414 us, benchmarks/RESULTS.md).
    Puts, not reads of the peers' inputs (as Intel MPI's process_vm_readv): alternating jobs on a 2-core x86
    VM, medians of the best repetition of 6-8 jobs each, puts / reads: 2 ranks 4 MiB 257 / 354 us, 16 MiB
    1,140-1,260 / 1,313-1,385 (an input just written sits in its owner's cache: a put reads it there, a read
    takes it from the other core), 64 MiB 7,501 / 6,981; 4 ranks 16 MiB 5,815 / 5,500. A cross-memory write
    pins and dirties the peer's pages, a read does not (two processes alone, 16 MiB, reads 12-15% faster),
    which shows only where the input is far larger than the cache."""
    p, n = nranks, count
    b = Builder("all_to_all", "peer_buffers", p, n, root)
    for r in range(p):
        b.copy(0, r, inp(r * n, n), out(r * n, n))
        for j in [(r + k) % p for k in range(1, p)] if n > 0 else ():
            b.put(0, r, j, inp(j * n, n), out(r * n, n))
            b.signal(0, r, j)
    return b.build()


@register("reduce_scatter", "peer_buffers")
def reduce_scatter_fastd(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 exchange from the ranks' own buffers: every rank reads its block from every peer's input and reduces its own in last."""
    p, m = nranks, count
    b = Builder("reduce_scatter", "peer_buffers", p, m, root)
    for r in range(p):
        if p == 1:
            b.copy(0, r, inp(0, m), out(0, m))
            continue
        # the first peer's block is read straight into the output (round 0), the others' reduced into
        # it and its own block last (round 1; read from its input: no copy of it first; 2 ranks, 1 MiB:
        # 86-96 -> 69-80 us). Inputs are read-only, so round 1 waits for nobody: the runtime runs both
        # rounds as one pass over the block (runtime/pageplan.py)
        first, *rest = _others(p, r)
        b.get(0, r, first, inp(r * m, m), out(0, m))
        for j in rest:
            b.get(1, r, j, inp(r * m, m), out(0, m), reduce=True)
        b.reduce(1, r, inp(r * m, m), out(0, m))
    return b.build()


# ---- what the host-page executor reads of a Schedule --------------------------------------------------

def host_plan(s: Schedule, rank: int) -> dict:
    """What the runtime's inlined one-shot executor (runtime/fastpath.py) takes from this rank's program of
    a ``slots`` or ``slots_once`` Schedule: ``reducer`` (slots_once). ``two_phase``, ``peer_buffers`` and ``slots`` above the
    inlined executor's sizes (the one-shot size; a broadcast, all_gather or reduce_scatter's
    ``policy.fast_inline_max_bytes``) are not read this way: the runtime runs their steps (runtime/pageplan.py).
    Checks that the program has the form that executor runs (a slot write, then reads of every peer's
    slot or buffer; the two-phase write-back; pushes with their signals) and raises ScheduleError
    naming the step where it does not: the executor never runs a Schedule it does not match."""
    from ..errors import ScheduleError
    from .schedule import Copy, Get, Put, Reduce, Signal, Wait

    coll, algo, p, n = s.collective, s.algorithm, s.nranks, s.count
    where = f"{coll}/{algo}"
    if algo not in HOST_PAGE:
        raise ScheduleError(f"{where}: not a host-page Schedule ({', '.join(sorted(HOST_PAGE))})", op=where)
    if algo in ("peer_buffers", "two_phase"):
        raise ScheduleError(f"{where}: {algo} runs step by step from its Schedule (runtime/pageplan.py), "
                            "not from a plan of this form", op=where)
    prog = [list(rnd.steps) for rnd in s.ranks[rank]]
    peers = [j for j in range(p) if j != rank]

    def bad(why: str) -> ScheduleError:
        return ScheduleError(f"{where}: rank {rank}: the host-page executor cannot run this Schedule: {why}",
                             op=where, ranks=[rank])

    def steps(kind: type, k: int) -> list:
        return [st for st in (prog[k] if k < len(prog) else []) if isinstance(st, kind)]

    out: dict = {}
    known = (Copy, Reduce, Get, Put, Signal, Wait)
    for k, rnd in enumerate(prog):
        for st in rnd:
            if not isinstance(st, known):
                raise bad(f"round {k} has a {type(st).__name__} step")

    def rank_order(k: int) -> None:
        """The executor reduces every slot in rank order, its own in its place: the Schedule must say so."""
        chain = [st.peer if isinstance(st, Get) else rank for st in (prog[k] if k < len(prog) else [])
                 if isinstance(st, Get) or (isinstance(st, (Copy, Reduce)) and st.inline)]
        if chain != list(range(p)):
            raise bad(f"round {k} reduces the ranks' chunks in the order {chain}; the executor reduces them in "
                      f"rank order, this rank's own in its place (inline)")
    if algo == "slots_once":
        red = s.root
        r1, r2 = steps(Get, 1), steps(Get, 2)
        read = sorted(st.peer for st in (r1 if rank == red else r2))
        if p > 1 and n and read != (peers if rank == red else [red]):
            raise bad("the reducer must read every peer's slot and the others the reducer's result slot")
        if p > 1 and n and rank == red:
            rank_order(1)
        out["reducer"] = red
    else:
        # fast: the reads of the last round cover each peer once
        reads = [st for rnd in prog for st in rnd if isinstance(st, (Get, Put))]
        if coll != "barrier" and n and p > 1:
            if coll == "broadcast":
                want = [] if rank == s.root else [s.root]
            else:
                want = peers
            got = sorted(st.peer for st in reads)
            if got != want:
                raise bad(f"it reads or writes ranks {got}, the executor one step with each of {want}")
            if coll in ("all_reduce", "reduce_scatter"):
                rank_order(len(prog) - 1)
    return out


# ---- traffic (what from_schedule gives, vectorised) ----------------------------------------------------

def _pairs(p: int) -> tuple[np.ndarray, np.ndarray]:
    """(reader, writer) of every ordered pair of distinct ranks, reader-major, writers in rank order."""
    r = np.repeat(np.arange(p, dtype=np.int64), max(p - 1, 0))
    k = np.tile(np.arange(p - 1, dtype=np.int64), p)
    w = k + (k >= r)
    return r, w


def _quadratic(p: int, n: int = 0, **_: object) -> int:
    return p * max(p - 1, 0)


def _gets(ph: _Phases, p: int, sizes: np.ndarray, reduced: np.ndarray | None) -> None:
    """One round of Gets: every reader reads ``sizes[reader]`` elements from every writer."""
    rd, wr = _pairs(p)
    keep = sizes[rd] > 0
    ph.add(wr[keep], rd[keep], sizes[rd][keep], reduced, by=RECEIVER)


def _pushes(ph: _Phases, p: int, sizes: np.ndarray, pushers: np.ndarray) -> None:
    """One round of Puts (each followed by a Signal): pusher -> every other rank."""
    src, dst, el = [], [], []
    for r in pushers:
        for j in range(p):
            if j != r:
                if sizes[r] > 0:
                    src.append(r), dst.append(j), el.append(sizes[r])
                    src.append(r), dst.append(j), el.append(0)
    ph.add(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.array(el, dtype=np.int64), None,
           by=SENDER)


@register_traffic("all_reduce", "slots", messages=_quadratic)
def all_reduce_fast_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    p, n = nranks, count
    ph = _Phases(p)
    if n > 0 and p > 1:
        _gets(ph, p, np.full(p, n, dtype=np.int64), np.full(p, (p - 1) * n, dtype=np.int64))
    return ph.traffic("all_reduce", "slots", n)


@register_traffic("all_reduce", "slots_once", messages=lambda p, n=0, **_: 2 * max(p - 1, 0))
def all_reduce_fast_once_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    p, n = nranks, count
    ph = _Phases(p)
    if n > 0 and p > 1:
        others = np.array(_others(p, root), dtype=np.int64)
        red = np.zeros(p, dtype=np.int64)
        red[root] = (p - 1) * n
        ph.add(others, np.full(others.size, root, dtype=np.int64), np.full(others.size, n, dtype=np.int64), red,
               by=RECEIVER)
        ph.add(np.full(others.size, root, dtype=np.int64), others, np.full(others.size, n, dtype=np.int64), None,
               by=RECEIVER)
    return ph.traffic("all_reduce", "slots_once", n)


@register_traffic("broadcast", "slots", messages=lambda p, n=0, **_: max(p - 1, 0))
def broadcast_fast_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    p, n = nranks, count
    ph = _Phases(p)
    if n > 0 and p > 1:
        rd = np.array(_others(p, root), dtype=np.int64)
        ph.add(np.full(rd.size, root, dtype=np.int64), rd, np.full(rd.size, n, dtype=np.int64), None, by=RECEIVER)
    return ph.traffic("broadcast", "slots", n)


@register_traffic("broadcast", "slots_pipelined", messages=lambda p, n=0, **_: PIPE_CHUNKS * max(p - 1, 0))
def broadcast_fastp_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    p, n = nranks, count
    ph = _Phases(p)
    if p > 1:
        rd = np.array(_others(p, root), dtype=np.int64)
        for _, c in split(n, PIPE_CHUNKS):
            if c:
                ph.add(np.full(rd.size, root, dtype=np.int64), rd, np.full(rd.size, c, dtype=np.int64), None,
                       by=RECEIVER)
    return ph.traffic("broadcast", "slots_pipelined", n)


def _blocks(collective: str, algorithm: str, p: int, n: int) -> Traffic:
    """Every rank moves a block of n elements to every other: read from the slots (``slots``) or put with
    its Signal (``peer_buffers``). all_gather's and all_to_all's traffic (which block goes differs, not the sizes)."""
    ph = _Phases(p)
    if algorithm == "slots":
        if n > 0 and p > 1:
            _gets(ph, p, np.full(p, n, dtype=np.int64), None)
    elif p > 1:
        _pushes(ph, p, np.full(p, n, dtype=np.int64), np.arange(p))
    return ph.traffic(collective, algorithm, n)


@register_traffic("all_gather", "slots", messages=_quadratic)
def all_gather_fast_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    return _blocks("all_gather", "slots", nranks, count)


@register_traffic("reduce_scatter", "slots", messages=_quadratic)
def reduce_scatter_fast_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    p, m = nranks, count
    ph = _Phases(p)
    if m > 0 and p > 1:
        _gets(ph, p, np.full(p, m, dtype=np.int64), np.full(p, (p - 1) * m, dtype=np.int64))
    return ph.traffic("reduce_scatter", "slots", m)


@register_traffic("all_to_all", "slots", messages=_quadratic)
def all_to_all_fast_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    return _blocks("all_to_all", "slots", nranks, count)


@register_traffic("barrier", "slots", messages=_quadratic)
def barrier_fast_traffic(nranks: int, count: int = 0, root: int = 0) -> Traffic:
    p = nranks
    ph = _Phases(p)
    if p > 1:
        src, dst = _pairs(p)
        ph.add(src, dst, np.zeros(src.size, dtype=np.int64), None, by=SENDER)
    return ph.traffic("barrier", "slots", 0)


@register_traffic("all_reduce", "two_phase", messages=lambda p, n=0, **_: 2 * _quadratic(p))
def all_reduce_fast2_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    return _twophase("two_phase", nranks, count)


@register_traffic("all_reduce", "peer_buffers", messages=lambda p, n=0, **_: 3 * _quadratic(p))
def all_reduce_fastd_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    p, n = nranks, count
    ph = _Phases(p)
    if n > 0 and p > 1:
        blk = split_sizes(n, p)
        _gets(ph, p, blk, (p - 1) * blk)
        _pushes(ph, p, blk, np.arange(p))
    return ph.traffic("all_reduce", "peer_buffers", n)


def _twophase(algo: str, p: int, n: int) -> Traffic:
    ph = _Phases(p)
    if n > 0 and p > 1:
        blk = split_sizes(n, p)
        _gets(ph, p, blk, (p - 1) * blk)
        rd, wr = _pairs(p)
        keep = blk[wr] > 0
        ph.add(wr[keep], rd[keep], blk[wr][keep], None, by=RECEIVER)
    return ph.traffic("all_reduce", algo, n)


@register_traffic("broadcast", "peer_buffers", messages=lambda p, n=0, **_: 3 * max(p - 1, 0))
def broadcast_fastd_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    p, n = nranks, count
    ph = _Phases(p)
    if p > 1:
        cut = broadcast_cut(p, n)
        src, dst, el, by = [], [], [], []
        for r in range(p):  # from_schedule's order: rank by rank, each rank's steps as built
            if r == root:
                for j in _others(p, root):
                    if n - cut > 0:  # the root's Put and its Signal
                        src += [root, root]
                        dst += [j, j]
                        el += [n - cut, 0]
                        by += [SENDER, SENDER]
            elif cut > 0:  # a receiver's Get
                src.append(root), dst.append(r), el.append(cut), by.append(RECEIVER)
        ph.add(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.array(el, dtype=np.int64), None,
               by=np.array(by, dtype=np.int64))
    return ph.traffic("broadcast", "peer_buffers", n)


@register_traffic("all_gather", "peer_buffers", messages=lambda p, n=0, **_: 2 * _quadratic(p))
def all_gather_fastd_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    return _blocks("all_gather", "peer_buffers", nranks, count)


@register_traffic("all_to_all", "peer_buffers", messages=lambda p, n=0, **_: 2 * _quadratic(p))
def all_to_all_fastd_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    return _blocks("all_to_all", "peer_buffers", nranks, count)


@register_traffic("reduce_scatter", "peer_buffers", messages=_quadratic)
def reduce_scatter_fastd_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    p, m = nranks, count
    ph = _Phases(p)
    if m > 0 and p > 1:
        rd, wr = _pairs(p)
        first = np.where(np.arange(p) == 0, 1, 0)  # each reader's first peer: copied in round 0
        ph.add(first, np.arange(p, dtype=np.int64), np.full(p, m, dtype=np.int64), None, by=RECEIVER)
        rest = wr != first[rd]  # round 1: the other peers and the own block, reduced
        ph.add(wr[rest], rd[rest], np.full(int(rest.sum()), m, dtype=np.int64),
               np.full(p, (p - 1) * m, dtype=np.int64), by=RECEIVER)
    return ph.traffic("reduce_scatter", "peer_buffers", m)
