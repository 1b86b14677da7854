"""Pairwise exchange: in each round every rank sends one block to one peer and receives one block
from another, so no link or port is ever shared within a round.

Bandwidth-optimal for all-to-all (each block crosses the network once); latency is p-1 rounds.
"""

from __future__ import annotations

from .registry import register
from .schedule import Builder, Schedule, inp, out


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
