"""The Schedule IR: a collective algorithm as data.

Glossary (used as names throughout):
  rank, nranks  -- a participant and how many there are
  peer          -- the other rank of a send or a receive
  buffer        -- "input", "output" or "scratch"; sizes in elements, the same on every rank
  chunk         -- (buffer, offset, count) in elements of the collective's dtype
  round         -- a set of steps of one rank: all its sends and receives run concurrently, then its
                   local steps (copy, reduce) run in order
  step          -- Send, Recv (store or reduce into the chunk), Get and Put (one-sided), Signal and
                   Wait, SwitchReduce and Multicast (in-switch), Copy, Reduce

Semantics of one round on one rank:
  1. every Send reads its chunk as it is at the start of the round (a snapshot);
  2. every Recv writes its chunk at the end of the round's communication; with reduce=True it
     combines: dst = dst (op) incoming (several reducing receives may target the same chunk: the
     reference interpreter and the host page's programs combine them in the listed order, the host
     executor as they arrive; a plain receive of the same chunk listed before them starts the chain, and
     a round with such a chain or an inline local step runs in the listed order everywhere);
  3. then the local steps run in the listed order: Copy (dst = src), Reduce (dst = dst (op) src).
A plain Recv's chunk must not overlap a Send's chunk or another receive's chunk of the same round
(other than as the head of such a chain).
A local step marked ``inline`` runs instead at its place among the round's deliveries (in step 2: after
the receives and reads listed before it, before those after it), so a chain of reductions can take this
rank's own chunk at any position: the one-shot host-page all_reduce reduces every rank's slot in rank
order, its own in its place, and every rank gets the same bits.

One-sided form: a Get on rank r reads chunk ``src`` of rank ``peer`` as it is at the start of the round
(like a Send's snapshot) and stores or reduces it into r's ``dst`` at the end of the round's communication
(like a Recv); the peer's program has no step for it (its memory is registered: CUDA IPC, interlink.empty
arenas, cross-memory attach). A chunk that peers Get in round k must not be written plainly by its owner
in round k (a reducing write is allowed: it lands after the readers are done). :func:`one_sided` turns
every Send/Recv pair into a Get of the receiver, :func:`two_sided` turns Gets back into pairs; the
reference interpreter, the verifier and the traffic the model and simulator price read both forms.

One-sided writes: a Put on rank r writes r's ``src`` (as at the start of the round) into ``dst`` of rank
``peer`` at the end of the round's communication; the peer has no step for it. A Signal of r to q and
the matching Wait of q on r (same round, matched in order) carry no data: they tell q that r's puts so
far have landed. Validation requires one between a Put and the peer's first later read of that chunk
(a dependency-driven executor needs it; the lock-step interpreter does not). :func:`one_sided` and
:func:`two_sided` turn Puts into Gets of the peer (and then pairs) and drop Signal/Wait.

In-switch form (NVLink SHARP, "NVLS"; SHARP): a SwitchReduce on rank r reads, through the switch, the
reduction over the ranks of its group of their chunk ``src`` (as at the start of the round) into r's
``dst``; a Multicast on rank r writes r's ``src`` (as at the start of the round) into ``dst`` of every
rank of its group at the end of the round's communication. The members have no step for either. The
switch does the arithmetic: each member's link to the switch carries its chunk once. Executors without
such a switch run :func:`two_sided`'s lowering (reducing Gets, then pairs), verified like any Schedule.

Rounds number the steps: the i-th Send from rank a to rank b in round k matches the i-th Recv of b from
a in round k, with the same count and channel. Every rank has the same number of rounds (some may be
empty).

Channels and dependencies. Every step names a ``channel`` (default 0). A Schedule of C channels is C
independent programs per rank, each over its own part of the buffers (checked: a chunk one channel
writes on a rank must not overlap a chunk another channel uses there), each with a route of its own (a
ring per NIC: the builder orders each channel's ranks so that it leaves a host through another NIC).
One exception, the hand-over: a chunk may pass from channel c to channel d on a rank once, never back:
every step of c that touches it comes in a round before every step of d that conflicts with it (checked
per step: the conflicting steps of another channel are all earlier or all later). d's step then waits
for c's: a read for c's write (NVLS: the multicast channel takes each reduced segment over from the
reduction channel; Traffic ``after``), a write for c's last read and write there (nccl_tree: the down
flow writes the sum where the up flow reduced and sent the rank's partial; the sum that arrives depends
on that send, and the interlink executors run a rank's rounds in order).
Rounds are not barriers: a rank-channel pair runs its rounds in order, and round k starts when that
pair's round k - 1 is done, i.e. when the messages it receives have arrived (a send is eager: its
data is buffered until the receiver gets to that round). With two-sided steps this gives the same
result as running the rounds in lock-step (what the reference interpreter does), so the verifier's
proof holds for the dependency-driven execution that the runtime and the simulator use. A delivery
gates the channel that reads the chunk next (not its own when another channel takes it over), and a
delivery nothing reads afterwards only has to land before the collective ends
(:class:`~interlink.algorithms.traffic.Phase` ``gate``/``wait``). One-sided Gets
read a peer's memory in place, so an executor of the one-sided form orders them with signals (the
device executor's READY/DONE).

The collective's contract fixes the buffer sizes (see :func:`buffer_sizes`) and where the result
must be (see :mod:`interlink.algorithms.reference`). AVG is run as SUM; the executor divides after.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence, Union

from ..errors import ScheduleError

SCHEMA_VERSION = 3  # 2: steps may name a channel (a trailing integer); 3: switch_reduce, multicast, put,
#                     signal, wait steps

COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "reduce_scatter",
    "gather",
    "scatter",
    "all_to_all",
    "barrier",
)

# collectives whose result combines contributions with a reduce op
REDUCING = frozenset({"all_reduce", "reduce", "reduce_scatter"})
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})

BUFFERS = ("input", "output", "scratch")


def buffer_sizes(collective: str, nranks: int, count: int) -> dict[str, int]:
    """Sizes in elements of input and output for a collective.

    ``count`` is the per-rank count: the whole vector for all_reduce/broadcast/reduce, one rank's
    block for all_gather/reduce_scatter/gather/scatter/all_to_all, 0 for barrier.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; expected one of {COLLECTIVES}")
    p, n = nranks, count
    if collective in ("all_reduce", "broadcast", "reduce"):
        return {"input": n, "output": n}
    if collective in ("all_gather", "gather"):
        return {"input": n, "output": n * p}
    if collective in ("reduce_scatter", "scatter"):
        return {"input": n * p, "output": n}
    if collective == "all_to_all":
        return {"input": n * p, "output": n * p}
    return {"input": 0, "output": 0}  # barrier


