"""All-to-all with per-peer sizes (torch's all_to_all_single with split sizes): each rank's program is a
pairwise exchange whose message sizes only that rank knows, so the Schedule is built per rank, per call
(it is not in the registry: the registry's Schedules are the same for every rank and size).
``interlink algorithms --verify`` checks it: :func:`interlink.algorithms.verify.check_alltoallv` merges
every rank's program for a split matrix and runs it on distinct values."""

from __future__ import annotations

import numpy as np

from .schedule import Builder, Chunk, Schedule

__all__ = ["alltoallv_schedule"]


def alltoallv_schedule(p: int, rank: int, isizes: list[int], osizes: list[int], isize: int, osize: int) -> Schedule:
    """Pairwise exchange with per-peer sizes (this rank's program only; the header of every message
    carries its size, so disagreeing split sizes raise CollectiveMismatchError)."""
    ioff = np.concatenate([[0], np.cumsum(isizes)]).astype(int)
    ooff = np.concatenate([[0], np.cumsum(osizes)]).astype(int)
    b = Builder("all_to_all", "pairwise_v", p, 0, 0, keep_empty=True)
    b.buffers.update({"input": isize, "output": osize})
    b.copy(0, rank, Chunk("input", int(ioff[rank]), isizes[rank]), Chunk("output", int(ooff[rank]), osizes[rank]))
    for k in range(1, p):
        to, frm = (rank + k) % p, (rank - k) % p
        b.send(k, rank, to, Chunk("input", int(ioff[to]), isizes[to]))
        b.recv(k, rank, frm, Chunk("output", int(ooff[frm]), osizes[frm]))
    # keep_empty: zero-size steps and rounds stay, so every rank's program has p rounds (the verifier merges
    # them round by round)
    sched = b.build()
    return sched
