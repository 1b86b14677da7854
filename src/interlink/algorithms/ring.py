"""Ring algorithms: every rank talks only to its neighbours (rank+1 sends, rank-1 receives).

Bandwidth-optimal for large messages; latency grows linearly with the number of ranks.
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .schedule import Builder, Schedule, inp, out, scr, split
from .traffic import Phase, Traffic, register_traffic


#: the builder parameters of every ring: ``channels`` parallel rings, each over its own slice of the
#: data; with ``local_size`` (ranks per host, hosts as consecutive blocks) and ``exits`` (per channel,
#: the local index of the rank through whose NIC the ring leaves each host) the rings are rail-aligned
RING_PARAMS = ("channels", "local_size", "exits")


def ring_orders(nranks: int, channels: int = 1, local_size: int | None = None,
                exits: tuple[int, ...] | None = None) -> list[list[int]]:
    """Per channel, the ranks in ring order (member i sends to member i + 1).

    One channel, or no host layout: 0, 1, ..., p - 1 for every channel (the data is split, the route
    is the same). With hosts of ``local_size`` consecutive ranks and ``exits``, channel c with e =
    exits[c] runs through even hosts from local rank e + 1 up to e and through odd hosts from e down to
    e + 1, so it leaves an even host from local rank e into local rank e of the next host and an odd
    host from local rank e + 1 into local rank e + 1: every host crossing stays on one rail (the NICs
    of local rank e, or e + 1, on both sides: one leaf switch of a rail-optimised fabric), and the C
    rings cross each host boundary through C different NICs, as NCCL's channels do (one ring per NIC).
    Only with an odd number of hosts does the crossing back to host 0 change rails.
    """
    p = int(nranks)
    C = max(1, int(channels))
    L = int(local_size or p)
    if exits is not None and len(exits) != C:
        raise ValueError(f"exits has {len(exits)} entries for {C} channels")
    if exits is None or L >= p or L < 1 or p % L:
        return [list(range(p)) for _ in range(C)]
    out = []
    for e in exits:
        if not 0 <= int(e) < L:
            raise ValueError(f"exit {e} out of range for local_size={L}")
        e = int(e)
        out.append([h * L + ((e + 1 + i) % L if h % 2 == 0 else (e - i) % L)
                    for h in range(p // L) for i in range(L)])
    return out


def _channel_slices(count: int, channels: int) -> list[tuple[int, int]]:
    if int(channels) < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    return split(count, int(channels))


@register("all_reduce", "ring", params=RING_PARAMS)
def all_reduce_ring(nranks: int, count: int, root: int = 0, channels: int = 1, local_size: int | None = None,
                    exits: tuple[int, ...] | None = None) -> Schedule:
    """2(p-1) rounds; each rank sends 2(p-1)/p of the buffer (reduce-scatter then all-gather), over
    ``channels`` rings, each with its slice of the buffer."""
    p = nranks
    b = Builder("all_reduce", "ring", p, count, root)
    slices = _channel_slices(count, channels)
    orders = ring_orders(p, len(slices), local_size, exits)
    for c, (co, cn) in enumerate(slices):
        for r in range(p):
            b.copy(0, r, inp(co, cn), out(co, cn), c)
    if p == 1:
        return b.build()
    for c, (co, cn) in enumerate(slices):
        if len(slices) > 1:
            b.meta["channels"] = len(slices)
        order = orders[c]
        chunks = [(co + o, n) for o, n in split(cn, p)]
        for t in range(p - 1):  # reduce-scatter
            for i in range(p):
                r, right, left = order[i], order[(i + 1) % p], order[(i - 1) % p]
                so, sn = chunks[(i - t) % p]
                b.send(1 + t, r, right, out(so, sn), c)
                ro, rn = chunks[(i - t - 1) % p]
                b.recv(1 + t, r, left, out(ro, rn), True, c)
        for t in range(p - 1):  # all-gather: member i starts with chunk (i+1)%p fully reduced
            for i in range(p):
                r, right, left = order[i], order[(i + 1) % p], order[(i - 1) % p]
                so, sn = chunks[(i + 1 - t) % p]
                b.send(p + t, r, right, out(so, sn), c)
                ro, rn = chunks[(i - t) % p]
                b.recv(p + t, r, left, out(ro, rn), False, c)
    return b.build()


@register("all_gather", "ring", params=RING_PARAMS)
def all_gather_ring(nranks: int, count: int, root: int = 0, channels: int = 1, local_size: int | None = None,
                    exits: tuple[int, ...] | None = None) -> Schedule:
    """p-1 rounds; each rank sends (p-1)/p of the output buffer (over ``channels`` rings, each with its
    slice of every block)."""
    p, n = nranks, count
    b = Builder("all_gather", "ring", p, n, root)
    slices = _channel_slices(n, channels)
    orders = ring_orders(p, len(slices), local_size, exits)
    if len(slices) > 1:
        b.meta["channels"] = len(slices)
    for c, (co, cn) in enumerate(slices):
        for r in range(p):
            b.copy(0, r, inp(co, cn), out(r * n + co, cn), c)
    for c, (co, cn) in enumerate(slices):
        order = orders[c]
        for t in range(p - 1):
            for i in range(p):
                r, right, left = order[i], order[(i + 1) % p], order[(i - 1) % p]
                sb = order[(i - t) % p]
                src = inp(co, cn) if t == 0 else out(sb * n + co, cn)
                b.send(t, r, right, src, c)
                rb = order[(i - t - 1) % p]
                b.recv(t, r, left, out(rb * n + co, cn), False, c)
    return b.build()


@register("reduce_scatter", "ring", params=RING_PARAMS)
def reduce_scatter_ring(nranks: int, count: int, root: int = 0, channels: int = 1, local_size: int | None = None,
                        exits: tuple[int, ...] | None = None) -> Schedule:
    """p-1 rounds; each rank sends (p-1)/p of the input buffer, reduces as much (over ``channels``
    rings, each with its slice of every block)."""
    p, n = nranks, count
    b = Builder("reduce_scatter", "ring", p, n, root, scratch=n * p)
    slices = _channel_slices(n, channels)
    orders = ring_orders(p, len(slices), local_size, exits)
    if len(slices) > 1:
        b.meta["channels"] = len(slices)

    # the partial sum of block j lives in scratch[j], except the rank's own block, which is
    # accumulated straight into the output
    def acc(r: int, j: int, co: int, cn: int):
        return out(co, cn) if j == r else scr(j * n + co, cn)

    for c, (co, cn) in enumerate(slices):
        for r in range(p):
            for j in range(p):
                b.copy(0, r, inp(j * n + co, cn), acc(r, j, co, cn), c)
    for c, (co, cn) in enumerate(slices):
        order = orders[c]
        for t in range(p - 1):
            for i in range(p):
                r, right, left = order[i], order[(i + 1) % p], order[(i - 1) % p]
                sb = order[(i - t - 1) % p]
                b.send(1 + t, r, right, acc(r, sb, co, cn), c)
                rb = order[(i - t - 2) % p]
                b.recv(1 + t, r, left, acc(r, rb, co, cn), True, c)
    return b.build()


def broadcast_segments(p: int, cn: int, segments: int | None) -> int:
    """Segments of one channel's chain (``cn`` > 0 elements): as given, else 1 for 2 ranks and up to 8."""
    sg = (1 if p == 2 else min(cn, 8)) if segments is None else segments
    return max(1, min(sg, cn))


