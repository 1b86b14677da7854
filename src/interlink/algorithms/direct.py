"""Direct (one-shot) algorithms: every message goes straight from its source to its destination in a
single communication round. Lowest latency; bandwidth and fan-in grow with p, so for small messages.

Reducing variants receive every contribution into scratch and then reduce them locally in rank
order 0, 1, ..., p-1, so that every rank (and every run) combines the inputs in the same order and
floating-point results are identical bit for bit across ranks.
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .ring import _Phases, split_sizes
from .schedule import Builder, Chunk, Schedule, inp, out, scr, split
from .traffic import Traffic, register_traffic


def _slot(j: int, me: int) -> int:
    """Scratch slot of the contribution of rank j on rank ``me`` (which has no slot for itself)."""
    return j if j < me else j - 1


def _reduce_in_rank_order(b: Builder, rnd: int, me: int, p: int, own: Chunk, n: int, dst: Chunk) -> None:
    """dst = x_0 op x_1 op ... op x_{p-1}, where x_me is ``own`` and x_j (j != me) is in scratch."""
    def part(j: int) -> Chunk:
        return own if j == me else scr(_slot(j, me) * n, n)

    b.copy(rnd, me, part(0), dst)
    for j in range(1, p):
        b.reduce(rnd, me, part(j), dst)


@register("all_reduce", "direct")
def all_reduce_direct(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 round; each rank sends its whole buffer to every other rank: (p-1)*count sent per rank."""
    p, n = nranks, count
    b = Builder("all_reduce", "direct", p, n, root, scratch=(p - 1) * n)
    for r in range(p):
        for j in range(p):
            if j != r:
                b.transfer(0, r, j, inp(0, n), scr(_slot(r, j) * n, n))
    for r in range(p):
        _reduce_in_rank_order(b, 0, r, p, inp(0, n), n, out(0, n))
    return b.build()


@register("all_reduce", "twoshot")
def all_reduce_twoshot(nranks: int, count: int, root: int = 0) -> Schedule:
    """2 rounds; a direct reduce-scatter, then a direct all-gather: each rank sends 2(p-1)/p of the buffer.

    Block r (of p, sizes differing by at most one) is reduced by its owner, rank r: its peers' blocks
    arrive in scratch in round 0 and are reduced onto its own, in rank order after its own (so it is safe
    in place); round 1 sends the reduced block to every other rank. Every rank ends with the owner's
    bits. The large-message one-host algorithm (vLLM/TensorRT-LLM "two-shot"; the device executor's
    choice for all_reduce: 2 rounds where the ring takes 2(p-1))."""
    p, n = nranks, count
    blocks = split(n, p)
    m = blocks[0][1] if blocks else 0
    b = Builder("all_reduce", "twoshot", p, n, root, scratch=(p - 1) * m)
    for r in range(p):
        for j in range(p):
            if j != r:
                jo, jn = blocks[j]
                b.transfer(0, r, j, inp(jo, jn), scr(_slot(r, j) * m, jn))
    for r in range(p):
        ro, rn = blocks[r]
        dst = out(ro, rn)
        b.copy(0, r, inp(ro, rn), dst)
        for j in range(p):
            if j != r:
                b.reduce(0, r, scr(_slot(j, r) * m, rn), dst)
    for r in range(p):
        ro, rn = blocks[r]
        for j in range(p):
            if j != r:
                b.transfer(1, r, j, out(ro, rn), out(ro, rn))
    return b.build()


