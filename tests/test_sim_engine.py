"""The flow-level simulator: exact max-min sharing on hand-computed cases, contention on real presets
(PCIe through the CPU, an oversubscribed fat tree), agreement with the contention-free cost model where
nothing is shared, path classes, merged rounds, traces and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from interlink.algorithms import traffic as tr
from interlink.algorithms.registry import get_schedule
from interlink.algorithms.traffic import Phase, Traffic
from interlink.cli.main import main
from interlink.sim import SimError, chrome_trace, max_min_rates, simulate, simulate_collective
from interlink.sim.engine import _PathTable
from interlink.topology import TopologyBuilder, parse_topology

G = 1 << 30


# ---- max-min fairness, exact ----------------------------------------------------------------------


def test_max_min_two_flows_share_one_link():
    rates = max_min_rates(np.array([0, 1]), np.array([0, 0]), np.array([10.0]), 2)
    assert rates.tolist() == [5.0, 5.0]


def test_max_min_three_flows_unequal_bottlenecks():
    # A uses link 0 (cap 10); B uses links 0 and 1; C uses link 1 (cap 4): link 1 saturates first at 2
    # each (B, C frozen), then A takes the rest of link 0: 10 - 2 = 8
    rates = max_min_rates(np.array([0, 1, 1, 2]), np.array([0, 0, 1, 1]), np.array([10.0, 4.0]), 3)
    assert rates.tolist() == [8.0, 2.0, 2.0]


def test_max_min_classic_parking_lot():
    # flow 0 crosses links 0,1,2 (cap 1 each); flows 1, 2, 3 use one link each: everyone gets 1/2
    fe = np.array([0, 0, 0, 1, 2, 3])
    re = np.array([0, 1, 2, 0, 1, 2])
    assert max_min_rates(fe, re, np.ones(3), 4).tolist() == [0.5, 0.5, 0.5, 0.5]
    # unused flow (no resources) is unconstrained
    assert max_min_rates(np.array([0]), np.array([0]), np.array([3.0]), 2).tolist() == [3.0, np.inf]


def _star(caps: dict[str, float]) -> "object":
    """GPUs g0..g3 on one switch; each GPU's link gets capacity caps[g] GB/s per direction (pcie-gen4 = 24
    GB/s derated by a factor), latency 0.5 us per link."""
    b = TopologyBuilder("star")
    b.device("sw", "pcie_switch", host=0)
    for g in sorted(caps):
        b.device(g, "gpu", host=0)
        b.link(g, "sw", "pcie-gen4", factor=caps[g] / 24.0)
    return b.build()


def _traffic(p: int, src, dst, elems) -> Traffic:
    ph = Phase(np.array(src, np.int64), np.array(dst, np.int64), np.array(elems, np.int64), None)
    return Traffic("all_to_all", "custom", p, 0, (ph,))


def test_two_flows_into_one_gpu_get_half_each():
    topo = _star({"g0": 20.0, "g1": 20.0, "g2": 20.0})
    n = 1_000_000  # elements of 4 bytes
    res = simulate(_traffic(3, [0, 1], [2, 2], [n, n]), topo)
    per_flow = 4 * n / (10.0 * 1e3)  # us at 10 GB/s: half of the 20 GB/s link into g2
    assert res.time_us == pytest.approx(per_flow + 1.0, rel=1e-12)  # + 2 links x 0.5 us
    assert res.ideal_us == pytest.approx(4 * n / 20e3 + 1.0, rel=1e-12)
    assert res.slowdown == pytest.approx((per_flow + 1.0) / (4 * n / 20e3 + 1.0), rel=1e-12)
    # bytes per directed link: g2's inbound link carried both messages
    top = res.top_links(1)[0]
    assert top["to"] == "g2" and top["bytes"] == 8 * n and top["util"] == pytest.approx(8 * n / 20e3 / res.time_us)


def test_shared_link_speeds_up_when_neighbour_finishes():
    topo = _star({"g0": 20.0, "g1": 20.0, "g2": 20.0})
    n = 1_000_000
    res = simulate(_traffic(3, [0, 1], [2, 2], [n, n // 2]), topo)
    # both at 10 GB/s until the short one is done (2 MB), then the long one alone at 20 GB/s
    t_short = 4 * (n // 2) / 10e3
    t_long = t_short + 4 * (n - n // 2) / 20e3
    ph = res.phases[0]
    assert ph.events == 2
    assert sorted(ph.flow_end_us.tolist()) == pytest.approx([t_short + 1.0, t_long + 1.0], rel=1e-6)
    assert res.time_us == pytest.approx(t_long + 1.0, rel=1e-12)


def test_three_flows_unequal_bottlenecks_in_time():
    # A: g0 -> g1, B: g0 -> g2, C: g3 -> g2. g0's uplink is 10 GB/s (A and B), g2's downlink 4 (B and C):
    # rates 8, 2, 2 (exact progressive filling). C has half the bytes: when it ends, B gets 4 GB/s.
    topo = _star({"g0": 10.0, "g1": 100.0, "g2": 4.0, "g3": 100.0})
    n = 1_000_000
    res = simulate(_traffic(4, [0, 0, 3], [1, 2, 2], [n, n, n // 2]), topo)
    B = 4 * n
    t_a = B / 8e3
    t_c = (B / 2) / 2e3
    t_b = t_c + (B - 2e3 * t_c) / 4e3
    ends = res.phases[0].flow_end_us.astype(float) - 1.0
    assert ends.tolist() == pytest.approx([t_a, t_b, t_c], rel=1e-6)
    assert res.phases[0].events == 3


# ---- contention on presets -------------------------------------------------------------------------


def test_pcie_server_slower_than_nvlink_and_than_contention_free():
    from interlink.model import schedule_time

    nv = simulate_collective("all_reduce", G, "dgx-h100", algorithm="ring")
    pc = simulate_collective("all_reduce", G, "pcie-8gpu", algorithm="ring")
    # the natural ring crosses the CPUs' UPI link once each way: 10 GB/s, no two flows share a link
    assert pc.busbw_gbps == pytest.approx(10.0, rel=1e-3)
    assert nv.busbw_gbps > 30 * pc.busbw_gbps
    assert pc.time_us == pytest.approx(pc.ideal_us, rel=1e-9)
    # a ring that alternates sockets crosses UPI on every hop: 4 flows share each direction
    t = parse_topology("pcie-8gpu")
    inter = t.with_ranks([f"gpu{i}" for i in (0, 4, 1, 5, 2, 6, 3, 7)])
    x = simulate_collective("all_reduce", G, inter, algorithm="ring")
    model = schedule_time(tr.traffic("all_reduce", "ring", 8, G // 4), inter).time_us
    assert x.time_us > 3.9 * x.ideal_us and x.time_us > 3.9 * model
    assert x.busbw_gbps == pytest.approx(2.5, rel=1e-3)
    upi = [row for row in x.top_links(2)]
    assert {row["kind"] for row in upi} == {"upi"} and upi[0]["util"] == pytest.approx(1.0, rel=1e-3)


def _cross_latency(spec: str, a: int, b: int) -> float:
    return parse_topology(spec).path(a, b).latency_us


def test_oversubscribed_fat_tree_slows_inter_node_ring_by_the_ratio():
    # 16 x DGX-H100, one NDR leaf per rail (16 hosts each), leaves joined through the spine. The ring's
    # host-crossing hop goes gpu7 -> rail-7 leaf -> spine -> rail-0 leaf -> gpu0: the 16 such flows
    # share the rail-7 leaf's uplink (16 x 47 GB/s, derated by oversub).
    chunk = G / 128  # bytes per ring message
    lat = _cross_latency("16xdgx-h100", 7, 8)
    times = {}
    for R in (1, 4):
        tx = chunk / (47e3 / R)
        spec = f"16xdgx-h100:oversub={R}"
        # rounds as global barriers: every round pays the crossing's transfer and its latency
        b = simulate_collective("all_reduce", G, spec, algorithm="ring", channels=1, protocol=None, barrier=True)
        assert b.time_us == pytest.approx(2 * 127 * (lat + tx), rel=1e-6) and b.model == "global-barrier"
        # dependency-driven: the crossing's sender sends back to back (sends are eager), the NVLink hops
        # keep up, so the latency is paid once (the pipeline's fill), not per round
        r = simulate_collective("all_reduce", G, spec, algorithm="ring", channels=1, protocol=None)
        assert r.model == "dependency"
        assert r.time_us == pytest.approx(2 * 127 * tx + lat, rel=1e-6)
        times[R] = r.time_us
    assert times[4] / times[1] == pytest.approx((4 * 254 * chunk / 47e3 + lat) / (254 * chunk / 47e3 + lat), rel=1e-6)
    # the lanes of the hierarchical algorithm stay on their rail's leaf: the spine does not matter
    h = [simulate_collective("all_reduce", G, f"16xdgx-h100:oversub={R}", algorithm="hierarchical").time_us
         for R in (1, 4)]
    assert h[0] == pytest.approx(h[1], rel=1e-12)
    # so do the 8 rail-aligned rings (channels) of the default ring: each host crossing stays on a rail
    c = [simulate_collective("all_reduce", G, f"16xdgx-h100:oversub={R}", algorithm="ring") for R in (1, 4)]
    assert "8 channels" in " ".join(c[0].notes)
    assert c[0].time_us == pytest.approx(c[1].time_us, rel=1e-12)
    assert c[0].busbw_gbps > 6 * simulate_collective("all_reduce", G, "16xdgx-h100", algorithm="ring",
                                                     channels=1).busbw_gbps


def test_oversubscribed_fat_tree_slows_all_to_all_by_the_expected_factor():
    # pairwise all_to_all, 128 ranks: in round k (1..127) rank 8h+j sends 8 MiB to rank 8h+j+k. When
    # k % 8 != 0 the message changes rail, so all 16 senders of a rail cross its leaf's uplink
    # (4x slower at oversub=4); when k % 8 == 0 it stays on the rail's leaf (unaffected).
    blk = G / 128
    l_x, l_s = _cross_latency("16xdgx-h100", 0, 9), _cross_latency("16xdgx-h100", 0, 8)
    t1 = 112 * (l_x + blk / 47e3) + 15 * (l_s + blk / 47e3)
    t4 = 112 * (l_x + 4 * blk / 47e3) + 15 * (l_s + blk / 47e3)
    kw = dict(algorithm="pairwise", protocol=None)  # flows only: no protocol costs
    b1 = simulate_collective("all_to_all", G, "16xdgx-h100", barrier=True, **kw)
    b4 = simulate_collective("all_to_all", G, "16xdgx-h100:oversub=4", barrier=True, **kw)
    assert b1.time_us == pytest.approx(t1, rel=1e-6)
    assert b4.time_us == pytest.approx(t4, rel=1e-6)
    # dependency-driven: a rank starts round k + 1 once its own message of round k is in and its send is
    # out, so part of each round's latency overlaps the next round: at most the barrier time, at least
    # the transfers back to back plus one latency
    r1 = simulate_collective("all_to_all", G, "16xdgx-h100", **kw)
    r4 = simulate_collective("all_to_all", G, "16xdgx-h100:oversub=4", **kw)
    assert 127 * blk / 47e3 + l_s < r1.time_us < t1
    assert 112 * 4 * blk / 47e3 + 15 * blk / 47e3 < r4.time_us < t4
    assert r4.time_us / r1.time_us == pytest.approx(t4 / t1, rel=2e-3)  # ~3.6
    assert r4.slowdown == pytest.approx(r4.time_us / r1.time_us, rel=1e-6)


@pytest.mark.parametrize("spec,algo", [("dgx-h100", "ring"), ("pcie-8gpu", "ring"), ("16xdgx-h100", "ring"),
                                       ("16xdgx-h100", "hierarchical"), ("4xdgx-a100", "hierarchical")])
def test_agrees_with_cost_model_where_nothing_is_shared(spec, algo):
    from interlink.model import schedule_time

    topo = parse_topology(spec)
    params = {"local_size": topo.ranks_per_host} if algo == "hierarchical" else {}
    t = tr.traffic("all_reduce", algo, topo.nranks, G // 4, prefer_fast=True, **params)
    sim = simulate(t, topo)
    est = schedule_time(t, topo).time_us
    assert sim.time_us == pytest.approx(sim.ideal_us, rel=1e-9)  # nothing shared
    assert abs(sim.time_us - est) / est < 0.10


# ---- machinery -------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["16xdgx-h100", "2xgb200-nvl72", "4xpcie-8gpu:oversub=2", "40xdgx-a100"])
def test_path_classes_give_the_topology_routes(spec):
    topo = parse_topology(spec)
    rng = np.random.default_rng(1)
    p = topo.nranks
    src, dst = rng.integers(0, p, 600), rng.integers(0, p, 600)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    table = _PathTable(topo)
    assert table.classes is not None
    pid = table.ids(src, dst)
    assert table.lookups < np.unique(src * p + dst).size
    for a, b, i in zip(src.tolist(), dst.tolist(), pid.tolist()):
        path = topo.path(a, b)
        assert table.hops[table.indptr[i]:table.indptr[i + 1]].tolist() == \
            [lid * 2 + d for lid, d in zip(path.hops, path.directions)]
        assert table.lat[i] == pytest.approx(path.latency_us)


def test_schedule_and_traffic_give_the_same_result():
    s = get_schedule("all_reduce", "tree", 16, 1000)
    a = simulate(s, "2xdgx-h100")
    b = simulate(tr.from_schedule(s), "2xdgx-h100")
    assert a.time_us == b.time_us and a.rounds == b.rounds == s.comm_rounds
    assert np.array_equal(a.link_bytes, b.link_bytes)


def test_uneven_rounds_merged_within_one_element():
    n = (1 << 20) + 7
    t = tr.traffic("all_reduce", "ring", 64, n, prefer_fast=True)
    exact = simulate(t, "8xdgx-h100", merge_tolerance=0)
    merged = simulate(t, "8xdgx-h100")
    assert len(exact.phases) == 126 and len(merged.phases) == 2
    assert exact.time_us <= merged.time_us <= exact.time_us * (1 + 1e-4)
    assert np.array_equal(exact.link_bytes, merged.link_bytes)  # bytes stay exact
    assert merged.link_bytes.sum() == exact.link_bytes.sum()


def test_reduction_time_and_overlap():
    t = tr.traffic("reduce_scatter", "ring", 8, 1 << 20)
    base = simulate(t, "dgx-h100", gamma=0.0)
    slow = simulate(t, "dgx-h100", gamma=1e-9, reduce_overlap=0.0)  # 1 ns per byte reduced
    per_round = (1 << 20) * 4 * 1e-9 * 1e6
    assert slow.time_us == pytest.approx(base.time_us + 7 * per_round, rel=1e-9)
    hidden = simulate(t, "dgx-h100", gamma=1e-12, reduce_overlap=1.0)
    assert hidden.time_us == pytest.approx(base.time_us, rel=1e-9)


def test_metrics_and_errors():
    from interlink.model import predict

    r = simulate_collective("all_gather", 64 << 20, "2xdgx-h100", algorithm="ring")
    assert r.nbytes == 64 << 20 and r.count == (64 << 20) // 4 // 16
    assert r.algbw_gbps == pytest.approx(r.nbytes / (r.time_us * 1e3))
    assert r.busbw_gbps == pytest.approx(r.algbw_gbps * 15 / 16)
    assert r.rank_busy_us.shape == (16,) and (r.rank_idle_us >= 0).all()
    assert (r.link_util <= 1 + 1e-9).all()
    d = r.to_dict()
    assert {"time_us", "algbw_gbps", "busbw_gbps", "links", "ranks", "phases"} <= set(d)
    json.dumps(d)
    one = simulate_collective("all_reduce", 4096, "dgx-h100", nranks=1)
    assert one.rounds == 0 and one.time_us == predict("all_reduce", 4096, "dgx-h100", nranks=1).time_us  # the call
    assert simulate_collective("all_reduce", 4096, "dgx-h100", nranks=1, protocol=None).time_us == 0  # flows only
    with pytest.raises(SimError):
        simulate(tr.traffic("all_reduce", "ring", 16, 10), "dgx-h100")
    with pytest.raises(SimError):
        simulate_collective("all_reduce", 1024, "dgx-h100", nranks=9)


def test_trace_is_compact_and_valid(tmp_path):
    from interlink.sim import write_trace

    r = simulate_collective("all_reduce", G, "16xdgx-h100", algorithm="ring")
    d = chrome_trace(r, max_ranks=8, max_links=4, max_repeats=2)
    ev = d["traceEvents"]
    ranks = {e["tid"] for e in ev if e.get("pid") == 1 and e["ph"] == "X"}
    assert ranks == set(range(8))
    links = {e["tid"] for e in ev if e.get("pid") == 2 and e["ph"] == "X"}
    assert 0 < len(links) <= 4
    assert any(e.get("cat") == "compressed" for e in ev)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in ev if e["ph"] == "X")
    assert len(ev) < 2000
    n = write_trace(r, str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"].__len__() == n


# ---- command line ----------------------------------------------------------------------------------


def test_cli_json(capsys):
    assert main(["simulate", "all_reduce", "--size", "64M", "--topology", "16xdgx-h100:oversub=2",
                 "--algorithm", "ring", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["nbytes"] == 64 << 20 and d["nranks"] == 128 and d["algorithm"] == "ring"
    assert d["time_us"] > 0 and d["busbw_gbps"] == pytest.approx(d["algbw_gbps"] * 2 * 127 / 128)


def test_cli_text_trace_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    tr_path, png = tmp_path / "t.json", tmp_path / "p.png"
    assert main(["simulate", "all_reduce", "--size", "1M", "--topology", "pcie-8gpu", "--trace", str(tr_path),
                 "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "busbw" in out and "busiest links" in out
    assert json.loads(tr_path.read_text())["traceEvents"] and png.stat().st_size > 1000


def test_cli_sweep_nodes(tmp_path, capsys):
    from interlink.cli.simulate import parse_nodes

    assert parse_nodes("1,2,4,...,64") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_nodes("1,2,3,...,6") == [1, 2, 3, 4, 5, 6]
    assert main(["simulate", "all_reduce", "--size", "1G", "--topology", "dgx-h100", "--sweep-nodes", "1,2,...,8",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["algorithms"] == ["ring", "tree", "hierarchical", "choice"]  # and the model's own pick
    rows = {row["nodes"]: row for row in d["rows"]}
    assert rows[1]["choice"]["algorithm"] == "nvls" and rows[1]["choice"]["busbw_gbps"] > rows[1]["ring"]["busbw_gbps"]
    assert sorted(rows) == [1, 2, 4, 8]
    # no cliff at 2 nodes: the ring runs one channel per NIC (8 x 400 Gb/s), so NVLink stays the bound
    assert rows[1]["ring"]["busbw_gbps"] > 300 and rows[2]["ring"]["busbw_gbps"] > 0.95 * rows[1]["ring"]["busbw_gbps"]
    assert rows[8]["ring"]["busbw_gbps"] > rows[8]["hierarchical"]["busbw_gbps"]
    assert rows[1]["ring"]["efficiency"] == 1.0
    # the published nccl-tests figures measured on N x dgx-h100 come with the sweep (and onto its plot)
    pub = {r["id"]: r for r in d["published"]}
    assert {"A5", "C9", "C14"} <= set(pub) and pub["C9"]["nodes"] == 4 and pub["C9"]["busbw_gbps"] == 365.84
    assert main(["simulate", "all_reduce", "--size", "1G", "--topology", "dgx-h100", "--sweep-nodes", "1,2"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# nodes"))  # the names line: busbw, eff per group
    assert "hierarchical" in lines[i - 1] and lines[i].count("busbw") == 4 and "NVIDIA/nccl-tests#309" in out
    assert main(["simulate", "all_reduce", "--size", "1G", "--topology", "dgx-h100", "--sweep-nodes", "x"]) == 2


def test_detail_is_bounded_for_many_distinct_rounds():
    from interlink.sim import write_trace

    t = tr.traffic("all_reduce", "ring", 64, (1 << 16) + 5, prefer_fast=True)
    r = simulate(t, "8xdgx-h100", merge_tolerance=0, max_detail=10)
    assert len(r.phases) == 126
    assert all(p.rank_busy_us.size == 64 for p in r.phases[:10])
    assert all(p.rank_busy_us.size == 0 and p.flow_end_us.size == 0 for p in r.phases[10:])
    full = simulate(t, "8xdgx-h100", merge_tolerance=0)
    assert r.time_us == full.time_us and np.array_equal(r.rank_busy_us, full.rank_busy_us)
    assert write_trace(r, "/dev/null") > 0
