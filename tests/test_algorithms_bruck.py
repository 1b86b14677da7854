"""Bruck all-gather / all-to-all and pairwise all-to-all: correctness for any p and count, round
and byte formulas, and that a broken schedule is caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import interlink.algorithms.pairwise  # noqa: F401  (registers all_to_all/pairwise)
from interlink.algorithms import Recv, Round, Send, get_entry, get_schedule, verify_schedule
from interlink.algorithms.schedule import Copy, Reduce
from interlink.errors import VerificationError

DTYPES = (np.float32, np.int32, np.float64)
NRANKS = list(range(1, 18))
COUNTS = (0, 1, 2, 3, 7, 13, 64)
ALGOS = [
    ("all_gather", "bruck"),
    ("all_to_all", "bruck"),
    ("all_to_all", "pairwise"),
]


def ceil_lg(p: int) -> int:
    return (p - 1).bit_length()


def writes_input(s) -> bool:
    for r in range(s.nranks):
        for _, st in s.steps(r):
            if isinstance(st, (Recv, Copy, Reduce)) and st.dst.buffer == "input":
                return True
    return False


@pytest.mark.parametrize("coll,alg", ALGOS)
@pytest.mark.parametrize("p", NRANKS)
def test_verifies(coll, alg, p):
    for n in COUNTS:
        s = get_schedule(coll, alg, p, n)
        assert s.collective == coll and s.algorithm == alg
        assert verify_schedule(s, dtypes=DTYPES) == len(DTYPES)
        assert not writes_input(s)


@pytest.mark.parametrize("coll,alg", ALGOS)
def test_registered_with_summary(coll, alg):
    assert "round" in get_entry(coll, alg).summary


@pytest.mark.parametrize("p", NRANKS)
def test_bruck_all_gather_rounds_and_bytes(p):
    n = 7
    s = get_schedule("all_gather", "bruck", p, n)
    assert s.comm_rounds == ceil_lg(p)
    assert s.sent_per_rank() == [(p - 1) * n] * p
    assert s.recv_per_rank() == [(p - 1) * n] * p
    # round k moves min(2^k, p - 2^k) blocks, to the rank 2^k below
    sent = [x for x in s.max_sent_per_round() if x]
    assert sent == [min(1 << k, p - (1 << k)) * n for k in range(ceil_lg(p))]
    for k in range(s.nrounds):
        for a, b, _ in s.round_traffic(k):
            assert (a - b) % p == 1 << k


@pytest.mark.parametrize("p", NRANKS)
def test_bruck_all_to_all_rounds_and_bytes(p):
    n = 4
    s = get_schedule("all_to_all", "bruck", p, n)
    assert s.comm_rounds == ceil_lg(p)
    moved = sum(1 for k in range(ceil_lg(p)) for i in range(1, p) if i >> k & 1)
    assert s.sent_per_rank() == [moved * n] * p
    if p & (p - 1) == 0:
        assert moved == p // 2 * ceil_lg(p)  # (n p/2) lg p per rank
    # one message per rank per round (packed through scratch)
    for k in range(s.nrounds):
        for r in range(p):
            assert len(s.ranks[r][k].sends) <= 1


@pytest.mark.parametrize("p", NRANKS)
def test_pairwise_rounds_and_bytes(p):
    n = 3
    s = get_schedule("all_to_all", "pairwise", p, n)
    assert s.comm_rounds == p - 1
    assert s.sent_per_rank() == [(p - 1) * n] * p
    assert s.nrounds == max(1, p - 1)  # the own-block copy rides in the first round
    for k in range(s.comm_rounds):
        traffic = s.round_traffic(k)
        assert len(traffic) == p
        for a, b, c in traffic:
            assert (b - a) % p == k + 1 and c == n


def _replace_step(s, rank: int, pred, fn):
    """Copy of s where the first step of `rank` matching pred is replaced by fn(step)."""
    ranks = [list(prog) for prog in s.ranks]
    for k, rnd in enumerate(ranks[rank]):
        for i, st in enumerate(rnd.steps):
            if pred(st):
                steps = list(rnd.steps)
                steps[i] = fn(st)
                ranks[rank][k] = Round(tuple(steps))
                return dataclasses.replace(s, ranks=tuple(tuple(p) for p in ranks))
    raise AssertionError("no step matched")


def test_corrupted_pairwise_fails():
    n = 5
    s = get_schedule("all_to_all", "pairwise", 4, n)
    verify_schedule(s)
    # rank 1 sends the wrong input block: structurally fine, numerically wrong
    def shift(st):
        return dataclasses.replace(st, src=dataclasses.replace(st.src, offset=(st.src.offset + n) % (4 * n)))

    bad = _replace_step(s, 1, lambda st: isinstance(st, Send), shift)
    bad.validate()
    with pytest.raises(VerificationError):
        verify_schedule(bad)


def test_corrupted_bruck_fails():
    s = get_schedule("all_gather", "bruck", 5, 3)
    verify_schedule(s)
    # rank 2 never stores its own block
    bad = _replace_step(s, 2, lambda st: isinstance(st, Copy),
                        lambda st: Copy(st.src, dataclasses.replace(st.dst, offset=(st.dst.offset + 3) % 15)))
    bad.validate()
    with pytest.raises(VerificationError):
        verify_schedule(bad)
