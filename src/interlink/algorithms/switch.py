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


__all__ = ["all_reduce_nvls", "nvls_segments"]
