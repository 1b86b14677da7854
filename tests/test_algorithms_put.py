"""One-sided writes (Put) with Signal/Wait in the Schedule IR: the reference interpreter and the symbolic
verifier run them, the signal discipline is validated (a put read by the peer needs a signal in between),
mutations fail, the point-to-point lowering is verified and runs on the host executor, and the model and
the simulator price the puts and the signals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from interlink.algorithms.reference import verify_schedule
from interlink.algorithms.schedule import (Builder, Put, Round, Schedule, Signal, Wait, inp, one_sided, out, scr,
                                           split, two_sided)
from interlink.algorithms.traffic import from_schedule
from interlink.errors import ScheduleError, VerificationError


def put_reduce_scatter(p: int, n: int, signal: bool = True) -> Schedule:
    """Round 0: rank r puts its block q into rank q's scratch slot r and signals q. Round 1: q reduces the
    slots (its own block from its input)."""
    b = Builder("reduce_scatter", "put", p, n, 0, scratch=n * p)
    for r in range(p):
        for q in range(p):
            if q != r:
                b.put(0, r, q, inp(q * n, n), scr(r * n, n))
                if signal:
                    b.signal(0, r, q)
    for q in range(p):
        b.copy(1, q, inp(q * n, n), out(0, n))
        for r in range(p):
            if r != q:
                b.reduce(1, q, scr(r * n, n), out(0, n))
    return b.build()


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_put_schedule_verified_lowered_and_round_tripped(p):
    for n in (0, 1, 7, 13):
        s = put_reduce_scatter(p, n).validate()
        verify_schedule(s, dtypes=(np.float64, np.int32))
        for low in (two_sided(s), one_sided(s)):
            assert not any(isinstance(st, (Put, Signal, Wait)) for prog in low.ranks for rnd in prog for st in rnd.steps)
            verify_schedule(low, dtypes=(np.float64,))
        assert Schedule.from_json(s.dumps()).dumps() == s.dumps()


def test_a_put_read_without_a_signal_is_refused():
    with pytest.raises(ScheduleError, match="no signal"):
        put_reduce_scatter(3, 4, signal=False).validate()


def _edit(s: Schedule, rank: int, k: int, fn) -> Schedule:
    ranks = [list(prog) for prog in s.ranks]
    ranks[rank][k] = Round(tuple(fn(list(ranks[rank][k].steps))))
    return dataclasses.replace(s, ranks=tuple(tuple(x) for x in ranks))


def test_mutations_fail():
    s = put_reduce_scatter(4, 5)
    # a signal without its wait
    bad = _edit(s, 2, 0, lambda st: [x for x in st if not (isinstance(x, Wait) and x.peer == 1)])
    with pytest.raises(ScheduleError, match="signals"):
        bad.validate()
    # a put of the wrong block
    def wrong(st):
        i = next(i for i, x in enumerate(st) if isinstance(x, Put))
        x = st[i]
        st[i] = dataclasses.replace(x, src=dataclasses.replace(x.src, offset=(x.src.offset + 5) % 20))
        return st
    with pytest.raises(VerificationError):
        verify_schedule(_edit(s, 0, 0, wrong), dtypes=(np.float64,))
    # a put into a slot another rank also writes
    def clash(st):
        i = next(i for i, x in enumerate(st) if isinstance(x, Put) and x.peer == 1)
        st[i] = dataclasses.replace(st[i], dst=scr(2 * 5, 5))  # rank 2's slot on rank 1
        return st
    with pytest.raises(ScheduleError):
        _edit(s, 0, 0, clash).validate()


def test_model_simulator_and_host_executor_take_puts():
    from interlink.model import schedule_time
    from interlink.ops import ReduceOp
    from interlink.runtime.executor import Plan
    from interlink.sim import simulate

    s = put_reduce_scatter(8, 1 << 20)
    tr = from_schedule(s)
    assert tr.phases[0].nmessages == 8 * 7 * 2  # 56 puts and 56 signals (no bytes)
    assert int(tr.phases[0].elems.sum()) == 56 << 20
    from interlink.model import default_params

    call = default_params().call_latency_us("put", "simple")  # the model adds NCCL's call latency once
    sim = simulate(tr, "dgx-h100", protocol="simple", base_us=call)
    est = schedule_time(tr, "dgx-h100")
    assert sim.time_us == pytest.approx(est.time_us, rel=1e-6) and sim.time_us > call
    Plan(two_sided(s), 0, np.dtype(np.float32), ReduceOp.SUM, None, lambda r: r, "x")
    with pytest.raises(ScheduleError):
        Plan(s, 0, np.dtype(np.float32), ReduceOp.SUM, None, lambda r: r, "x")
