"""Ring algorithms: every rank talks only to its neighbours (rank+1 sends, rank-1 receives).

Bandwidth-optimal for large messages; latency grows linearly with the number of ranks.
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .schedule import Builder, Schedule, inp, out, scr, split
from .traffic import Phase, Traffic, register_traffic


@register("all_reduce", "ring")
def all_reduce_ring(nranks: int, count: int, root: int = 0) -> Schedule:
    """2(p-1) rounds; each rank sends 2(p-1)/p of the buffer (reduce-scatter then all-gather)."""
    p = nranks
    b = Builder("all_reduce", "ring", p, count, root)
    for r in range(p):
        b.copy(0, r, inp(0, count), out(0, count))
    if p == 1:
        return b.build()
    chunks = split(count, p)
    for t in range(p - 1):  # reduce-scatter
        for r in range(p):
            right, left = (r + 1) % p, (r - 1) % p
            so, sn = chunks[(r - t) % p]
            b.send(1 + t, r, right, out(so, sn))
            ro, rn = chunks[(r - t - 1) % p]
            b.recv(1 + t, r, left, out(ro, rn), reduce=True)
    for t in range(p - 1):  # all-gather: rank r starts with chunk (r+1)%p fully reduced
        for r in range(p):
            right, left = (r + 1) % p, (r - 1) % p
            so, sn = chunks[(r + 1 - t) % p]
            b.send(p + t, r, right, out(so, sn))
            ro, rn = chunks[(r - t) % p]
            b.recv(p + t, r, left, out(ro, rn))
    return b.build()


@register("all_gather", "ring")
def all_gather_ring(nranks: int, count: int, root: int = 0) -> Schedule:
    """p-1 rounds; each rank sends (p-1)/p of the output buffer."""
    p, n = nranks, count
    b = Builder("all_gather", "ring", p, n, root)
    for r in range(p):
        b.copy(0, r, inp(0, n), out(r * n, n))
    for t in range(p - 1):
        for r in range(p):
            right, left = (r + 1) % p, (r - 1) % p
            sb = (r - t) % p
            src = inp(0, n) if t == 0 else out(sb * n, n)
            b.send(t, r, right, src)
            rb = (r - t - 1) % p
            b.recv(t, r, left, out(rb * n, n))
    return b.build()


@register("reduce_scatter", "ring")
def reduce_scatter_ring(nranks: int, count: int, root: int = 0) -> Schedule:
    """p-1 rounds; each rank sends (p-1)/p of the input buffer, reduces as much."""
    p, n = nranks, count
    b = Builder("reduce_scatter", "ring", p, n, root, scratch=n * p)
    # the partial sum of block j lives in scratch[j], except the rank's own block, which is
    # accumulated straight into the output
    def acc(r: int, j: int):
        return out(0, n) if j == r else scr(j * n, n)

    for r in range(p):
        for j in range(p):
            b.copy(0, r, inp(j * n, n), acc(r, j))
    for t in range(p - 1):
        for r in range(p):
            right, left = (r + 1) % p, (r - 1) % p
            sb = (r - t - 1) % p
            b.send(1 + t, r, right, acc(r, sb))
            rb = (r - t - 2) % p
            b.recv(1 + t, r, left, acc(r, rb), reduce=True)
    return b.build()


@register("broadcast", "ring", params=("segments",))
def broadcast_ring(nranks: int, count: int, root: int = 0, segments: int | None = None) -> Schedule:
    """Pipelined chain from the root: S + p - 2 rounds for S segments; each rank sends the buffer once
    (the last rank of the chain sends nothing)."""
    p, n = nranks, count
    b = Builder("broadcast", "ring", p, n, root)
    b.copy(0, root, inp(0, n), out(0, n))
    if p == 1 or n == 0:
        return b.build()
    if segments is None:
        segments = 1 if p == 2 else min(n, 8)
    segs = split(n, max(1, min(segments, n)))
    b.meta["segments"] = len(segs)
    chain = [(root + i) % p for i in range(p)]
    for i in range(1, p):
        src, dst = chain[i - 1], chain[i]
        for s, (so, sn) in enumerate(segs):
            rnd = s + i - 1
            b.send(rnd, src, dst, inp(so, sn) if src == root else out(so, sn))
            b.recv(rnd, dst, src, out(so, sn))
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

    def __init__(self, members: np.ndarray, sizes: np.ndarray, nranks: int) -> None:
        m, R = members.shape
        self.m, self.R, self.nranks = m, R, nranks
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
        if R == 1 and self.any_zero:
            z = int(nz[0].sum())
            if bool(nz[0, :z].all()):
                self.prefix = z
                self.src2 = np.concatenate([self.src, self.src])
                self.dst2 = np.concatenate([self.dst, self.dst])
                self.sizes0 = sizes[0]

    def _window(self, off: int) -> np.ndarray:
        start = (self.m + off) * self.R
        return self.W[start:start + self.m * self.R]

    def round(self, t: int, s0: int, reduce: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """(src, dst, elems, reduced per rank or None) of round t."""
        el = self._window(s0 - t)
        red = None
        if reduce:
            rv = self._window(s0 - t - 1)
            red = rv if self.identity else np.bincount(self.src, weights=rv, minlength=self.nranks).astype(np.int64)
        if not self.any_zero:
            return self.src, self.dst, el, red
        if self.prefix >= 0:
            a = (t - s0) % self.m
            z = self.prefix
            return self.src2[a:a + z], self.dst2[a:a + z], self.sizes0[:z], red
        keep = el > 0
        return self.src[keep], self.dst[keep], el[keep], red

    def phases(self, s0: int, reduce: bool, out: "_Phases") -> None:
        """Append the m - 1 rounds (one phase with a repeat count when they are identical)."""
        if self.m < 2:
            return
        if self.const:
            out.add(*self.round(0, s0, reduce), repeat=self.m - 1, merge=False)
            return
        for t in range(self.m - 1):
            out.add(*self.round(t, s0, reduce), merge=False)


class _Phases:
    """Collects the rounds of a Traffic as :func:`~interlink.algorithms.traffic.from_schedule` would:
    rounds with no message and no reduction are skipped, ``reduced`` is None when nothing is reduced,
    and (with ``merge``) a round identical to the previous one extends its repeat count."""

    def __init__(self, nranks: int) -> None:
        self.nranks = nranks
        self.list: list[Phase] = []

    def add(self, src: np.ndarray, dst: np.ndarray, elems: np.ndarray, reduced: np.ndarray | None,
            repeat: int = 1, merge: bool = True) -> None:
        if reduced is not None and not reduced.any():
            reduced = None
        if src.size == 0 and reduced is None:
            return
        ph = Phase(src, dst, elems, reduced, repeat)
        if merge and self.list:
            last = self.list[-1]
            if last.same_as(ph):
                self.list[-1] = Phase(last.src, last.dst, last.elems, last.reduced, last.repeat + repeat)
                return
        self.list.append(ph)

    def traffic(self, collective: str, algorithm: str, count: int) -> Traffic:
        return Traffic(collective, algorithm, self.nranks, count, tuple(self.list))


def _ring(p: int) -> np.ndarray:
    return np.arange(p, dtype=np.int64)[:, None]


@register_traffic("all_reduce", "ring")
def all_reduce_ring_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_reduce_ring`: p - 1 reduce-scatter rounds, then p - 1 all-gather rounds."""
    p = nranks
    out = _Phases(p)
    if p > 1 and count > 0:
        rings = _Rings(_ring(p), split_sizes(count, p)[None, :], p)
        rings.phases(0, True, out)   # round t: rank r sends chunk (r - t), reduces chunk (r - t - 1)
        rings.phases(1, False, out)  # round t: rank r sends chunk (r + 1 - t), stores chunk (r - t)
    return out.traffic("all_reduce", "ring", count)