def busbw_factor(collective: str, nranks: int) -> float:
    """nccl-tests bus bandwidth factor."""
    p = nranks
    if collective == "all_reduce":
        return 2.0 * (p - 1) / p
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (p - 1) / p
    return 1.0


@dataclass(frozen=True, slots=True)
class Chunk:
    buffer: str
    offset: int
    count: int

    @property
    def end(self) -> int:
        return self.offset + self.count

    def overlaps(self, other: "Chunk") -> bool:
        return (
            self.buffer == other.buffer
            and self.count > 0
            and other.count > 0
            and self.offset < other.end
            and other.offset < self.end
        )

    def to_json(self) -> list:
        return [self.buffer, self.offset, self.count]


@dataclass(frozen=True, slots=True)
class Send:
    peer: int
    src: Chunk
    channel: int = 0


@dataclass(frozen=True, slots=True)
class Recv:
    peer: int
    dst: Chunk
    reduce: bool = False
    channel: int = 0


@dataclass(frozen=True, slots=True)
class Get:
    """One-sided read: ``src`` in rank ``peer``'s buffers -> ``dst`` in this rank's (stored, or reduced)."""

    peer: int
    src: Chunk
    dst: Chunk
    reduce: bool = False
    channel: int = 0


@dataclass(frozen=True, slots=True)
class SwitchReduce:
    """In-switch reduction read (NVLS ``multimem.ld_reduce``; SHARP): this rank's ``dst`` gets the
    reduction over the ranks of ``group`` of their chunk ``src`` as it is at the start of the round. The
    switch reads every member's chunk once (its bytes cross each member's link to the switch once) and
    sends the one reduced chunk down to this rank; the members have no step for it."""

    group: tuple[int, ...]
    src: Chunk
    dst: Chunk
    channel: int = 0


@dataclass(frozen=True, slots=True)
class Multicast:
    """In-switch multicast write (NVLS ``multimem.st``): this rank's chunk ``src`` (as at the start of
    the round) lands in chunk ``dst`` of every rank of ``group`` at the end of the round's communication.
    It crosses this rank's link to the switch once; the switch copies it to every member."""

    group: tuple[int, ...]
    src: Chunk
    dst: Chunk
    channel: int = 0


SWITCH_STEPS = (SwitchReduce, Multicast)


@dataclass(frozen=True, slots=True)
class Put:
    """One-sided write (MSCCL++ ``put``; NVSHMEM ``put``): this rank's chunk ``src`` (as at the start of the
    round) lands in chunk ``dst`` of rank ``peer`` at the end of the round's communication; the peer has
    no step for it. Before the peer reads that chunk in a later round, this rank must :class:`Signal` it
    (in the round of the put or later, before the read; validated)."""

    peer: int
    src: Chunk
    dst: Chunk
    channel: int = 0


@dataclass(frozen=True, slots=True)
class Signal:
    """Tell ``peer`` that this rank's puts to it so far have landed (no data). The i-th Signal from a to b
    in round k matches the i-th :class:`Wait` of b on a in round k."""

    peer: int
    channel: int = 0


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for ``peer``'s matching :class:`Signal` (see there)."""

    peer: int
    channel: int = 0


ONE_SIDED_WRITES = (Put, Signal, Wait)


@dataclass(frozen=True, slots=True)
class Copy:
    """dst = src, after the round's communication (``inline``: at its place among the deliveries)."""

    src: Chunk
    dst: Chunk
    channel: int = 0
    inline: bool = False


@dataclass(frozen=True, slots=True)
class Reduce:
    """dst = dst (op) src, after the round's communication (``inline``: at its place among the deliveries)."""

    src: Chunk
    dst: Chunk
    channel: int = 0
    inline: bool = False


Step = Union[Send, Recv, Get, Put, Signal, Wait, SwitchReduce, Multicast, Copy, Reduce]
COMM_STEPS = (Send, Recv, Get, Put, Signal, Wait, SwitchReduce, Multicast)
LOCAL_STEPS = (Copy, Reduce)


@dataclass(frozen=True, slots=True)
class Round:
    steps: tuple[Step, ...] = ()

    @property
    def sends(self) -> tuple[Send, ...]:
        return tuple(s for s in self.steps if isinstance(s, Send))

    @property
    def recvs(self) -> tuple[Recv, ...]:
        return tuple(s for s in self.steps if isinstance(s, Recv))

    @property
    def locals(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if isinstance(s, LOCAL_STEPS))

    @property
    def has_comm(self) -> bool:
        return any(isinstance(s, COMM_STEPS) for s in self.steps)


