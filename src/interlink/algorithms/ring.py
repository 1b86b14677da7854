"""Ring algorithms: every rank talks only to its neighbours (rank+1 sends, rank-1 receives).

Bandwidth-optimal for large messages; latency grows linearly with the number of ranks.
"""

from __future__ import annotations

from .registry import register
from .schedule import Builder, Schedule, inp, out, scr, split


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
