"""Ring algorithms: rounds and elements on the wire against the closed-form costs their docstrings
state (exact per rank, also when the count does not divide by p), neighbour-only traffic, and every
rooted algorithm verified with a root in the middle of the ranks."""

from __future__ import annotations

import numpy as np
import pytest

from interlink.algorithms import algorithms_for, get_entry, get_schedule, split, verify_schedule

NRANKS = (1, 2, 3, 5, 8)
COUNTS = (0, 1, 7, 61)
ROOTED = ("broadcast", "reduce", "gather", "scatter")


def block_sizes(count: int, p: int) -> list[int]:
    """Sizes of the p blocks a ring splits ``count`` into: the first count % p are one larger
    (computed here, not with the library's split)."""
    return [count // p + (1 if i < count % p else 0) for i in range(p)]


def neighbour_only(s) -> None:
    """Every message goes from r to r+1 (mod p), and round by round at most one message per rank."""
    p = s.nranks
    for k, src, dst, n in s.messages():
        assert dst == (src + 1) % p, (k, src, dst, n)
        assert n > 0  # zero-length messages are dropped
    for k in range(s.nrounds):
        senders = [a for a, _, _ in s.round_traffic(k)]
        assert len(senders) == len(set(senders)), (k, s.round_traffic(k))


@pytest.mark.parametrize("p", NRANKS)
@pytest.mark.parametrize("n", COUNTS)
def test_all_reduce_ring_rounds_and_bytes(p, n):
    s = get_schedule("all_reduce", "ring", nranks=p, count=n)
    verify_schedule(s, dtypes=(np.float32, np.int32))
    neighbour_only(s)
    if p == 1 or n == 0:
        assert s.comm_rounds == 0 and s.sent_per_rank() == [0] * p
        return
    # 2(p-1) rounds: p-1 reduce-scatter, p-1 all-gather (every round moves at least block 0)
    assert s.comm_rounds == 2 * (p - 1)
    blk = block_sizes(n, p)
    # reduce-scatter: rank r sends every block but the one it ends up owning (r+1);
    # all-gather: it forwards every block but the one it would hand back to its owner (r+2)
    want = [(n - blk[(r + 1) % p]) + (n - blk[(r + 2) % p]) for r in range(p)]
    assert s.sent_per_rank() == want
    assert s.recv_per_rank() == [want[(r - 1) % p] for r in range(p)]
    # in all: every rank ships 2(p-1)/p of the buffer, exactly 2(p-1) n bytes on the wire
    assert sum(s.sent_per_rank()) == 2 * (p - 1) * n
    if n % p == 0:
        assert s.sent_per_rank() == [2 * (p - 1) * n // p] * p
    else:  # never more than 2(p-1) ceil(n/p) per rank, never less than 2(p-1) floor(n/p)
        assert all(2 * (p - 1) * (n // p) <= x <= 2 * (p - 1) * -(-n // p) for x in s.sent_per_rank())
    # each round: a rank sends at most one block (beta term = ceil(n/p) per round)
    assert max(s.max_sent_per_round()) == max(blk)
    assert len(s.max_sent_per_round()) == s.nrounds


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_all_reduce_ring_divisible_counts(p):
    """The bandwidth-optimal 2(p-1)/p exactly, for counts that divide evenly (including large ones)."""
    for n in (p, 4 * p, 1000 * p):
        s = get_schedule("all_reduce", "ring", nranks=p, count=n)
        assert s.comm_rounds == 2 * (p - 1)
        assert s.sent_per_rank() == [2 * (p - 1) * (n // p)] * p
        assert s.sent_per_rank()[0] / n == pytest.approx(2 * (p - 1) / p)


@pytest.mark.parametrize("p", NRANKS)
@pytest.mark.parametrize("n", COUNTS)
@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter"])
def test_all_gather_reduce_scatter_ring_rounds_and_bytes(coll, p, n):
    s = get_schedule(coll, "ring", nranks=p, count=n)
    verify_schedule(s, dtypes=(np.float32, np.int32))
    neighbour_only(s)
    if p == 1 or n == 0:
        assert s.comm_rounds == 0 and s.sent_per_rank() == [0] * p
        return
    assert s.comm_rounds == p - 1
    # p-1 blocks of n elements per rank: (p-1)/p of the p*n-element (output resp. input) buffer
    assert s.sent_per_rank() == [(p - 1) * n] * p
    assert s.recv_per_rank() == [(p - 1) * n] * p
    assert sorted(x for x in s.max_sent_per_round() if x) == [n] * (p - 1)  # one block per round
    if coll == "reduce_scatter":
        # every received block is reduced: (p-1) n reductions per rank, one block per round
        red = s.reduced_per_round()
        assert sum(red) == (p - 1) * n and max(red) == n


def chain_of(root: int, p: int) -> list[int]:
    return [(root + i) % p for i in range(p)]


@pytest.mark.parametrize("p", NRANKS)
@pytest.mark.parametrize("n", COUNTS)
@pytest.mark.parametrize("segments", [None, 1, 3, 8, 100])
def test_broadcast_ring_pipeline(p, n, segments):
    """Docstring: S + p - 2 rounds for S segments; every rank of the chain but the last forwards the
    whole buffer exactly once; every non-root rank receives it exactly once."""
    for root in sorted({0, p // 2, p - 1}):
        kw = {} if segments is None else {"segments": segments}
        s = get_schedule("broadcast", "ring", nranks=p, count=n, root=root, **kw)
        verify_schedule(s, dtypes=(np.float32, np.int32))
        if p == 1 or n == 0:
            assert s.comm_rounds == 0 and sum(s.sent_per_rank()) == 0
            continue
        req = (1 if p == 2 else min(n, 8)) if segments is None else segments
        S = max(1, min(req, n))
        assert s.meta["segments"] == S
        assert s.comm_rounds == S + p - 2
        chain = chain_of(root, p)
        sent, recvd = s.sent_per_rank(), s.recv_per_rank()
        for i, r in enumerate(chain):
            assert sent[r] == (n if i < p - 1 else 0), (root, i, r, sent)
            assert recvd[r] == (0 if r == root else n), (root, r, recvd)
        # only chain links carry data; link i carries its S segments in rounds i-1 .. i-1+S-1
        segs = block_sizes(n, S)
        per_link: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for k, a, b, m in s.messages():
            per_link.setdefault((a, b), []).append((k, m))
        assert set(per_link) == {(chain[i - 1], chain[i]) for i in range(1, p)}
        first = min(k for k, *_ in s.messages())
        for i in range(1, p):
            msgs = sorted(per_link[(chain[i - 1], chain[i])])
            assert [m for _, m in msgs] == segs
            assert [k - first for k, _ in msgs] == list(range(i - 1, i - 1 + S))


def test_split_is_what_the_rings_use():
    for n in COUNTS + (100, 1001):
        for p in NRANKS:
            assert [c for _, c in split(n, p)] == block_sizes(n, p)


def rooted_cases() -> list:
    cases = []
    for coll in ROOTED:
        for algo in algorithms_for(coll):
            cases.append((coll, algo))
    return cases


def test_rooted_cases_cover_ring_and_hierarchical():
    cases = rooted_cases()
    assert ("broadcast", "ring") in cases and ("broadcast", "hierarchical") in cases
    assert {c for c, _ in cases} == set(ROOTED)
    assert "local_size" in get_entry("broadcast", "hierarchical").params


@pytest.mark.parametrize("coll,algo", rooted_cases())
@pytest.mark.parametrize("p", NRANKS)
def test_rooted_verify_with_middle_root(coll, algo, p):
    root = p // 2
    params = get_entry(coll, algo).params
    variants: list[dict] = [{}]
    if "local_size" in params:  # default, 2 (uneven for odd p) and 3 ranks per host
        variants = [{}, {"local_size": 2}, {"local_size": 3}]
    elif "segments" in params:
        variants = [{}, {"segments": 3}]
    for kw in variants:
        for n in COUNTS:
            s = get_schedule(coll, algo, nranks=p, count=n, root=root, **kw)
            assert s.root == root
            cases = verify_schedule(s, dtypes=(np.float32, np.int32))
            assert cases >= 1
            if p > 1 and n > 0:
                # the root's data leaves the root (broadcast/scatter) or arrives there (reduce/gather)
                if coll in ("broadcast", "scatter"):
                    assert s.sent_per_rank()[root] > 0 and s.recv_per_rank()[root] == 0
                else:
                    assert s.recv_per_rank()[root] > 0 and s.sent_per_rank()[root] == 0