@dataclass(frozen=True, eq=False)
class Schedule:
    """Per rank, an ordered tuple of rounds. Immutable; serialises to JSON with a version.
    Hashed and compared by identity (the registry caches them)."""

    collective: str
    algorithm: str
    nranks: int
    count: int
    root: int
    buffers: Mapping[str, int]
    ranks: tuple[tuple[Round, ...], ...]
    meta: Mapping[str, object] = field(default_factory=dict)

    # ---- shape -------------------------------------------------------------------------
    @property
    def nrounds(self) -> int:
        """Number of rounds (all ranks have the same number)."""
        return len(self.ranks[0]) if self.ranks else 0

    @property
    def comm_rounds(self) -> int:
        """Rounds in which at least one rank sends or receives: the latency (alpha) terms."""
        return sum(
            1 for k in range(self.nrounds) if any(self.ranks[r][k].has_comm for r in range(self.nranks))
        )

    def steps(self, rank: int) -> Iterator[tuple[int, Step]]:
        for k, rnd in enumerate(self.ranks[rank]):
            for s in rnd.steps:
                yield k, s

    # ---- traffic: what the cost model and simulator need --------------------------------
    def round_traffic(self, k: int) -> list[tuple[int, int, int]]:
        """(src, dst, elements) of every message in round k, one entry per (src, dst) pair."""
        acc: dict[tuple[int, int], int] = {}
        for r in range(self.nranks):
            for s in self.ranks[r][k].steps:
                if isinstance(s, (Send, Put)):
                    acc[(r, s.peer)] = acc.get((r, s.peer), 0) + s.src.count
                elif isinstance(s, Get):  # the bytes flow from the peer to the reader
                    acc[(s.peer, r)] = acc.get((s.peer, r), 0) + s.src.count
        return [(a, b, n) for (a, b), n in sorted(acc.items())]

    def messages(self) -> Iterator[tuple[int, int, int, int]]:
        """(round, src, dst, elements) of every Send, Put (to the peer written) and Get (from the peer
        read), in order."""
        for r in range(self.nranks):
            for k, s in self.steps(r):
                if isinstance(s, (Send, Put)):
                    yield k, r, s.peer, s.src.count
                elif isinstance(s, Get):
                    yield k, s.peer, r, s.src.count

    def sent_per_rank(self) -> list[int]:
        """Total elements each rank sends over the whole schedule."""
        out = [0] * self.nranks
        for _, src, _, n in self.messages():
            out[src] += n
        return out

    def recv_per_rank(self) -> list[int]:
        out = [0] * self.nranks
        for _, _, dst, n in self.messages():
            out[dst] += n
        return out

    def max_sent_per_round(self) -> list[int]:
        """Per round, the largest number of elements any one rank sends (the beta term)."""
        res = []
        for k in range(self.nrounds):
            per = [0] * self.nranks
            for a, _, n in self.round_traffic(k):
                per[a] += n
            res.append(max(per) if per else 0)
        return res

    def reduced_per_round(self) -> list[int]:
        """Per round, the largest number of elements any one rank reduces (the gamma term)."""
        res = []
        for k in range(self.nrounds):
            best = 0
            for r in range(self.nranks):
                n = sum(s.dst.count for s in self.ranks[r][k].steps if isinstance(s, (Recv, Get)) and s.reduce)
                n += sum(s.dst.count for s in self.ranks[r][k].steps if isinstance(s, Reduce))
                best = max(best, n)
            res.append(best)
        return res

    # ---- validation ----------------------------------------------------------------------
    def validate(self) -> "Schedule":
        """Check structure: sizes, bounds, matching sends/receives, no overlapping plain receives."""
        p = self.nranks
        where = dict(op=f"{self.collective}/{self.algorithm}")
        if p < 1 or len(self.ranks) != p:
            raise ScheduleError(f"schedule has {len(self.ranks)} rank programs for nranks={p}", **where)
        if not 0 <= self.root < p:
            raise ScheduleError(f"root {self.root} out of range for nranks={p}", **where)
        nr = len(self.ranks[0])
        for r in range(p):
            if len(self.ranks[r]) != nr:
                raise ScheduleError(f"rank {r} has {len(self.ranks[r])} rounds, rank 0 has {nr}", ranks=[r], **where)
        # per round, what other ranks' steps do to each rank r (in the order of rank, then step): a Get from
        # r or a reduction over r's chunk reads it like a Send; a Put into r or a multicast to r writes it
        # like a plain receive. One pass per round (not p passes: validate is O(steps), not O(p x steps))
        touched: list[list[list[tuple[Step, Chunk]]]] = [[[] for _ in range(p)] for _ in range(nr)]
        for q in range(p):
            for k, rnd in enumerate(self.ranks[q]):
                tk = touched[k]
                for g in rnd.steps:
                    if isinstance(g, Get):
                        if g.peer != q and 0 <= g.peer < p:
                            tk[g.peer].append((Send(q, g.src), g.src))
                    elif isinstance(g, SwitchReduce):
                        for t in dict.fromkeys(g.group):  # a repeated member counts once (its own check names it)
                            if 0 <= t < p:
                                tk[t].append((Send(q, g.src), g.src))
                    elif isinstance(g, Multicast):
                        for t in dict.fromkeys(g.group):
                            if 0 <= t < p:
                                tk[t].append((Recv(q, g.dst, False, g.channel), g.dst))
                    elif isinstance(g, Put) and 0 <= g.peer < p:
                        tk[g.peer].append((Recv(q, g.dst, False, g.channel), g.dst))
        for r in range(p):
            for k, rnd in enumerate(self.ranks[r]):
                chunks: list[tuple[Step, Chunk]] = []
                for s in rnd.steps:
                    if isinstance(s, (Send, Recv, Get, Put, Signal, Wait)) and not 0 <= s.peer < p:
                        raise ScheduleError(f"rank {r} round {k}: peer {s.peer} out of range", ranks=[r], **where)
                    if isinstance(s, (Send, Recv, Get, Put, Signal, Wait)) and s.peer == r:
                        raise ScheduleError(f"rank {r} round {k}: sends to itself (use Copy)", ranks=[r], **where)
                    if isinstance(s, (Get, Put)) and s.src.count != s.dst.count:
                        raise ScheduleError(f"rank {r} round {k}: {type(s).__name__.lower()} of {s.src.count} elements into "
                                            f"{s.dst.count}", ranks=[r], **where)
                    if isinstance(s, SWITCH_STEPS):
                        what = type(s).__name__
                        if not s.group or len(set(s.group)) != len(s.group) or not all(0 <= g < p for g in s.group):
                            raise ScheduleError(f"rank {r} round {k}: {what} group {s.group} must be distinct "
                                                f"ranks in 0..{p - 1}", ranks=[r], **where)
                        if s.src.count != s.dst.count:
                            raise ScheduleError(f"rank {r} round {k}: {what} of {s.src.count} elements into "
                                                f"{s.dst.count}", ranks=[r], **where)
                    for c in _chunks_of(s):
                        size = self.buffers.get(c.buffer)
                        if size is None:
                            raise ScheduleError(f"rank {r} round {k}: unknown buffer {c.buffer!r}", ranks=[r], **where)
                        if c.offset < 0 or c.count < 0 or c.end > size:
                            raise ScheduleError(
                                f"rank {r} round {k}: chunk {c} outside {c.buffer}[0:{size}]", ranks=[r], **where
                            )
                    written = s.dst if isinstance(s, (Recv, Get, Put, Copy, Reduce) + SWITCH_STEPS) else None
                    if written is not None and written.buffer == "input":
                        raise ScheduleError(f"rank {r} round {k}: writes the input buffer ({written}); "
                                            f"input is the caller's and read-only", ranks=[r], **where)
                    if isinstance(s, Send):
                        chunks.append((s, s.src))
                    elif isinstance(s, (Recv, Get)):
                        chunks.append((s, s.dst))
                    elif isinstance(s, SwitchReduce):  # a plain receive of the reduced chunk
                        chunks.append((Recv(r, s.dst, False, s.channel), s.dst))
                    elif isinstance(s, (Multicast, Put)):  # read like a Send's
                        chunks.append((Send(r, s.src), s.src))
                # the chunks of this rank that peers read in this round (Get, in-switch reduction): read
                # like a Send's; multicasts of other ranks into it: plain receives
                chunks += touched[k][r]
                bad = _overlap_conflict(chunks)
                if bad is not None:
                    si, ci, cj = chunks[bad[0]][0], chunks[bad[0]][1], chunks[bad[1]][1]
                    raise ScheduleError(
                        f"rank {r} round {k}: receive into {ci if isinstance(si, (Recv, Get)) else cj} "
                        f"overlaps another chunk of the same round (sent, read by a peer, or received)",
                        ranks=[r],
                        **where,
                    )
        for k in range(nr):
            # per (sender, receiver) pair: the sends and the receives of the round, in step order; the
            # first pair (by sender, then receiver) that differs is reported
            sent: dict[tuple[int, int], list] = {}
            got: dict[tuple[int, int], list] = {}
            for a in range(p):
                for s in self.ranks[a][k].steps:
                    if isinstance(s, Send):
                        sent.setdefault((a, s.peer), []).append((s.src.count, s.channel))
                    elif isinstance(s, Recv):
                        got.setdefault((s.peer, a), []).append((s.dst.count, s.channel))
            for a, b in sorted(sent.keys() | got.keys()):
                if a != b:
                    sends, recvs = sent.get((a, b), []), got.get((a, b), [])
                    if sends != recvs:
                        show = (lambda m: [c for c, _ in m]) if [c for c, _ in sends] != [c for c, _ in recvs] \
                            else (lambda m: [f"{c} on channel {ch}" for c, ch in m])
                        raise ScheduleError(
                            f"round {k}: rank {a} sends {show(sends)} elements to rank {b}, which receives "
                            f"{show(recvs)}",
                            ranks=[a, b],
                            **where,
                        )
        if any(isinstance(st, ONE_SIDED_WRITES) for prog in self.ranks for rnd in prog for st in rnd.steps):
            _check_puts(self)
        if self.channels > 1:
            _check_channels(self)
        return self

    @property
    def channels(self) -> int:
        """How many channels the steps use (1 + the largest channel number)."""
        c = 0
        for prog in self.ranks:
            for rnd in prog:
                for st in rnd.steps:
                    if st.channel > c:
                        c = st.channel
        return c + 1

    # ---- serialisation --------------------------------------------------------------------
    def to_json(self) -> dict:
        def step(s: Step) -> list:
            if isinstance(s, Send):
                out = ["send", s.peer, s.src.to_json()]
            elif isinstance(s, Recv):
                out = ["recv_reduce" if s.reduce else "recv", s.peer, s.dst.to_json()]
            elif isinstance(s, Get):
                out = ["get_reduce" if s.reduce else "get", s.peer, s.src.to_json(), s.dst.to_json()]
            elif isinstance(s, Put):
                out = ["put", s.peer, s.src.to_json(), s.dst.to_json()]
            elif isinstance(s, Signal):
                out = ["signal", s.peer]
            elif isinstance(s, Wait):
                out = ["wait", s.peer]
            elif isinstance(s, SwitchReduce):
                out = ["switch_reduce", list(s.group), s.src.to_json(), s.dst.to_json()]
            elif isinstance(s, Multicast):
                out = ["multicast", list(s.group), s.src.to_json(), s.dst.to_json()]
            elif isinstance(s, Copy):
                out = ["copy_inline" if s.inline else "copy", s.src.to_json(), s.dst.to_json()]
            else:
                out = ["reduce_inline" if s.inline else "reduce", s.src.to_json(), s.dst.to_json()]
            if s.channel:  # channel 0 is implied (version 1 files read unchanged)
                out.append(s.channel)
            return out

        return {
            "version": SCHEMA_VERSION,
            "collective": self.collective,
            "algorithm": self.algorithm,
            "nranks": self.nranks,
            "count": self.count,
            "root": self.root,
            "buffers": dict(self.buffers),
            "meta": dict(self.meta),
            "ranks": [[[step(s) for s in rnd.steps] for rnd in prog] for prog in self.ranks],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Mapping | str) -> "Schedule":
        if isinstance(data, str):
            data = json.loads(data)
        if data.get("version") not in (1, 2, SCHEMA_VERSION):
            raise ScheduleError(f"unsupported schedule version {data.get('version')!r} (expected 1 to {SCHEMA_VERSION})")

        def chunk(c: Sequence) -> Chunk:
            return Chunk(str(c[0]), int(c[1]), int(c[2]))

        def step(s: Sequence) -> Step:
            kind = s[0]
            ch = int(s[-1]) if not isinstance(s[-1], (list, tuple)) else 0
            if kind == "send":
                return Send(int(s[1]), chunk(s[2]), ch)
            if kind in ("recv", "recv_reduce"):
                return Recv(int(s[1]), chunk(s[2]), kind == "recv_reduce", ch)
            if kind in ("get", "get_reduce"):
                return Get(int(s[1]), chunk(s[2]), chunk(s[3]), kind == "get_reduce", ch)
            if kind == "put":
                return Put(int(s[1]), chunk(s[2]), chunk(s[3]), ch)
            if kind in ("signal", "wait"):
                ch = int(s[2]) if len(s) > 2 else 0
                return (Signal if kind == "signal" else Wait)(int(s[1]), ch)
            if kind == "switch_reduce":
                return SwitchReduce(tuple(int(g) for g in s[1]), chunk(s[2]), chunk(s[3]), ch)
            if kind == "multicast":
                return Multicast(tuple(int(g) for g in s[1]), chunk(s[2]), chunk(s[3]), ch)
            if kind in ("copy", "copy_inline"):
                return Copy(chunk(s[1]), chunk(s[2]), ch, kind == "copy_inline")
            if kind in ("reduce", "reduce_inline"):
                return Reduce(chunk(s[1]), chunk(s[2]), ch, kind == "reduce_inline")
            raise ScheduleError(f"unknown step kind {kind!r}")

        ranks = tuple(tuple(Round(tuple(step(s) for s in rnd)) for rnd in prog) for prog in data["ranks"])
        return cls(
            collective=data["collective"],
            algorithm=data["algorithm"],
            nranks=int(data["nranks"]),
            count=int(data["count"]),
            root=int(data["root"]),
            buffers=dict(data["buffers"]),
            ranks=ranks,
            meta=dict(data.get("meta", {})),
        ).validate()


