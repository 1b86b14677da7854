"""Binomial trees (broadcast, reduce, gather, scatter) and the double binary tree all-reduce."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from interlink.algorithms import get_entry, get_schedule, run_numeric, verify_schedule
from interlink.algorithms.schedule import Copy, Round, Schedule, Send, Recv
from interlink.algorithms.trees import btree_parents, ceil_log2, double_binary_tree
from interlink.errors import ScheduleError, VerificationError

DTYPES = (np.float32, np.int32, np.float64)
NRANKS = list(range(1, 18))
COUNTS = (0, 1, 2, 3, 7, 13, 64)
BINOMIAL = ("broadcast", "reduce", "gather", "scatter")


def roots(p: int) -> list[int]:
    return sorted({0, 1 % p, p - 1})


def subtree(v: int, p: int) -> int:
    return p if v == 0 else min(v & -v, p - v)


@pytest.mark.parametrize("p", NRANKS)
@pytest.mark.parametrize("coll", BINOMIAL)
def test_binomial_verifies(coll, p):
    for n in COUNTS:
        for root in roots(p):
            s = get_schedule(coll, "binomial", p, n, root)
            verify_schedule(s, dtypes=DTYPES)


@pytest.mark.parametrize("p", NRANKS)
def test_tree_all_reduce_verifies(p):
    for n in COUNTS:
        verify_schedule(get_schedule("all_reduce", "tree", p, n), dtypes=DTYPES)


@pytest.mark.parametrize("p", [2, 3, 5, 8, 13, 17])
@pytest.mark.parametrize("segments", [2, 3, 8])
def test_tree_all_reduce_segments_verify(p, segments):
    for n in (1, 5, 64, 100):
        s = get_schedule("all_reduce", "tree", p, n, segments=segments)
        verify_schedule(s, dtypes=(np.int32,))
        if n >= 2 * segments and p > 1:
            assert s.meta["segments"] == segments
            assert s.comm_rounds <= 2 * ceil_log2(p) + segments - 1


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 33])
def test_binomial_costs(p):
    L = ceil_log2(p)
    n = 10
    for root in roots(p):
        rel = [(r - root) % p for r in range(p)]
        b = get_schedule("broadcast", "binomial", p, n, root)
        assert b.comm_rounds == L
        assert b.recv_per_rank() == [0 if r == root else n for r in range(p)]
        assert sum(b.sent_per_rank()) == (p - 1) * n

        red = get_schedule("reduce", "binomial", p, n, root)
        assert red.comm_rounds == L
        assert red.sent_per_rank() == [0 if r == root else n for r in range(p)]

        g = get_schedule("gather", "binomial", p, n, root)
        assert g.comm_rounds == L
        assert g.recv_per_rank()[root] == (p - 1) * n
        assert g.sent_per_rank() == [0 if r == root else subtree(rel[r], p) * n for r in range(p)]

        sc = get_schedule("scatter", "binomial", p, n, root)
        assert sc.comm_rounds == L
        assert sc.sent_per_rank()[root] == (p - 1) * n
        assert sc.recv_per_rank() == [0 if r == root else subtree(rel[r], p) * n for r in range(p)]


def test_binomial_zero_count_has_no_traffic():
    for coll in BINOMIAL:
        s = get_schedule(coll, "binomial", 7, 0, 3)
        assert s.comm_rounds == 0 and sum(s.sent_per_rank()) == 0


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 64])
def test_tree_all_reduce_costs(p):
    L = ceil_log2(p)
    for n in (1, 7, 64, 1001):
        s = get_schedule("all_reduce", "tree", p, n)
        assert s.comm_rounds <= 2 * L  # 2H + S - 1 with S = 1 and H <= ceil(log2 p)
        assert s.comm_rounds <= 4 * L + 2
        if p > 1:
            assert s.comm_rounds >= 2  # at least one round up and one down
        assert max(s.sent_per_rank()) <= 2 * n + 2
        assert max(s.recv_per_rank()) <= 2 * n + 2


@pytest.mark.parametrize("p", list(range(1, 70)))
def test_double_binary_tree_shape(p):
    t1, t2 = double_binary_tree(p)
    assert t1 == btree_parents(p)
    tree_roots = set()
    for parents in (t1, t2):
        assert parents.count(-1) == 1
        tree_roots.add(parents.index(-1))
        kids = [[c for c in range(p) if parents[c] == r] for r in range(p)]
        assert all(len(k) <= 2 for k in kids)
        for r in range(p):  # acyclic, height <= ceil(log2 p)
            d, u = 0, parents[r]
            while u >= 0:
                d, u = d + 1, parents[u]
                assert d <= ceil_log2(p)
    for r in range(p):
        if r in tree_roots:
            continue
        interior1 = any(t1[c] == r for c in range(p))
        interior2 = any(t2[c] == r for c in range(p))
        assert not (interior1 and interior2), f"rank {r} is interior in both trees (p={p})"


@pytest.mark.parametrize("p", [3, 5, 8, 13])
def test_tree_all_reduce_identical_on_every_rank(p):
    # random floats: rounding depends on the order of the sums; every rank must get the same bits
    s = get_schedule("all_reduce", "tree", p, 257, segments=3)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(257).astype(np.float32) for _ in range(p)]
    outs = [st["output"] for st in run_numeric(s, inputs, "sum")]
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()
    np.testing.assert_allclose(outs[0], np.sum(inputs, axis=0), rtol=1e-5, atol=1e-5)


def test_summaries_state_rounds():
    for coll, alg in [(c, "binomial") for c in BINOMIAL] + [("all_reduce", "tree")]:
        assert "round" in get_entry(coll, alg).summary


def _without(s: Schedule, rank: int, pred) -> Schedule:
    """A copy of s with the first step of `rank` matching pred removed."""
    ranks = [list(prog) for prog in s.ranks]
    for k, rnd in enumerate(ranks[rank]):
        steps = list(rnd.steps)
        for i, st in enumerate(steps):
            if pred(st):
                del steps[i]
                ranks[rank][k] = Round(tuple(steps))
                return Schedule(s.collective, s.algorithm, s.nranks, s.count, s.root, dict(s.buffers),
                                tuple(tuple(prog) for prog in ranks), dict(s.meta))
    raise AssertionError("no such step")


def test_broken_schedules_fail():
    s = get_schedule("broadcast", "binomial", 5, 7, 2)
    verify_schedule(s, dtypes=DTYPES)
    # the root forgets its own copy: its output is wrong
    with pytest.raises(VerificationError):
        verify_schedule(_without(s, 2, lambda st: isinstance(st, Copy)), dtypes=DTYPES)
    # a send without its receive: structurally invalid
    with pytest.raises(ScheduleError):
        verify_schedule(_without(s, 2, lambda st: isinstance(st, Send)), dtypes=DTYPES)
    # drop a matched message (both sides): the receiver never gets the data
    first = next(st for _, st in s.steps(2) if isinstance(st, Send))
    broken = _without(_without(s, 2, lambda st: st == first), first.peer,
                      lambda st: isinstance(st, Recv) and st.peer == 2)
    with pytest.raises(VerificationError):
        verify_schedule(broken, dtypes=DTYPES)

    # a reduce whose message is received plainly (not reduced) loses a contribution
    r = get_schedule("reduce", "binomial", 6, 5, 0)
    ranks = [list(prog) for prog in r.ranks]
    k, rnd = next((k, rnd) for k, rnd in enumerate(ranks[0]) if any(isinstance(x, Recv) and x.reduce for x in rnd.steps))
    ranks[0][k] = Round(tuple(dataclasses.replace(x, reduce=False) if isinstance(x, Recv) else x for x in rnd.steps))
    bad = dataclasses.replace(r, ranks=tuple(tuple(p) for p in ranks))
    with pytest.raises(VerificationError):
        verify_schedule(bad, dtypes=(np.int32,))
