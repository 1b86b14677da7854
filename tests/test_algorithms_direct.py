"""One-shot (direct) algorithms for small messages."""

from __future__ import annotations

import numpy as np
import pytest

from interlink.algorithms import get_entry, get_schedule, run_numeric, verify_schedule
from interlink.algorithms.schedule import ROOTED, Reduce, Round, Schedule
from interlink.errors import VerificationError

DTYPES = (np.float32, np.int32, np.float64)
COUNTS = (0, 1, 2, 3, 7, 13, 64)
COLLS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "gather", "scatter")


def roots(coll: str, p: int) -> list[int]:
    return sorted({0, 1 % p, p - 1}) if coll in ROOTED else [0]


@pytest.mark.parametrize("p", list(range(1, 18)))
@pytest.mark.parametrize("coll", COLLS)
def test_direct_verifies(coll, p):
    for n in COUNTS:
        for root in roots(coll, p):
            verify_schedule(get_schedule(coll, "direct", p, n, root), dtypes=DTYPES)


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 13, 17])
@pytest.mark.parametrize("coll", COLLS)
def test_direct_costs(coll, p):
    n = 9
    for root in roots(coll, p):
        s = get_schedule(coll, "direct", p, n, root)
        assert s.comm_rounds == (1 if p > 1 else 0)
        assert s.nrounds <= 1  # no separate initialisation round
        sent, recv = s.sent_per_rank(), s.recv_per_rank()
        every = [(p - 1) * n] * p
        if coll in ("all_reduce", "all_gather", "reduce_scatter"):
            assert sent == every and recv == every
        elif coll in ("broadcast", "scatter"):
            assert sent == [(p - 1) * n if r == root else 0 for r in range(p)]
            assert recv == [0 if r == root else n for r in range(p)]
        else:  # reduce, gather
            assert sent == [0 if r == root else n for r in range(p)]
            assert recv == [(p - 1) * n if r == root else 0 for r in range(p)]
        # one message per (src, dst) pair at most
        pairs = [(a, b) for _, a, b, _ in s.messages()]
        assert len(pairs) == len(set(pairs))


def test_direct_zero_count_has_no_traffic():
    for coll in COLLS:
        s = get_schedule(coll, "direct", 5, 0, 4 if coll in ROOTED else 0)
        assert s.comm_rounds == 0 and sum(s.sent_per_rank()) == 0


def test_summaries_state_rounds():
    for coll in COLLS:
        assert "round" in get_entry(coll, "direct").summary


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter"])
def test_direct_reduction_identical_on_every_rank(coll):
    p, n = 7, 101
    s = get_schedule(coll, "direct", p, n)
    size = s.buffers["input"]
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(size).astype(np.float32) for _ in range(p)]
    outs = [st["output"] for st in run_numeric(s, inputs, "sum")]
    if coll == "all_reduce":
        for o in outs[1:]:
            assert o.tobytes() == outs[0].tobytes()
    # same order on every rank: rank 0's contribution first, then 1, 2, ...
    acc = inputs[0].copy()
    for x in inputs[1:]:
        acc += x
    want = [acc] * p if coll == "all_reduce" else [acc[r * n:(r + 1) * n] for r in range(p)]
    for o, w in zip(outs, want):
        assert o.tobytes() == w.tobytes()


def test_broken_direct_schedule_fails():
    s = get_schedule("all_reduce", "direct", 4, 6)
    verify_schedule(s, dtypes=DTYPES)
    ranks = [list(prog) for prog in s.ranks]
    steps = list(ranks[2][0].steps)
    steps.remove(next(st for st in steps if isinstance(st, Reduce)))  # rank 2 forgets one contribution
    ranks[2][0] = Round(tuple(steps))
    broken = Schedule(s.collective, s.algorithm, s.nranks, s.count, s.root, dict(s.buffers),
                      tuple(tuple(prog) for prog in ranks), dict(s.meta))
    with pytest.raises(VerificationError):
        verify_schedule(broken, dtypes=DTYPES)