@register("broadcast", "ring", params=("segments",) + RING_PARAMS)
def broadcast_ring(nranks: int, count: int, root: int = 0, segments: int | None = None, channels: int = 1,
                   local_size: int | None = None, exits: tuple[int, ...] | None = None) -> Schedule:
    """Pipelined chain from the root: S + p - 2 rounds for S segments; each rank sends the buffer once
    (the last rank of the chain sends nothing). With ``channels``, one chain per channel (its ring
    from the root), each with its slice of the buffer cut into S segments."""
    p, n = nranks, count
    b = Builder("broadcast", "ring", p, n, root)
    slices = _channel_slices(n, channels)
    orders = ring_orders(p, len(slices), local_size, exits)
    for c, (co, cn) in enumerate(slices):
        b.copy(0, root, inp(co, cn), out(co, cn), c)
    if p == 1 or n == 0:
        return b.build()
    if len(slices) > 1:
        b.meta["channels"] = len(slices)
    nseg = 0
    for c, (co, cn) in enumerate(slices):
        if cn == 0:
            continue
        segs = [(co + o, k) for o, k in split(cn, broadcast_segments(p, cn, segments))]
        nseg = max(nseg, len(segs))
        ring = orders[c]
        at = ring.index(root)
        chain = ring[at:] + ring[:at]
        for i in range(1, p):
            src, dst = chain[i - 1], chain[i]
            for s, (so, sn) in enumerate(segs):
                rnd = s + i - 1
                b.send(rnd, src, dst, inp(so, sn) if src == root else out(so, sn), c)
                b.recv(rnd, dst, src, out(so, sn), False, c)
    b.meta["segments"] = nseg
    return b.build()


