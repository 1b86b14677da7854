"""Dissemination barrier."""

from __future__ import annotations

import numpy as np
import pytest

from interlink.algorithms import get_entry, get_schedule, verify_schedule
from interlink.algorithms.schedule import Round, Schedule
from interlink.algorithms.trees import ceil_log2
from interlink.errors import VerificationError


@pytest.mark.parametrize("p", list(range(1, 34)))
def test_dissemination_verifies_and_costs(p):
    s = get_schedule("barrier", "dissemination", p, 0)
    verify_schedule(s, dtypes=(np.float32, np.int32, np.float64))
    L = ceil_log2(p)
    assert s.comm_rounds == L
    assert s.nrounds == L
    assert sum(s.sent_per_rank()) == 0  # zero-length messages only
    for k in range(L):
        for r in range(p):
            (snd,) = s.ranks[r][k].sends
            (rcv,) = s.ranks[r][k].recvs
            assert snd.peer == (r + 2**k) % p and snd.src.count == 0
            assert rcv.peer == (r - 2**k) % p and rcv.dst.count == 0
    assert len(list(s.messages())) == p * L


def test_summary_states_rounds():
    assert "round" in get_entry("barrier", "dissemination").summary


@pytest.mark.parametrize("p", [2, 3, 5, 8, 17])
def test_truncated_barrier_fails(p):
    s = get_schedule("barrier", "dissemination", p, 0)
    # drop the last round: some rank can leave before every other rank arrived
    ranks = tuple(prog[:-1] + (Round(),) for prog in s.ranks)
    broken = Schedule(s.collective, s.algorithm, p, 0, 0, dict(s.buffers), ranks, dict(s.meta))
    with pytest.raises(VerificationError):
        verify_schedule(broken)
