"""The traffic of a Schedule in compact form: what the cost model and the simulator read.

A Schedule says, per rank and round, which chunk goes where. The model and the simulator only need,
per round, the messages (src, dst, elements) and how much each rank reduces. At 16,384 ranks a
Schedule of Python objects would hold ~10^9 steps, so the traffic is kept as numpy arrays, and runs of
identical consecutive rounds (a ring repeats the same pattern p-1 times) are stored once with a repeat
count.

    traffic(collective, algorithm, nranks, count, root=0, **params) -> Traffic

By default the traffic is derived from the Schedule itself (:func:`from_schedule`), so it is exactly
what the runtime executes. A family may register a vectorised generator for large rank counts with
:func:`register_traffic`; tests check that it equals :func:`from_schedule` wherever the Schedule can be
built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from .schedule import Get, Multicast, Put, Recv, Reduce, Schedule, Send, Signal, SwitchReduce, accesses


@dataclass(frozen=True, eq=False)
class Phase:
    """``repeat`` consecutive rounds with the same messages.

    src, dst, elems: one entry per message (int64 arrays of equal length);
    reduced: elements reduced per rank in one round (int64 array of length nranks), or None if none;
    channel: per message, the Schedule channel it belongs to (None: every message on channel 0);
    wait: whether the receivers wait for these messages before their next round (False: one-sided writes
    into memory the receiver does not read afterwards, e.g. a multicast of the final result: they only
    have to land before the collective ends);
    after: per message, another channel of the sender whose earlier round wrote the chunk it sends (a
    hand-off between channels: the message also waits for that channel), -1 for none; None: no hand-offs;
    gate: per message, the receiver's channel that waits for it (the channel that reads the chunk next;
    -1: none, it only lands); None: the message's own channel.
    by: per message, which end does the copying: :data:`BOTH` (a two-sided send/receive: the sender copies
    out, the receiver in), :data:`SENDER` (a one-sided Put or Signal: the writer), :data:`RECEIVER` (a
    one-sided Get: the reader); None: every message BOTH. A CPU host's cost model charges a message's
    bytes and per-message cost to the ends that work (the host page's Schedules are one-sided).
    """

    src: np.ndarray
    dst: np.ndarray
    elems: np.ndarray
    reduced: np.ndarray | None
    repeat: int = 1
    channel: np.ndarray | None = None
    wait: bool = True
    after: np.ndarray | None = None
    gate: np.ndarray | None = None
    by: np.ndarray | None = None

    def channels(self) -> np.ndarray:
        """The channel of every message (zeros when the phase has one channel)."""
        return self.channel if self.channel is not None else np.zeros(self.src.size, dtype=np.int64)

    def with_repeat(self, repeat: int) -> "Phase":
        return Phase(self.src, self.dst, self.elems, self.reduced, repeat, self.channel, self.wait, self.after,
                     self.gate, self.by)

    def workers(self) -> tuple[np.ndarray, np.ndarray]:
        """(sender works, receiver works) per message, as booleans (see ``by``)."""
        if self.by is None:
            one = np.ones(self.src.size, dtype=bool)
            return one, one
        return self.by != RECEIVER, self.by != SENDER

    @property
    def nmessages(self) -> int:
        return int(self.src.size)

    def same_as(self, other: "Phase") -> bool:
        if self.src.size != other.src.size or self.wait != other.wait:
            return False
        if not (np.array_equal(self.src, other.src) and np.array_equal(self.dst, other.dst)
                and np.array_equal(self.elems, other.elems)):
            return False
        if (self.reduced is None) != (other.reduced is None):
            return False
        if (self.channel is not None or other.channel is not None) and not np.array_equal(
                self.channels(), other.channels()):
            return False
        for x, y in ((self.after, other.after), (self.gate, other.gate), (self.by, other.by)):
            if (x is None) != (y is None) or (x is not None and not np.array_equal(x, y)):
                return False
        return self.reduced is None or np.array_equal(self.reduced, other.reduced)


#: Phase.by: which end of a message does the copying
BOTH, SENDER, RECEIVER = 0, 1, 2


@dataclass(frozen=True, eq=False)
class Traffic:
    """The messages of a Schedule, round by round. Endpoints ``nranks`` and ``nranks + 1`` are the switch
    of in-switch steps (its reductions and its multicasts; see :func:`from_schedule`); ``switch_kind``
    says which switch that is (the Schedule's ``meta["switch"]``: ``nvls``, the ranks' NVSwitch, by
    default; ``sharp``, the InfiniBand switch their NICs reach: ``interlink.topology.switch_plan``)."""

    collective: str
    algorithm: str
    nranks: int
    count: int
    phases: tuple[Phase, ...]
    switch_groups: tuple[tuple[int, ...], ...] = ()  # the groups of its in-switch steps (one switch each)
    switch_kind: str = "nvls"

    def on_switches(self, switch_of: np.ndarray) -> "Traffic":
        """The same traffic with the switch endpoints (``nranks + stream``, stream 0: reductions, 1:
        multicasts) replaced by ``nranks + 2 x switch_of[r] + stream``, r the rank at the message's other end
        (each rank reaches its own switch; ``interlink.topology.switch_plan``). Endpoint e >= nranks is
        then stream (e - nranks) % 2 of switch (e - nranks) // 2. ``nranks`` stays the ranks'."""
        p = self.nranks
        out = []
        for ph in self.phases:
            src, dst = ph.src, ph.dst
            if ph.src.size and (int(src.max()) >= p or int(dst.max()) >= p):
                up, dn = dst >= p, src >= p
                dst = np.where(up, p + 2 * switch_of[np.minimum(src, p - 1)] + (dst - p) % 2, dst)
                src = np.where(dn, p + 2 * switch_of[np.minimum(ph.dst, p - 1)] + (src - p) % 2, src)
            out.append(Phase(src, dst, ph.elems, ph.reduced, ph.repeat, ph.channel, ph.wait, ph.after, ph.gate))
        return Traffic(self.collective, self.algorithm, p, self.count, tuple(out), self.switch_groups,
                       self.switch_kind)

    @property
    def uses_switch(self) -> bool:
        p = self.nranks
        return any(ph.src.size and (int(ph.src.max()) >= p or int(ph.dst.max()) >= p) for ph in self.phases)

    @property
    def rounds(self) -> int:
        """Communication rounds (rounds with at least one message)."""
        return sum(ph.repeat for ph in self.phases if ph.nmessages)

    def expand(self) -> Iterator[Phase]:
        """Every round, in order (repeats unrolled: for small cases and tests)."""
        for ph in self.phases:
            for _ in range(ph.repeat):
                yield ph.with_repeat(1)

    def sent_per_rank(self) -> np.ndarray:
        out = np.zeros(self.nranks + 2, dtype=np.int64)  # + the switch's two streams
        for ph in self.phases:
            np.add.at(out, ph.src, ph.elems * ph.repeat)
        return out[: self.nranks]

    def equals(self, other: "Traffic") -> bool:
        a, b = list(self.expand()), list(other.expand())
        a = [p for p in a if p.nmessages or p.reduced is not None]
        b = [p for p in b if p.nmessages or p.reduced is not None]
        return (len(a) == len(b) and self.switch_groups == other.switch_groups
                and (not self.switch_groups or self.switch_kind == other.switch_kind)
                and all(_canon(x).same_as(_canon(y)) for x, y in zip(a, b)))


def _canon(ph: Phase) -> Phase:
    """Messages in a fixed order, merged per (src, dst, channel); zero reductions dropped."""
    ch = ph.channels()
    multi = bool(ch.any())
    if ph.src.size:
        key = (ph.src * (int(ph.dst.max(initial=0)) + 1) + ph.dst) * (int(ch.max(initial=0)) + 1) + ch
        uniq, inv = np.unique(key, return_inverse=True)
        elems = np.zeros(uniq.size, dtype=np.int64)
        np.add.at(elems, inv, ph.elems)
        first = np.zeros(uniq.size, dtype=np.int64)
        first[inv[::-1]] = np.arange(ph.src.size)[::-1]
        src, dst, ch = ph.src[first], ph.dst[first], ch[first]
    else:
        src = dst = elems = ch = first = np.zeros(0, dtype=np.int64)
    red = ph.reduced if ph.reduced is not None and ph.reduced.any() else None
    return Phase(src.astype(np.int64), dst.astype(np.int64), elems, red, ph.repeat,
                 ch.astype(np.int64) if multi else None, ph.wait,
                 None if ph.after is None else ph.after[first], None if ph.gate is None else ph.gate[first],
                 None if ph.by is None else ph.by[first])


def from_schedule(s: Schedule) -> Traffic:
    """Traffic of a built Schedule (identical consecutive rounds merged).

    In-switch steps go through the switch of the rank at the other end (the model and the simulator map
    it to each rank's NVLS switch), as two endpoints: ``nranks`` for its reductions and ``nranks + 1`` for
    its multicasts (one device, two streams that do not wait for each other, as NCCL's NVLS kernels run
    the reduce and the multicast of different segments at once). A SwitchReduce of rank r over a group is
    a message member -> switch from every member and then switch -> r; a Multicast is r -> switch and then
    switch -> every member. A round with such steps becomes up to three phases: the messages into the
    switch (with the round's other messages), then out of its multicast stream, then out of its
    reduction stream (each leaves once its stream has what it copies or reduces; the streams' outputs do
    not overlap in time, so they are phases of their own). The switch reduces: no rank's ``reduced``
    counts it.

    On a SHARP switch (``meta["switch"] == "sharp"``: NCCL's CollNet) the SwitchReduces of one round over
    the same group, chunk and channel are one in-network all-reduce: each member's chunk goes up once and
    the result comes down to every member that asked for it (an NVLS ``multimem.ld_reduce`` reads the
    members again for every rank that issues it)."""
    phases: list[Phase] = []
    p = s.nranks
    sw, mc = p, p + 1  # the switch's reduction stream and its multicast stream
    kind = str(s.meta.get("switch", "nvls"))
    once = kind == "sharp"
    multi = s.channels > 1
    reads = writes = None
    if multi or once or any(isinstance(st, Multicast) for prog in s.ranks for rnd in prog for st in rnd.steps):
        reads, writes = _accesses(s)

    def handoff(x: int, k: int, c, ch: int) -> int:
        return _handoff(writes, x, k, c, ch) if writes is not None else -1

    groups: set[tuple[int, ...]] = set()
    for k in range(s.nrounds):
        src, dst, elems, chan, aft, by = [], [], [], [], [], []
        asked: set = set()  # (group, chunk, channel) of this round's SHARP reductions already sent up
        down_sr: tuple[list, list, list, list, list] = ([], [], [], [], [])
        down_mc: tuple[list, list, list, list, list] = ([], [], [], [], [])
        reduced = np.zeros(p, dtype=np.int64)
        for r in range(p):
            for st in s.ranks[r][k].steps:
                if isinstance(st, (SwitchReduce, Multicast)):
                    groups.add(tuple(sorted(set(st.group) | {r})))
                if isinstance(st, SwitchReduce):
                    key = (frozenset(st.group), st.src, st.channel)
                    for g in (() if once and key in asked else st.group):
                        src.append(g), dst.append(sw), elems.append(st.src.count), chan.append(st.channel)
                        aft.append(handoff(g, k, st.src, st.channel))
                        by.append(BOTH)
                    if once:
                        asked.add(key)
                    nxt = _next_reader(reads, r, k, st.dst) if multi or once else st.channel
                    for lst, v in zip(down_sr, (sw, r, st.dst.count, st.channel, nxt)):
                        lst.append(v)
                    continue
                if isinstance(st, Multicast):
                    src.append(r), dst.append(mc), elems.append(st.src.count), chan.append(st.channel)
                    aft.append(handoff(r, k, st.src, st.channel))
                    by.append(BOTH)
                    for g in st.group:
                        land = _next_reader(reads, g, k, st.dst) < 0  # nothing later on g reads it
                        for lst, v in zip(down_mc, (mc, g, st.dst.count, st.channel, land)):
                            lst.append(v)
                    continue
                if isinstance(st, (Send, Put)):  # a put's bytes flow like a send's
                    src.append(r)
                    dst.append(st.peer)
                    elems.append(st.src.count)
                    chan.append(st.channel)
                    aft.append(handoff(r, k, st.src, st.channel))
                    by.append(SENDER if isinstance(st, Put) else BOTH)
                elif isinstance(st, Signal):  # no bytes: the path's latency to the waiter
                    src.append(r)
                    dst.append(st.peer)
                    elems.append(0)
                    chan.append(st.channel)
                    aft.append(-1)
                    by.append(SENDER)
                elif isinstance(st, Get):  # one-sided: the bytes flow from the peer read to this rank
                    src.append(st.peer)
                    dst.append(r)
                    elems.append(st.src.count)
                    chan.append(st.channel)
                    aft.append(handoff(st.peer, k, st.src, st.channel))
                    by.append(RECEIVER)
                    if st.reduce:
                        reduced[r] += st.dst.count
                elif isinstance(st, Recv) and st.reduce:
                    reduced[r] += st.dst.count
                elif isinstance(st, Reduce):
                    reduced[r] += st.dst.count
        if not src and not reduced.any():
            continue  # local copies only: not modelled as a round
        aa = np.array(aft, dtype=np.int64)
        bb = np.array(by, dtype=np.int64)
        new = [Phase(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.array(elems, dtype=np.int64),
                     reduced if reduced.any() else None, 1, np.array(chan, dtype=np.int64) if any(chan) else None,
                     True, aa if (aa >= 0).any() else None, None, bb if bb.any() else None)]
        # each stream's output leaves when that stream has its input; multicast deliveries nothing reads
        # afterwards only have to land (wait=False), the others gate their receiver's next round
        land = np.array(down_mc[4], dtype=bool)
        outs = [tuple(np.array(x, dtype=np.int64)[m] for x in down_mc[:4]) + (w, None)
                for m, w in ((~land, True), (land, False))]
        gate = np.array(down_sr[4], dtype=np.int64)
        outs.append(tuple(np.array(x, dtype=np.int64) for x in down_sr[:4]) + (True, gate))
        for a, b_, e, ch, w, gt in outs:
            if a.size:
                same = gt is None or np.array_equal(gt, ch)
                new.append(Phase(a, b_, e, None, 1, ch if ch.any() else None, w, None, None if same else gt))
        for ph in new:
            if phases and phases[-1].same_as(ph):
                phases[-1] = phases[-1].with_repeat(phases[-1].repeat + 1)
            else:
                phases.append(ph)
    return Traffic(s.collective, s.algorithm, p, s.count, tuple(phases), tuple(sorted(groups)), kind)


def _close(a: np.ndarray | None, b: np.ndarray | None, tol: int) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if a is b:
        return True
    if a.size != b.size:
        return False
    if tol == 0:
        return bool(np.array_equal(a, b))
    return bool(np.abs(a - b).max(initial=0) <= tol)


def _same_pairs(a: Phase, b: Phase) -> bool:
    if a.src.size != b.src.size or a.wait != b.wait:
        return False
    for x, y in ((a.after, b.after), (a.gate, b.gate)):
        if (x is None) != (y is None) or (x is not None and not np.array_equal(x, y)):
            return False
    return (a.src is b.src or np.array_equal(a.src, b.src)) and (a.dst is b.dst or np.array_equal(a.dst, b.dst))


def merge_rounds(phases: Iterable[Phase], tol: int = 1) -> list[list[Phase]]:
    """Consecutive phases with the same (src, dst) messages whose sizes (and reductions) differ by at most
    ``tol`` elements, grouped: the model and the simulator time a group once, every message at its largest
    size in the group (an upper bound within ``tol`` elements per message per round; 0: exact). Uneven
    ring blocks (sizes rotating by one element) become one group instead of one per round."""
    out: list[list[Phase]] = []
    for ph in phases:
        if out:
            first = out[-1][0]
            # a rank's reduction sums its messages of the round: it may differ by tol per message
            fan = int(np.bincount(first.dst).max(initial=1)) if first.dst.size else 1
            if (_same_pairs(first, ph) and _close(first.elems, ph.elems, tol)
                    and _close(first.reduced, ph.reduced, tol * fan)):
                out[-1].append(ph)
                continue
        out.append([ph])
    return out



def blocks(phases: list[Phase], max_len: int = 4, min_reps: int = 3) -> dict[int, tuple[int, int]]:
    """Runs of a block of 2..``max_len`` distinct single rounds repeated at least ``min_reps`` times in a
    row (NVLS's rounds are three phases each: into the switch, out of its multicast, out of its
    reduction): {first phase: (block length, repetitions)}, found greedily from the start. The clocks run
    such a run as one block map (:meth:`interlink.model.clocks.Clocks.run_block`)."""
    out: dict[int, tuple[int, int]] = {}
    n = len(phases)
    i = 0
    while i < n:
        found = 0
        for b in range(2, max_len + 1):
            if i + b * min_reps > n or any(ph.repeat != 1 for ph in phases[i:i + b]):
                continue
            r = 1
            while i + (r + 1) * b <= n and all(phases[i + r * b + j].repeat == 1
                                               and phases[i + r * b + j].same_as(phases[i + j]) for j in range(b)):
                r += 1
            if r >= min_reps:
                out[i] = (b, r)
                found = b * r
                break
        i += found or 1
    return out


def merged(group: list[Phase]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, int]:
    """A :func:`merge_rounds` group as one run: (elements per message at their largest, reductions per rank
    at their largest, elements per message summed over all its rounds (exact bytes), rounds)."""
    first = group[0]
    repeat = sum(ph.repeat for ph in group)
    if len(group) == 1:
        return first.elems, first.reduced, first.elems * first.repeat, repeat
    elems = first.elems.copy()
    total = first.elems * first.repeat
    reduced = None if first.reduced is None else first.reduced.copy()
    for ph in group[1:]:  # one pass, O(messages) memory (a group may hold thousands of rounds)
        np.maximum(elems, ph.elems, out=elems)
        total += ph.elems * ph.repeat
        if reduced is not None:
            np.maximum(reduced, ph.reduced, out=reduced)
    return elems, reduced, total, repeat


def _accesses(s: Schedule) -> tuple[dict, dict]:
    """Per (rank, buffer): arrays (round, lo, hi, channel) of the chunks read there, and of those written
    (:func:`~interlink.algorithms.schedule.accesses`)."""
    acc: tuple[dict, dict] = ({}, {})
    for owner, k, c, ch, w in accesses(s):
        acc[w].setdefault((owner, c.buffer), []).append((k, c.offset, c.end, ch))
    return tuple({key: np.array(v, dtype=np.int64) for key, v in d.items()} for d in acc)  # type: ignore[return-value]


def _next_reader(reads: dict | None, r: int, k: int, c) -> int:
    """The channel of the first step after round k that reads part of chunk c on rank r, or -1."""
    a = reads.get((r, c.buffer)) if reads is not None else None
    if a is None or not a.size:
        return -1
    hit = (a[:, 0] > k) & (a[:, 1] < c.end) & (c.offset < a[:, 2])
    if not hit.any():
        return -1
    i = np.flatnonzero(hit)
    return int(a[i[np.argmin(a[i, 0])], 3])


def _handoff(writes: dict, x: int, k: int, c, ch: int) -> int:
    """The channel other than ``ch`` that last wrote (in a round before k) a part of chunk c on rank x
    (a hand-off between channels), or -1 (also when ``ch`` itself wrote it last: a chunk handed over to
    ``ch`` and written there since)."""
    a = writes.get((x, c.buffer))
    if a is None or not a.size:
        return -1
    hit = (a[:, 0] < k) & (a[:, 1] < c.end) & (c.offset < a[:, 2])
    if not hit.any():
        return -1
    i = np.flatnonzero(hit)
    last = int(a[i[np.argmax(a[i, 0])], 3])
    return -1 if last == ch else last


TrafficFn = Callable[..., Traffic]
_FAST: dict[tuple[str, str], TrafficFn] = {}
_MESSAGES: dict[tuple[str, str], Callable[..., int]] = {}


def register_traffic(collective: str, algorithm: str, messages: Callable[..., int] | None = None
                     ) -> Callable[[TrafficFn], TrafficFn]:
    """Register a vectorised generator ``fn(nranks, count, root=0, **params) -> Traffic`` that must
    equal :func:`from_schedule` of the registered builder (tests check it).

    ``messages(nranks, count, **params) -> int``: for generators whose traffic grows faster than about
    p log p messages (direct algorithms, pairwise exchange: p(p - 1); CollNet: about 2pL per pipeline
    segment), the number of messages its stored phases hold (a run of identical rounds counts once; an upper
    bound is fine), so that a caller can tell beforehand that a case is too large to price
    (:func:`stored_messages`)."""

    def deco(fn: TrafficFn) -> TrafficFn:
        _FAST[(collective, algorithm)] = fn
        if messages is not None:
            _MESSAGES[(collective, algorithm)] = messages
        return fn

    return deco


def has_generator(collective: str, algorithm: str) -> bool:
    """Whether (collective, algorithm) has a registered vectorised traffic generator."""
    from . import registry

    algorithm = registry.get_entry(collective, algorithm).algorithm  # loads the families; a former name's
    return (collective, algorithm) in _FAST


def stored_messages(collective: str, algorithm: str, nranks: int, count: int, **params) -> int | None:
    """The messages the generator's traffic holds for ``nranks`` and ``count`` when it declared them
    (quadratic and pipelined algorithms), else None (about p log p or fewer: no concern)."""
    has_generator(collective, algorithm)
    fn = _MESSAGES.get((collective, registry_name(collective, algorithm)))
    return None if fn is None else int(fn(nranks, count, **params))


def registry_name(collective: str, algorithm: str) -> str:
    """The registered name of (collective, algorithm), a former name resolved."""
    from . import registry

    return registry.get_entry(collective, algorithm).algorithm


# above this many (rank x round) cells, a Schedule of objects is too slow to build
BUILD_LIMIT = 2_000_000


def traffic(collective: str, algorithm: str, nranks: int, count: int, root: int = 0, *,
            prefer_fast: bool | None = None, **params) -> Traffic:
    """Traffic of (collective, algorithm) for nranks ranks and count elements per rank.

    Uses the registered fast generator when there is one and the case is large (or prefer_fast);
    otherwise builds the Schedule (cached) and derives the traffic from it."""
    from . import registry

    algorithm = registry.get_entry(collective, algorithm).algorithm  # validates the names (a former name's too)
    fast = _FAST.get((collective, algorithm))
    big = nranks * max(nranks, 1) > BUILD_LIMIT
    if fast is not None and (prefer_fast or (prefer_fast is None and big)):
        return fast(nranks, count, root=root, **params)
    if big and fast is None:
        raise ValueError(f"{collective}/{algorithm} at {nranks} ranks is too large to build as a Schedule and "
                         f"has no vectorised traffic generator")
    return from_schedule(registry.get_schedule(collective, algorithm, nranks, count, root, **params))
