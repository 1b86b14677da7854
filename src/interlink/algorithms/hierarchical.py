"""Hierarchical (two-level) algorithms for ranks grouped into hosts.

Hosts are runs of consecutive ranks: host h is ranks [h*L, min((h+1)*L, p)) for L = ``local_size``,
so there are H = ceil(p / L) hosts and, when L does not divide p, the last host is smaller
(m = p - (H-1)*L ranks). ``local_size`` defaults to :func:`default_local_size`; values above p
are clamped to p (one host); values below 1 are an error.

Lanes. The work is cut into L lanes (for all_reduce, L near-equal pieces of the vector; for
all_gather, one lane per local rank's block). In a full host local rank l owns lane l. In a host
of m < L ranks, local rank c owns the contiguous lanes {l : l*m // L == c} (ceil(L/m) or
floor(L/m) of them), so every lane has exactly one owner in every host, every rank of a short host
still owns at least one lane and every intra-host link stays in use. Inter-host traffic runs along
lanes: the owners of lane l in the H hosts form a ring that never carries anything but lane l, so
in the even case every inter-host message is 1/L of the data and every rank crosses hosts with
its own share in parallel; a rank of a short host carries its several lanes at once (its host has
fewer ranks to carry them).

Rounds and traffic, even case (H hosts of L ranks, vector of n elements):
  all_reduce   (L-1) + 2(H-1) + (L-1) rounds; inter-host per rank 2(H-1)/H * n/L
  all_gather   (H-1) + (L-1) rounds; inter-host per rank (H-1)n, intra-host (L-1)Hn
  broadcast    ceil(lg H) + ceil(lg L) rounds (binomial trees: leaders, then each host)
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .ring import _Phases, _Rings, split_sizes
from .schedule import Builder, Chunk, Schedule, inp, out, split
from .traffic import Traffic, register_traffic


def default_local_size(nranks: int) -> int:
    """The largest divisor of p that is <= 8 and < p (hosts of up to 8 ranks, at least two
    hosts); p itself (a single host) when there is none, i.e. p prime or p == 1."""
    p = nranks
    cands = [d for d in range(2, min(8, p - 1) + 1) if p % d == 0]
    return max(cands) if cands else p


def resolve_local_size(nranks: int, local_size: int | None) -> int:
    if local_size is None:
        return default_local_size(nranks)
    if isinstance(local_size, bool) or int(local_size) != local_size or local_size < 1:
        raise ValueError(f"local_size must be a positive integer, got {local_size!r}")
    return min(int(local_size), nranks)


def hosts(nranks: int, local_size: int) -> list[list[int]]:
    """The ranks of each host: consecutive runs of local_size, the last one possibly shorter."""
    L = local_size
    return [list(range(s, min(s + L, nranks))) for s in range(0, nranks, L)]


def lane_owner(lane: int, host_size: int, local_size: int) -> int:
    """Local rank that owns ``lane`` in a host of ``host_size`` ranks (identity in a full host)."""
    return lane * host_size // local_size


def owned_lanes(local: int, host_size: int, local_size: int) -> tuple[int, int]:
    """[first, end) of the lanes local rank ``local`` owns in a host of ``host_size`` ranks."""
    L, m = local_size, host_size
    return -(-local * L // m), -(-(local + 1) * L // m)


def _ring_reduce_scatter(b: Builder, rnd0: int, members: list[int], blocks: list[Chunk]) -> None:
    """Ring reduce-scatter in place over len(members)-1 rounds: member i ends with blocks[i] reduced
    over all members (blocks are chunks of the same buffer, the same on every member)."""
    m = len(members)
    for t in range(m - 1):
        for i, r in enumerate(members):
            b.send(rnd0 + t, r, members[(i + 1) % m], blocks[(i - t - 1) % m])
            b.recv(rnd0 + t, r, members[(i - 1) % m], blocks[(i - t - 2) % m], reduce=True)


def _ring_all_gather(b: Builder, rnd0: int, members: list[int], blocks: list[Chunk],
                     first: dict[int, Chunk] | None = None) -> None:
    """Ring all-gather over len(members)-1 rounds: member i starts with blocks[i] (or sends
    first[i] in its place in the first round) and ends with all of them."""
    m = len(members)
    for t in range(m - 1):
        for i, r in enumerate(members):
            src = first[i] if (t == 0 and first and i in first) else blocks[(i - t) % m]
            b.send(rnd0 + t, r, members[(i + 1) % m], src)
            b.recv(rnd0 + t, r, members[(i - 1) % m], blocks[(i - t - 1) % m])


def _ring_all_reduce(b: Builder, rnd0: int, members: list[int], offset: int, count: int) -> None:
    """Ring all-reduce of output[offset:offset+count] in place, 2(m-1) rounds from rnd0."""
    m = len(members)
    if m == 1:
        return
    subs = [out(offset + o, c) for o, c in split(count, m)]
    # member i ends the reduce-scatter with subs[i]; the all-gather starts from there
    _ring_reduce_scatter(b, rnd0, members, subs)
    _ring_all_gather(b, rnd0 + m - 1, members, subs)


def _binomial_broadcast(b: Builder, rnd0: int, members: list[int], root_index: int, n: int,
                        root_rank: int) -> int:
    """Binomial-tree broadcast of output[0:n] among members; ceil(lg m) rounds. ``root_rank`` sends
    from its input (its output is written by a local copy). Returns the number of rounds."""
    m = len(members)
    k, d = 0, 1
    while d < m:
        for v in range(min(d, m - d)):
            src = members[(root_index + v) % m]
            dst = members[(root_index + v + d) % m]
            b.transfer(rnd0 + k, src, dst, inp(0, n) if src == root_rank else out(0, n), out(0, n))
        k += 1
        d *= 2
    return k


@register("all_reduce", "hierarchical", params=("local_size",))
def all_reduce_hierarchical(nranks: int, count: int, root: int = 0, local_size: int | None = None) -> Schedule:
    """2(L-1) + 2(H-1) rounds for H hosts of L ranks; each rank sends 2(H-1)/H * n/L across hosts.

    Ring reduce-scatter in each host (local rank c ends with its lanes), ring all-reduce of each
    lane among its owners across hosts, ring all-gather in each host. Intra-host traffic per rank
    is 2(L-1)/L * n in the even case."""
    p, n = nranks, count
    L = resolve_local_size(p, local_size)
    hs = hosts(p, L)
    H = len(hs)
    b = Builder("all_reduce", "hierarchical", p, n, root)
    b.meta.update(local_size=L, hosts=H)
    for r in range(p):
        b.copy(0, r, inp(0, n), out(0, n))
    pieces = split(n, L)

    def lane_chunk(first: int, end: int) -> Chunk:
        o = pieces[first][0]
        return out(o, pieces[end - 1][0] + pieces[end - 1][1] - o)

    host_blocks = [
        [lane_chunk(*owned_lanes(c, len(members), L)) for c in range(len(members))] for members in hs
    ]
    # 1. in each host, local rank c reduces the lanes it owns over the host
    for members, blocks in zip(hs, host_blocks):
        _ring_reduce_scatter(b, 1, members, blocks)
    # 2. across hosts, the owners of lane l all-reduce it
    base = 1 + (L - 1)
    for lane, (o, c) in enumerate(pieces):
        ring = [members[lane_owner(lane, len(members), L)] for members in hs]
        _ring_all_reduce(b, base, ring, o, c)
    # 3. in each host, everyone gathers the lanes
    base += 2 * (H - 1)
    for members, blocks in zip(hs, host_blocks):
        _ring_all_gather(b, base, members, blocks)
    return b.build()


@register("all_gather", "hierarchical", params=("local_size",))
def all_gather_hierarchical(nranks: int, count: int, root: int = 0, local_size: int | None = None) -> Schedule:
    """(H-1) + (L-1) rounds for H hosts of L ranks; each rank sends (p-1)n, (H-1)n of it across hosts.

    Ring along each lane across hosts, then ring within each host; blocks are kept lane-major in
    scratch so that each message is contiguous, then copied into place (skipped when the layout
    is already the output's: one host, or one rank per host)."""
    p, n = nranks, count
    L = resolve_local_size(p, local_size)
    hs = hosts(p, L)
    H = len(hs)
    # slot (lane, host) holds the block of the lane's owner in that host if the lane is the owner's
    # first one, else nothing; slots are laid out lane-major so that what a rank owns is contiguous
    slot_block: dict[tuple[int, int], int | None] = {}
    for lane in range(L):
        for h, members in enumerate(hs):
            c = lane_owner(lane, len(members), L)
            slot_block[(lane, h)] = members[c] if owned_lanes(c, len(members), L)[0] == lane else None
    offset: dict[tuple[int, int], int] = {}
    pos = 0
    for lane in range(L):
        for h in range(H):
            offset[(lane, h)] = pos
            pos += n if slot_block[(lane, h)] is not None else 0
    identity = all(blk is None or offset[key] == blk * n for key, blk in slot_block.items())
    work = "output" if identity else "scratch"
    b = Builder("all_gather", "hierarchical", p, n, root, scratch=0 if identity else n * p)
    b.meta.update(local_size=L, hosts=H)

    def slot(lane: int, h: int) -> Chunk:
        return Chunk(work, offset[(lane, h)], n if slot_block[(lane, h)] is not None else 0)

    home = {blk: key for key, blk in slot_block.items() if blk is not None}
    for r in range(p):
        b.copy(0, r, inp(0, n), slot(*home[r]))
    # 1. along each lane, across hosts (round 0 sends straight from the input)
    for lane in range(L):
        ring = [members[lane_owner(lane, len(members), L)] for members in hs]
        _ring_all_gather(b, 0, ring, [slot(lane, h) for h in range(H)],
                         first={h: inp(0, slot(lane, h).count) for h in range(H)})
    # 2. within each host: local rank c holds its lanes from every host, a contiguous range
    base = H - 1
    for members in hs:
        m = len(members)
        blocks = []
        for c in range(m):
            first, end = owned_lanes(c, m, L)
            lo = offset[(first, 0)]
            hi = offset[(end, 0)] if end < L else n * p
            blocks.append(Chunk(work, lo, hi - lo))
        firsts = {c: inp(0, n) for c in range(m)} if base == 0 else None
        _ring_all_gather(b, base, members, blocks, first=firsts)
    if not identity:
        last = max(0, (H - 1) + (L - 1) - 1)
        for r in range(p):
            for key, blk in slot_block.items():
                if blk is not None:
                    b.copy(last, r, slot(*key), out(blk * n, n))
    return b.build()


@register("broadcast", "hierarchical", params=("local_size",))
def broadcast_hierarchical(nranks: int, count: int, root: int = 0, local_size: int | None = None) -> Schedule:
    """ceil(lg H) + ceil(lg L) rounds for H hosts of L ranks; the buffer crosses hosts H-1 times.

    Binomial tree among the host leaders (the root, and in each other host the rank with the root's
    local index, or its last rank), then a binomial tree in each host; p-1 copies sent in all."""
    p, n = nranks, count
    L = resolve_local_size(p, local_size)
    hs = hosts(p, L)
    H = len(hs)
    b = Builder("broadcast", "hierarchical", p, n, root)
    b.meta.update(local_size=L, hosts=H)
    b.copy(0, root, inp(0, n), out(0, n))
    root_host, root_local = root // L, root % L
    # leader of each host: the root in its own host, else the rank with the root's local index
    # (or the host's last rank when the host is shorter)
    leaders = [members[min(root_local, len(members) - 1)] for members in hs]
    k = _binomial_broadcast(b, 0, leaders, root_host, n, root)
    for h, members in enumerate(hs):
        _binomial_broadcast(b, k, members, members.index(leaders[h]), n, root)
    return b.build()


# ---- vectorised traffic for large rank counts ---------------------------------------------------------



def _block_sizes(psz: np.ndarray, m: int, L: int) -> np.ndarray:
    """Elements each local rank of a host of m ranks owns: the sum of its lanes (see owned_lanes)."""
    c = np.arange(m, dtype=np.int64)
    first, end = -(-c * L // m), -(-(c + 1) * L // m)
    cs = np.concatenate([[0], np.cumsum(psz)])
    return cs[end] - cs[first]


def _intra_stage(p: int, L: int, H: int, psz: np.ndarray, s0: int, reduce: bool, out: _Phases) -> None:
    """Ring reduce-scatter (s0 = -1, reducing) or all-gather (s0 = 0) inside every host at once."""
    m_last = p - (H - 1) * L
    full = H if m_last == L else H - 1
    groups = []
    if full and L > 1:
        members = np.arange(L, dtype=np.int64)[:, None] + L * np.arange(full, dtype=np.int64)[None, :]
        groups.append(_Rings(members, np.tile(_block_sizes(psz, L, L), (full, 1)), p))
    short = None
    if m_last < L and m_last > 1:
        short = _Rings(((H - 1) * L + np.arange(m_last, dtype=np.int64))[:, None],
                       _block_sizes(psz, m_last, L)[None, :], p)
    if short is None and len(groups) == 1:
        groups[0].phases(s0, reduce, out)  # full hosts only: identical rounds stored once
        return
    for t in range(L - 1):
        parts = [g.round(t, s0, reduce) for g in groups]
        if short is not None and t < m_last - 1:
            parts.append(short.round(t, s0, reduce))
        if not parts:
            continue
        src = np.concatenate([x[0] for x in parts])
        dst = np.concatenate([x[1] for x in parts])
        el = np.concatenate([x[2] for x in parts])
        red = None
        if reduce:
            red = np.zeros(p, dtype=np.int64)
            for x in parts:
                red += x[3]
        out.add(src, dst, el, red)


@register_traffic("all_reduce", "hierarchical")
def all_reduce_hierarchical_traffic(nranks: int, count: int, root: int = 0,
                                    local_size: int | None = None) -> Traffic:
    """Traffic of :func:`all_reduce_hierarchical`: L - 1 intra-host reduce-scatter rounds, 2(H - 1)
    rounds of the lane rings across hosts (all lanes at once), L - 1 intra-host all-gather rounds."""
    p, n = nranks, count
    L = resolve_local_size(p, local_size)
    H = -(-p // L)
    out = _Phases(p)
    if p == 1 or n == 0:
        return out.traffic("all_reduce", "hierarchical", n)
    psz = split_sizes(n, L)
    _intra_stage(p, L, H, psz, -1, True, out)
    if H > 1:
        m_last = p - (H - 1) * L
        lanes = np.arange(L, dtype=np.int64)
        members = np.arange(H, dtype=np.int64)[:, None] * L + lanes[None, :]
        members[H - 1] = (H - 1) * L + lanes * m_last // L  # the owners of the lanes in the last host
        base, extra = np.divmod(psz, H)
        sizes = base[:, None] + (np.arange(H)[None, :] < extra[:, None])
        rings = _Rings(members, sizes.astype(np.int64), p)
        rings.phases(-1, True, out)  # reduce-scatter along each lane
        rings.phases(0, False, out)  # all-gather along each lane
    _intra_stage(p, L, H, psz, 0, False, out)
    return out.traffic("all_reduce", "hierarchical", n)


def _lane_owners(p: int, L: int, H: int) -> np.ndarray:
    """(L, H) array: the rank that owns lane l in host h (every host full but possibly the last)."""
    m_last = p - (H - 1) * L
    lanes = np.arange(L, dtype=np.int64)
    owners = lanes[:, None] + L * np.arange(H, dtype=np.int64)[None, :]
    owners[:, H - 1] = (H - 1) * L + lanes * m_last // L
    return owners


@register_traffic("all_gather", "hierarchical")
def all_gather_hierarchical_traffic(nranks: int, count: int, root: int = 0,
                                    local_size: int | None = None) -> Traffic:
    """Traffic of :func:`all_gather_hierarchical`: H - 1 rounds of the lane rings across hosts (member h of
    lane l's ring sends the block of host h - t; a short last host holds a block only in the first lane of
    each of its ranks), then L - 1 rounds of the rings inside every host (local rank c sends the blocks of
    its lanes from every host; a short host stops after m - 1 rounds)."""
    p, n = nranks, count
    L = resolve_local_size(p, local_size)
    H = -(-p // L)
    out_ = _Phases(p)
    if p == 1 or n == 0:
        return out_.traffic("all_gather", "hierarchical", n)
    m_last = p - (H - 1) * L
    lanes = np.arange(L, dtype=np.int64)
    # lane l holds a block in the last host iff it is the first lane of its owner there
    c_last = lanes * m_last // L
    first_last = -(-c_last * L // m_last) == lanes
    has = np.ones((L, H), dtype=bool)
    has[:, H - 1] = first_last
    if H > 1:
        owners = _lane_owners(p, L, H)
        src = owners.reshape(-1)
        dst = np.roll(owners, -1, axis=1).reshape(-1)
        hcol = np.arange(H, dtype=np.int64)
        for t in range(H - 1):
            el = np.where(has[:, (hcol - t) % H], n, 0).reshape(-1)
            ok = el > 0
            out_.add(src[ok], dst[ok], el[ok], None)
    if L > 1:
        # blocks inside a host: local rank c of a host of m ranks holds lanes [first, end) from every host
        per_lane = has.sum(axis=1) * n
        cs = np.concatenate([[0], np.cumsum(per_lane)])

        def ring(m: int, base: int):
            c = np.arange(m, dtype=np.int64)
            first, end = -(-c * L // m), -(-(c + 1) * L // m)
            return base + c, base + (c + 1) % m, cs[end] - cs[first]

        full = H if m_last == L else H - 1
        rings = [ring(L, h * L) for h in range(full)] if full else []
        short = ring(m_last, (H - 1) * L) if m_last < L and m_last > 1 else None
        if rings:
            fsrc = np.concatenate([r[0] for r in rings])
            fdst = np.concatenate([r[1] for r in rings])
            fblk = rings[0][2]
        for t in range(L - 1):
            srcs, dsts, els = [], [], []
            if rings:
                i = np.arange(L, dtype=np.int64)
                srcs.append(fsrc), dsts.append(fdst), els.append(np.tile(fblk[(i - t) % L], full))
            if short is not None and t < m_last - 1:
                i = np.arange(m_last, dtype=np.int64)
                srcs.append(short[0]), dsts.append(short[1]), els.append(short[2][(i - t) % m_last])
            if srcs:
                el = np.concatenate(els)
                ok = el > 0
                out_.add(np.concatenate(srcs)[ok], np.concatenate(dsts)[ok], el[ok], None)
    return out_.traffic("all_gather", "hierarchical", n)


def _binomial_pairs(m: int, root_index: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(sender, receiver) member indices of the binomial broadcast's round with distance d among m."""
    v = np.arange(max(0, min(d, m - d)), dtype=np.int64)
    return (root_index + v) % m, (root_index + v + d) % m


@register_traffic("broadcast", "hierarchical")
def broadcast_hierarchical_traffic(nranks: int, count: int, root: int = 0,
                                   local_size: int | None = None) -> Traffic:
    """Traffic of :func:`broadcast_hierarchical`: ceil(lg H) rounds of the binomial tree over the host
    leaders, then ceil(lg L) rounds of the binomial trees of every host at once (a short host's tree
    finishes earlier)."""
    p, n = nranks, count
    L = resolve_local_size(p, local_size)
    H = -(-p // L)
    out_ = _Phases(p)
    if p == 1 or n == 0:
        return out_.traffic("broadcast", "hierarchical", n)
    m_last = p - (H - 1) * L
    root_host, root_local = root // L, root % L
    lead_local = np.full(H, root_local, dtype=np.int64)
    lead_local[H - 1] = min(root_local, m_last - 1)
    leaders = np.arange(H, dtype=np.int64) * L + lead_local
    d = 1
    while d < H:
        a, b = _binomial_pairs(H, root_host, d)
        out_.add(leaders[a], leaders[b], np.full(a.size, n, dtype=np.int64), None)
        d *= 2
    full = H if m_last == L else H - 1
    base = np.arange(full, dtype=np.int64)[:, None] * L
    d = 1
    while d < L:
        srcs, dsts = [], []
        a, b = _binomial_pairs(L, root_local, d)
        if full and a.size:
            srcs.append((base + a[None, :]).reshape(-1)), dsts.append((base + b[None, :]).reshape(-1))
        if m_last < L:
            a, b = _binomial_pairs(m_last, int(lead_local[H - 1]), d)
            srcs.append((H - 1) * L + a), dsts.append((H - 1) * L + b)
        src = np.concatenate(srcs)
        if src.size:
            out_.add(src, np.concatenate(dsts), np.full(src.size, n, dtype=np.int64), None)
        d *= 2
    return out_.traffic("broadcast", "hierarchical", n)