def accesses(s: "Schedule") -> Iterator[tuple[int, int, Chunk, int, bool]]:
    """Every chunk access of the Schedule as (owner rank, round, chunk, channel, is a write), whoever's step
    it is: a Get reads its peer's memory, a Put writes it, an in-switch reduction reads every member's, a
    multicast writes every member's; a reducing receive or Reduce reads its destination too. Empty chunks
    are left out. The channel check, the put check and the traffic's hand-offs and gates all ask this."""
    for r, prog in enumerate(s.ranks):
        for k, rnd in enumerate(prog):
            for st in rnd.steps:
                ch = st.channel
                acc: list[tuple[int, Chunk, bool]] = []
                if isinstance(st, Send):
                    acc = [(r, st.src, False)]
                elif isinstance(st, Recv):
                    acc = [(r, st.dst, True)] + ([(r, st.dst, False)] if st.reduce else [])
                elif isinstance(st, Get):
                    acc = [(st.peer, st.src, False), (r, st.dst, True)] + ([(r, st.dst, False)] if st.reduce else [])
                elif isinstance(st, Put):
                    acc = [(r, st.src, False), (st.peer, st.dst, True)]
                elif isinstance(st, SwitchReduce):
                    acc = [(g, st.src, False) for g in st.group] + [(r, st.dst, True)]
                elif isinstance(st, Multicast):
                    acc = [(r, st.src, False)] + [(g, st.dst, True) for g in st.group]
                elif isinstance(st, Copy):
                    acc = [(r, st.src, False), (r, st.dst, True)]
                elif isinstance(st, Reduce):
                    acc = [(r, st.src, False), (r, st.dst, False), (r, st.dst, True)]
                for owner, c, w in acc:
                    if c.count:
                        yield owner, k, c, ch, w


