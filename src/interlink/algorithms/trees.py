"""Tree algorithms: binomial trees for the rooted collectives and an NCCL-style double binary tree
for all-reduce.

Binomial trees work on the *relative* rank ``v = (r - root) % p``, so any rank can be the root.
In a binomial tree the subtree of relative rank ``v > 0`` is the contiguous range
``[v, min(v + lowbit(v), p))`` (the root's is everything); gather and scatter move whole subtrees.
Logarithmic latency (``ceil(log2 p)`` rounds); good for small and medium messages.
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .ring import _Phases, split_sizes
from .schedule import Builder, Schedule, inp, out, scr, split
from .traffic import Traffic, register_traffic


def ceil_log2(p: int) -> int:
    """Smallest L with 2**L >= p (0 for p <= 1)."""
    return max(0, (p - 1).bit_length())


def _lowbit(v: int) -> int:
    return v & -v


def _subtree(v: int, p: int) -> int:
    """Number of relative ranks in the binomial subtree of relative rank v."""
    return p if v == 0 else min(_lowbit(v), p - v)


def _abs_runs(rel_start: int, m: int, root: int, p: int) -> list[tuple[int, int]]:
    """The blocks of relative ranks [rel_start, rel_start + m) as at most two runs (first absolute
    block, number of blocks) of consecutive absolute ranks: the range wraps past p - 1 at most once."""
    if m == 0:
        return []
    a0 = (rel_start + root) % p
    first = min(m, p - a0)
    runs = [(a0, first)]
    if m > first:
        runs.append((0, m - first))
    return runs


# ---- binomial trees ---------------------------------------------------------------------------


@register("broadcast", "binomial")
def broadcast_binomial(nranks: int, count: int, root: int = 0) -> Schedule:
    """ceil(log2 p) rounds; every non-root rank receives the buffer exactly once (p-1 copies in all)."""
    p, n = nranks, count
    b = Builder("broadcast", "binomial", p, n, root)
    b.copy(0, root, inp(0, n), out(0, n))
    for k in range(ceil_log2(p)):
        step = 1 << k
        for v in range(step):
            w = v + step
            if w >= p:
                break
            src, dst = (v + root) % p, (w + root) % p
            b.transfer(k, src, dst, inp(0, n) if v == 0 else out(0, n), out(0, n))
    return b.build()


@register("reduce", "binomial")
def reduce_binomial(nranks: int, count: int, root: int = 0) -> Schedule:
    """ceil(log2 p) rounds; every non-root rank sends the buffer exactly once (p-1 copies in all)."""
    p, n = nranks, count
    b = Builder("reduce", "binomial", p, n, root)
    if p == 1:
        b.copy(0, root, inp(0, n), out(0, n))
        return b.build()
    # relative rank v receives from v + 2^k in round k (for 2^k < lowbit(v)), then sends to
    # v - lowbit(v) in round log2(lowbit(v)). Its first child (v + 1) always arrives in round 0:
    # that receive initialises the output, and the rank folds its own input in right after.
    for v in range(p):
        r = (v + root) % p
        for k in range(ceil_log2(p)):
            step = 1 << k
            if v != 0 and step >= _lowbit(v):
                break
            w = v + step
            if w >= p:
                break
            child = (w + root) % p
            child_src = inp(0, n) if _subtree(w, p) == 1 else out(0, n)
            b.transfer(k, child, r, child_src, out(0, n), reduce=k > 0)
            if k == 0:
                b.reduce(0, r, inp(0, n), out(0, n))
    return b.build()


@register("gather", "binomial")
def gather_binomial(nranks: int, count: int, root: int = 0) -> Schedule:
    """ceil(log2 p) rounds; each rank sends its subtree's blocks once, the root receives (p-1)*count.

    Blocks sit at their absolute place in every rank's output (non-root ranks use it as temp), so
    a subtree whose absolute ranks wrap past p-1 travels as two messages in the same round."""
    p, n = nranks, count
    b = Builder("gather", "binomial", p, n, root)
    for v in range(p):
        r = (v + root) % p
        if v == 0 or _subtree(v, p) > 1:
            b.copy(0, r, inp(0, n), out(r * n, n))
    for k in range(ceil_log2(p)):
        step = 1 << k
        for v in range(step, p, 2 * step):  # v % 2^(k+1) == 2^k: sends its subtree to v - 2^k
            m = _subtree(v, p)
            src, dst = (v + root) % p, (v - step + root) % p
            if m == 1:
                b.transfer(k, src, dst, inp(0, n), out(src * n, n))
                continue
            for a0, cnt in _abs_runs(v, m, root, p):
                b.transfer(k, src, dst, out(a0 * n, cnt * n), out(a0 * n, cnt * n))
    return b.build()


@register("scatter", "binomial")
def scatter_binomial(nranks: int, count: int, root: int = 0) -> Schedule:
    """ceil(log2 p) rounds; the root sends (p-1)*count, each rank forwards its subtree's blocks once.

    An interior rank keeps its subtree's blocks in scratch in relative order; the root sends from
    its input, two messages where the subtree's absolute ranks wrap past p-1."""
    p, n = nranks, count
    L = ceil_log2(p)
    widest = max((_subtree(w, p) for w in range(1, p) if _subtree(w, p) > 1), default=0)
    b = Builder("scatter", "binomial", p, n, root, scratch=widest * n)
    b.copy(0, root, inp(root * n, n), out(0, n))
    for t, k in enumerate(range(L - 1, -1, -1)):
        step = 1 << k
        for v in range(0, p, 2 * step):  # v % 2^(k+1) == 0 sends the subtree of v + 2^k
            w = v + step
            if w >= p:
                break
            m = _subtree(w, p)
            src, dst = (v + root) % p, (w + root) % p
            if v == 0:
                pieces = [inp(a0 * n, cnt * n) for a0, cnt in _abs_runs(w, m, root, p)]
            else:
                pieces = [scr(step * n, m * n)]  # relative block w sits at (w - v) * n in v's scratch
            if m == 1:
                (piece,) = pieces
                b.transfer(t, src, dst, piece, out(0, n))
                continue
            off = 0
            for piece in pieces:
                b.transfer(t, src, dst, piece, scr(off, piece.count))
                off += piece.count
            b.copy(t, dst, scr(0, n), out(0, n))
    return b.build()


