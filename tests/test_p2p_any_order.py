"""Receives from any rank queued among receives from a named rank match messages in call order (torch's
semantics): a per-pair sequence number is given to a queued receive when it runs, not when it is posted.
Before, ``irecv(any); irecv(src=1)`` raised CollectiveMismatchError ("expecting seq 2 ... sent seq 1")."""

from __future__ import annotations

import numpy as np

from mp import run_ranks


def _any_then_named(rank: int, world: int) -> list:
    import interlink as d

    d.init(timeout=20)
    got = []
    if rank == 0:
        bufs = [np.zeros(3) for _ in range(4)]
        # from any, from 1, from any, from 1: rank 1 sends 1, 2, 3 (in order), rank 2 sends 10 after a barrier
        ws = [d.irecv(bufs[0]), d.irecv(bufs[1], src=1), d.irecv(bufs[2]), d.irecv(bufs[3], src=1)]
        srcs = [w.result() for w in ws]
        got = [b[0] for b in bufs] + [srcs[0], srcs[2]]
        d.barrier()
        last = np.zeros(3)
        d.recv(last, src=None)
        got.append(last[0])
    elif rank == 1:
        for v in (1.0, 2.0, 3.0):
            d.send(np.full(3, v), 0)
        d.send(np.full(3, 4.0), 0)
        d.barrier()
    else:
        d.barrier()
        d.send(np.full(3, 10.0), 0)
    d.destroy()
    return got


def test_receives_from_any_and_from_a_rank_match_in_call_order():
    for transport in ("shm", "tcp"):
        got = run_ranks(3, _any_then_named, env={"INTERLINK_TRANSPORT": transport}, timeout=90)[0]
        assert got[:4] == [1.0, 2.0, 3.0, 4.0], (transport, got)
        assert got[4:6] == [1, 1] and got[6] == 10.0, (transport, got)
