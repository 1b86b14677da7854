"""Bruck's algorithms: ceil(lg p) rounds for any p, powers of two or not. In round k every rank
sends to the rank 2^k below it and receives from the rank 2^k above it (mod p).

* all_gather: after round k a rank holds the 2^(k+1) blocks of the ranks just above it. The
  classic formulation keeps them in a rotated temporary and un-rotates at the end; here every
  block is addressed by its absolute index in the output, which makes the rotation unnecessary
  (a message whose block range wraps past rank p-1 is sent as two chunks, same bytes, same round).
* all_to_all: position i of a rank's rotated send array holds the block for rank (rank + i) % p;
  in round k the positions with bit k set move 2^k ranks up. Those positions are not contiguous,
  so they are packed into a send area before the round and unpacked after it (the classic
  pack/unpack), one message per rank per round. Blocks are packed straight from the input and
  unpacked straight into their final place in the output, so the initial and final rotations of
  the textbook algorithm cost nothing extra.
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .ring import _Phases
from .schedule import Builder, Chunk, Schedule, inp, out, scr
from .traffic import Traffic, register_traffic


def ceil_log2(p: int) -> int:
    return (p - 1).bit_length()


def _wrapped(buffer: str, first: int, nblocks: int, p: int, n: int) -> list[Chunk]:
    """Blocks first, first+1, ..., first+nblocks-1 (mod p) of a p-block buffer as at most two chunks."""
    first %= p
    head = min(nblocks, p - first)
    chunks = [Chunk(buffer, first * n, head * n)]
    if nblocks > head:
        chunks.append(Chunk(buffer, 0, (nblocks - head) * n))
    return chunks


@register("all_gather", "bruck")
def all_gather_bruck(nranks: int, count: int, root: int = 0) -> Schedule:
    """ceil(lg p) rounds for any p; each rank sends (p-1)n (2^k blocks in round k, the rest in the last)."""
    p, n = nranks, count
    b = Builder("all_gather", "bruck", p, n, root)
    for r in range(p):
        b.copy(0, r, inp(0, n), out(r * n, n))
    k, d = 0, 1
    while d < p:
        cnt = min(d, p - d)  # blocks moved this round
        for r in range(p):
            below = (r - d) % p
            # rank r holds blocks r..r+d-1 and gives the first cnt of them to the rank d below;
            # the receiver holds below..below+d-1 and needs exactly below+d..below+d+cnt-1 = these
            if k == 0:
                srcs = [inp(0, n)]  # own block; the copy into output lands after this round's sends
            else:
                srcs = _wrapped("output", r, cnt, p, n)
            dsts = _wrapped("output", r, cnt, p, n)
            for s, t in zip(srcs, dsts):
                b.transfer(k, r, below, s, t)
        k += 1
        d *= 2
    b.meta["rounds"] = k
    return b.build()


@register("all_to_all", "bruck")
def all_to_all_bruck(nranks: int, count: int, root: int = 0) -> Schedule:
    """ceil(lg p) rounds for any p; each rank sends about (n p/2) lg p, one message per round.

    Round k moves the blocks whose rotated index has bit k set, packed through scratch."""
    p, n = nranks, count
    nrounds = ceil_log2(p)
    moves = [[i for i in range(1, p) if i >> k & 1] for k in range(nrounds)]  # positions per round
    width = max((len(m) for m in moves), default=0)
    # scratch: [0, pn) parked positions (slot i), then the send area, then the receive area
    send_base, recv_base = p * n, p * n + width * n
    b = Builder("all_to_all", "bruck", p, n, root, scratch=p * n + 2 * width * n)

    def where(r: int, i: int, done: int) -> Chunk:
        """Where position i of rank r lives after its first `done` moves (r = the rank holding it)."""
        if done == 0:
            return inp(((r + i) % p) * n, n)  # still at its source: the block for rank r+i
        if done == bin(i).count("1"):
            return out(((r - i) % p) * n, n)  # arrived: it came from rank r-i
        return scr(i * n, n)

    def send_slot(k: int, i: int) -> Chunk:
        return scr(send_base + moves[k].index(i) * n, n)

    for r in range(p):
        b.copy(0, r, inp(r * n, n), out(r * n, n))  # position 0 never moves
        if nrounds:
            for i in moves[0]:
                b.copy(0, r, where(r, i, 0), send_slot(0, i))  # pack round 0
    for k in range(nrounds):
        d, rnd = 1 << k, k + 1
        size = len(moves[k]) * n
        low = (1 << (k + 1)) - 1  # bits done after this round
        for r in range(p):
            b.transfer(rnd, r, (r + d) % p, scr(send_base, size), scr(recv_base, size))
            # unpack: straight into the next send area, the output, or a parking slot
            for idx, i in enumerate(moves[k]):
                got = scr(recv_base + idx * n, n)
                if k + 1 < nrounds and i >> (k + 1) & 1:
                    b.copy(rnd, r, got, send_slot(k + 1, i))
                else:
                    b.copy(rnd, r, got, where(r, i, bin(i & low).count("1")))
            # pack the positions of the next round that did not just arrive
            if k + 1 < nrounds:
                for i in moves[k + 1]:
                    if not i >> k & 1:
                        b.copy(rnd, r, where(r, i, bin(i & low).count("1")), send_slot(k + 1, i))
    b.meta["rounds"] = nrounds
    return b.build()


# ---- vectorised traffic for large rank counts ---------------------------------------------------------


@register_traffic("all_gather", "bruck")
def all_gather_bruck_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_gather_bruck`: in round k every rank sends min(2^k, p - 2^k) blocks to the rank
    2^k below it."""
    p, n = nranks, count
    out_ = _Phases(p)
    if n > 0:
        r = np.arange(p, dtype=np.int64)
        d = 1
        while d < p:
            out_.add(r, (r - d) % p, np.full(p, min(d, p - d) * n, dtype=np.int64), None)
            d *= 2
    return out_.traffic("all_gather", "bruck", n)


@register_traffic("all_to_all", "bruck")
def all_to_all_bruck_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_to_all_bruck`: in round k every rank sends the blocks whose rotated index
    (1..p-1) has bit k set, packed into one message, to the rank 2^k above it."""
    p, n = nranks, count
    out_ = _Phases(p)
    if n > 0:
        r = np.arange(p, dtype=np.int64)
        for k in range(ceil_log2(p)):
            # indices i in [1, p) with bit k set: full periods of 2^(k+1) plus the tail
            period, d = 1 << (k + 1), 1 << k
            moved = (p // period) * d + max(0, p % period - d)
            if moved:
                out_.add(r, (r + d) % p, np.full(p, moved * n, dtype=np.int64), None)
    return out_.traffic("all_to_all", "bruck", n)