# ---- vectorised traffic for large rank counts ---------------------------------------------------------
#
# The generators below return exactly ``traffic.from_schedule`` of the builders above (tests check it for
# p in 1..33 and many counts), without building a Schedule: numpy over ranks, one Python step per round,
# and identical consecutive rounds stored once with a repeat count. When the count does not divide
# evenly, consecutive ring rounds differ (the block sizes rotate); every round is then kept, exact, but
# its arrays are *views* of one doubled array of block sizes, so memory stays O(p) for all 2(p-1) rounds.



def split_sizes(count: int, parts: int) -> np.ndarray:
    """The sizes of :func:`~interlink.algorithms.schedule.split` as an int64 array."""
    base, extra = divmod(int(count), int(parts))
    out = np.full(parts, base, dtype=np.int64)
    out[:extra] += 1
    return out


class _Rings:
    """R parallel rings of m members, numbered member-major: message j = i * R + l is member i of ring l
    sending to member i + 1 of ring l (members[i, l] holds the rank; sizes[l, k] is the element count
    of block k of ring l).

    In round t member i sends block (i - t + s0) % m and receives block (i - t + s0 - 1) % m. With the
    member-major order, the block sizes of round t are one contiguous window of ``W`` (W[k*R + l] =
    sizes[l, k % m]), so every round is a view; only zero-sized blocks (dropped, as the Builder drops
    them) and per-rank reductions of ranks that hold several members cost a copy.
    """

    def __init__(self, members: np.ndarray, sizes: np.ndarray, nranks: int, channels: bool = False) -> None:
        m, R = members.shape
        self.m, self.R, self.nranks = m, R, nranks
        # with ``channels``, ring l is channel l (its messages carry it), else every ring is channel 0
        self.chan = np.tile(np.arange(R, dtype=np.int64), m) if channels and R > 1 else None
        self.src = members.reshape(-1)
        self.dst = np.roll(members, -1, axis=0).reshape(-1)
        self.W = np.ascontiguousarray(sizes[:, np.arange(2 * m + 2) % m].T).reshape(-1)
        # rounds repeat exactly when every ring's blocks have one size
        self.const = bool((sizes == sizes[:, :1]).all()) if sizes.size else True
        self.identity = self.src.size == nranks and bool((self.src == np.arange(nranks)).all())
        nz = sizes > 0
        self.any_zero = not bool(nz.all())
        # one ring whose non-empty blocks are a prefix (split() sizes): windows of the doubled ranks
        self.prefix = -1
        if R == 1 and self.any_zero and self.chan is None:
            z = int(nz[0].sum())
            if bool(nz[0, :z].all()):
                self.prefix = z
                self.src2 = np.concatenate([self.src, self.src])
                self.dst2 = np.concatenate([self.dst, self.dst])
                self.sizes0 = sizes[0]

    def _window(self, off: int) -> np.ndarray:
        start = (self.m + off) * self.R
        return self.W[start:start + self.m * self.R]

    def round(self, t: int, s0: int, reduce: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(src, dst, elems, reduced per rank or None, channel per message or None) of round t."""
        el = self._window(s0 - t)
        red = None
        if reduce:
            rv = self._window(s0 - t - 1)
            red = rv if self.identity else np.bincount(self.src, weights=rv, minlength=self.nranks).astype(np.int64)
        if not self.any_zero:
            return self.src, self.dst, el, red, self.chan
        if self.prefix >= 0:
            a = (t - s0) % self.m
            z = self.prefix
            return self.src2[a:a + z], self.dst2[a:a + z], self.sizes0[:z], red, None
        keep = el > 0
        return self.src[keep], self.dst[keep], el[keep], red, None if self.chan is None else self.chan[keep]

    def phases(self, s0: int, reduce: bool, out: "_Phases") -> None:
        """Append the m - 1 rounds (one phase with a repeat count when they are identical)."""
        if self.m < 2:
            return
        if self.const:
            src, dst, el, red, ch = self.round(0, s0, reduce)
            out.add(src, dst, el, red, repeat=self.m - 1, merge=False, channel=ch)
            return
        for t in range(self.m - 1):
            src, dst, el, red, ch = self.round(t, s0, reduce)
            out.add(src, dst, el, red, merge=False, channel=ch)


class _Phases:
    """Collects the rounds of a Traffic as :func:`~interlink.algorithms.traffic.from_schedule` would:
    rounds with no message and no reduction are skipped, ``reduced`` is None when nothing is reduced,
    and (with ``merge``) a round identical to the previous one extends its repeat count."""

    def __init__(self, nranks: int) -> None:
        self.nranks = nranks
        self.list: list[Phase] = []

    def add(self, src: np.ndarray, dst: np.ndarray, elems: np.ndarray, reduced: np.ndarray | None,
            repeat: int = 1, merge: bool = True, channel: np.ndarray | None = None,
            by: int | np.ndarray | None = None, after: np.ndarray | None = None) -> None:
        """``by``: which end of the messages does the copying (traffic.SENDER / RECEIVER, for every message
        or per message: one-sided steps; None: both, two-sided sends). ``after``: per message, the channel
        that handed its chunk over (-1: none; Phase.after)."""
        if reduced is not None and not reduced.any():
            reduced = None
        if src.size == 0 and reduced is None:
            return
        if channel is not None and not channel.any():
            channel = None
        if by is not None:
            by = np.broadcast_to(np.asarray(by, dtype=np.int64), src.shape).copy()
            by = by if by.any() else None
        if after is not None and not (after >= 0).any():
            after = None
        ph = Phase(src, dst, elems, reduced, repeat, channel, after=after, by=by)
        if merge and self.list:
            last = self.list[-1]
            if last.same_as(ph):
                self.list[-1] = last.with_repeat(last.repeat + repeat)
                return
        self.list.append(ph)

    def traffic(self, collective: str, algorithm: str, count: int) -> Traffic:
        return Traffic(collective, algorithm, self.nranks, count, tuple(self.list))


def _ring(p: int) -> np.ndarray:
    return np.arange(p, dtype=np.int64)[:, None]


def _orders(p: int, channels: int, local_size: int | None, exits: tuple[int, ...] | None) -> np.ndarray:
    """(p, C) array: members[i, c] is member i of channel c's ring (:func:`ring_orders`)."""
    return np.array(ring_orders(p, channels, local_size, exits), dtype=np.int64).reshape(-1, p).T.copy()


def _channel_sizes(n: int, channels: int) -> np.ndarray:
    if int(channels) < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    return split_sizes(n, int(channels))


@register_traffic("all_reduce", "ring")
def all_reduce_ring_traffic(nranks: int, count: int, root: int = 0, channels: int = 1,
                            local_size: int | None = None, exits: tuple[int, ...] | None = None) -> Traffic:
    """Traffic of :func:`all_reduce_ring`: p - 1 reduce-scatter rounds, then p - 1 all-gather rounds
    (every channel's ring in the same rounds, each over its slice)."""
    p = nranks
    out = _Phases(p)
    cs = _channel_sizes(count, channels)
    if p > 1 and count > 0:
        sizes = np.stack([split_sizes(int(n), p) for n in cs])
        rings = _Rings(_orders(p, cs.size, local_size, exits), sizes, p, channels=True)
        rings.phases(0, True, out)   # round t: member i sends chunk (i - t), reduces chunk (i - t - 1)
        rings.phases(1, False, out)  # round t: member i sends chunk (i + 1 - t), stores chunk (i - t)
    return out.traffic("all_reduce", "ring", count)


def _block_rings(p: int, n: int, channels: int, local_size: int | None, exits: tuple[int, ...] | None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(src, dst, elems, channel) of one round of the block rings (all_gather, reduce_scatter): member i
    of channel c sends its channel's slice of one block to member i + 1."""
    cs = _channel_sizes(n, channels)
    members = _orders(p, cs.size, local_size, exits)
    src = members.reshape(-1)
    dst = np.roll(members, -1, axis=0).reshape(-1)
    el = np.tile(cs, p)
    ch = np.tile(np.arange(cs.size, dtype=np.int64), p)
    keep = el > 0
    return src[keep], dst[keep], el[keep], (ch[keep] if cs.size > 1 else None)


@register_traffic("all_gather", "ring")
def all_gather_ring_traffic(nranks: int, count: int, root: int = 0, channels: int = 1,
                            local_size: int | None = None, exits: tuple[int, ...] | None = None) -> Traffic:
    """Traffic of :func:`all_gather_ring`: p - 1 identical rounds of one block per rank (per channel, its
    slice of the block)."""
    p = nranks
    out = _Phases(p)
    if p > 1 and count > 0:
        src, dst, el, ch = _block_rings(p, count, channels, local_size, exits)
        out.add(src, dst, el, None, repeat=p - 1, channel=ch)
    return out.traffic("all_gather", "ring", count)


@register_traffic("reduce_scatter", "ring")
def reduce_scatter_ring_traffic(nranks: int, count: int, root: int = 0, channels: int = 1,
                                local_size: int | None = None, exits: tuple[int, ...] | None = None) -> Traffic:
    """Traffic of :func:`reduce_scatter_ring`: p - 1 identical rounds, each rank sends and reduces a block."""
    p = nranks
    out = _Phases(p)
    if p > 1 and count > 0:
        src, dst, el, ch = _block_rings(p, count, channels, local_size, exits)
        out.add(src, dst, el, np.full(p, count, dtype=np.int64), repeat=p - 1, channel=ch)
    return out.traffic("reduce_scatter", "ring", count)


@register_traffic("broadcast", "ring")
def broadcast_ring_traffic(nranks: int, count: int, root: int = 0, segments: int | None = None, channels: int = 1,
                           local_size: int | None = None, exits: tuple[int, ...] | None = None) -> Traffic:
    """Traffic of :func:`broadcast_ring`: link i of channel c's chain (its ring from the root) carries
    the channel's segment s in round s + i - 1."""
    p, n = nranks, count
    out = _Phases(p)
    cs = _channel_sizes(n, channels)
    if p == 1 or n == 0:
        return out.traffic("broadcast", "ring", n)
    orders = ring_orders(p, cs.size, local_size, exits)
    chains, segs = [], []
    for c, cn in enumerate(cs.tolist()):
        if cn == 0:
            continue
        ring = orders[c]
        at = ring.index(root)
        chains.append((c, np.array(ring[at:] + ring[:at], dtype=np.int64)))
        segs.append(split_sizes(cn, broadcast_segments(p, cn, segments)))
    nrounds = max(sg.size for sg in segs) + p - 2
    multi = cs.size > 1
    for k in range(nrounds):
        src, dst, el, ch = [], [], [], []
        for (c, chain), seg in zip(chains, segs):
            S = seg.size
            i = np.arange(max(1, k - S + 2), min(p - 1, k + 1) + 1, dtype=np.int64)
            e = seg[k - i + 1]
            keep = e > 0
            i, e = i[keep], e[keep]
            src.append(chain[i - 1])
            dst.append(chain[i])
            el.append(e)
            ch.append(np.full(i.size, c, dtype=np.int64))
        out.add(np.concatenate(src), np.concatenate(dst), np.concatenate(el), None,
                channel=np.concatenate(ch) if multi else None)
    return out.traffic("broadcast", "ring", n)