# ---- double binary tree -------------------------------------------------------------------------


def btree_parents(p: int) -> list[int]:
    """NCCL's binary tree (ncclGetBtree) over ranks 0..p-1 as a parent array (-1 at the root, 0).

    A rank r > 0 with lowest set bit b hangs under (r ^ b) | 2b, or under r ^ b when that is out of
    range; odd ranks are leaves, rank 0 has one child. Height <= ceil(log2 p)."""
    parents = [-1] * p
    for r in range(1, p):
        bit = _lowbit(r)
        up = (r ^ bit) | (bit << 1)
        if up >= p:
            up = r ^ bit
        parents[r] = up
    return parents


def double_binary_tree(p: int) -> tuple[list[int], list[int]]:
    """The two complementary trees of NCCL's ncclGetDtree, as parent arrays.

    Tree 1 is :func:`btree_parents`; tree 2 mirrors it (r -> p-1-r) when p is even and shifts it by
    one rank (r -> r+1) when p is odd, so that the interior ranks of one tree are (but for the
    roots) leaves of the other."""
    t1 = btree_parents(p)
    if p % 2 == 0:
        t2 = [-1 if t1[p - 1 - r] < 0 else p - 1 - t1[p - 1 - r] for r in range(p)]
    else:
        t2 = [-1 if t1[(r - 1) % p] < 0 else (t1[(r - 1) % p] + 1) % p for r in range(p)]
    return t1, t2