def _check_puts(s: "Schedule") -> None:
    """Signals match waits (the i-th Signal from a to b in round k is the i-th Wait of b on a in round k),
    and a chunk a rank Puts into a peer is read there only after a Signal of the putter to that peer in a
    round from the put's on and before the read (what a dependency-driven executor needs)."""
    p = s.nranks
    where = dict(op=f"{s.collective}/{s.algorithm}")
    for k in range(s.nrounds):
        for a in range(p):
            for b in range(p):
                if a == b:
                    continue
                sig = [st.channel for st in s.ranks[a][k].steps if isinstance(st, Signal) and st.peer == b]
                wai = [st.channel for st in s.ranks[b][k].steps if isinstance(st, Wait) and st.peer == a]
                if sig != wai:
                    raise ScheduleError(f"round {k}: rank {a} signals rank {b} {len(sig)} time(s), which waits "
                                        f"{len(wai)} time(s) (on channels {sig} / {wai})", ranks=[a, b], **where)
    signals: dict[tuple[int, int], list[int]] = {}
    for a, prog in enumerate(s.ranks):
        for k, rnd in enumerate(prog):
            for st in rnd.steps:
                if isinstance(st, Signal):
                    signals.setdefault((a, st.peer), []).append(k)
    reads: dict[int, list[tuple[int, Chunk]]] = {}
    for owner, k, c, _, w in accesses(s):
        if not w:
            reads.setdefault(owner, []).append((k, c))
    for a, prog in enumerate(s.ranks):
        for k, rnd in enumerate(prog):
            for st in rnd.steps:
                if not isinstance(st, Put):
                    continue
                later = [k2 for k2, c in reads.get(st.peer, []) if k2 > k and c.overlaps(st.dst)]
                if not later:
                    continue
                first = min(later)
                if not any(k <= ks < first for ks in signals.get((a, st.peer), [])):
                    raise ScheduleError(f"rank {a} round {k}: puts {st.dst} into rank {st.peer}, which reads it in "
                                        f"round {first} with no signal from rank {a} in rounds {k}..{first - 1}",
                                        ranks=[a, st.peer], **where)


def _allowed_overlap(si: Step, ci: Chunk, sj: Step, cj: Chunk) -> bool:
    """Whether two overlapping chunks of one rank's round may overlap (``si`` listed before ``sj``): two
    reads by senders, a reducing receive with a send or another reducing receive, or a plain receive
    followed by reducing receives of the same chunk (they apply in order: dst = first, then dst (op) each
    next: a chain in the order it is written)."""
    both_sends = isinstance(si, Send) and isinstance(sj, Send)
    red_i = isinstance(si, (Recv, Get)) and si.reduce
    red_j = isinstance(sj, (Recv, Get)) and sj.reduce
    reduce_pair = (red_i and (isinstance(sj, Send) or red_j)) or (red_j and isinstance(si, Send))
    chain = isinstance(si, (Recv, Get)) and not si.reduce and red_j and ci == cj
    return bool(both_sends or reduce_pair or chain)


def _overlap_conflict(chunks: list) -> tuple[int, int] | None:
    """The first pair (i < j, in list order) of overlapping chunks that may not overlap, or None. A sweep
    over each buffer's chunks sorted by offset: only pairs that overlap are looked at (not all n^2)."""
    by_buf: dict[str, list[tuple[int, int, int]]] = {}
    for idx, (_, c) in enumerate(chunks):
        if c.count > 0:
            by_buf.setdefault(c.buffer, []).append((c.offset, c.offset + c.count, idx))
    bad: tuple[int, int] | None = None
    for lst in by_buf.values():
        if len(lst) < 2:
            continue
        lst.sort()
        for x, (_, e, i) in enumerate(lst):
            for y in range(x + 1, len(lst)):
                o2, _, j = lst[y]
                if o2 >= e:
                    break
                a, b = (i, j) if i < j else (j, i)
                if bad is not None and (a, b) >= bad:
                    continue
                if not _allowed_overlap(chunks[a][0], chunks[a][1], chunks[b][0], chunks[b][1]):
                    bad = (a, b)
    return bad


