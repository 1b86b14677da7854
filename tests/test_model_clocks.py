"""Dependency-driven timing (interlink.model.clocks): hand-computed cases, the periodic extrapolation against
round-by-round evaluation, the approximate rate beyond ``settle``, and predict = simulate wherever nothing
contends (one engine prices the steps for both)."""

from __future__ import annotations

import numpy as np
import pytest

from interlink.algorithms.traffic import Phase, Traffic
from interlink.sim import simulate, simulate_collective
from interlink.model.clocks import Clocks
from interlink.topology import TopologyBuilder

G = 1 << 30
I = np.int64


def _a(*v):
    return np.array(v, dtype=I)


def test_a_rank_with_its_data_does_not_wait_for_a_slow_neighbour():
    # round 0: 0 -> 1 takes 10 us, 2 -> 3 takes 1 us; round 1: 2 -> 3 again (1 us), 0 and 1 idle
    c = Clocks(4, 1, rows=1)
    c.run(_a(0, 2), _a(1, 3), None, np.array([[10.0, 1.0]]), np.array([[10.0, 1.0]]), None, 0.0, 1)
    c.run(_a(2), _a(3), None, np.array([[1.0]]), np.array([[1.0]]), None, 0.0, 1)
    assert c.T[0].tolist() == [10.0, 10.0, 2.0, 2.0]
    b = Clocks(4, 1, rows=1, barrier=True)  # rounds as global barriers: round 1 starts at 10
    b.run(_a(0, 2), _a(1, 3), None, np.array([[10.0, 1.0]]), np.array([[10.0, 1.0]]), None, 0.0, 1)
    b.run(_a(2), _a(3), None, np.array([[1.0]]), np.array([[1.0]]), None, 0.0, 1)
    assert b.makespan() == 11.0


def test_eager_sends_pipeline_a_chain():
    # a chain 0 -> 1 -> 2 -> 3 forwarding S segments (round k: rank i sends segment k - i): transfer t,
    # latency L. The sender is busy t per segment; a segment reaches the next rank t + L after it left.
    t, L, S = 3.0, 2.0, 5
    c = Clocks(4, 1, rows=1)
    for k in range(S + 2):
        src = _a(*[i for i in range(3) if 0 <= k - i < S])
        c.run(src, src + 1, None, np.full((1, src.size), t), np.full((1, src.size), t + L), None, 0.0, 1)
    # the first segment pays t + L per hop (the fill); after it every rank forwards one segment per t:
    # the latency of the later segments hides under the sender's next transfer
    assert c.makespan() == pytest.approx(3 * (t + L) + (S - 1) * t)
    b = Clocks(4, 1, rows=1, barrier=True)  # as global barriers every round pays t + L
    for k in range(S + 2):
        src = _a(*[i for i in range(3) if 0 <= k - i < S])
        b.run(src, src + 1, None, np.full((1, src.size), t), np.full((1, src.size), t + L), None, 0.0, 1)
    assert b.makespan() == pytest.approx((S + 2) * (t + L))


def test_reduction_overlaps_by_the_given_fraction():
    for ov, expect in ((0.0, 4.0 + 3.0), (1.0, 4.0), (0.5, 4.0 + 3.0 - 1.5)):
        c = Clocks(2, 1, rows=1)
        c.run(_a(0), _a(1), None, np.array([[4.0]]), np.array([[4.0]]), np.array([0.0, 3.0]), ov, 1)
        assert c.T[0, 1] == pytest.approx(expect)


def _ring(p, lat, t):
    """One ring round: i -> i + 1, latency lat[i], transfer t[i]."""
    src = np.arange(p, dtype=I)
    return src, (src + 1) % p, None, np.asarray(t, float)[None], (np.asarray(t, float) + np.asarray(lat, float))[None]


@pytest.mark.parametrize("p,rep", [(16, 15), (24, 100), (7, 50)])
def test_periodic_extrapolation_is_exact(p, rep):
    rng = np.random.default_rng(p)
    # a host pattern (fast hops, one slow crossing every 4 ranks) plus a reduction per rank
    lat = np.where(np.arange(p) % 4 == 3, 5.0, 0.7)
    t = np.where(np.arange(p) % 4 == 3, 9.0, 1.0)
    red = np.where(np.arange(p) % 4 == 0, 1.5, 0.25)  # the host's pattern again
    start = rng.uniform(0, 3, p)  # a ragged start, as after an earlier phase
    out = []
    for kw in ({}, {"max_period": 0, "settle": None}):
        c = Clocks(p, 1, rows=1, **kw)
        c.T[0] = start
        r = c.run(*_ring(p, lat, t), red, 0.5, rep)
        out.append((c.T[0].copy(), r))
    (fast, rf), (exact, re) = out
    assert re.rounds_evaluated == rep and re.period == 0
    assert rf.period > 0 and rf.rounds_evaluated < rep or rep <= 8
    np.testing.assert_allclose(fast, exact, rtol=1e-12, atol=1e-9)