@register_traffic("all_gather", "ring")
def all_gather_ring_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_gather_ring`: p - 1 identical rounds of one block per rank."""
    p = nranks
    out = _Phases(p)
    if p > 1 and count > 0:
        r = np.arange(p, dtype=np.int64)
        out.add(r, (r + 1) % p, np.full(p, count, dtype=np.int64), None, repeat=p - 1)
    return out.traffic("all_gather", "ring", count)


@register_traffic("reduce_scatter", "ring")
def reduce_scatter_ring_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`reduce_scatter_ring`: p - 1 identical rounds, each rank sends and reduces a block."""
    p = nranks
    out = _Phases(p)
    if p > 1 and count > 0:
        r = np.arange(p, dtype=np.int64)
        blk = np.full(p, count, dtype=np.int64)
        out.add(r, (r + 1) % p, blk, blk.copy(), repeat=p - 1)
    return out.traffic("reduce_scatter", "ring", count)


@register_traffic("broadcast", "ring")
def broadcast_ring_traffic(nranks: int, count: int, root: int = 0, segments: int | None = None) -> Traffic:
    """Traffic of :func:`broadcast_ring`: link i of the chain (ranks root+i-1 -> root+i) carries segment
    s in round s + i - 1."""
    p, n = nranks, count
    out = _Phases(p)
    if p == 1 or n == 0:
        return out.traffic("broadcast", "ring", n)
    if segments is None:
        segments = 1 if p == 2 else min(n, 8)
    seg = split_sizes(n, max(1, min(segments, n)))
    S = seg.size
    for k in range(S + p - 2):
        i = np.arange(max(1, k - S + 2), min(p - 1, k + 1) + 1, dtype=np.int64)
        el = seg[k - i + 1]
        keep = el > 0
        i, el = i[keep], el[keep]
        out.add((root + i - 1) % p, (root + i) % p, el, None)
    return out.traffic("broadcast", "ring", n)