def _chunks_of(s: Step) -> tuple[Chunk, ...]:
    if isinstance(s, Send):
        return (s.src,)
    if isinstance(s, Recv):
        return (s.dst,)
    if isinstance(s, (Signal, Wait)):
        return ()
    return (s.src, s.dst)  # Copy, Reduce; Get (its src is in the peer's buffers, of the same sizes)


_PAIRS_AT_ONCE = 1024  # _check_channels: up to this many accesses of a rank's buffer, pairs as matrices


def _check_channels(s: "Schedule") -> None:
    """Channels run independently (each rank-channel pair is its own stream of rounds), so each works on
    its own part of every rank's buffers: two steps of different channels that touch overlapping chunks of
    a rank, one of them writing, conflict (a Get's source, an in-switch reduction's sources, count as reads
    on their owners; a multicast's destinations as writes there). The exception is the hand-over: a chunk
    passes from channel c to channel d once, never back. Conflicting steps must be in different rounds,
    and for every step, the steps of another channel it conflicts with come all in earlier rounds or all
    in later ones (c writes, d reads: the read hand-off of NVLS's multicast; c reduces and sends up, then
    d writes the result there: the tree's down flow). d's step then waits for c's on that rank (see the
    module docstring)."""
    import numpy as np

    where = dict(op=f"{s.collective}/{s.algorithm}")
    acc: dict[tuple[int, str], list[tuple[int, int, int, bool, int]]] = {}  # (lo, hi, channel, write, round)
    for owner, k, c, ch, w in accesses(s):
        acc.setdefault((owner, c.buffer), []).append((c.offset, c.end, ch, w, k))

    for (r, buf), items in acc.items():
        a = np.array([it for it in items if it[1] > it[0]], dtype=np.int64).reshape(-1, 5)
        chans = np.unique(a[:, 2])
        if chans.size < 2:
            continue
        order = np.argsort(a[:, 0], kind="stable")
        a = a[order]
        lo, hi, ch, w, k = a.T
        side: dict[tuple[int, int], tuple[int, int]] = {}  # (step, other channel) -> (+1 later / -1 earlier, witness)

        def refuse(i: int, j: int, why: str) -> None:
            x, y = (i, j) if w[i] else (j, i)
            raise ScheduleError(
                f"rank {r}: channel {int(ch[x])} writes {buf}[{int(lo[x])}:{int(hi[x])}] in round {int(k[x])}, "
                f"which channel {int(ch[y])} also uses in round {int(k[y])}{why}; channels work on disjoint "
                f"parts of the buffers, or hand a chunk over once (all of one channel's steps on it before "
                f"all of the other's)", ranks=[r], **where)

        if a.shape[0] <= _PAIRS_AT_ONCE:  # all pairs at once (the rule below, as matrices)
            conf = ((lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None]) & (ch[:, None] != ch[None, :])
                    & (w[:, None] | w[None, :]))
            if not conf.any():
                continue
            same = conf & (k[:, None] == k[None, :])
            if same.any():
                i, j = np.argwhere(same)[0]
                refuse(int(i), int(j), " (the same round)")
            later = conf & (k[None, :] > k[:, None])
            earlier = conf & (k[None, :] < k[:, None])
            for c in np.unique(ch).tolist():
                col = ch == c
                both = later[:, col].any(axis=1) & earlier[:, col].any(axis=1)
                if both.any():
                    x = int(np.flatnonzero(both)[0])
                    ys = np.flatnonzero(col)
                    y_after = int(ys[later[x, col]][0])
                    y_before = int(ys[earlier[x, col]][0])
                    refuse(x, y_after, f" and in round {int(k[y_before])}, on both sides of it")
            continue
        # every pair of overlapping intervals on different channels with a write among them: sweep by start
        for i in range(a.shape[0]):
            j = i + 1
            while j < a.shape[0] and lo[j] < hi[i]:
                if ch[j] != ch[i] and (w[i] or w[j]):
                    if k[i] == k[j]:
                        refuse(i, j, " (the same round)")
                    for x, y in ((i, j), (j, i)):
                        d = 1 if k[y] > k[x] else -1
                        key = (x, int(ch[y]))
                        seen = side.setdefault(key, (d, y))
                        if seen[0] != d:  # x sits between two steps of channel ch[y]: handed back
                            refuse(x, y, f" and in round {int(k[seen[1]])}, on both sides of it")
                j += 1


def has_gets(s: "Schedule") -> bool:
    """Whether the Schedule has one-sided steps (Get, Put / Signal / Wait, or the in-switch SwitchReduce /
    Multicast)."""
    return any(isinstance(st, (Get,) + ONE_SIDED_WRITES + SWITCH_STEPS)
               for prog in s.ranks for rnd in prog for st in rnd.steps)


def _puts_as_gets(s: "Schedule") -> "Schedule":
    """Every Put as a Get of the peer (it reads the putter's chunk as at the start of the round, as the put
    does); Signals and Waits dropped (a reading executor's Get carries its own synchronisation), except a
    Wait on a rank that puts nothing to the waiter in that round: it becomes an empty Get of the signaller."""
    if not any(isinstance(st, ONE_SIDED_WRITES) for prog in s.ranks for rnd in prog for st in rnd.steps):
        return s
    p = s.nranks
    progs = [[[st for st in rnd.steps if not isinstance(st, ONE_SIDED_WRITES)] for rnd in s.ranks[r]]
             for r in range(p)]
    putters = [[{st.peer for st in rnd.steps if isinstance(st, Put)} for rnd in s.ranks[r]] for r in range(p)]
    none = Chunk("output", 0, 0)
    for r in range(p):
        for k, rnd in enumerate(s.ranks[r]):
            for st in rnd.steps:
                if isinstance(st, Put):
                    progs[st.peer][k].append(Get(r, st.src, st.dst, False, st.channel))
                elif isinstance(st, Wait) and r not in putters[st.peer][k]:
                    # a signal that no put of this round carries (a barrier's): an empty read of the
                    # signaller keeps what it says (the waiter goes on only after the signaller got here)
                    progs[r][k].append(Get(st.peer, Chunk("input", 0, 0), none, False, st.channel))
    ranks = tuple(tuple(Round(tuple(sorted((x for x in steps if isinstance(x, COMM_STEPS)), key=_channel_of))
                              + tuple(x for x in steps if isinstance(x, LOCAL_STEPS))) for steps in prog)
                  for prog in progs)
    return Schedule(s.collective, s.algorithm, p, s.count, s.root, dict(s.buffers), ranks, dict(s.meta)).validate()


