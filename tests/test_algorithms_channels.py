"""Channels in the Schedule IR: C rings, each over its own slice of the buffers, rail-aligned across
hosts; validation of channel matching and disjointness; JSON; the model and the simulator read the
channels from the Schedule."""

from __future__ import annotations

import json

import numpy as np
import pytest

from interlink.algorithms.reference import verify_schedule
from interlink.algorithms.registry import get_schedule
from interlink.algorithms.ring import ring_orders
from interlink.algorithms.schedule import Recv, Round, Schedule, Send
from interlink.errors import ScheduleError, VerificationError


def _replace(s: Schedule, rank: int, rnd: int, idx: int, step) -> Schedule:
    ranks = [list(prog) for prog in s.ranks]
    steps = list(ranks[rank][rnd].steps)
    steps[idx] = step
    ranks[rank][rnd] = Round(tuple(steps))
    return Schedule(s.collective, s.algorithm, s.nranks, s.count, s.root, dict(s.buffers),
                    tuple(tuple(p) for p in ranks), dict(s.meta))


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
@pytest.mark.parametrize("p,params", [(4, dict(channels=2)), (5, dict(channels=3)),
                                      (6, dict(channels=3, local_size=3, exits=(2, 0, 1))),
                                      (8, dict(channels=4, local_size=4, exits=(0, 1, 2, 3)))])
def test_channel_rings_are_verified(coll, p, params):
    for n in (0, 1, 7, 29):
        s = get_schedule(coll, "ring", p, n, p - 1 if coll == "broadcast" else 0, **params)
        assert s.channels == (params["channels"] if n >= params["channels"] else s.channels)
        verify_schedule(s, dtypes=(np.float64, np.int32))