@register("broadcast", "direct")
def broadcast_direct(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 round; the root sends the buffer to each other rank: (p-1)*count from the root."""
    p, n = nranks, count
    b = Builder("broadcast", "direct", p, n, root)
    b.copy(0, root, inp(0, n), out(0, n))
    for j in range(p):
        if j != root:
            b.transfer(0, root, j, inp(0, n), out(0, n))
    return b.build()


@register("reduce", "direct")
def reduce_direct(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 round; every non-root rank sends its buffer to the root, which receives (p-1)*count."""
    p, n = nranks, count
    b = Builder("reduce", "direct", p, n, root, scratch=(p - 1) * n)
    for j in range(p):
        if j != root:
            b.transfer(0, j, root, inp(0, n), scr(_slot(j, root) * n, n))
    _reduce_in_rank_order(b, 0, root, p, inp(0, n), n, out(0, n))
    return b.build()


@register("all_gather", "direct")
def all_gather_direct(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 round; each rank sends its block to every other rank: (p-1)*count sent per rank."""
    p, n = nranks, count
    b = Builder("all_gather", "direct", p, n, root)
    for r in range(p):
        b.copy(0, r, inp(0, n), out(r * n, n))
        for j in range(p):
            if j != r:
                b.transfer(0, r, j, inp(0, n), out(r * n, n))
    return b.build()


@register("reduce_scatter", "direct")
def reduce_scatter_direct(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 round; each rank sends block j of its input to rank j: (p-1)*count sent per rank."""
    p, n = nranks, count
    b = Builder("reduce_scatter", "direct", p, n, root, scratch=(p - 1) * n)
    for r in range(p):
        for j in range(p):
            if j != r:
                b.transfer(0, r, j, inp(j * n, n), scr(_slot(r, j) * n, n))
    for r in range(p):
        _reduce_in_rank_order(b, 0, r, p, inp(r * n, n), n, out(0, n))
    return b.build()


@register("gather", "direct")
def gather_direct(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 round; every non-root rank sends its block to the root, which receives (p-1)*count."""
    p, n = nranks, count
    b = Builder("gather", "direct", p, n, root)
    b.copy(0, root, inp(0, n), out(root * n, n))
    for j in range(p):
        if j != root:
            b.transfer(0, j, root, inp(0, n), out(j * n, n))
    return b.build()


@register("scatter", "direct")
def scatter_direct(nranks: int, count: int, root: int = 0) -> Schedule:
    """1 round; the root sends block j of its input to rank j: (p-1)*count from the root."""
    p, n = nranks, count
    b = Builder("scatter", "direct", p, n, root)
    b.copy(0, root, inp(root * n, n), out(0, n))
    for j in range(p):
        if j != root:
            b.transfer(0, root, j, inp(j * n, n), out(0, n))
    return b.build()


# ---- vectorised traffic for large rank counts ---------------------------------------------------------
# One round each (two for twoshot): every pair (r, j), r != j, as numpy arrays. Direct algorithms send
# p(p - 1) messages per round, so their traffic grows with the square of the rank count (the model leaves
# them out where that is too many messages to price: ``messages`` below).


def _pairs(p: int) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every ordered pair of distinct ranks, source-major."""
    r = np.repeat(np.arange(p, dtype=np.int64), p - 1)
    k = np.tile(np.arange(1, p, dtype=np.int64), p)
    return r, (r + k) % p


def _to_root(p: int, root: int) -> np.ndarray:
    """The ranks other than root."""
    j = np.arange(p, dtype=np.int64)
    return j[j != root]


def _quadratic(p: int, n: int = 0, **_: object) -> int:
    return p * max(p - 1, 0)


def _linear(p: int, n: int = 0, **_: object) -> int:
    return max(p - 1, 0)


@register_traffic("all_reduce", "direct", messages=_quadratic)
def all_reduce_direct_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_reduce_direct`: every pair sends n; every rank reduces (p - 1)n."""
    p, n = nranks, count
    out = _Phases(p)
    if n > 0 and p > 1:
        src, dst = _pairs(p)
        out.add(src, dst, np.full(src.size, n, dtype=np.int64), np.full(p, (p - 1) * n, dtype=np.int64))
    return out.traffic("all_reduce", "direct", n)


@register_traffic("all_reduce", "twoshot", messages=lambda p, n=0, **_: 2 * _quadratic(p))
def all_reduce_twoshot_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_reduce_twoshot`: round 0, r sends block j to j (reduced there); round 1, r
    sends its reduced block r to every other rank."""
    p, n = nranks, count
    out = _Phases(p)
    if n > 0 and p > 1:
        blk = split_sizes(n, p)
        src, dst = _pairs(p)
        keep = blk[dst] > 0
        out.add(src[keep], dst[keep], blk[dst][keep], (p - 1) * blk)
        keep = blk[src] > 0
        out.add(src[keep], dst[keep], blk[src][keep], None)
    return out.traffic("all_reduce", "twoshot", n)


@register_traffic("broadcast", "direct", messages=_linear)
def broadcast_direct_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`broadcast_direct`: the root sends n to every other rank."""
    p, n = nranks, count
    out = _Phases(p)
    if n > 0 and p > 1:
        dst = _to_root(p, root)
        out.add(np.full(dst.size, root, dtype=np.int64), dst, np.full(dst.size, n, dtype=np.int64), None)
    return out.traffic("broadcast", "direct", n)


@register_traffic("reduce", "direct", messages=_linear)
def reduce_direct_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`reduce_direct`: every other rank sends n to the root, which reduces (p - 1)n."""
    p, n = nranks, count
    out = _Phases(p)
    if n > 0 and p > 1:
        src = _to_root(p, root)
        red = np.zeros(p, dtype=np.int64)
        red[root] = (p - 1) * n
        out.add(src, np.full(src.size, root, dtype=np.int64), np.full(src.size, n, dtype=np.int64), red)
    return out.traffic("reduce", "direct", n)


@register_traffic("all_gather", "direct", messages=_quadratic)
def all_gather_direct_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_gather_direct`: every pair sends one block of n."""
    p, n = nranks, count
    out = _Phases(p)
    if n > 0 and p > 1:
        src, dst = _pairs(p)
        out.add(src, dst, np.full(src.size, n, dtype=np.int64), None)
    return out.traffic("all_gather", "direct", n)


@register_traffic("reduce_scatter", "direct", messages=_quadratic)
def reduce_scatter_direct_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`reduce_scatter_direct`: every pair sends one block of n; each rank reduces (p - 1)n."""
    p, n = nranks, count
    out = _Phases(p)
    if n > 0 and p > 1:
        src, dst = _pairs(p)
        out.add(src, dst, np.full(src.size, n, dtype=np.int64), np.full(p, (p - 1) * n, dtype=np.int64))
    return out.traffic("reduce_scatter", "direct", n)


@register_traffic("gather", "direct", messages=_linear)
def gather_direct_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`gather_direct`: every other rank sends its block of n to the root."""
    p, n = nranks, count
    out = _Phases(p)
    if n > 0 and p > 1:
        src = _to_root(p, root)
        out.add(src, np.full(src.size, root, dtype=np.int64), np.full(src.size, n, dtype=np.int64), None)
    return out.traffic("gather", "direct", n)


@register_traffic("scatter", "direct", messages=_linear)
def scatter_direct_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`scatter_direct`: the root sends block j (n) to rank j."""
    p, n = nranks, count
    out = _Phases(p)
    if n > 0 and p > 1:
        dst = _to_root(p, root)
        out.add(np.full(dst.size, root, dtype=np.int64), dst, np.full(dst.size, n, dtype=np.int64), None)
    return out.traffic("scatter", "direct", n)
