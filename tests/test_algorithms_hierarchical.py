"""Hierarchical (hosts x local ranks) all_reduce, all_gather and broadcast: correctness for even and
uneven hosts, traffic that crosses hosts, round counts, and that a broken schedule is caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from interlink.algorithms import Recv, Round, get_entry, get_schedule, verify_schedule
from interlink.algorithms.hierarchical import default_local_size, hosts, owned_lanes, resolve_local_size
from interlink.algorithms.schedule import Copy, Reduce
from interlink.errors import VerificationError

DTYPES = (np.float32, np.int32, np.float64)
NRANKS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 17)
COUNTS = (0, 1, 2, 3, 7, 13, 64)
COLLS = ("all_reduce", "all_gather", "broadcast")


def local_sizes(p: int) -> list:
    """Default, 1 (every rank its own host), a few even and uneven sizes, and one above p."""
    out, seen = [], set()
    for L in (None, 1, 3, 4, 5, p + 2):
        key = resolve_local_size(p, L)
        if key not in seen:
            seen.add(key)
            out.append(L)
    return out


def ceil_lg(x: int) -> int:
    return (x - 1).bit_length()


def cross_host(s, L: int) -> list[int]:
    """Elements each rank sends to ranks of other hosts (hosts: consecutive runs of L ranks)."""
    out = [0] * s.nranks
    for _, a, b, n in s.messages():
        if a // L != b // L:
            out[a] += n
    return out


@pytest.mark.parametrize("coll", COLLS)
@pytest.mark.parametrize("p", NRANKS)
def test_verifies(coll, p):
    roots = sorted({0, p - 1, p // 2}) if coll == "broadcast" else [0]
    for L in local_sizes(p):
        for n in COUNTS:
            for root in roots:
                s = get_schedule(coll, "hierarchical", p, n, root=root, local_size=L)
                assert s.meta["local_size"] == resolve_local_size(p, L)
                verify_schedule(s, dtypes=DTYPES)
                for r in range(p):
                    for _, st in s.steps(r):
                        if isinstance(st, (Recv, Copy, Reduce)):
                            assert st.dst.buffer != "input"


@pytest.mark.parametrize("coll", COLLS)
def test_registered(coll):
    e = get_entry(coll, "hierarchical")
    assert "local_size" in e.params and "round" in e.summary


def test_local_size_default_and_checks():
    assert [default_local_size(p) for p in range(1, 18)] == [
        1, 2, 3, 2, 5, 3, 7, 4, 3, 5, 11, 6, 13, 7, 5, 8, 17]
    for p in range(1, 18):
        L = default_local_size(p)
        assert p % L == 0 and (L <= 8 or L == p)
    assert resolve_local_size(4, 10) == 4
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError):
            get_schedule("all_reduce", "hierarchical", 4, 8, local_size=bad)


def test_lanes_partition():
    for L in range(1, 9):
        for m in range(1, L + 1):
            spans = [owned_lanes(c, m, L) for c in range(m)]
            assert spans[0][0] == 0 and spans[-1][1] == L
            assert all(a < b for a, b in spans)
            assert all(spans[i][1] == spans[i + 1][0] for i in range(m - 1))
    assert hosts(7, 3) == [[0, 1, 2], [3, 4, 5], [6]]


EVEN = [(4, 2), (6, 2), (6, 3), (8, 2), (8, 4), (9, 3), (12, 3), (12, 4), (16, 4), (16, 8)]


@pytest.mark.parametrize("p,L", EVEN)
def test_all_reduce_even_traffic(p, L):
    H = p // L
    n = L * H * 5
    s = get_schedule("all_reduce", "hierarchical", p, n, local_size=L)
    assert s.meta["local_size"] == L
    assert s.comm_rounds == 2 * (L - 1) + 2 * (H - 1)
    inter = cross_host(s, L)
    assert inter == [2 * (H - 1) * n // (H * L)] * p
    intra = [a - b for a, b in zip(s.sent_per_rank(), inter)]
    assert intra == [2 * (L - 1) * n // L] * p
    # every inter-host message is one sub-piece of one lane: n / (L H)
    for _, a, b, c in s.messages():
        if a // L != b // L:
            assert c == n // (L * H)


@pytest.mark.parametrize("p,L", [(7, 3), (10, 4), (13, 4), (14, 4), (17, 8), (11, 5)])
def test_all_reduce_uneven_traffic(p, L):
    hs = hosts(p, L)
    H = len(hs)
    n = L * H * 3
    s = get_schedule("all_reduce", "hierarchical", p, n, local_size=L)
    assert s.comm_rounds == 2 * (L - 1) + 2 * (H - 1)
    inter = cross_host(s, L)
    lane = 2 * (H - 1) * n // (H * L)
    for h, members in enumerate(hs):
        for c, r in enumerate(members):
            a, b = owned_lanes(c, len(members), L)
            assert inter[r] == lane * (b - a)  # one lane's share per owned lane


@pytest.mark.parametrize("p,L", EVEN)
def test_all_gather_even_traffic(p, L):
    H = p // L
    n = 4
    s = get_schedule("all_gather", "hierarchical", p, n, local_size=L)
    assert s.comm_rounds == (H - 1) + (L - 1)
    assert cross_host(s, L) == [(H - 1) * n] * p
    assert s.sent_per_rank() == [(p - 1) * n] * p


@pytest.mark.parametrize("p,L", EVEN + [(7, 3), (13, 4), (10, 4)])
def test_broadcast_rounds(p, L):
    H = -(-p // L)
    n = 10
    for root in (0, p - 1):
        s = get_schedule("broadcast", "hierarchical", p, n, root=root, local_size=L)
        assert s.comm_rounds == ceil_lg(H) + ceil_lg(L)
        assert sum(cross_host(s, L)) == (H - 1) * n  # the buffer enters every other host once
        assert sum(s.sent_per_rank()) == (p - 1) * n


def test_corrupted_hierarchical_fails():
    s = get_schedule("all_reduce", "hierarchical", 8, 32, local_size=4)
    verify_schedule(s)
    # one inter-host reducing receive turned into a plain store: contributions go missing
    ranks = [list(prog) for prog in s.ranks]
    done = False
    for k, rnd in enumerate(ranks[5]):
        steps = list(rnd.steps)
        for i, st in enumerate(steps):
            if isinstance(st, Recv) and st.reduce and st.peer // 4 != 5 // 4:
                steps[i] = dataclasses.replace(st, reduce=False)
                done = True
                break
        if done:
            ranks[5][k] = Round(tuple(steps))
            break
    assert done
    bad = dataclasses.replace(s, ranks=tuple(tuple(p) for p in ranks))
    bad.validate()
    with pytest.raises(VerificationError):
        verify_schedule(bad)
