"""Algorithms that reduce in the network: the switch does the arithmetic (NVLink SHARP on NVSwitch gen 3+,
"NVLS" in NCCL; SHARP on InfiniBand switches).

    all_reduce nvls: rank r owns chunk r (1/p of the buffer): it reads the switch's reduction of its
    chunk over every rank (SwitchReduce, NCCL's multimem.ld_reduce) and writes the result to every other
    rank through the switch (Multicast, multimem.st), pipelined in segments (the multicast of segment j
    with the reduction of segment j + 1).
    all_reduce nvls_tree: NVLS inside each NVLink domain (a host, or an NVL72 rack), NCCL's double binary
    tree across domains.
    all_reduce collnet_direct, collnet_chain: NCCL's CollNet (SHARP on the InfiniBand switches): inside
    each host a reduce-scatter over NVLink, across hosts an in-network all-reduce of each local rank's
    shard through its own NIC, then an all-gather inside the host (Direct: direct sends to and from the
    owner of a shard; Chain: along a chain of the host's ranks ending at the owner).

Bytes per rank: up to the switch n (its part of every chunk, read by the switch) + n/p (its chunk,
multicast); down n/p (its reduced chunk) + n (every chunk, multicast): n(1 + 1/p) each way, against
2n(p - 1)/p for a ring; no reduction on the GPU. The Schedule says what the switch does with
:class:`~interlink.algorithms.schedule.SwitchReduce` and :class:`~interlink.algorithms.schedule.Multicast`;
the reference interpreter and the verifier run those steps, executors without such a switch run the
point-to-point lowering (:func:`~interlink.algorithms.schedule.two_sided`), and the cost model and the
simulator route the steps through the ranks' NVLS switch (``Topology.nvls_switch``) or, for the CollNet
Schedules (``meta["switch"] = "sharp"``), through each rank's NIC to the SHARP switch its group reaches
(``Topology.sharp_switch``, ``interlink.topology.switch_plan(kind="sharp")``).
"""

from __future__ import annotations

from .registry import register
from .schedule import Builder, Schedule, inp, out, scr, split

#: algorithms whose Schedules need a switch that reduces: the model and the simulator price them where the
#: topology has one; interlink's own executors only run their point-to-point lowering (for checks), so the
#: runtime's tuner does not offer them
NEEDS_SWITCH = ("nvls", "nvls_tree", "collnet_direct", "collnet_chain")

#: the algorithms whose in-switch steps run on SHARP InfiniBand switches (the others: NVLS on NVSwitch)
SHARP = ("collnet_direct", "collnet_chain")


#: NCCL's most NVLS heads per NVLink domain (NCCL_MAX_NVLS_ARITY, 32 since NCCL 2.20): the ranks that read the
#: switch's reduction of a chunk and multicast it (and, in NVLSTree, carry it across domains through their
#: NICs); on a domain of more GPUs (a GB200 NVL72 rack: 72) the others only serve the switch's reads and
#: receive its multicasts
MAX_HEADS = 32


