"""Vectorised traffic generators (algorithms/{ring,hierarchical,trees}.py) against the traffic of the
built Schedule (traffic.from_schedule), round by round and message by message."""

from __future__ import annotations

import numpy as np
import pytest

from interlink.algorithms import traffic as tr
from interlink.algorithms.registry import get_schedule
from interlink.algorithms.hierarchical import resolve_local_size

NRANKS = list(range(1, 34))


def counts(p: int) -> list[int]:
    """0, tiny (fewer elements than ranks), divisible, not divisible, and one larger odd count."""
    return sorted({0, 1, p - 1 if p > 1 else 3, 2 * p + 1, 4 * p})


def check(coll: str, algo: str, p: int, n: int, root: int = 0, **params) -> None:
    ref = tr.from_schedule(get_schedule(coll, algo, p, n, root, **params))  # loads the families
    fast = tr._FAST[(coll, algo)](p, n, root=root, **params)
    assert fast.nranks == p and fast.count == n
    assert fast.equals(ref), (coll, algo, p, n, root, params)
    assert fast.rounds == ref.rounds
    assert np.array_equal(fast.sent_per_rank(), ref.sent_per_rank())


@pytest.mark.parametrize("p", NRANKS)
def test_ring_family(p):
    for n in counts(p):
        check("all_reduce", "ring", p, n)
        check("all_gather", "ring", p, n)
        check("reduce_scatter", "ring", p, n)
        check("broadcast", "ring", p, n, p - 1)
        check("broadcast", "binomial", p, n, p // 2)
    check("broadcast", "ring", p, 50, 0, segments=3)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6, 8, 9, 12, 16])
def test_ring_channels(p):
    """C rings, each over its slice; rail-aligned over hosts of L ranks (exits per channel)."""
    cases = [dict(channels=2), dict(channels=3)]
    for L in (2, 3, 4):
        if L < p and p % L == 0:
            cases.append(dict(channels=L, local_size=L, exits=tuple(range(L))[::-1]))
            cases.append(dict(channels=2, local_size=L, exits=(0, L - 1)))
    for params in cases:
        for n in counts(p):
            check("all_reduce", "ring", p, n, **params)
            check("all_gather", "ring", p, n, **params)
            check("reduce_scatter", "ring", p, n, **params)
            check("broadcast", "ring", p, n, p - 1, **params)
        check("broadcast", "ring", p, 50, 0, segments=3, **params)


@pytest.mark.parametrize("p", NRANKS)
def test_hierarchical(p):
    seen = set()
    for L in (None, 1, 2, 3, 4, 5, 8, p + 2):
        key = resolve_local_size(p, L)
        if key in seen:
            continue
        seen.add(key)
        for n in counts(p):
            check("all_reduce", "hierarchical", p, n, local_size=L)


@pytest.mark.parametrize("p", NRANKS)
def test_tree(p):
    for n in counts(p):
        check("all_reduce", "tree", p, n)
    for S in (2, 5):
        check("all_reduce", "tree", p, 40, segments=S)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6, 8, 9, 12, 16, 24])
def test_nccl_tree(p):
    """NCCL's Tree: chains per host of L ranks, the double binary tree over hosts, C channels through
    their heads (exits), pipelined segments; the generator equals the Schedule's traffic."""
    cases = [dict(), dict(channels=1), dict(channels=3, segments=2)]
    for L in (1, 2, 3, 4, 8):
        if L <= p and p % L == 0:
            cases.append(dict(channels=2, local_size=L))
            cases.append(dict(channels=4, local_size=L, exits=(0, L - 1), segments=3))
    for params in cases:
        for n in counts(p) + [300_000]:
            check("all_reduce", "nccl_tree", p, n, **params)


@pytest.mark.parametrize("p,L", [(1, 1), (2, 2), (4, 2), (6, 3), (8, 4), (8, 8), (9, 3), (12, 4), (16, 8), (24, 8)])
def test_nvls_and_nvls_tree(p, L):
    """In-switch Schedules: the generator gives the switch endpoints, the landing multicasts, the gates and
    the hand-offs exactly as from_schedule does."""
    for n in counts(p) + [1031]:
        for seg in (None, 1, 3):
            check("all_reduce", "nvls_tree", p, n, segments=seg, local_size=L)
            if L == p:
                check("all_reduce", "nvls", p, n, segments=seg)


def test_nccl_tree_at_scale():
    # 248 x 8 ranks (beyond what a Schedule of objects builds): 16 channels, 128 segments each; the down
    # flow of channel c runs on channel c + 16
    t = tr.traffic("all_reduce", "nccl_tree", 1984, (1 << 29) // 4, channels=16, local_size=8,
                   exits=tuple(range(8)))
    assert t.rounds == len([ph for ph in t.phases if ph.nmessages]) or t.rounds > 0
    assert int(t.sent_per_rank().sum()) > 0 and max(int(ph.channels().max()) for ph in t.phases) == 31
    # only the root's down sends wait for the up channel that handed them its sum
    aft = [ph for ph in t.phases if ph.after is not None]
    assert aft and all(set(np.unique(ph.after[ph.after >= 0]).tolist()) <= set(range(16)) for ph in aft)


def test_compact_at_scale():
    """Divisible counts: a handful of phases whatever the rank count; uneven counts: every round kept,
    as views of one array (no copy per round)."""
    t = tr.traffic("all_reduce", "ring", 16384, 1 << 28)
    assert [ph.repeat for ph in t.phases] == [16383, 16383]
    t = tr.traffic("all_reduce", "hierarchical", 16384, 1 << 28, local_size=8)
    assert len(t.phases) == 4 and t.rounds == 2 * 7 + 2 * 2047
    u = tr.traffic("all_reduce", "ring", 4096, (1 << 20) + 7)
    assert len(u.phases) == 2 * 4095
    assert all(ph.elems.base is not None for ph in u.phases)  # views
    assert int(u.sent_per_rank().sum()) == 2 * 4095 * ((1 << 20) + 7)
    tree = tr.traffic("all_reduce", "tree", 16384, 1 << 20)
    assert tree.rounds <= 2 * 14 + 1


def test_traffic_uses_generator_when_large():
    big = tr.traffic("all_reduce", "hierarchical", 4096, 1000, local_size=8)
    assert big.algorithm == "hierarchical" and big.nranks == 4096
    assert int(big.sent_per_rank().sum()) > 0
