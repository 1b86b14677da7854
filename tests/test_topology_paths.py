"""interlink.topology.paths: the path table that the cost model and the simulator share."""

import numpy as np
import pytest

from interlink.topology import (CATALOG, HOP_KINDS, PathTable, PathType, TopologyBuilder, TopologyError,
                                hop_kind, parse_topology, path_table)


def _one(table: PathTable, a: int, b: int, tcp: bool = False):
    bw, lat, kind, cross = table.classify(np.array([a]), np.array([b]), tcp=tcp)
    pid = int(table.ids(np.array([a]), np.array([b]))[0])
    return float(bw[0]), float(lat[0]), HOP_KINDS[int(kind[0])], bool(cross[0]), pid


def _specs(topo, table, pid):
    return [topo.links[h // 2].spec.name for h in table.route(pid).tolist()]


def test_gpus_in_one_node_go_over_nvlink_through_the_switch():
    topo = parse_topology("dgx-h100")
    t = path_table(topo)
    bw, lat, kind, cross, pid = _one(t, 0, 1)
    nv = CATALOG["nvlink4"]
    assert kind == "nvlink" and not cross
    assert bw == pytest.approx(18 * nv.effective_gbps)  # 18 NVLink4 per GPU
    assert lat == pytest.approx(2 * nv.latency_us)      # GPU -> NVSwitch -> GPU
    assert _specs(topo, t, pid) == ["nvlink4", "nvlink4"]
    assert t.lat[pid] == pytest.approx(lat) and t.bw[pid] == pytest.approx(bw * 1e3)
    assert t.nhosts == 1 and t.ranks_on_host.tolist() == [8]


def test_across_nodes_rails_and_latency_from_the_catalog():
    topo = parse_topology("2xdgx-h100")
    t = path_table(topo)
    ndr, pcie = CATALOG["ib-ndr"], CATALOG["pcie-gen5"]
    assert t.nhosts == 2 and t.host.tolist() == [0] * 8 + [1] * 8
    # same rail (GPU 0 of each host: NIC 0 -> leaf 0 -> NIC 0) and another rail (through the spine)
    bw0, lat0, kind0, cross0, p0 = _one(t, 0, 8)
    bw1, lat1, kind1, cross1, p1 = _one(t, 0, 9)
    assert kind0 == kind1 == "net" and cross0 and cross1
    assert bw0 == bw1 == pytest.approx(ndr.effective_gbps)
    assert _specs(topo, t, p0) == ["pcie-gen5"] * 2 + ["ib-ndr"] * 2 + ["pcie-gen5"] * 2
    assert _specs(topo, t, p1) == ["pcie-gen5"] * 2 + ["ib-ndr"] * 4 + ["pcie-gen5"] * 2
    assert lat0 == pytest.approx(4 * pcie.latency_us + 2 * ndr.latency_us)
    assert lat1 == pytest.approx(4 * pcie.latency_us + 4 * ndr.latency_us)
    # each GPU leaves through its own NIC
    links = [topo.links[h // 2] for h in t.route(p0).tolist()]
    assert topo.nic_for(0) in (links[1].a, links[1].b)
    assert topo.nic_for(8) in (links[-2].a, links[-2].b)


def test_pcie_machine_path_types():
    topo = parse_topology("pcie-8gpu")
    t = path_table(topo)
    bw, lat, kind, _, _ = _one(t, 0, 1)  # same PCIe switch
    assert kind == "pcie" and bw == pytest.approx(CATALOG["pcie-gen4"].effective_gbps)
    bw, lat, kind, _, pid = _one(t, 0, 7)  # across the sockets: UPI is the bottleneck
    assert kind == "pcie" and bw == pytest.approx(CATALOG["upi"].effective_gbps)
    assert "upi" in _specs(topo, t, pid)
    assert topo.path(0, 7).path_type is PathType.SYS


def test_loopback_tcp_on_a_cpu_host():
    t = path_table(parse_topology("cpu-host"))
    shm = _one(t, 0, 1)
    tcp = _one(t, 0, 1, tcp=True)
    assert shm[2] == "pcie" and tcp[2] == "net" and not tcp[3]
    assert tcp[0] < shm[0]


@pytest.mark.parametrize("spec", ["16xdgx-h100", "2xgb200-nvl72", "4xpcie-8gpu:oversub=2", "3xh800", "4xcpu-host"])
def test_classes_agree_with_topology_path(spec):
    topo = parse_topology(spec)
    t = PathTable(topo)
    p = topo.nranks
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, p, 500), rng.integers(0, p, 500)
    bw, lat, kind, cross = t.classify(src, dst)
    pid = t.ids(src, dst)
    assert t.lookups <= np.unique(src * p + dst).size
    for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
        path = topo.path(a, b)
        assert bw[i] == (path.bottleneck_gbps if a != b else 1e12)
        assert lat[i] == path.latency_us == t.lat[pid[i]]
        assert HOP_KINDS[kind[i]] == HOP_KINDS[hop_kind(path.path_type)]
        assert cross[i] == (topo.device(a).host != topo.device(b).host)
        assert t.route(pid[i]).tolist() == [lid * 2 + d for lid, d in zip(path.hops, path.directions)]


def test_incidence_and_capacities():
    topo = parse_topology("2xdgx-a100")
    t = path_table(topo)
    pid = t.ids(np.array([0, 1, 0]), np.array([8, 2, 8]))
    assert pid[0] == pid[2]
    flow, res = t.incidence(pid)
    assert np.bincount(flow).tolist() == [len(t.route(i)) for i in pid.tolist()]
    assert res.tolist() == np.concatenate([t.route(i) for i in pid.tolist()]).tolist()
    assert t.cap.size == 2 * len(topo.links)
    assert t.cap[res].tolist() == [topo.links[r // 2].gbps * 1e3 for r in res.tolist()]


def test_one_table_per_topology_shared_by_model_and_simulator():
    from interlink.model import cost
    from interlink.sim import engine

    topo = parse_topology("4xdgx-h100")
    assert path_table(topo) is path_table(topo)
    assert cost._info(topo).paths is path_table(topo) is engine._table(topo)
    sub = topo.with_ranks(list(topo.ranks[:4]))
    assert path_table(sub) is not path_table(topo) and path_table(sub).n == 4


def test_empty_and_unroutable():
    t = path_table(parse_topology("dgx-h100"))
    bw, lat, kind, cross = t.classify(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert bw.size == lat.size == kind.size == cross.size == 0
    b = TopologyBuilder("apart")
    b.device("g0", "gpu", 0)
    b.device("g1", "gpu", 1)
    topo = b.build()
    with pytest.raises(TopologyError):
        path_table(topo).ids(np.array([0]), np.array([1]))


@pytest.mark.parametrize("spec,nranks,size", [
    ("dgx-h100", None, 8), ("2xdgx-h100", None, 8), ("hgx-b200", None, 8), ("gb200-nvl72", None, 72),
    ("2xgb200-nvl72", None, 72), ("2xgb200-nvl72", 72, 72), ("gb200-nvl72", 8, 8),
    # not blocks of one NVLS switch each: 100 = 72 + 28; no NVLink SHARP before Hopper; no NVLink at all
    ("2xgb200-nvl72", 100, None), ("dgx-a100", None, None), ("pcie-8gpu", None, None), ("cpu-host", None, None),
])
def test_nvls_domains_are_equal_blocks_of_consecutive_ranks(spec, nranks, size):
    """The NVLSTree's blocks: a DGX's host, a whole NVL72 rack across its 18 hosts (multi-node NVLink)."""
    from interlink.topology import nvls_domains

    assert nvls_domains(parse_topology(spec), nranks) == size


def test_nvls_domains_refuse_interleaved_switches():
    """Ranks that alternate between two hosts' switches are not blocks: NVLS in a block would span two
    switches, which reduce only the ranks on their own ports."""
    from interlink.topology import nvls_domains

    topo = parse_topology("2xdgx-h100")
    order = [r for pair in zip(range(8), range(8, 16)) for r in pair]
    assert nvls_domains(topo.with_ranks([topo.ranks[r] for r in order])) is None


@pytest.mark.parametrize("spec,channels,local_size", [
    ("2xdgx-h100", 8, 8),                 # one ring per NIC, leaving each host through its own NIC
    ("3xgb200-nvl72:gpus=4", 4, 4),       # one tray per rack: the tray's 4 NICs
    ("3xgb200-nvl72:gpus=8", 8, 8),       # two trays per rack talk over NVLink: the block is the partition
    ("2xgb200-nvl72", 32, 72),            # a rack's 72 NICs, NCCL's 32 channels at most
    ("gb200-nvl72", 1, 72),               # one rack: one NVLink domain, nothing to cross
])
def test_rail_plan_blocks_are_nvlink_domains_where_they_span_hosts(spec, channels, local_size):
    """NCCL's multi-node NVLink treats an NVL72 rack (or a partition of one) as one node: rings cross
    between its trays over NVLink and leave it through its NICs. With host blocks, 3 partitions of 8 GPUs
    priced a ring at 187 GB/s where NVIDIA/nccl#1801 measured 394 (published row C25r)."""
    from interlink.topology import rail_plan
    from interlink.topology.paths import MAX_CHANNELS, ring_blocks

    topo = parse_topology(spec)
    plan = rail_plan(topo)
    assert (plan.channels, plan.local_size) == (channels, local_size)
    if plan.exits is not None:
        assert len(set(topo.nic_for(e) for e in plan.exits)) == plan.channels <= MAX_CHANNELS
        assert list(plan.exits) == sorted(plan.exits)
    blocks = ring_blocks(topo)
    assert np.unique(blocks).size == topo.nranks // local_size


def test_rail_plan_falls_back_to_hosts_where_domains_are_not_equal_blocks():
    """100 ranks of 2 NVL72 racks (72 + 28): the racks are not equal blocks, so the rings cross hosts (trays
    of 4) as before, one channel per tray NIC, rather than one channel in all."""
    from interlink.topology import rail_plan
    from interlink.topology.paths import spanning_blocks

    t = parse_topology("2xgb200-nvl72")
    part = t.with_ranks(list(t.ranks[:100]))
    assert (rail_plan(part).channels, rail_plan(part).local_size) == (4, 4)
    assert spanning_blocks(part) is None


@pytest.mark.parametrize("spec,n", [("3xgb200-nvl72:gpus=8", 24), ("2xdgx-h100:gpus=3", 6), ("4xhgx-b200:gpus=8", 32)])
def test_cluster_gpus_option_keeps_the_first_gpus_of_each_machine(spec, n):
    topo = parse_topology(spec)
    g = n // int(spec.split("x")[0])
    assert topo.nranks == n
    machine = [topo.nvlink_domain(r) for r in range(n)]
    assert all(machine[k * g:(k + 1) * g] == [machine[k * g]] * g for k in range(n // g))  # blocks of g
    assert len(set(machine)) == n // g
    whole = parse_topology(spec.split(":")[0])
    assert topo.ranks[:g] == whole.ranks[:g]


@pytest.mark.parametrize("spec", ["3xgb200-nvl72:gpus=0", "3xgb200-nvl72:gpus=73", "2xdgx-h100:gpus=x",
                                  "dgx-h100:gpus=4"])
def test_cluster_gpus_option_refuses_what_is_not_there(spec):
    with pytest.raises(TopologyError, match="gpus|clusters only"):
        parse_topology(spec)


def test_hierarchical_algorithms_cross_an_nvlink_domain_once_not_each_tray():
    """On GB200 NVL72 racks the hierarchical all_reduce's block is the rack (its trays talk over NVLink):
    with tray blocks it crossed the NICs between trays of one rack and fell from 717 to 159 GB/s from 1 to
    2 racks; CollNet (SHARP) keeps its host blocks, one NIC per SHARP group member."""
    from interlink.model.cost import builder_params
    from interlink.sim import simulate_collective
    from interlink.topology.paths import spanning_blocks

    topo = parse_topology("2xgb200-nvl72")
    assert spanning_blocks(topo) == 72 and spanning_blocks(parse_topology("2xdgx-h100")) is None
    assert spanning_blocks(parse_topology("3xgb200-nvl72:gpus=8")) == 8
    assert dict(builder_params("all_reduce", "hierarchical", topo, 4))["local_size"] == 72
    assert dict(builder_params("all_reduce", "collnet_direct", topo, 4))["local_size"] == 4
    assert dict(builder_params("all_reduce", "hierarchical", parse_topology("2xdgx-h100"), 8))["local_size"] == 8
    one = simulate_collective("all_reduce", 8 << 30, "gb200-nvl72", algorithm="hierarchical", protocol="simple")
    two = simulate_collective("all_reduce", 8 << 30, topo, algorithm="hierarchical", protocol="simple")
    assert two.busbw_gbps > 0.85 * one.busbw_gbps