def _two_rings(p, rep, after_of_slow, after_of_fast, start_fast=0.0):
    """Channel 0: a ring of transfer 3 per hop; channel 1: one of 1. ``after_of_slow`` / ``after_of_fast``:
    the channel-0 / channel-1 messages also wait for the sender's other channel. Run with the default
    extrapolation and round by round (settle=None both); returns (default clocks, exact, its RunResult)."""
    src = np.r_[np.arange(p), np.arange(p)].astype(I)
    dst = (src + 1) % p
    ch = np.r_[np.zeros(p), np.ones(p)].astype(I)
    tx = np.r_[np.full(p, 3.0), np.full(p, 1.0)][None]
    aft = np.r_[np.full(p, 1 if after_of_slow else -1), np.full(p, 0 if after_of_fast else -1)].astype(I)
    out = []
    for kw in ({"settle": None}, {"max_period": 0, "settle": None}):
        c = Clocks(p, 2, rows=1, **kw)
        c.T[0].reshape(p, 2)[:, 1] = start_fast
        r = c.run(src, dst, ch, tx, tx + 0.5, None, 0.0, rep, after=aft)
        out.append((c.T[0].copy(), r))
    return out[0][0], out[1][0], out[0][1]


def test_each_channel_at_its_own_rate_is_extrapolated_exactly():
    """A generalized period (a pipeline's two flows at different rates: the slow one only waits for the
    fast one) is extrapolated exactly; one where a faster source would later set its target's clock is
    not (channel 1 starts far behind, runs at its own rate until channel 0 catches up and holds it)."""
    fast, exact, r = _two_rings(6, 400, after_of_slow=True, after_of_fast=False)
    assert r.period > 0 and r.rounds_evaluated < 50
    np.testing.assert_allclose(fast, exact, rtol=1e-12, atol=1e-9)
    fast, exact, r = _two_rings(6, 400, after_of_slow=False, after_of_fast=True, start_fast=300.0)
    assert r.rounds_evaluated > 150  # nothing extrapolated before channel 0 catches up (round ~150)
    np.testing.assert_allclose(fast, exact, rtol=1e-12, atol=1e-9)


def test_mean_rate_beyond_settle_is_close():
    # no period: the hop latencies do not repeat along the ring (random), the ring is latency-bound
    p, rep = 64, 2000
    rng = np.random.default_rng(1)
    lat = rng.uniform(0.5, 5.0, p)
    t = np.full(p, 0.2)
    res = {}
    for name, kw in (("approx", {"settle": 32, "max_period": 16}), ("exact", {"settle": None, "max_period": 0})):
        c = Clocks(p, 1, rows=1, **kw)
        r = c.run(*_ring(p, lat, t), None, 0.0, rep)
        res[name] = (c.makespan(), r)
    assert res["approx"][1].period < 0 and res["approx"][1].rounds_evaluated < rep // 10
    assert res["approx"][0] == pytest.approx(res["exact"][0], rel=0.005)
    # the exact growth is the critical cycle's mean: the ring's, (t + lat) averaged
    assert res["exact"][0] / rep == pytest.approx(float(np.mean(t + lat)), rel=0.01)


def test_channels_have_their_own_clocks():
    # two channels between the same ranks: channel 1's slow message does not hold channel 0
    c = Clocks(2, 2, rows=1)
    c.run(_a(0, 0), _a(1, 1), _a(0, 1), np.array([[1.0, 10.0]]), np.array([[1.0, 10.0]]), None, 0.0, 3)
    assert c.T[0].reshape(2, 2).tolist() == [[3.0, 30.0], [3.0, 30.0]]