def _children(parents: list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for r, u in enumerate(parents):
        if u >= 0:
            kids[u].append(r)
    return kids


def _depths(parents: list[int]) -> list[int]:
    """Distance of each rank from its tree's root."""
    depth = []
    for r in range(len(parents)):
        d, u = 0, parents[r]
        while u >= 0:
            d, u = d + 1, parents[u]
        depth.append(d)
    return depth


def _heights(kids: list[list[int]], depth: list[int]) -> list[int]:
    """Height of each rank's subtree (0 for a leaf)."""
    h = [0] * len(kids)
    for r in sorted(range(len(kids)), key=lambda x: -depth[x]):  # children before parents
        if kids[r]:
            h[r] = 1 + max(h[c] for c in kids[r])
    return h


@register("all_reduce", "tree", params=("segments",))
def all_reduce_tree(nranks: int, count: int, root: int = 0, segments: int | None = None) -> Schedule:
    """2H + S - 1 rounds (tree height H <= ceil(log2 p), S segments); each rank sends <= ~2x the buffer.

    NCCL's double binary tree (:func:`double_binary_tree`); ``segments`` defaults to 1, so 2H rounds.
    The buffer is split in two halves; half t is reduced up tree t to its root and broadcast back
    down, both trees at once. With S segments the halves are pipelined: a rank of subtree height h
    sends segment s up in comm round h + s; a tree's root of height H sends segment s down in round
    H + s and a rank at depth d forwards it in round H + s + d. Every rank computes the same result.
    """
    p, n = nranks, count
    b = Builder("all_reduce", "tree", p, n, root)
    halves = split(n, 2)
    S = max(1, min(int(segments) if segments is not None else 1, n // 2))
    b.meta["segments"] = S
    trees = double_binary_tree(p)
    for (ho, hn), parents in zip(halves, trees):
        kids = _children(parents)
        depth = _depths(parents)
        h = _heights(kids, depth)
        troot = parents.index(-1)
        H = h[troot]
        segs = [(ho + so, sn) for so, sn in split(hn, S)]
        # ranks that accumulate (interior) or own the result (root) start from their own input
        for r in range(p):
            if kids[r] or r == troot:
                b.copy(0, r, inp(ho, hn), out(ho, hn))
        for s, (so, sn) in enumerate(segs):
            # up: comm rounds start at 1 (round 0 holds the local initialisation)
            for r in range(p):
                u = parents[r]
                if u < 0:
                    continue
                src = out(so, sn) if kids[r] else inp(so, sn)
                b.transfer(1 + h[r] + s, r, u, src, out(so, sn), reduce=True)
            # down
            for r in range(p):
                for c in kids[r]:
                    b.transfer(1 + H + s + depth[r], r, c, out(so, sn), out(so, sn))
    return b.build()


def host_blocks(nranks: int, local_size: int | None) -> tuple[int, int]:
    """(L, H): hosts are blocks of ``local_size`` consecutive ranks (default, or not dividing the ranks:
    one host of every rank) and H of them."""
    L = int(local_size or nranks)
    if L < 1 or nranks % L:
        L = nranks
    return L, nranks // max(L, 1)


def host_trees(H: int) -> list[tuple[list[int], list[list[int]], list[int], list[int], int]]:
    """The two trees of :func:`double_binary_tree` over H hosts, each as (parents, children, depth,
    subtree height, height of the root); one host: two single-node trees."""
    out = []
    for parents in (double_binary_tree(H) if H > 1 else ([-1], [-1])):
        kids = _children(parents)
        depth = _depths(parents)
        height = _heights(kids, depth)
        out.append((parents, kids, depth, height, height[parents.index(-1)]))
    return out


def nccl_tree_segments(cn: int, segments: int | None) -> int:
    """Segments per channel of :func:`all_reduce_nccl_tree`: given, else one per 64 Ki elements (a
    256 KiB float32 chunk), at most 128; never more than the channel's elements."""
    if segments is not None:
        if int(segments) < 1:
            raise ValueError(f"segments must be >= 1, got {segments}")
        return max(1, min(int(segments), cn))
    return max(1, min(cn, 128, cn // 65536))


@register("all_reduce", "nccl_tree", params=("segments", "channels", "local_size", "exits"))
def all_reduce_nccl_tree(nranks: int, count: int, root: int = 0, segments: int | None = None, channels: int = 2,
                         local_size: int | None = None, exits: tuple[int, ...] | None = None) -> Schedule:
    """NCCL's Tree: a chain inside each host, a double binary tree across hosts, C channels, pipelined.

    Hosts are blocks of ``local_size`` consecutive ranks (default: one host). Channel c carries its slice
    of the buffer through head ``exits[c % E]`` (E = len(exits); the local rank whose NIC the channel
    uses; default E = ceil(C / 2) heads 0..E-1) up and down tree (c // E) % 2 of the
    :func:`double_binary_tree` over the hosts, so with C = 2E every NIC carries one channel of each
    tree (what balances the double binary tree); inside a host the chain starts at the head and runs
    through the other local ranks in order. Each channel's slice is cut into
    ``segments`` pieces that follow each other one round apart: segment s is reduced from the chain's
    tail to the head (stage i for chain position L - 1 - i), up the tree (a host of height h sends in
    stage L - 1 + h), and broadcast from the tree's root down the tree and each chain. Round = 1 +
    stage + s. Each rank sends about 2x the buffer, like the ring, in 2(L - 1 + tree height) + S rounds.

    The two flows run at once, as NCCL's Simple tree runs them on separate warps (runTreeSplit): the up
    flow (reduce) on channel c, the down flow (broadcast) on channel c + C. On a rank, channel c reduces a
    segment into the output and sends it up, then hands it over to c + C, which writes the sum there (the
    root: sends it down); on one channel a parent and a child would wait for each other's segment every
    round (a two-hop cycle: transfer + hop latency per segment), apart each flow goes at its own rate. The
    Schedule has 2C channels; the bytes each rank moves are those of one channel per slice.
    """
    p, n = nranks, count
    L, H = host_blocks(p, local_size)  # not in host blocks: one chain over every rank
    b = Builder("all_reduce", "nccl_tree", p, n, root)
    C = int(channels)
    if C < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    slices = split(n, C)
    if C > 1:
        b.meta["channels"] = C
    shapes = host_trees(H)
    nseg = 0
    E = len(exits) if exits else max(1, (C + 1) // 2)  # heads (NICs); channel c uses head c % E
    for c, (co, cn) in enumerate(slices):
        if cn == 0:
            continue
        parents, kids, depth, height, Ht = shapes[(c // E) % 2]
        head = int(exits[c % E]) % L if exits else (c % E) % L
        S = nccl_tree_segments(cn, segments)
        nseg = max(nseg, S)
        segs = [(co + o, k) for o, k in split(cn, S)]
        U = L - 2 + Ht  # the tree root's head holds the full sum of a segment at the end of stage U

        def rank(h: int, i: int) -> int:
            return h * L + (head + i) % L

        for h in range(H):
            for i in range(L):
                r = rank(h, i)
                acc = i < L - 1 or bool(kids[h]) or (i == 0 and parents[h] < 0)
                if acc:
                    b.copy(0, r, inp(co, cn), out(co, cn), c)
        for s, (so, sn) in enumerate(segs):
            for h in range(H):
                # up the chain: position i (>= 1) sends to i - 1 in stage L - 1 - i
                for i in range(1, L):
                    src = inp(so, sn) if i == L - 1 else out(so, sn)
                    b.transfer(1 + (L - 1 - i) + s, rank(h, i), rank(h, i - 1), src, out(so, sn), True, c)
                # up the tree: the head of a host of height ht sends in stage L - 1 + ht
                u = parents[h]
                if u >= 0:
                    src = out(so, sn) if (L > 1 or kids[h]) else inp(so, sn)
                    b.transfer(1 + L - 1 + height[h] + s, rank(h, 0), rank(u, 0), src, out(so, sn), True, c)
                # down the tree, on channel c + C: a head at depth d sends to its children in stage U + 1 + d
                for k in kids[h]:
                    b.transfer(1 + U + 1 + depth[h] + s, rank(h, 0), rank(k, 0), out(so, sn), out(so, sn), False,
                               c + C)
                # down the chain: position i sends to i + 1 in stage U + 1 + depth + i
                for i in range(L - 1):
                    b.transfer(1 + U + 1 + depth[h] + i + s, rank(h, i), rank(h, i + 1), out(so, sn), out(so, sn),
                               False, c + C)
    b.meta["segments"] = nseg
    return b.build()


__all__ = [
    "broadcast_binomial", "reduce_binomial", "gather_binomial", "scatter_binomial", "all_reduce_tree",
    "all_reduce_nccl_tree", "btree_parents", "double_binary_tree", "ceil_log2",
]


# ---- vectorised traffic for large rank counts ---------------------------------------------------------



def _btree_parents_np(p: int) -> np.ndarray:
    r = np.arange(p, dtype=np.int64)
    bit = r & -r
    up = (r ^ bit) | (bit << 1)
    up = np.where(up >= p, r ^ bit, up)
    up[0] = -1
    return up


def _double_binary_tree_np(p: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`double_binary_tree` with numpy (parent arrays)."""
    t1 = _btree_parents_np(p)
    r = np.arange(p, dtype=np.int64)
    if p % 2 == 0:
        m = t1[p - 1 - r]
        t2 = np.where(m < 0, -1, p - 1 - m)
    else:
        m = t1[(r - 1) % p]
        t2 = np.where(m < 0, -1, (m + 1) % p)
    return t1, t2


def _depths_heights_np(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth of every rank and height of its subtree; O(p x height) numpy."""
    p = parents.size
    nonroot = parents >= 0
    depth = np.zeros(p, dtype=np.int64)
    u = parents.copy()
    while True:
        up = u >= 0
        if not up.any():
            break
        depth += up
        u = np.where(up, parents[np.maximum(u, 0)], -1)
    height = np.zeros(p, dtype=np.int64)
    kids, par = np.flatnonzero(nonroot), parents[nonroot]
    while True:
        new = np.zeros(p, dtype=np.int64)
        np.maximum.at(new, par, height[kids] + 1)
        if np.array_equal(new, height):
            break
        height = new
    return depth, height


def host_trees_np(H: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]]:
    """:func:`host_trees` with numpy: (parents, the non-root hosts, depth, subtree height, root height)."""
    out = []
    for parents in (_double_binary_tree_np(H) if H > 1 else (np.array([-1]), np.array([-1]))):
        depth, height = _depths_heights_np(parents)
        out.append((parents, np.flatnonzero(parents >= 0), depth, height, int(height[parents < 0][0])))
    return out


@register_traffic("all_reduce", "tree")
def all_reduce_tree_traffic(nranks: int, count: int, root: int = 0, segments: int | None = None) -> Traffic:
    """Traffic of :func:`all_reduce_tree` (both trees of the double binary tree, every segment), one
    numpy pass over the ranks per round."""
    p, n = nranks, count
    out = _Phases(p)
    if p == 1:
        return out.traffic("all_reduce", "tree", n)
    S = max(1, min(int(segments) if segments is not None else 1, n // 2))
    halves = split_sizes(n, 2)
    trees = []
    last = 0
    for hn, parents in zip(halves.tolist(), _double_binary_tree_np(p)):
        depth, height = _depths_heights_np(parents)
        H = int(height[parents < 0][0])
        kids = np.flatnonzero(parents >= 0)
        seg = split_sizes(hn, S)
        trees.append((parents, kids, depth, height, H, seg))
        last = max(last, 1 + int(height[kids].max(initial=0)) + S - 1, 1 + H + S - 1 + int(depth.max()) - 1)
    for k in range(1, last + 1):
        srcs, dsts, els = [], [], []
        red = np.zeros(p, dtype=np.int64)
        for parents, kids, depth, height, H, seg in trees:
            s = k - 1 - height[kids]  # up: a rank of subtree height h sends segment s in round 1 + h + s
            ok = (s >= 0) & (s < S)
            c, el = kids[ok], seg[s[ok]]
            nz = el > 0
            c, el = c[nz], el[nz]
            srcs.append(c)
            dsts.append(parents[c])
            els.append(el)
            red += np.bincount(parents[c], weights=el, minlength=p).astype(np.int64)
            s = k - H - depth[kids]  # down: parent at depth d - 1 sends segment s in round 1 + H + s + d - 1
            ok = (s >= 0) & (s < S)
            c, el = kids[ok], seg[s[ok]]
            nz = el > 0
            c, el = c[nz], el[nz]
            srcs.append(parents[c])
            dsts.append(c)
            els.append(el)
        out.add(np.concatenate(srcs), np.concatenate(dsts), np.concatenate(els), red)
    return out.traffic("all_reduce", "tree", n)


@register_traffic("broadcast", "binomial")
def broadcast_binomial_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`broadcast_binomial`: in round k relative ranks v < 2^k send to v + 2^k."""
    p, n = nranks, count
    out = _Phases(p)
    if n > 0:
        for k in range(ceil_log2(p)):
            step = 1 << k
            v = np.arange(min(step, p - step), dtype=np.int64)
            out.add((v + root) % p, (v + step + root) % p, np.full(v.size, n, dtype=np.int64), None)
    return out.traffic("broadcast", "binomial", n)


@register_traffic("reduce", "binomial")
def reduce_binomial_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`reduce_binomial`: in round k relative ranks w = 2^k mod 2^(k+1) send the buffer
    to w - 2^k, which reduces it."""
    p, n = nranks, count
    out_ = _Phases(p)
    if n > 0:
        for k in range(ceil_log2(p)):
            step = 1 << k
            w = np.arange(step, p, 2 * step, dtype=np.int64)
            dst = (w - step + root) % p
            red = np.zeros(p, dtype=np.int64)
            red[dst] = n
            out_.add((w + root) % p, dst, np.full(w.size, n, dtype=np.int64), red)
    return out_.traffic("reduce", "binomial", n)


@register_traffic("gather", "binomial")
def gather_binomial_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`gather_binomial`: in round k relative rank v = 2^k mod 2^(k+1) sends its subtree's
    min(2^k, p - v) blocks to v - 2^k."""
    p, n = nranks, count
    out_ = _Phases(p)
    if n > 0:
        for k in range(ceil_log2(p)):
            step = 1 << k
            v = np.arange(step, p, 2 * step, dtype=np.int64)
            out_.add((v + root) % p, (v - step + root) % p, np.minimum(step, p - v) * n, None)
    return out_.traffic("gather", "binomial", n)


@register_traffic("scatter", "binomial")
def scatter_binomial_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`scatter_binomial`: for k from ceil(lg p) - 1 down to 0, relative rank v (a multiple
    of 2^(k+1)) sends the min(2^k, p - w) blocks of the subtree of w = v + 2^k to w."""
    p, n = nranks, count
    out_ = _Phases(p)
    if n > 0:
        for k in range(ceil_log2(p) - 1, -1, -1):
            step = 1 << k
            w = np.arange(step, p, 2 * step, dtype=np.int64)
            out_.add((w - step + root) % p, (w + root) % p, np.minimum(step, p - w) * n, None)
    return out_.traffic("scatter", "binomial", n)


@register_traffic("all_reduce", "nccl_tree")
def all_reduce_nccl_tree_traffic(nranks: int, count: int, root: int = 0, segments: int | None = None,
                                 channels: int = 2, local_size: int | None = None,
                                 exits: tuple[int, ...] | None = None) -> Traffic:
    """Traffic of :func:`all_reduce_nccl_tree`, one numpy pass per (round, channel): the chains of every
    host and the tree's hosts at once (the builder's stages, solved for the segment each sends)."""
    p, n = nranks, count
    L, H = host_blocks(p, local_size)
    C = int(channels)
    if C < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    out = _Phases(p)
    sizes = split_sizes(n, C)
    E = len(exits) if exits else max(1, (C + 1) // 2)
    shapes = host_trees_np(H)
    hosts = np.arange(H, dtype=np.int64)
    chans = []
    last = 0
    for c, cn in enumerate(sizes.tolist()):
        if cn == 0:
            continue
        parents, kids, depth, height, Ht = shapes[(c // E) % 2]
        head = int(exits[c % E]) % L if exits else (c % E) % L
        S = nccl_tree_segments(cn, segments)
        seg = split_sizes(cn, S)
        U = L - 2 + Ht
        chans.append((c, parents, kids, depth, height, U, head, S, seg))
        last = max(last, 1 + U + 1 + int(depth.max(initial=0)) + max(L - 2, 0) + S - 1, 1 + L - 1 + Ht + S - 1)
    for k in range(1, last + 1):
        srcs, dsts, els, chs, afts = [], [], [], [], []
        red = np.zeros(p, dtype=np.int64)

        def emit(src, dst, el, c, reduce, aft=-1):
            srcs.append(src)
            dsts.append(dst)
            els.append(el)
            chs.append(np.full(src.size, c, dtype=np.int64))
            afts.append(np.broadcast_to(np.asarray(aft, dtype=np.int64), src.shape))
            if reduce:
                red[:] += np.bincount(dst, weights=el, minlength=p).astype(np.int64)

        for c, parents, kids, depth, height, U, head, S, seg in chans:
            def rank(h, i):
                return h * L + (head + i) % L

            if L > 1:
                # up the chain: position i (1..L-1) sends segment s = k - 1 - (L - 1 - i)
                i = np.arange(1, L, dtype=np.int64)
                s = k - 1 - (L - 1 - i)
                ok = (s >= 0) & (s < S)
                if ok.any():
                    hh, ii = np.meshgrid(hosts, i[ok], indexing="ij")
                    el = np.broadcast_to(seg[s[ok]], hh.shape).ravel()
                    emit(rank(hh, ii).ravel(), rank(hh, ii - 1).ravel(), el, c, True)
            # up the tree: host x (not the root) of height h sends s = k - 1 - (L - 1) - h
            s = k - 1 - (L - 1) - height[kids]
            ok = (s >= 0) & (s < S)
            x = kids[ok]
            if x.size:
                emit(rank(x, 0), rank(parents[x], 0), seg[s[ok]], c, True)
            # down the tree, on channel c + C: host x's parent (at depth d - 1) sends s = k - 2 - U - (d - 1);
            # the root's sends wait for channel c, which handed it the sum
            s = k - 2 - U - (depth[kids] - 1)
            ok = (s >= 0) & (s < S)
            x = kids[ok]
            if x.size:
                emit(rank(parents[x], 0), rank(x, 0), seg[s[ok]], c + C, False, np.where(depth[x] == 1, c, -1))
            if L > 1:
                # down the chain: position i (0..L-2) of host h sends s = k - 2 - U - depth[h] - i
                i = np.arange(L - 1, dtype=np.int64)
                hh, ii = np.meshgrid(hosts, i, indexing="ij")
                s = k - 2 - U - depth[hh] - ii
                ok = (s >= 0) & (s < S)
                if ok.any():
                    hk, ik = hh[ok], ii[ok]
                    emit(rank(hk, ik), rank(hk, ik + 1), seg[s[ok]], c + C, False,
                         np.where((ik == 0) & (parents[hk] < 0), c, -1))
        if srcs:
            out.add(np.concatenate(srcs), np.concatenate(dsts), np.concatenate(els).astype(np.int64),
                    red, channel=np.concatenate(chs), after=np.concatenate(afts))
    return out.traffic("all_reduce", "nccl_tree", n)
