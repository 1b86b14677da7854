"""Algorithms that reduce in the network: the switch does the arithmetic (NVLink SHARP on NVSwitch gen 3+,
"NVLS" in NCCL; SHARP on InfiniBand switches).

    all_reduce nvls: rank r owns chunk r (1/p of the buffer): it reads the switch's reduction of its
    chunk over every rank (SwitchReduce, NCCL's multimem.ld_reduce) and writes the result to every other
    rank through the switch (Multicast, multimem.st), pipelined in segments (the multicast of segment j
    with the reduction of segment j + 1).

Bytes per rank: up to the switch n (its part of every chunk, read by the switch) + n/p (its chunk,
multicast); down n/p (its reduced chunk) + n (every chunk, multicast): n(1 + 1/p) each way, against
2n(p - 1)/p for a ring; no reduction on the GPU. The Schedule says what the switch does with
:class:`~interlink.algorithms.schedule.SwitchReduce` and :class:`~interlink.algorithms.schedule.Multicast`;
the reference interpreter and the verifier run those steps, executors without such a switch run the
point-to-point lowering (:func:`~interlink.algorithms.schedule.two_sided`), and the cost model and the
simulator route the steps through the ranks' NVLS switch (``Topology.nvls_switch``).
"""

from __future__ import annotations

from .registry import register
from .schedule import Builder, Schedule, inp, out, split

#: algorithms whose Schedules need a switch that reduces: the model and the simulator price them where the
#: topology has one; interlink's own executors only run their point-to-point lowering (for checks), so the
#: runtime's tuner does not offer them
NEEDS_SWITCH = ("nvls", "nvls_tree")


def nvls_segments(chunk: int, segments: int | None) -> int:
    """Segments of each rank's chunk: given, else one per 64 Ki elements, at most 128, never more than the
    chunk's elements (1 for an empty chunk)."""
    if segments is not None:
        if int(segments) < 1:
            raise ValueError(f"segments must be >= 1, got {segments}")
        return max(1, min(int(segments), chunk))
    return max(1, min(chunk, 128, chunk // 65536))


@register("all_reduce", "nvls", params=("segments",))
def all_reduce_nvls(nranks: int, count: int, root: int = 0, segments: int | None = None) -> Schedule:
    """S + 1 rounds, pipelined: rank r owns chunk r (1/p of the buffer), cut in S segments. In round j it
    reads the in-switch reduction of its segment j (SwitchReduce) and multicasts its segment j - 1,
    reduced in the round before, to every other rank (Multicast). The switch's reduction and multicast
    streams run at once, so each rank's link to the switch carries n(1 + 1/p) each way in S + 1 steps."""
    p, n = nranks, count
    b = Builder("all_reduce", "nvls", p, n, root)
    group = tuple(range(p))
    chunks = split(n, p)
    S = nvls_segments(max(c for _, c in chunks), segments)
    b.meta["segments"] = S
    for r, (o, c) in enumerate(chunks):
        others = tuple(g for g in group if g != r)
        for j, (so, sn) in enumerate(split(c, S)):
            # the reductions on channel 0, the multicasts on channel 1: channel 1 takes each segment over
            # from channel 0 (a hand-off), so the reduction of segment j + 1 does not wait for the
            # multicast of segment j, as NCCL's NVLS kernel runs the two at once
            b.switch_reduce(j, r, group, inp(o + so, sn), out(o + so, sn), channel=0)
            b.multicast(j + 1, r, others, out(o + so, sn), out(o + so, sn), channel=1)
    return b.build()


__all__ = ["NEEDS_SWITCH", "all_reduce_nvls", "all_reduce_nvls_tree", "nvls_segments"]


@register("all_reduce", "nvls_tree", params=("segments", "local_size"))
def all_reduce_nvls_tree(nranks: int, count: int, root: int = 0, segments: int | None = None,
                         local_size: int | None = None) -> Schedule:
    """NCCL's NVLSTree: NVLS inside each host, a double binary tree across hosts, pipelined in segments.

    Hosts are blocks of ``local_size`` consecutive ranks (default: one host, where this is :func:`all_reduce_nvls`).
    Local rank j owns chunk j (1/L of the buffer), cut in two halves (one per tree of the
    :func:`~interlink.algorithms.trees.double_binary_tree` over the hosts) and S segments. Segment s:
    round s, every rank reads the in-switch reduction of its segment over its host (SwitchReduce); up
    the tree on rail j (host h of subtree height ht sends to its parent in round s + 1 + ht, reducing);
    down from the tree's root (a host at depth d forwards it in round s + 1 + H + d, H the tree's
    height); in that same round the host's rank j multicasts the final segment to its host (Multicast,
    channel 1, handed over from channel 0). Per rank: n(1 + 1/L) each way over NVLink to the switch and
    about 2n/L each way over its NIC.
    """
    from .trees import _children, _depths, _heights, double_binary_tree

    p, n = nranks, count
    L = int(local_size or p)
    if L < 1 or p % L:
        L = p
    H = p // L
    b = Builder("all_reduce", "nvls_tree", p, n, root)
    shapes = []
    for parents in (double_binary_tree(H) if H > 1 else ([-1], [-1])):
        kids = _children(parents)
        depth = _depths(parents)
        height = _heights(kids, depth)
        shapes.append((parents, kids, depth, height, height[parents.index(-1)]))
    chunks = split(n, L)
    S = nvls_segments(max((c + 1) // 2 for _, c in chunks), segments)
    b.meta["segments"] = S
    for j, (o, c) in enumerate(chunks):
        for t, (ho, hn) in enumerate(split(c, 2)):
            parents, kids, depth, height, Ht = shapes[t]
            for s, (so, sn) in enumerate(split(hn, S)):
                x, i = out(o + ho + so, sn), inp(o + ho + so, sn)
                for h in range(H):
                    r = h * L + j
                    host = tuple(range(h * L, h * L + L))
                    b.switch_reduce(s, r, host, i, x, channel=0)
                    if parents[h] >= 0:
                        b.transfer(s + 1 + height[h], r, parents[h] * L + j, x, x, True, 0)
                    down = s + 1 + Ht + depth[h]
                    for k in kids[h]:
                        b.transfer(down, r, k * L + j, x, x, False, 0)
                    b.multicast(down, r, tuple(q for q in host if q != r), x, x, channel=1)
    return b.build()
