"""Barrier algorithms: zero-length messages that carry only the fact that a rank has arrived."""

from __future__ import annotations

import numpy as np

from .registry import register
from .schedule import Builder, Schedule, inp, out
from .traffic import Phase, Traffic, register_traffic


@register("barrier", "dissemination")
def barrier_dissemination(nranks: int, count: int = 0, root: int = 0) -> Schedule:
    """ceil(log2 p) rounds; every rank sends one zero-length message per round (0 bytes on the wire).

    In round k rank r signals (r + 2^k) % p and waits for (r - 2^k) % p (Hensgen, Finkel and
    Manber): after round k every rank knows that the 2^(k+1) ranks before it have arrived."""
    p = nranks
    b = Builder("barrier", "dissemination", p, 0, root, keep_empty=True)
    k = 0
    while (1 << k) < p:
        d = 1 << k
        for r in range(p):
            b.send(k, r, (r + d) % p, inp(0, 0))
            b.recv(k, r, (r - d) % p, out(0, 0))
        k += 1
    return b.build()


@register_traffic("barrier", "dissemination")
def barrier_dissemination_traffic(nranks: int, count: int = 0, root: int = 0) -> Traffic:
    """Traffic of :func:`barrier_dissemination`: in round k every rank sends a zero-length message to the
    rank 2^k above it (count is always 0)."""
    p = nranks
    r = np.arange(p, dtype=np.int64)
    zero = np.zeros(p, dtype=np.int64)
    phases = []
    d = 1
    while d < p:
        phases.append(Phase(r, (r + d) % p, zero, None))
        d *= 2
    return Traffic("barrier", "dissemination", p, 0, tuple(phases))