def test_rail_aligned_rings_cross_hosts_on_one_rail_through_distinct_nics():
    L, H = 8, 4
    exits = tuple(range(L))
    orders = ring_orders(L * H, L, L, exits)
    outgoing = {h: [] for h in range(H)}
    for order in orders:
        assert sorted(order) == list(range(L * H))  # each channel is a ring over every rank
        for i, a in enumerate(order):
            b = order[(i + 1) % len(order)]
            if a // L != b // L:
                assert a % L == b % L, (a, b)  # same local rank on both sides: same rail
                outgoing[a // L].append(a % L)
    for h, nics in outgoing.items():
        assert sorted(nics) == list(range(L)), (h, nics)  # one channel leaves through each NIC
    # an odd number of hosts changes rail once (back to host 0)
    odd = ring_orders(3 * L, 2, L, (0, 5))
    for order in odd:
        cross = [(a, order[(i + 1) % len(order)]) for i, a in enumerate(order) if a // L != order[(i + 1) % len(order)] // L]
        assert sum(a % L != b % L for a, b in cross) == 1


def test_a_receive_on_another_channel_is_refused():
    s = get_schedule("all_reduce", "ring", 3, 12, channels=2)
    for k, rnd in enumerate(s.ranks[1]):
        for i, st in enumerate(rnd.steps):
            if isinstance(st, Recv) and st.channel == 1:
                bad = _replace(s, 1, k, i, Recv(st.peer, st.dst, st.reduce, 0))
                with pytest.raises(ScheduleError, match="channel"):
                    bad.validate()
                return
    raise AssertionError("no channel-1 receive found")


@pytest.mark.parametrize("at_once", [1024, 0])
def test_channels_sharing_a_chunk_are_refused(at_once, monkeypatch):
    from interlink.algorithms import schedule

    monkeypatch.setattr(schedule, "_PAIRS_AT_ONCE", at_once)
    s = get_schedule("all_reduce", "ring", 3, 12, channels=2)
    # a channel-1 send moved onto channel 0's slice: validate refuses it (overlapping writes) before the
    # verifier would see a wrong sum
    for k, rnd in enumerate(s.ranks[0]):
        for i, st in enumerate(rnd.steps):
            if isinstance(st, Recv) and st.channel == 1:
                moved = type(st.dst)(st.dst.buffer, 0, st.dst.count)
                bad = _replace(s, 0, k, i, Recv(st.peer, moved, st.reduce, 1))
                with pytest.raises(ScheduleError, match="disjoint|overlaps"):
                    bad.validate()
                return
    raise AssertionError("no channel-1 receive found")


def test_a_send_of_the_wrong_slice_fails_verification():
    s = get_schedule("all_gather", "ring", 4, 6, channels=2)
    for k, rnd in enumerate(s.ranks[2]):
        for i, st in enumerate(rnd.steps):
            if isinstance(st, Send) and st.channel == 1 and st.src.buffer == "output":
                wrong = type(st.src)(st.src.buffer, st.src.offset - 1, st.src.count)
                bad = _replace(s, 2, k, i, Send(st.peer, wrong, 1))
                # refused as a channel conflict, or (read as a hand-off from channel 0) by the verifier
                with pytest.raises((ScheduleError, VerificationError)):
                    verify_schedule(bad, dtypes=(np.float64,))
                return
    raise AssertionError("no channel-1 send from the output found")


def test_json_keeps_channels_and_reads_version_1():
    s = get_schedule("reduce_scatter", "ring", 6, 5, channels=3, local_size=3, exits=(0, 1, 2))
    back = Schedule.from_json(s.dumps())
    assert back.channels == 3 and back.dumps() == s.dumps()
    one = json.loads(get_schedule("all_reduce", "ring", 3, 7).dumps())
    one["version"] = 1
    assert Schedule.from_json(one).channels == 1
    one["version"] = 99
    with pytest.raises(ScheduleError, match="version"):
        Schedule.from_json(one)


@pytest.mark.parametrize("spec", ["2xdgx-a100", "4xdgx-h100", "2xhgx-h200", "8xdgx-h100"])
@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter"])
def test_predict_and_simulate_price_the_same_channels(spec, coll):
    """The model and the simulator read the channels from the one Schedule: where nothing contends
    (rail-aligned rings on a non-blocking fabric), they agree within 5%."""
    from interlink.model import predict
    from interlink.sim import simulate_collective

    G = 1 << 30
    pr = predict(coll, G, spec, algorithm="ring")
    assert all(c.channels == 8 for c in pr.table)
    # one engine prices the steps (dependency-driven clocks, the same per-step costs): where nothing
    # contends the simulator's flows change nothing, under every protocol
    for row in pr.table:
        sim = simulate_collective(coll, G, spec, algorithm="ring", protocol=row.protocol)
        assert sim.time_us == pytest.approx(row.time_us, rel=1e-6), row.protocol
    # by default the simulator runs the protocol the model chose
    assert simulate_collective(coll, G, spec, algorithm="ring").time_us == pytest.approx(pr.time_us, rel=1e-6)


# ---- the hand-over: a chunk passes from one channel to another once -----------------------------------

def _handover(second_round: int = 2, hand_back: bool = False) -> Schedule:
    """2-rank all_reduce: channel 0 reduces rank 1's input into rank 0's output (round 1), channel 1
    sends the sum back into rank 1's output (``second_round``), which channel 0 filled in round 0; with
    ``hand_back`` channel 0 reads rank 1's output again afterwards."""
    from interlink.algorithms.schedule import Builder, inp, out, scr

    n = 5
    b = Builder("all_reduce", "handover", 2, n, scratch=n if hand_back else 0)
    for r in (0, 1):
        b.copy(0, r, inp(0, n), out(0, n), 0)
    b.transfer(1, 1, 0, inp(0, n), out(0, n), True, 0)
    b.transfer(second_round, 0, 1, out(0, n), out(0, n), False, 1)
    if hand_back:
        b.transfer(second_round + 1, 1, 0, out(0, n), scr(0, n), False, 0)
    return b.build()


def test_a_chunk_handed_over_to_another_channel_is_written_there():
    s = _handover()
    assert s.channels == 2
    verify_schedule(s, dtypes=(np.float64, np.int32))  # rank 1's output: filled on 0, then the sum on 1


@pytest.mark.parametrize("at_once", [1024, 0])  # the check's matrices and its sweep (large buffers)
def test_a_hand_over_in_the_same_round_or_back_again_is_refused(at_once, monkeypatch):
    from interlink.algorithms import schedule

    monkeypatch.setattr(schedule, "_PAIRS_AT_ONCE", at_once)
    _handover().validate()
    get_schedule("all_reduce", "nccl_tree", 8, 1000, channels=2, local_size=4, segments=3).validate()
    with pytest.raises(ScheduleError, match="the same round"):
        _handover(second_round=1).validate()
    with pytest.raises(ScheduleError, match="on both sides"):
        _handover(hand_back=True).validate()


@pytest.mark.parametrize("C", [1, 2, 3])
def test_nccl_tree_runs_its_down_flow_on_channels_of_its_own(C):
    """The up flow (reducing receives) on channels 0..C-1, the down flow (plain receives) on C..2C-1, as
    NCCL's split tree: the two flows never share a rank-channel's rounds."""
    s = get_schedule("all_reduce", "nccl_tree", 8, 1000, channels=C, local_size=4, segments=3)
    assert s.channels == 2 * C
    kinds = {(st.channel, st.reduce) for prog in s.ranks for rnd in prog for st in rnd.steps if isinstance(st, Recv)}
    assert {ch for ch, red in kinds if red} == set(range(C))
    assert {ch for ch, red in kinds if not red} == set(range(C, 2 * C))
    verify_schedule(s, dtypes=(np.float64,))
