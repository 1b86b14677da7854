"""Recursive doubling / halving and Rabenseifner: correctness for any p and count, round and byte
formulas, and that a broken schedule is caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from interlink.algorithms import Recv, Round, get_entry, get_schedule, verify_schedule
from interlink.algorithms.recursive import fold, new_rank, old_rank
from interlink.algorithms.schedule import Copy, Reduce
from interlink.errors import InterlinkError, VerificationError

DTYPES = (np.float32, np.int32, np.float64)
NRANKS = list(range(1, 18))
COUNTS = (0, 1, 2, 3, 7, 13, 64)
ALGOS = [
    ("all_reduce", "recursive_doubling"),
    ("all_reduce", "rabenseifner"),
    ("all_gather", "recursive_doubling"),
    ("reduce_scatter", "recursive_halving"),
]
POW2 = (1, 2, 4, 8, 16)


def lg(p: int) -> int:
    return p.bit_length() - 1


def writes_input(s) -> bool:
    for r in range(s.nranks):
        for _, st in s.steps(r):
            if isinstance(st, Recv) and st.dst.buffer == "input":
                return True
            if isinstance(st, (Copy, Reduce)) and st.dst.buffer == "input":
                return True
    return False


@pytest.mark.parametrize("coll,alg", ALGOS)
@pytest.mark.parametrize("p", NRANKS)
def test_verifies(coll, alg, p):
    for n in COUNTS:
        s = get_schedule(coll, alg, p, n)
        assert s.collective == coll and s.algorithm == alg and s.nranks == p and s.count == n
        assert verify_schedule(s, dtypes=DTYPES) > 0
        assert not writes_input(s)


@pytest.mark.parametrize("coll,alg", ALGOS)
def test_registered_with_summary(coll, alg):
    e = get_entry(coll, alg)
    assert "round" in e.summary


def test_fold_maps():
    for p in NRANKS:
        pp, r = fold(p)
        assert pp & (pp - 1) == 0 and pp <= p < 2 * pp and r == p - pp
        core = [q for q in range(p) if new_rank(q, r) >= 0]
        assert len(core) == pp
        assert [old_rank(new_rank(q, r), r) for q in core] == core
        assert sorted(new_rank(q, r) for q in core) == list(range(pp))


@pytest.mark.parametrize("p", NRANKS)
def test_recursive_doubling_all_reduce_rounds(p):
    n = 64
    s = get_schedule("all_reduce", "recursive_doubling", p, n)
    pp, extra = fold(p)
    assert s.comm_rounds == lg(pp) + (2 if extra else 0)
    if p == pp:
        assert s.sent_per_rank() == [lg(p) * n] * p
        assert [x for x in s.max_sent_per_round() if x] == [n] * lg(p)


@pytest.mark.parametrize("p", NRANKS)
def test_rabenseifner_rounds_and_bytes(p):
    pp, extra = fold(p)
    for n in (64, 13, 1000):
        s = get_schedule("all_reduce", "rabenseifner", p, n)
        if n >= pp:
            assert s.comm_rounds == 2 * lg(pp) + (2 if extra else 0)
        if p == pp:
            ideal = 2 * n * (p - 1) / p
            for sent in s.sent_per_rank():
                assert abs(sent - ideal) <= 2 * lg(p)  # split() rounding, at most 1 per exchange
            if n % p == 0:
                assert s.sent_per_rank() == [2 * n * (p - 1) // p] * p
        else:
            # the even rank of a folded pair sends its buffer once; its odd partner pays the core
            # plus the whole buffer back; the other ranks pay the core only
            core = 2 * n * (pp - 1) / pp
            for q, sent in enumerate(s.sent_per_rank()):
                if new_rank(q, extra) < 0:
                    assert sent == n
                else:
                    assert abs(sent - core - (n if q < 2 * extra else 0)) <= 2 * lg(pp)


@pytest.mark.parametrize("p", NRANKS)
def test_all_gather_recursive_doubling_rounds(p):
    n = 5
    s = get_schedule("all_gather", "recursive_doubling", p, n)
    pp, extra = fold(p)
    assert s.comm_rounds == lg(pp) + (2 if extra else 0)
    if p == pp:
        assert s.sent_per_rank() == [(p - 1) * n] * p
        assert s.recv_per_rank() == [(p - 1) * n] * p


@pytest.mark.parametrize("p", NRANKS)
def test_reduce_scatter_recursive_halving_rounds(p):
    n = 6
    s = get_schedule("reduce_scatter", "recursive_halving", p, n)
    pp, extra = fold(p)
    assert s.comm_rounds == lg(pp) + (2 if extra else 0)
    if p == pp:
        assert s.sent_per_rank() == [(p - 1) * n] * p
        # halving: n p/2, n p/4, ..., n
        assert [x for x in s.max_sent_per_round() if x] == [n * p >> (k + 1) for k in range(lg(p))]


def _corrupt(s, fn):
    """A copy of s with fn applied to every step of every rank (fn returns the new step)."""
    ranks = tuple(tuple(Round(tuple(fn(r, k, st) for st in rnd.steps)) for k, rnd in enumerate(prog))
                  for r, prog in enumerate(s.ranks))
    return dataclasses.replace(s, ranks=ranks)


def test_corrupted_schedule_fails():
    s = get_schedule("all_reduce", "recursive_doubling", 8, 16)
    verify_schedule(s)
    # a reducing receive turned into a plain one loses contributions
    hit = {"done": False}

    def plain(r, k, st):
        if r == 3 and isinstance(st, Recv) and st.reduce and not hit["done"]:
            hit["done"] = True
            return dataclasses.replace(st, reduce=False)
        return st

    bad = _corrupt(s, plain)
    assert hit["done"]
    with pytest.raises(InterlinkError):
        verify_schedule(bad)


def test_corrupted_rabenseifner_fails():
    s = get_schedule("all_reduce", "rabenseifner", 6, 24)
    verify_schedule(s)
    # drop the last round of one rank: it misses the final all-gather / unfold
    ranks = list(s.ranks)
    prog = list(ranks[0])
    prog[-1] = Round(())
    ranks[0] = tuple(prog)
    # the matching sender now has no receiver: structural error
    with pytest.raises(InterlinkError):
        verify_schedule(dataclasses.replace(s, ranks=tuple(ranks)))
    # or, with the numeric/symbolic checks alone, the result is wrong
    peers = {st.peer for st in s.ranks[0][-1].steps if isinstance(st, Recv)}
    for q in peers:
        prog = list(ranks[q])
        prog[-1] = Round(tuple(st for st in prog[-1].steps if getattr(st, "peer", None) != 0))
        ranks[q] = tuple(prog)
    bad = dataclasses.replace(s, ranks=tuple(ranks))
    bad.validate()
    with pytest.raises(VerificationError):
        verify_schedule(bad)
