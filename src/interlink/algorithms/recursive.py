"""Recursive doubling and halving: in round k a rank talks to the rank whose (new) number differs in
one bit, so every collective finishes in lg p rounds.

Non-powers of two use the standard MPICH fold: with p' the largest power of two <= p and r = p - p',
the first 2r ranks pair up (2i, 2i+1); the even rank of each pair hands its data to the odd one in an
extra first round and sits out, the other p' ranks (new ranks 0..p'-1) run the power-of-two core,
and in an extra last round each odd rank of a pair hands the result to its even partner. The fold
costs 2 rounds; an all-reduce pays the whole buffer on each of them.
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .ring import _Phases, split_sizes
from .schedule import Builder, Schedule, inp, out, scr, split
from .traffic import Traffic, register_traffic


# ---- the MPICH fold ---------------------------------------------------------------------------


def fold(p: int) -> tuple[int, int]:
    """(p', r): p' the largest power of two <= p, r = p - p' ranks folded away."""
    pp = 1 << (p.bit_length() - 1)
    return pp, p - pp


def new_rank(rank: int, extra: int) -> int:
    """The core rank of ``rank``, or -1 for the even rank of a folded pair (it sits out)."""
    if rank < 2 * extra:
        return rank // 2 if rank % 2 else -1
    return rank - extra


def old_rank(j: int, extra: int) -> int:
    """The real rank of core rank j."""
    return 2 * j + 1 if j < extra else j + extra


def _core_blocks(extra: int, pp: int) -> list[int]:
    """Block boundaries of the core ranks: core rank j stands for real ranks
    [start[j], start[j+1]) (two ranks for the odd rank of a folded pair, one otherwise)."""
    return [2 * j if j < extra else j + extra for j in range(pp)] + [pp + extra]


def _piece_range(pieces: list[tuple[int, int]], lo: int, hi: int) -> tuple[int, int]:
    """(offset, count) of the contiguous pieces [lo, hi)."""
    start = pieces[lo][0]
    end = pieces[hi - 1][0] + pieces[hi - 1][1]
    return start, end - start


def _fold_in_all_reduce(b: Builder, p: int, n: int, extra: int) -> None:
    """Round 0: the result lives in output. Folded pairs: the even rank sends its input, the odd
    one stores it and reduces its own input in; everyone else copies its input."""
    for rank in range(p):
        if rank < 2 * extra:
            if rank % 2 == 0:
                b.transfer(0, rank, rank + 1, inp(0, n), out(0, n))
                b.reduce(0, rank + 1, inp(0, n), out(0, n))
        else:
            b.copy(0, rank, inp(0, n), out(0, n))


def _fold_out_all_reduce(b: Builder, rnd: int, n: int, extra: int) -> None:
    for i in range(extra):
        b.transfer(rnd, 2 * i + 1, 2 * i, out(0, n), out(0, n))


# ---- all_reduce --------------------------------------------------------------------------------


@register("all_reduce", "recursive_doubling")
def all_reduce_recursive_doubling(nranks: int, count: int, root: int = 0) -> Schedule:
    """lg p rounds (+2 if p is not a power of two); each rank sends the whole buffer every round: n lg p."""
    p, n = nranks, count
    b = Builder("all_reduce", "recursive_doubling", p, n, root)
    pp, extra = fold(p)
    b.meta["core_ranks"] = pp
    _fold_in_all_reduce(b, p, n, extra)
    rnd, mask = 1, 1
    while mask < pp:
        for j in range(pp):
            me, peer = old_rank(j, extra), old_rank(j ^ mask, extra)
            # pairwise exchange: the send reads the round-start snapshot, the receive reduces in
            b.send(rnd, me, peer, out(0, n))
            b.recv(rnd, me, peer, out(0, n), reduce=True)
        rnd += 1
        mask <<= 1
    _fold_out_all_reduce(b, rnd, n, extra)
    return b.build()


@register("all_reduce", "rabenseifner")
def all_reduce_rabenseifner(nranks: int, count: int, root: int = 0) -> Schedule:
    """2 lg p rounds (+2 if p is not a power of two); each rank sends 2n(p-1)/p.

    Recursive-halving reduce-scatter (nearest partner, largest message first) then
    recursive-doubling all-gather on p' near-equal pieces of the vector; with the fold, the even
    rank of a pair sends n once and the odd one n more than the core."""
    p, n = nranks, count
    b = Builder("all_reduce", "rabenseifner", p, n, root)
    pp, extra = fold(p)
    b.meta["core_ranks"] = pp
    _fold_in_all_reduce(b, p, n, extra)
    pieces = split(n, pp)
    # reduce-scatter by recursive halving, nearest partner (largest message) first: window[j] is
    # the range of pieces core rank j is still responsible for
    window = [(0, pp) for _ in range(pp)]
    history: list[list[tuple[int, int]]] = []
    rnd, mask = 1, 1
    while mask < pp:
        history.append(list(window))
        new = []
        for j in range(pp):
            lo, hi = window[j]
            mid = (lo + hi) // 2
            keep, give = ((mid, hi), (lo, mid)) if j & mask else ((lo, mid), (mid, hi))
            me, peer = old_rank(j, extra), old_rank(j ^ mask, extra)
            so, sn = _piece_range(pieces, *give)
            ko, kn = _piece_range(pieces, *keep)
            b.send(rnd, me, peer, out(so, sn))
            b.recv(rnd, me, peer, out(ko, kn), reduce=True)
            new.append(keep)
        window = new
        rnd += 1
        mask <<= 1
    # all-gather by recursive doubling, retracing the halving steps backwards
    for step in range(len(history) - 1, -1, -1):
        mask = 1 << step
        for j in range(pp):
            me, peer = old_rank(j, extra), old_rank(j ^ mask, extra)
            mo, mn = _piece_range(pieces, *window[j])
            po, pn = _piece_range(pieces, *window[j ^ mask])
            b.send(rnd, me, peer, out(mo, mn))
            b.recv(rnd, me, peer, out(po, pn))
        window = history[step]
        rnd += 1
    _fold_out_all_reduce(b, rnd, n, extra)
    return b.build()


# ---- all_gather --------------------------------------------------------------------------------


@register("all_gather", "recursive_doubling")
def all_gather_recursive_doubling(nranks: int, count: int, root: int = 0) -> Schedule:
    """lg p rounds (+2 if p is not a power of two); each rank sends (p-1)n (folded pairs differ).

    Core rank j holds a contiguous run of blocks (two for the odd rank of a folded pair), so every
    message is one contiguous chunk; the even rank of a pair sends 1 block, the odd one p-1 more."""
    p, n = nranks, count
    b = Builder("all_gather", "recursive_doubling", p, n, root)
    pp, extra = fold(p)
    b.meta["core_ranks"] = pp
    start = _core_blocks(extra, pp)  # core rank j holds blocks [start[j], start[j+1])
    for rank in range(p):
        b.copy(0, rank, inp(0, n), out(rank * n, n))
    for i in range(extra):  # fold: the odd rank of a pair also holds its partner's block
        b.transfer(0, 2 * i, 2 * i + 1, inp(0, n), out(2 * i * n, n))
    rnd, mask = 1, 1
    while mask < pp:
        for j in range(pp):
            me, peer = old_rank(j, extra), old_rank(j ^ mask, extra)
            mine = (j // mask) * mask  # aligned window of core ranks whose blocks j holds
            theirs = ((j ^ mask) // mask) * mask
            a0, a1 = start[mine] * n, start[mine + mask] * n
            c0, c1 = start[theirs] * n, start[theirs + mask] * n
            b.send(rnd, me, peer, out(a0, a1 - a0))
            b.recv(rnd, me, peer, out(c0, c1 - c0))
        rnd += 1
        mask <<= 1
    for i in range(extra):  # unfold: everything but the even rank's own block
        src, dst = 2 * i + 1, 2 * i
        b.transfer(rnd, src, dst, out(0, dst * n), out(0, dst * n))
        b.transfer(rnd, src, dst, out((dst + 1) * n, (p - dst - 1) * n), out((dst + 1) * n, (p - dst - 1) * n))
    return b.build()


# ---- reduce_scatter ----------------------------------------------------------------------------


@register("reduce_scatter", "recursive_halving")
def reduce_scatter_recursive_halving(nranks: int, count: int, root: int = 0) -> Schedule:
    """lg p rounds (+2 if p is not a power of two); each rank sends (p-1)n (folded pairs differ).

    Distance halving (p'/2 first) keeps each window a contiguous run of blocks; half the window
    goes each round. The even rank of a folded pair sends its whole input (pn), the odd one n more.
    Partial sums live in scratch (pn)."""
    p, n = nranks, count
    b = Builder("reduce_scatter", "recursive_halving", p, n, root, scratch=n * p)
    if p == 1:
        b.copy(0, 0, inp(0, n), out(0, n))
        return b.build()
    pp, extra = fold(p)
    b.meta["core_ranks"] = pp
    start = _core_blocks(extra, pp)
    # ready[rank]: its partial sums are in scratch (else still only its input)
    ready = [False] * p
    for i in range(extra):  # fold: the even rank's whole input goes to the odd rank
        b.transfer(0, 2 * i, 2 * i + 1, inp(0, n * p), scr(0, n * p))
        b.reduce(0, 2 * i + 1, inp(0, n * p), scr(0, n * p))
        ready[2 * i + 1] = True

    def blocks(lo: int, hi: int) -> tuple[int, int]:
        """(offset, count) of the blocks of core ranks [lo, hi)."""
        return start[lo] * n, (start[hi] - start[lo]) * n

    rnd, mask = 1, pp // 2
    while mask >= 1:  # distance halving keeps every window a contiguous range of blocks
        for j in range(pp):
            me, peer = old_rank(j, extra), old_rank(j ^ mask, extra)
            lo = (j // (2 * mask)) * 2 * mask
            mine, theirs = (lo, lo + mask), (lo + mask, lo + 2 * mask)
            if j & mask:
                mine, theirs = theirs, mine
            ko, kn = blocks(*mine)
            go, gn = blocks(*theirs)
            if ready[me]:
                b.send(rnd, me, peer, scr(go, gn))
                b.recv(rnd, me, peer, scr(ko, kn), reduce=True)
            else:
                b.send(rnd, me, peer, inp(go, gn))
                b.recv(rnd, me, peer, scr(ko, kn))
                b.reduce(rnd, me, inp(ko, kn), scr(ko, kn))
        for j in range(pp):
            ready[old_rank(j, extra)] = True
        if mask == 1:  # each core rank now holds its blocks fully reduced
            for j in range(pp):
                me = old_rank(j, extra)
                b.copy(rnd, me, scr(me * n, n), out(0, n))
        rnd += 1
        mask //= 2
    for i in range(extra):  # unfold: the odd rank also reduced its partner's block
        b.transfer(rnd, 2 * i + 1, 2 * i, scr(2 * i * n, n), out(0, n))
    return b.build()


# ---- vectorised traffic for large rank counts ---------------------------------------------------------
# lg p' core rounds of p' pairs each (+ the fold's rounds of r pairs), as numpy arrays.


def _core(p: int) -> tuple[int, int, np.ndarray]:
    """(p', r, the real rank of every core rank)."""
    pp, extra = fold(p)
    j = np.arange(pp, dtype=np.int64)
    return pp, extra, np.where(j < extra, 2 * j + 1, j + extra)


def _core_starts(pp: int, extra: int) -> np.ndarray:
    """The first real rank whose block core rank j holds (a folded pair's two blocks start at its even
    rank), and p at the end: core rank j's blocks are [start[j], start[j + 1])."""
    j = np.arange(pp)
    return np.concatenate([np.where(j < extra, 2 * j, j + extra), [pp + extra]]).astype(np.int64)


def _fold_pairs(extra: int) -> tuple[np.ndarray, np.ndarray]:
    """(even, odd) ranks of the folded pairs."""
    even = 2 * np.arange(extra, dtype=np.int64)
    return even, even + 1


@register_traffic("all_reduce", "recursive_doubling")
def all_reduce_recursive_doubling_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_reduce_recursive_doubling`: the fold (n from each even rank of a pair, reduced
    by the odd one), lg p' rounds where every core rank exchanges n with its partner and reduces it, the
    unfold (n back to each even rank)."""
    p, n = nranks, count
    out_ = _Phases(p)
    if n > 0 and p > 1:
        pp, extra, real = _core(p)
        even, odd = _fold_pairs(extra)
        full = np.full(max(pp, extra), n, dtype=np.int64)
        red = np.zeros(p, dtype=np.int64)
        red[odd] = n
        out_.add(even, odd, full[:extra], red)
        red = np.zeros(p, dtype=np.int64)
        red[real] = n
        j = np.arange(pp, dtype=np.int64)
        mask = 1
        while mask < pp:
            out_.add(real, real[j ^ mask], full[:pp], red)
            mask <<= 1
        out_.add(odd, even, full[:extra], None)
    return out_.traffic("all_reduce", "recursive_doubling", n)


@register_traffic("all_reduce", "rabenseifner")
def all_reduce_rabenseifner_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_reduce_rabenseifner`: the fold, lg p' recursive-halving rounds (each core rank
    sends the half of its window it gives away and reduces the half it keeps), lg p' recursive-doubling
    rounds retracing them, the unfold."""
    p, n = nranks, count
    out_ = _Phases(p)
    if n > 0 and p > 1:
        pp, extra, real = _core(p)
        even, odd = _fold_pairs(extra)
        full = np.full(extra, n, dtype=np.int64)
        red = np.zeros(p, dtype=np.int64)
        red[odd] = n
        out_.add(even, odd, full, red)
        cs = np.concatenate([[0], np.cumsum(split_sizes(n, pp))])
        j = np.arange(pp, dtype=np.int64)
        lo, hi = np.zeros(pp, dtype=np.int64), np.full(pp, pp, dtype=np.int64)
        history = []
        mask = 1
        while mask < pp:
            history.append((lo, hi))
            mid = (lo + hi) // 2
            up = (j & mask) != 0
            klo, khi = np.where(up, mid, lo), np.where(up, hi, mid)
            glo, ghi = np.where(up, lo, mid), np.where(up, mid, hi)
            give, keep = cs[ghi] - cs[glo], cs[khi] - cs[klo]
            ok = give > 0
            red = np.zeros(p, dtype=np.int64)
            red[real] = keep
            out_.add(real[ok], real[j ^ mask][ok], give[ok], red)
            lo, hi = klo, khi
            mask <<= 1
        for step in range(len(history) - 1, -1, -1):
            mask = 1 << step
            mine = cs[hi] - cs[lo]
            ok = mine > 0
            out_.add(real[ok], real[j ^ mask][ok], mine[ok], None)
            lo, hi = history[step]
        out_.add(odd, even, full, None)
    return out_.traffic("all_reduce", "rabenseifner", n)


@register_traffic("all_gather", "recursive_doubling")
def all_gather_recursive_doubling_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_gather_recursive_doubling`: the fold (one block to each odd rank of a pair),
    lg p' rounds where core rank j sends the blocks of its aligned window of 2^k core ranks, the unfold
    (every block but its own to each even rank)."""
    p, n = nranks, count
    out_ = _Phases(p)
    if n > 0 and p > 1:
        pp, extra, real = _core(p)
        even, odd = _fold_pairs(extra)
        start = _core_starts(pp, extra)
        out_.add(even, odd, np.full(extra, n, dtype=np.int64), None)
        j = np.arange(pp, dtype=np.int64)
        mask = 1
        while mask < pp:
            mine = (j // mask) * mask
            out_.add(real, real[j ^ mask], (start[mine + mask] - start[mine]) * n, None)
            mask <<= 1
        out_.add(odd, even, np.full(extra, (p - 1) * n, dtype=np.int64), None)
    return out_.traffic("all_gather", "recursive_doubling", n)


@register_traffic("reduce_scatter", "recursive_halving")
def reduce_scatter_recursive_halving_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`reduce_scatter_recursive_halving`: the fold (a whole input, pn, to each odd rank of
    a pair, reduced there), lg p' distance-halving rounds (core rank j sends the half of its window of
    blocks it gives away and reduces the half it keeps), the unfold (its block to each even rank)."""
    p, n = nranks, count
    out_ = _Phases(p)
    if n > 0 and p > 1:
        pp, extra, real = _core(p)
        even, odd = _fold_pairs(extra)
        start = _core_starts(pp, extra)
        red = np.zeros(p, dtype=np.int64)
        red[odd] = n * p
        out_.add(even, odd, np.full(extra, n * p, dtype=np.int64), red)
        j = np.arange(pp, dtype=np.int64)
        mask = pp // 2
        while mask >= 1:
            lo = (j // (2 * mask)) * 2 * mask
            up = (j & mask) != 0
            a = np.where(up, lo + mask, lo)  # the half j keeps
            g = np.where(up, lo, lo + mask)  # the half it gives
            red = np.zeros(p, dtype=np.int64)
            red[real] = (start[a + mask] - start[a]) * n
            out_.add(real, real[j ^ mask], (start[g + mask] - start[g]) * n, red)
            mask //= 2
        out_.add(odd, even, np.full(extra, n, dtype=np.int64), None)
    return out_.traffic("reduce_scatter", "recursive_halving", n)


__all__ = [
    "all_gather_recursive_doubling",
    "all_reduce_rabenseifner",
    "all_reduce_recursive_doubling",
    "fold",
    "new_rank",
    "old_rank",
    "reduce_scatter_recursive_halving",
]