def has_switch_steps(s: "Schedule") -> bool:
    return any(isinstance(st, SWITCH_STEPS) for prog in s.ranks for rnd in prog for st in rnd.steps)


def _lower_switch(s: "Schedule") -> "Schedule":
    """In-switch steps as point-to-point ones, for executors without a switch that reduces: a
    SwitchReduce of rank r becomes a copy of r's own chunk (in a round inserted before, when r is in the
    group) and a reducing Get from every other member; a Multicast becomes a Get of every other member
    (and a local copy on r when r is in the group). Verified like any Schedule."""
    p = s.nranks
    progs: list[list[list[Step]]] = [[] for _ in range(p)]
    for k in range(s.nrounds):
        pre: list[list[Step]] = [[] for _ in range(p)]
        cur: list[list[Step]] = [[] for _ in range(p)]
        post: list[list[Step]] = [[] for _ in range(p)]
        for r in range(p):
            for st in s.ranks[r][k].steps:
                if isinstance(st, SwitchReduce):
                    others = [g for g in st.group if g != r]
                    if r in st.group:
                        if st.src != st.dst:
                            pre[r].append(Copy(st.src, st.dst, st.channel))
                        cur[r] += [Get(g, st.src, st.dst, True, st.channel) for g in others]
                    else:  # the first member's chunk is stored in the round inserted before, the others reduce
                        pre[r].append(Get(others[0], st.src, st.dst, False, st.channel))
                        cur[r] += [Get(g, st.src, st.dst, True, st.channel) for g in others[1:]]
                elif isinstance(st, Multicast):
                    for g in st.group:
                        if g == r:
                            if st.src != st.dst:
                                post[r].append(Copy(st.src, st.dst, st.channel))
                        else:
                            cur[g].append(Get(r, st.src, st.dst, False, st.channel))
                else:
                    cur[r].append(st)
        if any(pre):
            for r in range(p):
                progs[r].append(pre[r])
        for r in range(p):
            comm = [x for x in cur[r] if isinstance(x, COMM_STEPS)]
            loc = [x for x in cur[r] if isinstance(x, LOCAL_STEPS)]
            progs[r].append(comm + post[r] + loc)
    ranks = tuple(tuple(Round(tuple(steps)) for steps in prog) for prog in progs)
    return Schedule(s.collective, s.algorithm, p, s.count, s.root, dict(s.buffers), ranks, dict(s.meta)).validate()


def one_sided(s: "Schedule") -> "Schedule":
    """The same algorithm with every Send/Recv pair as a Get of the receiver (the i-th receive of rank r
    from q in round k reads the chunk of q's i-th send to r in round k). Gets already there stay;
    in-switch steps are lowered to Gets first (as :func:`two_sided` does: executors that run this form
    have no switch that reduces, and a step they do not know must never be skipped)."""
    if has_switch_steps(s):
        s = _lower_switch(s)
    s = _puts_as_gets(s)
    p = s.nranks
    ranks = []
    for r in range(p):
        prog = []
        for k, rnd in enumerate(s.ranks[r]):
            nth: dict[int, int] = {}
            steps: list[Step] = []
            for st in rnd.steps:
                if isinstance(st, Send):
                    continue
                if isinstance(st, Recv):
                    i = nth[st.peer] = nth.get(st.peer, -1) + 1
                    theirs = [t for t in s.ranks[st.peer][k].steps if isinstance(t, Send) and t.peer == r]
                    if i >= len(theirs):
                        raise ScheduleError(f"round {k}: rank {r}'s receive #{i} from rank {st.peer} has no send",
                                            op=f"{s.collective}/{s.algorithm}", ranks=[r, st.peer])
                    steps.append(Get(st.peer, theirs[i].src, st.dst, st.reduce, st.channel))
                else:
                    steps.append(st)
            prog.append(Round(tuple(steps)))
        ranks.append(tuple(prog))
    return Schedule(s.collective, s.algorithm, p, s.count, s.root, dict(s.buffers), tuple(ranks),
                    dict(s.meta, form="one-sided")).validate()


def two_sided(s: "Schedule") -> "Schedule":
    """Every Get as a Send of the peer read and a Recv of the reader, in the same round (for executors
    without one-sided memory: the host rings, TCP)."""
    if not has_gets(s):
        return s
    if has_switch_steps(s):
        s = _lower_switch(s)
    s = _puts_as_gets(s)
    p = s.nranks
    progs = [[list(rnd.steps) for rnd in s.ranks[r]] for r in range(p)]
    for r in range(p):
        for k, rnd in enumerate(s.ranks[r]):
            for j, st in enumerate(rnd.steps):
                if isinstance(st, Get):  # (appends to other programs never move rank r's own steps)
                    progs[r][k][j] = Recv(st.peer, st.dst, st.reduce, st.channel)
                    progs[st.peer][k].append(Send(r, st.src, st.channel))
    ranks = tuple(tuple(Round(tuple(steps)) for steps in prog) for prog in progs)
    meta = {k: v for k, v in s.meta.items() if k != "form"}
    return Schedule(s.collective, s.algorithm, p, s.count, s.root, dict(s.buffers), ranks, meta).validate()


# ---- a small builder that keeps every rank's program aligned ---------------------------------


def split(count: int, parts: int) -> list[tuple[int, int]]:
    """Split ``count`` elements into ``parts`` contiguous (offset, count) pieces, sizes differing by
    at most one (the first ``count % parts`` pieces are one larger). Pieces may be empty."""
    base, extra = divmod(count, parts)
    out = []
    off = 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append((off, n))
        off += n
    return out


