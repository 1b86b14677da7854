"""In-switch steps (SwitchReduce, Multicast: NVLS) in the Schedule IR: the reference interpreter and the
verifier run them, mutations fail, validation refuses bad ones, the point-to-point lowering is verified,
the traffic crosses each rank's link to the switch n(1 + 1/p) each way, and predict/simulate price the
NVLS Schedule only where the hardware has NVLink SHARP."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from interlink.algorithms.reference import verify_schedule
from interlink.algorithms.registry import get_schedule
from interlink.algorithms.schedule import Multicast, Round, Schedule, SwitchReduce, has_switch_steps, two_sided
from interlink.algorithms.traffic import from_schedule
from interlink.errors import ScheduleError, VerificationError
from interlink.topology import parse_topology
from switch_bytes import switch_bytes

G = 1 << 30


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 9])
def test_nvls_verified_and_lowered(p):
    for n in (0, 1, p - 1, 2 * p + 1, 97):
        for seg in (None, 1, 3):
            s = get_schedule("all_reduce", "nvls", p, n, segments=seg)
            verify_schedule(s, dtypes=(np.float64, np.int32))
            low = two_sided(s)
            assert not has_switch_steps(low)
            verify_schedule(low, dtypes=(np.float64,))
            assert Schedule.from_json(s.dumps()).dumps() == s.dumps()


def _replace(s: Schedule, rank: int, k: int, i: int, new) -> Schedule:
    ranks = [list(prog) for prog in s.ranks]
    steps = list(ranks[rank][k].steps)
    steps[i] = new
    ranks[rank][k] = Round(tuple(steps))
    return dataclasses.replace(s, ranks=tuple(tuple(prog) for prog in ranks))


def _find(s: Schedule, kind):
    for r, prog in enumerate(s.ranks):
        for k, rnd in enumerate(prog):
            for i, st in enumerate(rnd.steps):
                if isinstance(st, kind):
                    return r, k, i, st
    raise AssertionError(f"no {kind.__name__}")


def test_mutations_fail_verification():
    s = get_schedule("all_reduce", "nvls", 5, 23, segments=2)
    r, k, i, st = _find(s, SwitchReduce)
    bad = _replace(s, r, k, i, dataclasses.replace(st, group=st.group[:-1]))  # a member left out
    with pytest.raises(VerificationError):
        verify_schedule(bad, dtypes=(np.float64,))
    r, k, i, st = _find(s, Multicast)
    bad = _replace(s, r, k, i, dataclasses.replace(st, group=st.group[1:]))  # a rank never gets the chunk
    with pytest.raises(VerificationError):
        verify_schedule(bad, dtypes=(np.float64,))
    r, k, i, st = _find(s, SwitchReduce)
    src = dataclasses.replace(st.src, offset=(st.src.offset + 1) % (23 - st.src.count + 1))
    bad = _replace(s, r, k, i, dataclasses.replace(st, src=src))  # the wrong slice
    with pytest.raises(VerificationError):
        verify_schedule(bad, dtypes=(np.float64,))


def test_validation_refuses_bad_switch_steps():
    s = get_schedule("all_reduce", "nvls", 4, 16)
    r, k, i, st = _find(s, SwitchReduce)
    for group in ((), (0, 0, 1), (0, 7)):
        with pytest.raises(ScheduleError, match="group"):
            _replace(s, r, k, i, dataclasses.replace(st, group=group)).validate()
    with pytest.raises(ScheduleError, match="elements"):
        _replace(s, r, k, i, dataclasses.replace(st, dst=dataclasses.replace(st.dst, count=st.dst.count + 1))
                 ).validate()
    # a multicast into a chunk the receiver also receives in that round
    r, k, i, st = _find(s, Multicast)
    target = st.group[0]
    clash = Multicast((target,), st.src, st.src, st.channel)
    other = (r + 1) % 4 if (r + 1) % 4 != target else (r + 2) % 4
    steps = list(s.ranks[other][k].steps) + [clash]
    ranks = [list(prog) for prog in s.ranks]
    ranks[other][k] = Round(tuple(steps))
    with pytest.raises(ScheduleError):
        dataclasses.replace(s, ranks=tuple(tuple(x) for x in ranks)).validate()


def test_channels_hand_over_only_forward_in_rounds():
    s = get_schedule("all_reduce", "nvls", 3, 12, segments=2)
    assert s.channels == 2  # reductions on 0, multicasts on 1: segment j handed over after round j
    # channel 1 reading a segment before channel 0 has written it (round 0 < round 1) is refused
    st = next(x for x in s.ranks[0][1].steps if isinstance(x, SwitchReduce))
    steps = list(s.ranks[0][0].steps) + [Multicast((1, 2), st.dst, st.dst, 1)]
    ranks = [list(prog) for prog in s.ranks]
    ranks[0][0] = Round(tuple(steps))
    with pytest.raises(ScheduleError, match="channel"):
        dataclasses.replace(s, ranks=tuple(tuple(x) for x in ranks)).validate()


@pytest.mark.parametrize("p", [2, 5, 8])
def test_traffic_crosses_each_link_to_the_switch_n_times_one_plus_one_over_p(p):
    n = 7 * p * 4
    tr = from_schedule(get_schedule("all_reduce", "nvls", p, n, segments=4))
    assert all(ph.reduced is None for ph in tr.phases)  # the switch reduces
    up, down = switch_bytes(tr, p)
    assert up.tolist() == [n + n // p] * p
    # a rank receives its own reduced chunk (n/p) and the others' chunks ((p-1) n/p): n in all
    assert down.tolist() == [n] * p


@pytest.mark.parametrize("p,h", [(5, 2), (8, 3), (9, 1)])
def test_with_fewer_heads_only_the_heads_read_and_multicast(p, h):
    """NCCL runs at most 32 NVLS heads (NCCL_MAX_NVLS_ARITY): on a 72-GPU NVL72 rack the other 40 ranks only
    serve the switch's reads and take its multicasts. A head's link carries n(1 + 1/h) up, every other
    rank's n; every rank receives n (its own chunk's result, if a head, and every multicast)."""
    from interlink.algorithms.switch import MAX_HEADS, nvls_heads

    n = 6 * p * h
    heads = nvls_heads(p, h)
    assert len(heads) == h == len(set(heads)) and heads[0] == 0
    s = get_schedule("all_reduce", "nvls", p, n, segments=2, heads=h)
    verify_schedule(s, dtypes=(np.float64, np.int32))
    verify_schedule(two_sided(s), dtypes=(np.float64,))
    up, down = switch_bytes(from_schedule(s), p)
    assert up.tolist() == [n + n // h if r in heads else n for r in range(p)]
    assert down.tolist() == [n] * p
    assert nvls_heads(72, MAX_HEADS)[:4] == [0, 2, 4, 6] and len(set(nvls_heads(72, MAX_HEADS))) == 32
    with pytest.raises(ValueError, match="heads"):
        get_schedule("all_reduce", "nvls", p, n, heads=0)


def test_predict_and_simulate_nvls_where_the_hardware_has_it():
    from interlink.model import ModelError, predict
    from interlink.sim import SimError, simulate_collective

    pr = predict("all_reduce", 8 * G, "dgx-h100")
    assert pr.algorithm == "nvls" and pr.protocol == "simple"
    assert pr.busbw_gbps == pytest.approx(478.9, rel=0.05)  # Azure ND H100 v5, nccl-tests (docs/reference.md)
    sim = simulate_collective("all_reduce", 8 * G, "dgx-h100")
    assert sim.algorithm == "nvls" and sim.time_us == pytest.approx(pr.time_us, rel=1e-6)
    assert any("nvswitch" in n for n in sim.notes)
    # the two halves overlap: close to n(1 + 1/p) at 0.85 x the NVLink bandwidth, not twice that
    ideal = 8 * G * (1 + 1 / 8) / (0.85 * 370.8e3)
    assert sim.time_us < 1.1 * ideal
    # A100 (no NVLink SHARP): not a candidate; asked for, a clear error
    assert all(c.algorithm != "nvls" for c in predict("all_reduce", G, "dgx-a100").table)
    with pytest.raises(ModelError, match="nvls"):
        predict("all_reduce", G, "dgx-a100", algorithm="nvls")
    with pytest.raises(SimError, match="NVLS"):
        simulate_collective("all_reduce", G, "dgx-a100", algorithm="nvls", protocol="simple")
    # one switch reduces only the ranks on its ports: NVLS over two hosts' NVSwitches is refused
    with pytest.raises(SimError, match="spans 2 switches"):
        simulate_collective("all_reduce", G, "2xdgx-h100", algorithm="nvls", protocol="simple")
    assert all(c.algorithm != "nvls" for c in predict("all_reduce", G, "2xdgx-h100").table)


@pytest.mark.parametrize("p,L", [(1, 1), (2, 1), (2, 2), (4, 2), (6, 3), (8, 4), (9, 3), (12, 4), (16, 8)])
def test_nvls_tree_verified_and_lowered(p, L):
    """NVLS inside each host of L ranks, the double binary tree across hosts (rail j carries chunk j)."""
    for n in (0, 1, L - 1, 2 * p + 1, 97):
        for seg in (None, 1, 3):
            s = get_schedule("all_reduce", "nvls_tree", p, n, segments=seg, local_size=L)
            verify_schedule(s, dtypes=(np.float64,))
            verify_schedule(two_sided(s), dtypes=(np.float64,))
    tr = from_schedule(get_schedule("all_reduce", "nvls_tree", p, 64 * p, local_size=L))
    assert all(len(set(g)) == L for g in tr.switch_groups)  # one switch per host


def test_nvls_tree_across_hosts_meets_the_published_nvlstree_figure():
    from interlink.model import predict
    from interlink.sim import simulate_collective

    pr = predict("all_reduce", 16 * G, "2xdgx-h100")
    assert pr.algorithm == "nvls_tree"
    assert pr.busbw_gbps == pytest.approx(470.0, rel=0.05)  # NVIDIA/nccl-tests#309, 2 nodes, NVLSTree
    sim = simulate_collective("all_reduce", 16 * G, "2xdgx-h100")
    assert sim.algorithm == "nvls_tree" and sim.time_us == pytest.approx(pr.time_us, rel=1e-6)
    # the runtime's tuner never offers an algorithm that needs a switch that reduces
    from interlink.model import tuner

    assert tuner.choose("all_reduce", 16 * G, 16, parse_topology("2xdgx-h100")) not in ("nvls", "nvls_tree")


def test_nvls_tree_runs_nvls_in_each_rack_when_an_nvlink_domain_spans_hosts():
    """GB200 NVL72: a rack's 72 GPUs over 18 hosts are one NVLink domain (NCCL's multi-node NVLink), so the
    NVLSTree's blocks are racks, not hosts: NVLS inside each rack, the tree across racks through the NICs.
    Before, the model refused nvls_tree there and priced 2 racks at 354 GB/s (nccl_tree, host blocks of 4)
    where CoreWeave measured 810 (published row C22; 980 now, NVLS's miss of C21)."""
    from interlink.model import ModelError, predict
    from interlink.model.cost import builder_params
    from interlink.sim import simulate_collective

    topo = parse_topology("2xgb200-nvl72")
    # the rack is the block; NCCL's 32 heads of its 72 GPUs carry it across racks
    assert dict(builder_params("all_reduce", "nvls_tree", topo, 4)) == {"local_size": 72, "heads": 32}
    assert dict(builder_params("all_reduce", "nvls_tree", parse_topology("2xdgx-h100"), 8)) == {"local_size": 8}
    assert dict(builder_params("all_reduce", "nvls", parse_topology("gb200-nvl72"))) == {"heads": 32}
    pr = predict("all_reduce", 16 * G, topo)
    assert pr.algorithm == "nvls_tree"
    nccl_tree = next(c for c in pr.table if c.algorithm == "nccl_tree")
    assert pr.busbw_gbps > 1.3 * nccl_tree.busbw_gbps  # nccl_tree: a chain over each rack, tree across
    # NVLS-bound: within 6% of one rack's NVLS (the tree across 2 racks moves 1/32 of the buffer per head's NIC)
    one = predict("all_reduce", 16 * G, "gb200-nvl72")
    assert one.algorithm == "nvls" and pr.time_us == pytest.approx(one.time_us, rel=0.06)
    sim = simulate_collective("all_reduce", 16 * G, topo)
    assert sim.algorithm == "nvls_tree" and sim.time_us == pytest.approx(pr.time_us, rel=0.05)
    assert any("r0/nvswitch" in n and "r1/nvswitch" in n for n in sim.notes)
    # the Schedule's switch groups are the racks; the tree's messages cross between racks only
    tr = from_schedule(get_schedule("all_reduce", "nvls_tree", 144, 144 * 4, local_size=72, segments=1, heads=32))
    assert sorted(map(len, tr.switch_groups)) == [72, 72]
    heads = set()
    for ph in tr.phases:
        for a, b in zip(ph.src.tolist(), ph.dst.tolist()):
            if a < 144 and b < 144:
                assert a // 72 != b // 72 and a % 72 == b % 72  # rail j of one rack to rail j of the other
                heads.add(a % 72)
    assert len(heads) == 32  # across racks: the heads' NICs only
    # ranks that are not whole racks: a clear refusal, and the default choice leaves nvls_tree out
    with pytest.raises(ModelError, match="equal blocks"):
        predict("all_reduce", G, topo, nranks=100, algorithm="nvls_tree")
    assert all(c.algorithm != "nvls_tree" for c in predict("all_reduce", G, topo, nranks=100).table)


def test_nvls_busbw_grows_with_the_rank_count_as_published():
    """NVIDIA/nccl#1455 (8x H100, NCCL_ALGO=NVLS, 2G-4G): busbw 420, 440, 460, 480 GB/s at 5, 6, 7, 8 GPUs, as
    the NVLS Schedule's traffic n(1 + 1/p) each way says (busbw = 2B(p-1)/(p+1)). A flat busbw (NCCL's own
    NVLS tuning formula has no rank count) would miss the 5 -> 8 growth of 14%; the model's growth must be
    within 3% of the published one at every step."""
    from interlink.model import predict

    published = {5: 420.0, 6: 440.0, 7: 460.0, 8: 480.0}
    model = {p: predict("all_reduce", 4 * G, "dgx-h100", nranks=p, algorithm="nvls").busbw_gbps for p in published}
    for p in (6, 7, 8):
        assert model[p] / model[5] == pytest.approx(published[p] / published[5], rel=0.03)
    assert model[8] / model[5] > 1.1  # it grows, as measured


def test_executors_never_skip_a_step_they_do_not_run():
    """A wrong result must not ship silently: the host executor refuses Gets and in-switch steps (the group
    hands it two_sided(s)), and the device executor's one-sided form has the switch steps lowered."""
    from interlink.algorithms.schedule import one_sided
    from interlink.ops import ReduceOp
    from interlink.runtime.executor import Plan

    s = get_schedule("all_reduce", "nvls", 3, 12)
    with pytest.raises(ScheduleError, match="two_sided"):
        Plan(s, 0, np.dtype(np.float32), ReduceOp.SUM, None, lambda r: r, "x")
    Plan(two_sided(s), 0, np.dtype(np.float32), ReduceOp.SUM, None, lambda r: r, "x")  # the lowering runs
    assert not has_switch_steps(one_sided(s))
    verify_schedule(one_sided(s), dtypes=(np.float64,))


def test_nvls_tree_heads_carry_each_rack_across_racks():
    """Fewer heads, fewer NICs leaving a rack: with 8 heads per NVL72 rack the tree across racks limits,
    and an inner rack of the tree carries twice a leaf's bytes, so 4 racks take twice as long as 2 (NCCL's
    own NVLSTree model: inter bandwidth x2 at <= 2 nodes); with NCCL's 32 the racks stay NVLS-bound."""
    from interlink.sim import simulate_collective
    from interlink.topology import link

    S = 16 * G
    nic = link("ib-ndr").gbps * 1e3  # bytes per us
    two = simulate_collective("all_reduce", S, "2xgb200-nvl72", algorithm="nvls_tree", heads=8)
    four = simulate_collective("all_reduce", S, "4xgb200-nvl72", algorithm="nvls_tree", heads=8)
    assert two.time_us == pytest.approx(S / (8 * nic), rel=0.08)
    assert four.time_us == pytest.approx(2 * S / (8 * nic), rel=0.05)
    full = simulate_collective("all_reduce", S, "4xgb200-nvl72", algorithm="nvls_tree")
    assert full.time_us < 0.45 * four.time_us


def _h100_with_4_nics():
    """One 8-GPU H100 host whose 4 PCIe switches hold 2 GPUs and 1 NIC each (NVIDIA/nccl#1357's machine)."""
    from interlink.topology import TopologyBuilder

    b = TopologyBuilder("h100-4nic")
    cpu = b.device("cpu0", "cpu", 0, "Xeon", socket=0, numa=0)
    nvs = b.device("nvswitch", "nvswitch", 0, "NVSwitch gen 3", spec="nvswitch3", chips=4, nvls=True)
    for k in range(4):
        sw = b.device(f"pcisw{k}", "pcie_switch", 0, "PCIe Gen5 switch", socket=0, numa=0)
        b.link(sw, cpu, "pcie-gen5")
        nic = b.device(f"nic{k}", "nic", 0, "ConnectX-7 NDR", socket=0, numa=0, rail=k, role="compute", port="ib-ndr")
        b.link(nic, sw, "pcie-gen5")
        for g in (2 * k, 2 * k + 1):
            gpu = b.device(f"gpu{g}", "gpu", 0, "H100-SXM5-80GB", socket=0, numa=0, index=g)
            b.link(gpu, nvs, "nvlink4", count=18)
            b.link(gpu, sw, "pcie-gen5")
    return b.build()


def test_nvls_heads_are_one_per_nic_as_nccl_picks_them():
    """NCCL's NVLS graph search makes one head per NIC (the GPU nearest it): 4 heads on 8 GPUs with 4 NICs
    (GPUs 0, 2, 4, 6 in NVIDIA/nccl#1357's log), 8 on a DGX, at most 32 (an NVL72 rack's 72 NICs)."""
    from interlink.model import predict
    from interlink.model.cost import builder_params, nvls_head_count

    topo = _h100_with_4_nics()
    assert nvls_head_count(topo, 8) == 4
    assert dict(builder_params("all_reduce", "nvls", topo)) == {"heads": 4}
    from interlink.algorithms.switch import nvls_heads

    assert nvls_heads(8, 4) == [0, 2, 4, 6]  # the GPU nearest each NIC here, as NCCL's log shows
    assert nvls_head_count(parse_topology("dgx-h100"), 8) == 8
    assert nvls_head_count(parse_topology("gb200-nvl72"), 72) == 32
    # 4 heads: each head's link carries n(1 + 1/4), so the NVLS busbw drops by (1 + 1/8) / (1 + 1/4)
    four = predict("all_reduce", 8 * G, topo, algorithm="nvls")
    eight = predict("all_reduce", 8 * G, "dgx-h100", algorithm="nvls")
    assert four.busbw_gbps / eight.busbw_gbps == pytest.approx((1 + 1 / 8) / (1 + 1 / 4), rel=0.02)