def test_simulate_runs_the_traffic_dependency_driven():
    # star of 4 GPUs: round 0 has a big message 0 -> 1 and a small one 2 -> 3; round 1 only 2 -> 3
    b = TopologyBuilder("star")
    b.device("sw", "pcie_switch", host=0)
    for g in range(4):
        b.device(f"g{g}", "gpu", host=0)
        b.link(f"g{g}", "sw", "pcie-gen4")
    topo = b.build()
    n = 1_000_000
    ph0 = Phase(_a(0, 2), _a(1, 3), _a(n, 1000), None)
    ph1 = Phase(_a(2), _a(3), _a(1000), None)
    tr = Traffic("all_to_all", "custom", 4, 0, (ph0, ph1))
    dep, bar = simulate(tr, topo), simulate(tr, topo, barrier=True)
    assert dep.model == "dependency" and bar.model == "global-barrier"
    big = 4 * n / 24e3 + 1.0  # us: 24 GB/s pcie-gen4, two 0.5 us links
    small = 4 * 1000 / 24e3 + 1.0
    assert dep.time_us == pytest.approx(big)  # 2 -> 3 twice fits inside the big message
    assert bar.time_us == pytest.approx(big + small)


@pytest.mark.parametrize("spec", ["dgx-a100", "a800", "dgx-h100", "hgx-h200", "h800", "hgx-b200", "gb200-nvl72",
                                  "pcie-8gpu", "2xdgx-h100", "16xdgx-a100", "128xdgx-h100", "2xgb200-nvl72",
                                  "3xgb200-nvl72:gpus=8"])
@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_predict_equals_simulate_where_nothing_contends(spec, coll):
    """predict and simulate price the same Schedule with the same clocks and step costs: they differ only
    where the simulator's flows share a link beyond a rank's own ports (pcie-8gpu's UPI, a spine)."""
    from interlink.model import predict

    for algo in (None, "ring"):
        pr = predict(coll, 256 << 20, spec, algorithm=algo)
        sim = simulate_collective(coll, 256 << 20, spec, algorithm=pr.algorithm)
        assert sim.time_us >= pr.time_us * (1 - 1e-3)  # flows can only add contention (1e-3: merged rounds)
        if spec != "pcie-8gpu":  # pcie-8gpu: rings that cross the UPI link share it
            assert sim.time_us == pytest.approx(pr.time_us, rel=0.05), (algo, pr.algorithm)


def test_gates_send_an_arrival_to_the_channel_that_reads_it():
    # rank 0 sends two messages to rank 1 on channel 0: the first is read next by rank 1's channel 1,
    # the second by nothing (it only lands); rank 2 -> 1 on channel 0 gates channel 0 as usual
    c = Clocks(3, 2, rows=1)
    c.run(_a(0, 0, 2), _a(1, 1, 1), _a(0, 0, 0), np.array([[1.0, 2.0, 3.0]]), np.array([[5.0, 9.0, 4.0]]),
          None, 0.0, 1, gate=_a(1, -1, 0))
    T = c.T[0].reshape(3, 2)
    assert T[1].tolist() == [4.0, 5.0]  # channel 0: the 2 -> 1 message; channel 1: the handed-over one
    assert T[0].tolist() == [2.0, 0.0] and T[2].tolist() == [3.0, 0.0]  # senders: their transfers
    assert c.makespan() == 9.0  # the landing one still ends the collective
    # and a message that also waits for another channel of its sender (a hand-off)
    c.run(_a(1), _a(2), _a(0), np.array([[1.0]]), np.array([[1.0]]), None, 0.0, 1, after=_a(1))
    assert c.T[0].reshape(3, 2)[2, 0] == 6.0  # starts at max(channel 0: 4, channel 1: 5) + 1


@pytest.mark.parametrize("spec", ["2xdgx-h100", "8xdgx-h100"])
def test_a_repeated_block_of_rounds_is_priced_as_round_by_round(spec, monkeypatch):
    """NVLSTree's steady state cycles through three distinct phases per round (into the switch, out of its
    multicast, out of its reduction): the model runs the repeated block as one map (Clocks.run_block),
    with the same periods; the time equals the phases run one by one."""
    from interlink.algorithms import traffic
    from interlink.model.cost import predict

    found = []
    real = traffic.blocks
    monkeypatch.setattr(traffic, "blocks", lambda ph, *a, **k: found.append(real(ph, *a, **k)) or found[-1])
    fast = predict("all_reduce", 1 << 30, spec, algorithm="nvls_tree")
    assert any(b for b in found), found  # a block was found and run as one
    monkeypatch.setattr(traffic, "blocks", lambda ph, *a, **k: {})
    slow = predict("all_reduce", 1 << 30, spec, algorithm="nvls_tree")
    assert fast.time_us == pytest.approx(slow.time_us, rel=1e-9)
