"""The device executor: runs this rank's part of a Schedule on GPU buffers over cuda-ipc.

The same Schedule the host executor runs (ring, direct, trees ...), in its one-sided form: every Send/Recv
pair is a Get of the receiver (algorithms.schedule.one_sided; the reference interpreter and the verifier
check that form too), run as a *pull*: the receiver reads the sender's chunk straight from the sender's
device buffer (mapped by CUDA IPC) and copies it into, or reduces it onto, its own chunk. No byte
touches host memory; only small signals go over the host channels (the engine).

Compiled once per (schedule, rank, dtype, op, aliasing) into a :class:`DevicePlan`: for each round,
the peers to signal, the peers to wait for, and the pulls (peer buffer and byte range, own buffer and
byte range, store / reduce / deferred reduce), then the local steps.

Round k on one rank, keeping the round semantics of :mod:`interlink.algorithms.schedule` (sends read
their chunk as at the start of the round, receives land at its end, local steps after):

1. READY: tell every peer that pulls from me in round k that my buffers hold their start-of-round
   state (my device work up to here is synchronised); wait for READY from every peer I pull from;
2. pull: copy / reduce from the peers' chunks on my stream (a reducing receive whose chunk a peer is
   reading in this round lands in a temporary and is reduced after step 3), then synchronise;
3. DONE: tell the peers I pulled from that I am done reading; wait for DONE from every peer that pulls
   from me (only then may my chunks they read change);
4. deferred reductions and local steps (Copy, Reduce), then synchronise.

A call starts by exchanging buffer descriptions (IPC handle + offset of input, output, scratch) with
the peers it pulls from / serves. Every signal carries the call's signature, sequence number and a tag
naming the round and phase, so a mismatched call or a peer on another path (e.g. staged) raises
CollectiveMismatchError instead of reading the wrong memory; a dead peer raises PeerLostError through
the engine, a missing one CommTimeoutError.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

import numpy as np

from ..algorithms.schedule import Copy, Get, Reduce, Schedule, has_switch_steps, one_sided, two_sided
from ..errors import ScheduleError
from ..ops import ReduceOp
from ..transport import cuda_ipc
from ..transport.base import Op, encode_sig
from .engine import Engine
from .executor import aliasing, averages

IN, OUT, SCR = 0, 1, 2
_BUF = {"input": IN, "output": OUT, "scratch": SCR}
PLAIN, REDUCE, DEFERRED, INLINE_COPY, INLINE_REDUCE = 0, 1, 2, 3, 4
_SIG = np.zeros(8, dtype=np.uint8)
TAG_DESC = 1


def _tag(k: int, phase: int) -> int:
    return 2 + 2 * k + phase  # phase 0: READY, 1: DONE


class DevicePlan:
    """One rank's compiled pull program for (schedule, dtype, op, aliasing): the Schedule's one-sided form
    (:func:`interlink.algorithms.schedule.one_sided`, checked by the reference interpreter like any
    Schedule), each Get a pull from the peer's buffer."""

    __slots__ = ("schedule", "sigb", "dtype", "op", "nranks", "copy_input", "scratch", "rounds", "serve",
                 "pull_from", "partners", "avg")

    def __init__(self, schedule: Schedule, rank: int, dtype: np.dtype, op: ReduceOp, alias: Optional[int],
                 global_rank: Callable[[int], int], sig: str) -> None:
        self.schedule = schedule
        self.sigb = encode_sig(sig)
        self.dtype = dtype
        self.op = op
        self.avg = averages(schedule, rank, op)
        self.nranks = schedule.nranks
        self.scratch = schedule.buffers.get("scratch", 0)
        self.copy_input, space, overlaps = aliasing(two_sided(schedule), rank, alias)
        isz = dtype.itemsize
        if len(schedule.ranks) != schedule.nranks or any(len(r) != len(schedule.ranks[rank]) for r in schedule.ranks):
            raise ScheduleError(f"{schedule.collective}:{schedule.algorithm}: the device executor needs every "
                                f"rank's program (it pulls from the sender's chunk)")
        os_ = one_sided(schedule)
        if has_switch_steps(os_):  # never skip a step the executor does not know
            raise ScheduleError(f"{schedule.collective}:{schedule.algorithm}: in-switch steps need a lowering")
        rounds = []
        serve: set[int] = set()
        pull_from: set[int] = set()
        p = schedule.nranks
        for k, rnd in enumerate(os_.ranks[rank]):
            # what the peers read from this rank in this round (READY to them; DONE from them)
            read = [(q, g.src) for q in range(p) if q != rank
                    for g in os_.ranks[q][k].steps if isinstance(g, Get) and g.peer == rank]
            ready_to = sorted({global_rank(q) for q, _ in read})
            pulls = []
            for g in rnd.steps:
                if isinstance(g, (Copy, Reduce)) and g.inline:  # in its place among the pulls (one stream)
                    pulls.append((None, _BUF[g.src.buffer], g.src.offset * isz, g.dst.count, _BUF[g.dst.buffer],
                                  g.dst.offset * isz, INLINE_REDUCE if isinstance(g, Reduce) else INLINE_COPY))
                    continue
                if not isinstance(g, Get):
                    continue
                mode = PLAIN
                if g.reduce:  # onto a chunk a peer reads in this round: after its DONE
                    mode = DEFERRED if any(overlaps(g.dst, c) for _, c in read) else REDUCE
                pulls.append((global_rank(g.peer), _BUF[g.src.buffer], g.src.offset * isz, g.dst.count,
                              _BUF[g.dst.buffer], g.dst.offset * isz, mode))
            if any(pl[6] == DEFERRED for pl in pulls) and any(pl[0] is None for pl in pulls):
                # (decided from the Schedule alone: every rank refuses it alike)
                raise ScheduleError(f"{schedule.collective}:{schedule.algorithm}: rank {rank} round {k}: an inline "
                                    f"local step in a round whose reductions wait for the peers' reads")
            wait_from = sorted({pl[0] for pl in pulls if pl[0] is not None})
            locs = []
            for st in rnd.steps:
                if isinstance(st, (Copy, Reduce)) and not st.inline:
                    a, b = st.src, st.dst
                    if isinstance(st, Copy) and space(a) == space(b):
                        continue  # aliased in-place copy
                    locs.append((isinstance(st, Reduce), _BUF[a.buffer], a.offset * isz, _BUF[b.buffer],
                                 b.offset * isz, a.count))
            serve.update(ready_to)
            pull_from.update(wait_from)
            if ready_to or pulls or locs:
                rounds.append((k, tuple(ready_to), tuple(wait_from), tuple(pulls), tuple(locs)))
        self.rounds = tuple(rounds)
        self.serve = tuple(sorted(serve))
        self.pull_from = tuple(sorted(pull_from))
        self.partners = tuple(sorted(serve | pull_from))


