"""Pairwise exchange: in each round every rank sends one block to one peer and receives one block
from another, so no link or port is ever shared within a round.

Bandwidth-optimal for all-to-all (each block crosses the network once); latency is p-1 rounds.
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .schedule import Builder, Schedule, inp, out
from .traffic import Phase, Traffic, register_traffic


@register("all_to_all", "pairwise")
def all_to_all_pairwise(nranks: int, count: int, root: int = 0) -> Schedule:
    """p-1 rounds; each rank sends (p-1)n, one block per round (own block copied locally)."""
    p, n = nranks, count
    b = Builder("all_to_all", "pairwise", p, n, root)
    for r in range(p):
        b.copy(0, r, inp(r * n, n), out(r * n, n))
    for k in range(1, p):
        for r in range(p):
            # round k-1: rank r sends block (r+k)%p to its owner, which stores it as block r
            # (so rank r itself receives block r from rank (r-k)%p in the same round)
            to = (r + k) % p
            b.transfer(k - 1, r, to, inp(to * n, n), out(r * n, n))
    return b.build()


@register_traffic("all_to_all", "pairwise", messages=lambda p, n=0, **_: p * max(p - 1, 0))
def all_to_all_pairwise_traffic(nranks: int, count: int, root: int = 0) -> Traffic:
    """Traffic of :func:`all_to_all_pairwise`: in round k - 1 (k = 1..p-1) every rank sends one block to the
    rank k above it. The p - 1 rounds have different pairs: p(p - 1) messages are stored."""
    p, n = nranks, count
    phases = []
    if n > 0 and p > 1:
        r = np.arange(p, dtype=np.int64)
        el = np.full(p, n, dtype=np.int64)
        phases = [Phase(r, (r + k) % p, el, None) for k in range(1, p)]
    return Traffic("all_to_all", "pairwise", p, n, tuple(phases))