def nvls_heads(L: int, heads: int | None) -> list[int]:
    """The local ranks that are heads in a block of L: ``heads`` of them (default every one), spread evenly
    over the block (on an NVL72 rack: different trays, different NICs)."""
    h = L if heads is None else int(heads)
    if h < 1:
        raise ValueError(f"heads must be >= 1, got {heads}")
    h = min(h, L)
    return [k * L // h for k in range(h)]


def nvls_segments(chunk: int, segments: int | None) -> int:
    """Segments of each rank's chunk: given, else one per 64 Ki elements, at most 128, never more than the
    chunk's elements (1 for an empty chunk)."""
    if segments is not None:
        if int(segments) < 1:
            raise ValueError(f"segments must be >= 1, got {segments}")
        return max(1, min(int(segments), chunk))
    return max(1, min(chunk, 128, chunk // 65536))


@register("all_reduce", "nvls", params=("segments", "heads"))
def all_reduce_nvls(nranks: int, count: int, root: int = 0, segments: int | None = None,
                    heads: int | None = None) -> Schedule:
    """NVLS on one NVLink domain, pipelined: rank r owns chunk r (1/p of the buffer), cut in segments. In
    round s it reads the in-switch reduction of its segment s over every rank (SwitchReduce, channel 0);
    in round s + 1 it multicasts that segment to every other rank (Multicast, channel 1, handed over from
    channel 0), while channel 0 reads the reduction of segment s + 1: the switch's reduction and multicast
    streams run at once, so each rank's link to the switch carries n(1 + 1/p) each way. ``heads`` (default
    every rank; NCCL: at most :data:`MAX_HEADS`): only that many ranks, spread evenly, own a chunk (1/heads
    of the buffer) and read and multicast it; the others' links carry n each way, a head's n(1 + 1/heads).
    The one-host case of :func:`all_reduce_nvls_tree` (each chunk in two halves, as that one cuts them for
    its two trees)."""
    return _nvls_tree(nranks, count, segments, nranks, "nvls", root, heads)


@register("all_reduce", "nvls_tree", params=("segments", "local_size", "heads"))
def all_reduce_nvls_tree(nranks: int, count: int, root: int = 0, segments: int | None = None,
                         local_size: int | None = None, heads: int | None = None) -> Schedule:
    """NCCL's NVLSTree: NVLS inside each block, a double binary tree across blocks, pipelined in segments.

    Blocks ("hosts" below) are ``local_size`` consecutive ranks on one NVLS switch: a DGX's host, or a GB200
    NVL72 rack of 18 hosts (default: one block, where this is :func:`all_reduce_nvls`).
    Local rank j owns chunk j (1/L of the buffer), cut in two halves (one per tree of the
    :func:`~interlink.algorithms.trees.double_binary_tree` over the hosts) and S segments. Segment s:
    round s, every rank reads the in-switch reduction of its segment over its host (SwitchReduce); up
    the tree on rail j (host h of subtree height ht sends to its parent in round s + 1 + ht, reducing);
    down from the tree's root (a host at depth d forwards it in round s + 1 + H + d, H the tree's
    height); in that same round the host's rank j multicasts the final segment to its host (Multicast,
    channel 1, handed over from channel 0). Per rank: n(1 + 1/L) each way over NVLink to the switch and
    about 2n/L each way over its NIC. ``heads`` (default every local rank; NCCL: at most
    :data:`MAX_HEADS`): only that many local ranks, spread evenly, own a chunk (1/heads of the buffer),
    carry it across hosts through their NICs (about 2n/heads each way) and multicast it.
    """
    return _nvls_tree(nranks, count, segments, int(local_size or nranks), "nvls_tree", root, heads)


def _nvls_tree(p: int, n: int, segments: int | None, L: int, name: str, root: int = 0,
               heads: int | None = None) -> Schedule:
    from .trees import host_blocks, host_trees

    L, H = host_blocks(p, L)
    hl = nvls_heads(L, heads)
    b = Builder("all_reduce", name, p, n, root)
    if len(hl) < L:
        b.meta["heads"] = len(hl)
    shapes = host_trees(H)
    chunks = split(n, len(hl))
    S = nvls_segments(max((c + 1) // 2 for _, c in chunks), segments)
    b.meta["segments"] = S
    for j, (o, c) in enumerate(chunks):
        for t, (ho, hn) in enumerate(split(c, 2)):
            parents, kids, depth, height, Ht = shapes[t]
            for s, (so, sn) in enumerate(split(hn, S)):
                x, i = out(o + ho + so, sn), inp(o + ho + so, sn)
                for h in range(H):
                    r = h * L + hl[j]
                    host = tuple(range(h * L, h * L + L))
                    b.switch_reduce(s, r, host, i, x, channel=0)
                    if parents[h] >= 0:
                        b.transfer(s + 1 + height[h], r, parents[h] * L + hl[j], x, x, True, 0)
                    down = s + 1 + Ht + depth[h]
                    for k in kids[h]:
                        b.transfer(down, r, k * L + hl[j], x, x, False, 0)
                    b.multicast(down, r, tuple(q for q in host if q != r), x, x, channel=1)
    return b.build()


@register("all_reduce", "collnet_direct", params=("segments", "local_size"))
def all_reduce_collnet_direct(nranks: int, count: int, root: int = 0, segments: int | None = None,
                              local_size: int | None = None) -> Schedule:
    """NCCL's CollNet Direct (SHARP): a direct reduce-scatter in each host, an in-network all-reduce of
    each shard across hosts through its owner's NIC, a direct all-gather in each host; pipelined.

    Hosts are blocks of ``local_size`` consecutive ranks (L of them per host, H hosts; default: one
    host). Local rank j owns chunk j (1/L of the buffer), cut in S segments. Segment s: round s, the
    owner copies its own part into scratch; round s + 1, every other rank of the host sends its part to
    the owner, which reduces it there (channel 0, NVLink); round s + 2, the owners of chunk j on every
    host (local rank j of each host: one NIC each) read the switch's all-reduce of their partial sums
    (SwitchReduce over that group, channel 0: each partial goes up its NIC once, the result comes down
    to each; ``meta["switch"] = "sharp"``; a copy on a single host); round s + 3, the owner sends the
    result to the other ranks of its host (channel 1, handed over from channel 0). The stages of
    successive segments overlap. Per rank: 2n(L - 1)/L each way over NVLink, n/L each way through its
    NIC (against about 2n/L for NCCL's tree and 2n(H - 1)/(H L) for the rail rings); no reduction
    across hosts on the GPU.
    """
    from .trees import host_blocks

    p, n = nranks, count
    L, H = host_blocks(p, local_size)
    chunks = split(n, L)
    m = max((c for _, c in chunks), default=0)
    S = nvls_segments(m, segments)
    b = Builder("all_reduce", "collnet_direct", p, n, root, scratch=m if L > 1 else 0)
    b.meta["segments"] = S
    b.meta["switch"] = "sharp"
    for j, (o, c) in enumerate(chunks):
        group = tuple(h * L + j for h in range(H))
        for s, (so, sn) in enumerate(split(c, S)):
            x = out(o + so, sn)
            for h in range(H):
                r = h * L + j
                local = [h * L + i for i in range(L) if i != j]
                t = inp(o + so, sn)
                if L > 1:  # the host's partial sum of the segment, in the owner's scratch
                    t = scr(so, sn)
                    b.copy(s, r, inp(o + so, sn), t)
                    for q in local:
                        b.transfer(s + 1, q, r, inp(o + so, sn), t, True, 0)
                if H > 1:
                    b.switch_reduce(s + 2, r, group, t, x, channel=0)
                else:
                    b.copy(s + 2, r, t, x)
                for q in local:
                    b.transfer(s + 3, r, q, x, x, False, 1)
    return b.build()


@register("all_reduce", "collnet_chain", params=("segments", "local_size"))
def all_reduce_collnet_chain(nranks: int, count: int, root: int = 0, segments: int | None = None,
                             local_size: int | None = None) -> Schedule:
    """NCCL's CollNet Chain (SHARP): in each host the ranks reduce each shard along a chain that ends at
    the shard's owner, the owners all-reduce it across hosts in the network, and the result goes back
    down the chain; pipelined.

    Hosts and shards as :func:`all_reduce_collnet_direct` (local rank j owns chunk j, cut in S segments).
    The chain of chunk j visits the host's ranks in the order j + 1, j + 2, ..., j (mod L): position 0
    sends its part of segment s in round s + 1, position i (1 <= i < L) copies its own part into scratch
    in round s + i - 1, receives and reduces the partial sum in round s + i and passes it on in round
    s + i + 1 (channel 0). The owner (the last position) reads the switch's all-reduce of segment s over
    the owners of chunk j on every host in round s + L (SwitchReduce, channel 0; a copy on a single host),
    and the result runs back down the chain, one position per round from round s + L + 1 (channel 1,
    handed over from channel 0). Per rank: 2n(L - 1)/L each way over NVLink, as Direct, with L hops of
    pipeline fill each way inside the host instead of one; n/L each way through its NIC.
    """
    from .trees import host_blocks

    p, n = nranks, count
    L, H = host_blocks(p, local_size)
    chunks = split(n, L)
    m = max((c for _, c in chunks), default=0)
    S = nvls_segments(m, segments)
    b = Builder("all_reduce", "collnet_chain", p, n, root, scratch=n if L > 1 else 0)
    b.meta["segments"] = S
    b.meta["switch"] = "sharp"
    for j, (o, c) in enumerate(chunks):
        group = tuple(h * L + j for h in range(H))
        order = [(j + 1 + i) % L for i in range(L)]  # the chain, ending at the owner j
        for s, (so, sn) in enumerate(split(c, S)):
            x, i_, t = out(o + so, sn), inp(o + so, sn), scr(o + so, sn)
            for h in range(H):
                chain = [h * L + q for q in order]
                for pos in range(1, L):  # up the chain, reducing into each position's scratch
                    b.copy(s + pos - 1, chain[pos], i_, t)
                    b.transfer(s + pos, chain[pos - 1], chain[pos], i_ if pos == 1 else t, t, True, 0)
                r = chain[-1]
                part = t if L > 1 else i_
                if H > 1:
                    b.switch_reduce(s + L, r, group, part, x, channel=0)
                else:
                    b.copy(s + L, r, part, x)
                for d in range(1, L):  # back down: position L - 1 - d gets it in round s + L + d
                    b.transfer(s + L + d, chain[L - d], chain[L - 1 - d], x, x, False, 1)
    return b.build()


# ---- vectorised traffic for large rank counts ---------------------------------------------------------


def _nvls_tree_traffic(p: int, n: int, segments: int | None, L: int, algorithm: str,
                       heads: int | None = None) -> "Traffic":
    """Traffic of :func:`all_reduce_nvls_tree` (``nvls``: one host of every rank), as
    :func:`~interlink.algorithms.traffic.from_schedule` gives it, one numpy pass per (round, chunk, tree
    half) over the hosts: messages into the switch (its reduction stream p, multicast stream p + 1) with
    the tree's sends, then the multicasts out (they only land: nothing reads them again), then the
    reductions out (waited for by channel 0, or by channel 1 on a single host, whose multicast reads
    them next)."""
    import numpy as np

    from .ring import split_sizes
    from .traffic import Phase, Traffic
    from .trees import host_blocks, host_trees_np

    L, H = host_blocks(p, L)
    hl = nvls_heads(L, heads)
    shapes = host_trees_np(H)
    sizes = split_sizes(n, len(hl))
    S = nvls_segments(max((int(c) + 1) // 2 for c in sizes.tolist()) if sizes.size else 0, segments)
    halves = [split_sizes(int(c), 2) for c in sizes.tolist()]
    segs = [[split_sizes(int(h), S) for h in hv] for hv in halves]
    hosts = np.arange(H, dtype=np.int64)
    SW, MC = p, p + 1
    last = S - 1 + 1 + max(Ht + int(d.max(initial=0)) for _, _, d, _, Ht in shapes)
    phases: list = []

    def add(ph) -> None:
        if phases and phases[-1].same_as(ph):
            phases[-1] = phases[-1].with_repeat(phases[-1].repeat + 1)
        else:
            phases.append(ph)

    e64 = np.zeros(0, dtype=np.int64)
    for k in range(last + 1):
        up_s, up_d, up_e, up_c, up_a = [], [], [], [], []
        lm_s, lm_d, lm_e = [], [], []
        sd_d, sd_e = [], []
        red = np.zeros(p, dtype=np.int64)
        for j, lj in enumerate(hl):
            for t in range(2):
                parents, _, depth, height, Ht = shapes[t]
                seg = segs[j][t]
                ranks = hosts * L + lj
                # in-switch reduction of segment k over each host: every member -> switch, then switch -> r
                if k < S and seg[k] > 0:
                    m = seg[k]
                    g = (hosts[:, None] * L + np.arange(L)[None, :]).ravel()
                    up_s.append(g), up_d.append(np.full(g.size, SW)), up_e.append(np.full(g.size, m))
                    up_c.append(np.zeros(g.size, np.int64)), up_a.append(np.full(g.size, -1))
                    sd_d.append(ranks), sd_e.append(np.full(H, m))
                # up the tree: host h sends segment k - 1 - height[h] to its parent (reducing there)
                s_up = k - 1 - height
                ok = (parents >= 0) & (s_up >= 0) & (s_up < S)
                if ok.any():
                    el = seg[s_up[ok]]
                    nz = el > 0
                    src, dst = ranks[ok][nz], parents[ok][nz] * L + lj
                    up_s.append(src), up_d.append(dst), up_e.append(el[nz])
                    up_c.append(np.zeros(src.size, np.int64)), up_a.append(np.full(src.size, -1))
                    np.add.at(red, dst, el[nz])
                # down the tree and the multicast in each host: segment k - 1 - Ht - depth[h]
                s_dn = k - 1 - Ht - depth
                okh = (s_dn >= 0) & (s_dn < S)
                kid = okh[np.maximum(parents, 0)] & (parents >= 0)  # kids of hosts sending down now
                if kid.any():
                    el = seg[s_dn[parents[kid]]]
                    nz = el > 0
                    src, dst = parents[kid][nz] * L + lj, ranks[kid][nz]
                    up_s.append(src), up_d.append(dst), up_e.append(el[nz])
                    up_c.append(np.zeros(src.size, np.int64)), up_a.append(np.full(src.size, -1))
                if okh.any() and L > 1:
                    el = seg[s_dn[okh]]
                    nz = el > 0
                    src = ranks[okh][nz]
                    el = el[nz]
                    up_s.append(src), up_d.append(np.full(src.size, MC)), up_e.append(el)
                    up_c.append(np.ones(src.size, np.int64)), up_a.append(np.zeros(src.size, np.int64))
                    others = (src[:, None] // L) * L + np.arange(L)[None, :]
                    keep = others != src[:, None]
                    lm_d.append(others[keep]), lm_e.append(np.broadcast_to(el[:, None], others.shape)[keep])
        cat = (lambda xs: np.concatenate(xs) if xs else e64)
        src, dst, el, ch, af = cat(up_s), cat(up_d), cat(up_e), cat(up_c), cat(up_a)
        if src.size or red.any():
            add(Phase(src, dst, el, red if red.any() else None, 1, ch if ch.any() else None, True,
                      af if (af >= 0).any() else None))
        d = cat(lm_d)
        if d.size:
            add(Phase(np.full(d.size, MC), d, cat(lm_e), None, 1, np.ones(d.size, np.int64), False))
        d = cat(sd_d)
        if d.size:
            gate = np.ones(d.size, np.int64) if H == 1 and L > 1 else None
            add(Phase(np.full(d.size, SW), d, cat(sd_e), None, 1, None, True, None, gate))
    groups = tuple(tuple(range(h * L, h * L + L)) for h in range(H)) if n else ()
    return Traffic("all_reduce", algorithm, p, n, tuple(phases), groups)


def _collnet_traffic(p: int, n: int, segments: int | None, local_size: int | None, algorithm: str) -> "Traffic":
    """Traffic of :func:`all_reduce_collnet_direct` / :func:`all_reduce_collnet_chain`, as
    :func:`~interlink.algorithms.traffic.from_schedule` gives it, one numpy pass per round over the chunks
    and hosts: the round's messages (NVLink sends, each member's partial sum up to the SHARP switch
    once per group, the results' hand-offs from channel 0 to channel 1), then the switch's results down to
    their readers (gated by the channel that reads them next: 1, or none on one rank per host)."""
    import numpy as np

    from .ring import split_sizes
    from .traffic import Phase, Traffic
    from .trees import host_blocks

    L, H = host_blocks(p, local_size)
    sizes = split_sizes(n, L)
    S = nvls_segments(int(sizes.max(initial=0)), segments)
    seg = np.stack([split_sizes(int(c), S) for c in sizes.tolist()])  # (L, S)
    SW = p
    chain = algorithm == "collnet_chain"
    last = S - 1 + (2 * L - 1 if chain else 3)
    hosts = np.arange(H, dtype=np.int64)[:, None] * L  # (H, 1)
    lanes = np.arange(L, dtype=np.int64)
    gate_ch = 1 if L > 1 else -1
    phases: list = []

    def add(ph) -> None:
        if phases and phases[-1].same_as(ph):
            phases[-1] = phases[-1].with_repeat(phases[-1].repeat + 1)
        else:
            phases.append(ph)

    for k in range(last + 1):
        parts = []  # (src, dst, elems, channel, after, key j)
        red = np.zeros(p, dtype=np.int64)

        def emit(src, dst, el, ch, aft, j, reduce=False):
            src, dst, el, j = (np.broadcast_to(x, np.broadcast(src, dst, el, j).shape).reshape(-1)
                               for x in (src, dst, el, j))
            ok = el > 0
            src, dst, el, j = src[ok], dst[ok], el[ok], j[ok]
            parts.append((src, dst, el, np.full(src.size, ch, np.int64), np.full(src.size, aft, np.int64), j))
            if reduce:
                np.add.at(red, dst, el)

        def seg_at(s: int):
            """(chunks j, their size of segment s) for every chunk, or none where s is out of range (every
            chunk of a host is at the same segment in a round)."""
            if 0 <= s < S:
                return lanes, seg[:, s]
            return lanes[:0], seg[:0, 0]

        if not chain:
            if L > 1:  # the host's parts to the owner (reduced there), then the result back (channel 1)
                q = lanes[None, :]
                for s_, up in ((k - 1, True), (k - 3, False)):
                    j, el = seg_at(s_)
                    if j.size:
                        jj, qq = np.broadcast_arrays(j[:, None], q)
                        keep = jj != qq
                        jj, qq = jj[keep], qq[keep]
                        e = np.broadcast_to(el[:, None], keep.shape)[keep]
                        own, oth = hosts + jj[None, :], hosts + qq[None, :]
                        if up:
                            emit(oth, own, e[None, :], 0, -1, jj[None, :], reduce=True)
                        else:
                            emit(own, oth, e[None, :], 1, 0, jj[None, :])
            sw = k - 2
        else:
            if L > 1:  # up the chains (position pos of chunk j's chain: local rank (j + 1 + pos) % L)
                pos = np.arange(1, L, dtype=np.int64)
                for pp in pos.tolist():
                    j, el = seg_at(k - pp)
                    if j.size:
                        emit(hosts + (j + pp) % L, hosts + (j + pp + 1) % L, el[None, :], 0, -1, j[None, :],
                             reduce=True)
                for d in range(1, L):  # back down (channel 1; the first hop hands over from channel 0)
                    j, el = seg_at(k - L - d)
                    if j.size:
                        emit(hosts + (j + 1 - d) % L, hosts + (j - d) % L, el[None, :], 1, 0 if d == 1 else -1,
                             j[None, :])
            sw = k - L
        down = None
        if H > 1:
            j, el = seg_at(sw)
            if j.size:
                g = hosts + j[None, :]
                emit(g, np.full(g.shape, SW, np.int64), el[None, :], 0, -1, j[None, :])
                ok = el > 0
                down = ((hosts + j[ok][None, :]).reshape(-1), np.broadcast_to(el[ok][None, :], (H, int(ok.sum()))
                                                                               ).reshape(-1))
        if parts:
            src, dst, el, ch, af, key = (np.concatenate([x[i] for x in parts]) for i in range(6))
            o = np.argsort(key, kind="stable")  # the builder's order (chunk by chunk): merged pairs keep the first
            src, dst, el, ch, af = src[o], dst[o], el[o], ch[o], af[o]
        else:
            src = dst = el = ch = af = np.zeros(0, dtype=np.int64)
        if src.size or red.any():
            add(Phase(src, dst, el, red if red.any() else None, 1, ch if ch.any() else None, True,
                      af if (af >= 0).any() else None))
        if down is not None and down[0].size:
            d, e = down
            gate = None if gate_ch == 0 else np.full(d.size, gate_ch, np.int64)
            add(Phase(np.full(d.size, SW, np.int64), d, e.astype(np.int64), None, 1, None, True, None, gate))
    groups = tuple(tuple(range(j, p, L)) for j in range(L) if sizes[j] > 0) if H > 1 else ()
    return Traffic("all_reduce", algorithm, p, n, tuple(phases), groups, "sharp")


def _collnet_messages(p: int, n: int, segments: int | None = None, local_size: int | None = None, **_) -> int:
    """An upper bound of the messages of :func:`_collnet_traffic`: per segment, at most 2p(L - 1) NVLink
    messages and 2p to and from the switch."""
    from .trees import host_blocks

    L, _H = host_blocks(p, local_size)
    return 2 * p * L * nvls_segments(-(-n // max(L, 1)), segments)


def _register_traffic() -> None:
    from .traffic import register_traffic

    @register_traffic("all_reduce", "nvls")
    def nvls_traffic(nranks: int, count: int, root: int = 0, segments: int | None = None,
                     heads: int | None = None):
        return _nvls_tree_traffic(nranks, count, segments, nranks, "nvls", heads)

    @register_traffic("all_reduce", "nvls_tree")
    def nvls_tree_traffic(nranks: int, count: int, root: int = 0, segments: int | None = None,
                          local_size: int | None = None, heads: int | None = None):
        return _nvls_tree_traffic(nranks, count, segments, int(local_size or nranks), "nvls_tree", heads)

    @register_traffic("all_reduce", "collnet_direct", messages=_collnet_messages)
    def collnet_direct_traffic(nranks: int, count: int, root: int = 0, segments: int | None = None,
                               local_size: int | None = None):
        return _collnet_traffic(nranks, count, segments, local_size, "collnet_direct")

    @register_traffic("all_reduce", "collnet_chain", messages=_collnet_messages)
    def collnet_chain_traffic(nranks: int, count: int, root: int = 0, segments: int | None = None,
                              local_size: int | None = None):
        return _collnet_traffic(nranks, count, segments, local_size, "collnet_chain")


_register_traffic()