_kept: dict[tuple, Any] = {}  # per (kind, device, which): a device buffer kept between calls


def _keep(kern: "cuda_ipc.Kernels", which: str, nbytes: int) -> int:
    """A device buffer kept between calls (scratch, input copy): the same allocation call after call, so
    the peers' opened IPC handle stays valid and is not reopened (0.5 ms each)."""
    key = (kern.kind, kern.device, which)
    buf = _kept.get(key)
    if buf is None or buf[1] < nbytes:
        buf = kern.empty(max(nbytes, 1 << 20))
        buf = (buf[0], max(nbytes, 1 << 20), buf[1])
        _kept[key] = buf
    return buf[2]


def execute(plan: DevicePlan, engine: Engine, inp: "cuda_ipc.DevBuf", out: "cuda_ipc.DevBuf", seq: int,
            deadline: float) -> None:
    """Run a compiled plan on this call's device buffers (flat, same dtype, on one device)."""
    be = cuda_ipc.backend(out.kind)
    kern = be.Kernels(out.kind, out.device, plan.dtype, out.obj, plan.op.value, out.stream)
    with kern:
        _execute(plan, engine, be, kern, inp, out, seq, deadline)


def _execute(plan: DevicePlan, engine: Engine, be: Any, kern: "cuda_ipc.Kernels", inp: "cuda_ipc.DevBuf",
             out: "cuda_ipc.DevBuf", seq: int, deadline: float) -> None:
    isz = plan.dtype.itemsize
    sigb = plan.sigb
    host = host_ordered()
    dirty = True  # device work queued since the last signal point

    def signal_point() -> None:
        """Before telling a peer 'my data is ready' or 'my reads are done': mark the stream (the peer's
        stream waits on the mark), and in host order also wait for it here, so that the peer's wait is
        already satisfied and no GPU context ever waits on another's."""
        nonlocal dirty
        kern.record()
        if host and dirty:
            kern.sync()
        dirty = False

    hold: list = []  # temporaries the stream still uses: kept until the final synchronisation
    iptr, inb = inp.ptr, inp.nbytes
    if plan.copy_input and inb:  # an in-place layout this schedule would overwrite before reading
        iptr = _keep(kern, "input", inb)
        kern.copy(iptr, inp.ptr, inb)
    sptr = _keep(kern, "scratch", plan.scratch * isz) if plan.scratch else 0
    mine = (iptr, out.ptr, sptr)
    sizes = (inb, out.nbytes, plan.scratch * isz)
    # buffer descriptions and this rank's event, exchanged with every partner (the peers I pull from
    # and the peers that pull from me). The event is recorded after the producer's work, so nobody reads
    # unfinished data; a partner's event orders my stream after its work (READY) or its reads (DONE).
    peers: dict[int, tuple[int, int, int]] = {}
    events: dict[int, int] = {}
    if plan.partners:
        signal_point()
        desc = b"".join(_export(be, ptr, n, kern) for ptr, n in zip(mine, sizes)) + be.own_event(kern.device)[1]
        mine_desc = np.frombuffer(desc, dtype=np.uint8)
        got = {q: np.empty(len(desc), dtype=np.uint8) for q in plan.partners}
        ops = [Op("send", q, mine_desc, seq, TAG_DESC, sigb) for q in plan.partners]
        ops += [Op("recv", q, got[q], seq, TAG_DESC, sigb) for q in plan.partners]
        engine.run(ops, deadline)
        D = cuda_ipc.DESC.size
        for q, raw in got.items():
            b = raw.tobytes()
            events[q] = be.peer_event(b[3 * D:], kern.device)
            if q in plan.pull_from:
                peers[q] = tuple(be.open_handle(b[j * D:(j + 1) * D], kern.device)[0] for j in range(3))
    def exchange(k: int, phase: int, tell: tuple, hear: tuple) -> None:
        """Signal ``tell`` (after marking my stream), wait for ``hear``'s signals and order my stream
        after their marks. READY (phase 0): tell the peers that read from me, hear those I read from;
        DONE (phase 1): the other way round."""
        signal_point()
        ops = [Op("send", q, _SIG, seq, _tag(k, phase), sigb) for q in tell]
        ops += [Op("recv", q, np.empty(8, dtype=np.uint8), seq, _tag(k, phase), sigb) for q in hear]
        engine.run(ops, deadline)
        for q in hear:
            kern.wait(events[q])

    for k, ready_to, wait_from, pulls, locs in plan.rounds:
        if ready_to or wait_from:  # 1. READY: my chunks of this round are written (on my stream)
            exchange(k, 0, ready_to, wait_from)
        deferred = []
        dirty = dirty or bool(pulls)
        for q, pb, plo, count, mb, mlo, mode in pulls:  # 2. pull (and inline local steps), in order
            src = (mine if q is None else peers[q])[pb] + plo
            dst = mine[mb] + mlo
            if mode == PLAIN or mode == INLINE_COPY:
                kern.copy(dst, src, count * isz)
            elif mode == REDUCE or mode == INLINE_REDUCE:
                kern.reduce(dst, src, count)
            else:
                tmp, tptr = kern.empty(count * isz)
                hold.append(tmp)
                kern.copy(tptr, src, count * isz)
                deferred.append((dst, tptr, count))
        if ready_to or wait_from:  # 3. DONE: my reads of this round are issued; wait for the peers'
            exchange(k, 1, wait_from, ready_to)
        dirty = dirty or bool(deferred or locs)
        for dst, tptr, count in deferred:  # 4. deferred reductions, local steps
            kern.reduce(dst, tptr, count)
        for is_reduce, sb, slo, db, dlo, count in locs:
            if is_reduce:
                kern.reduce(mine[db] + dlo, mine[sb] + slo, count)
            else:
                kern.copy(mine[db] + dlo, mine[sb] + slo, count * isz)
    if plan.avg:
        kern.avg(out.ptr, out.size, plan.nranks)
    kern.sync()  # done on this rank, and (through the waits) every peer is done reading its buffers
    hold.clear()


def host_ordered() -> bool:
    """How the ranks' device work is ordered: 'event' (default: a peer's stream waits on our recorded
    interprocess event; the host never blocks until the call ends) or 'host' (each rank also
    synchronises its stream before every signal, so no GPU context waits on another's).
    INTERLINK_CUDA_IPC_ORDER=host|event. Measured on an H100 with 4 ranks (benchmarks/RESULTS.md),
    'event' was as fast or faster with and without MPS. Both are exact and may be mixed across ranks:
    every peer's event is waited on either way."""
    return os.environ.get("INTERLINK_CUDA_IPC_ORDER", "event") == "host"


def _export(be: Any, ptr: int, nbytes: int, kern: "cuda_ipc.Kernels") -> bytes:
    if not nbytes:
        return be.export(None)
    return be.export(cuda_ipc.DevBuf(None, kern.kind, np.dtype(np.uint8), nbytes, ptr, kern.device))