class Builder:
    """Collects steps per (rank, round) and pads every rank to the same number of rounds.

    Zero-length sends/receives are dropped unless ``keep_empty`` (barrier needs empty messages).
    """

    def __init__(self, collective: str, algorithm: str, nranks: int, count: int, root: int = 0,
                 scratch: int = 0, keep_empty: bool = False) -> None:
        if nranks < 1:
            raise ValueError(f"nranks must be >= 1, got {nranks}")
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if not 0 <= root < nranks:
            raise ValueError(f"root {root} out of range for nranks={nranks}")
        self.collective = collective
        self.algorithm = algorithm
        self.nranks = nranks
        self.count = count
        self.root = root
        self.buffers = dict(buffer_sizes(collective, nranks, count))
        self.buffers["scratch"] = scratch
        self.keep_empty = keep_empty
        self._rounds: list[list[list[Step]]] = [[] for _ in range(nranks)]
        self.meta: dict[str, object] = {}

    def _slot(self, rank: int, rnd: int) -> list[Step]:
        prog = self._rounds[rank]
        while len(prog) <= rnd:
            prog.append([])
        return prog[rnd]

    def send(self, rnd: int, src: int, dst: int, chunk: Chunk, channel: int = 0) -> None:
        """Record the message src -> dst in round rnd (both the Send and the matching Recv side
        must be added; see :meth:`transfer` for both at once)."""
        if chunk.count == 0 and not self.keep_empty:
            return
        self._slot(src, rnd).append(Send(dst, chunk, channel))

    def recv(self, rnd: int, dst: int, src: int, chunk: Chunk, reduce: bool = False, channel: int = 0) -> None:
        if chunk.count == 0 and not self.keep_empty:
            return
        self._slot(dst, rnd).append(Recv(src, chunk, reduce, channel))

    def transfer(self, rnd: int, src: int, dst: int, src_chunk: Chunk, dst_chunk: Chunk, reduce: bool = False,
                 channel: int = 0) -> None:
        """A message from src to dst in round rnd: src sends src_chunk, dst receives into dst_chunk."""
        if src_chunk.count != dst_chunk.count:
            raise AssertionError(f"transfer of {src_chunk.count} into {dst_chunk.count} elements")
        self.send(rnd, src, dst, src_chunk, channel)
        self.recv(rnd, dst, src, dst_chunk, reduce, channel)

    def get(self, rnd: int, rank: int, peer: int, src: Chunk, dst: Chunk, reduce: bool = False,
            channel: int = 0) -> None:
        """``rank`` reads src of ``peer`` into its dst, stored or reduced (:class:`Get`; registered memory)."""
        if src.count != dst.count:
            raise AssertionError(f"get of {src.count} into {dst.count} elements")
        if src.count == 0 and not self.keep_empty:
            return
        self._slot(rank, rnd).append(Get(peer, src, dst, reduce, channel))

    def put(self, rnd: int, rank: int, peer: int, src: Chunk, dst: Chunk, channel: int = 0) -> None:
        """``rank`` writes its src into dst of ``peer`` (:class:`Put`); see :meth:`signal`."""
        if src.count != dst.count:
            raise AssertionError(f"put of {src.count} into {dst.count} elements")
        if src.count == 0 and not self.keep_empty:
            return
        self._slot(rank, rnd).append(Put(peer, src, dst, channel))

    def signal(self, rnd: int, rank: int, peer: int, channel: int = 0) -> None:
        """``rank`` signals ``peer``, which waits for it in the same round (:class:`Signal`, :class:`Wait`)."""
        self._slot(rank, rnd).append(Signal(peer, channel))
        self._slot(peer, rnd).append(Wait(rank, channel))

    def switch_reduce(self, rnd: int, rank: int, group: Sequence[int], src: Chunk, dst: Chunk,
                      channel: int = 0) -> None:
        """``rank``'s dst gets the in-switch reduction of ``src`` over ``group`` (:class:`SwitchReduce`)."""
        if src.count == 0 and not self.keep_empty:
            return
        self._slot(rank, rnd).append(SwitchReduce(tuple(group), src, dst, channel))

    def multicast(self, rnd: int, rank: int, group: Sequence[int], src: Chunk, dst: Chunk,
                  channel: int = 0) -> None:
        """``rank``'s src lands in dst of every rank of ``group`` through the switch (:class:`Multicast`)."""
        if src.count == 0 or not group:
            return
        self._slot(rank, rnd).append(Multicast(tuple(group), src, dst, channel))

    def copy(self, rnd: int, rank: int, src: Chunk, dst: Chunk, channel: int = 0, inline: bool = False) -> None:
        """``inline``: at its place among the round's deliveries, not after them (module docstring)."""
        if (src.count == 0 and not self.keep_empty) or src == dst:
            return
        self._slot(rank, rnd).append(Copy(src, dst, channel, inline))

    def reduce(self, rnd: int, rank: int, src: Chunk, dst: Chunk, channel: int = 0, inline: bool = False) -> None:
        """``inline``: at its place among the round's deliveries, not after them (module docstring)."""
        if src.count == 0:
            return
        self._slot(rank, rnd).append(Reduce(src, dst, channel, inline))

    def build(self) -> Schedule:
        nr = max((len(p) for p in self._rounds), default=0)
        # drop rounds that are empty on every rank
        keep = [k for k in range(nr) if any(k < len(p) and p[k] for p in self._rounds)]
        ranks = []
        for prog in self._rounds:
            rounds = []
            for k in keep:
                steps = prog[k] if k < len(prog) else []
                # communication first (channel by channel, in the order given within a channel: the
                # i-th message between two ranks is then the i-th on both sides whatever order the
                # channels were built in), then local steps in the order given; an inline local step
                # keeps its place among the communication of its channel
                inl = [isinstance(s, COMM_STEPS) or s.inline for s in steps]
                comm = sorted((s for s, c in zip(steps, inl) if c), key=_channel_of)
                loc = [s for s, c in zip(steps, inl) if not c]
                rounds.append(Round(tuple(comm + loc)))
            ranks.append(tuple(rounds))
        return Schedule(
            collective=self.collective,
            algorithm=self.algorithm,
            nranks=self.nranks,
            count=self.count,
            root=self.root,
            buffers=self.buffers,
            ranks=tuple(ranks),
            meta=dict(self.meta),
        )


def _channel_of(step: Step) -> int:
    return step.channel


def inp(offset: int, count: int) -> Chunk:
    return Chunk("input", offset, count)


def out(offset: int, count: int) -> Chunk:
    return Chunk("output", offset, count)


def scr(offset: int, count: int) -> Chunk:
    return Chunk("scratch", offset, count)
