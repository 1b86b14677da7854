"""interlink plan --topology this on a machine without GPUs: torch DDP / FSDP2 on CPU ranks of this host
(plan/host.py). The rates come from a fixed HostCompute (no measuring here) so that the checks are exact;
the comparison with real training is benchmarks/plan_host.py, a figure, not a test."""

from __future__ import annotations

import json
import re

import pytest

from interlink.cli.main import main
from interlink.plan import PlanError, parse_model
from interlink.plan.host import (
    DISPATCH_CHAIN,
    HostCompute,
    at,
    build_gpt,
    kernel_fns,
    step_ops,
    _ddp_buckets,
    gemm_shapes,
    kernel_shapes,
    measure_estimate,
    param_shapes,
    plan_host,
    torch_params,
    _key,
)

from interlink.plan.calls import CALL_COLLECTIVES, calls_key  # noqa: E402

SMALL = "layers=4,hidden=256,heads=4,seq=128,vocab=2048"
GFLOPS = 100.0


def fixed(model: str, b: int, fw: bool = True, shared: float = 1.0) -> HostCompute:
    """Rates of a made-up host: every GEMM at 100 GFLOP/s, every other kernel 1 ms forward, 2 backward
    (the dispatch chain: 1 us an op each way), measured alone and with 2, 4 and 8 processes at once, where
    every time is ``shared`` times as long (the ranks sharing the memory bus)."""
    m = parse_model(model)
    hc = HostCompute(meta={"host": "test", "date": "2026-11-28 00:00 UTC", "torch": "x"})
    for P in (1, 2, 4, 8):
        x = 1.0 if P == 1 else shared
        for M, K, N, _ in gemm_shapes(m, b):
            hc.gemm[at(_key(M, K, N), P)] = {"forward_gflops": GFLOPS / x, "backward_gflops": GFLOPS / x}
        for name, shape in kernel_shapes(m, b).items():
            if name == "framework":
                for n in (2, 4, 8):
                    if fw:
                        hc.kernels[at(f"{name}:{_key(*shape, n)}", P)] = {"plain_step_s": 0.1, "ddp_s": 0.005 * x,
                                                                         "fsdp_s": 0.05 * x}
                continue
            per = 1e-6 * DISPATCH_CHAIN if name == "dispatch" else 1e-3
            hc.kernels[at(f"{name}:{_key(*shape)}", P)] = {"forward_s": per * x, "backward_s": 2 * per * x}
        hc.copy_gbps[at(str(torch_params(m) * 4), P)] = 10.0 / x
    for n in (2, 4, 8):  # a call through torch: 150 us on interlink (its numpy API 10 us), 400 us on gloo,
        for c in CALL_COLLECTIVES:  # gloo's 4 MiB call 4.4 ms (1 ms a MiB beyond its 1 KiB call)
            hc.calls[calls_key("interlink", c, n)] = {"torch_s": 150e-6, "api_s": 10e-6, "bytes": 1024,
                                                      "date": "2026-11-28 00:00 UTC", "load": 1.0}
            hc.calls[calls_key("gloo", c, n)] = {"torch_s": 400e-6, "bytes": 1024, "date": "2026-11-28 00:00 UTC",
                                                 "load": 1.0, "line_s": 400e-6 + (4 * 1024 - 1) * 1e-3 / 1024,
                                                 "line_bytes": 4 << 20}
    return hc


@pytest.fixture(autouse=True)
def stored(tmp_path, monkeypatch):
    """The CLI reads the rates from INTERLINK_HOST_COMPUTE: the fixed ones; no GPUs on 'this' host."""
    p = tmp_path / "host_compute.json"
    p.write_text(json.dumps(fixed(SMALL, 4).to_dict()))
    monkeypatch.setenv("INTERLINK_HOST_COMPUTE", str(p))
    import interlink.cli.plan as cli_plan

    monkeypatch.setattr(cli_plan, "_cpu_host", lambda: True)
    return p


def test_the_parameter_tensors_are_the_models() -> None:
    m = parse_model(SMALL)
    n = sum(1 for _ in param_shapes(m))
    assert n == 1 + 12 * m.layers + 2
    total = torch_params(m)
    h, f = m.hidden, m.f
    assert total == m.vocab * h + m.layers * (12 * h * h + 9 * h + f) + 2 * h  # every bias and layer norm
    # Model.params counts the layer norms and biases approximately (4h a layer): within 0.5%
    assert total == pytest.approx(m.params(), rel=5e-3)


def test_compute_is_the_flops_at_the_measured_rate() -> None:
    m = parse_model(SMALL)
    p = plan_host(m, 1, micro_batch=4, compute=fixed(SMALL, 4), cores=2)
    gemm = sum(2.0 * M * K * N * c for M, K, N, c in gemm_shapes(m, 4))
    assert p.stage["gemm_s"] == pytest.approx(3 * gemm / (GFLOPS * 1e9))
    # the GEMMs are the model's FLOPs but for the attention core's
    assert 3 * gemm == pytest.approx(m.model_flops(4) - 3 * m.layers * m.attention_share *
                                     m.layer_attention_flops(4))
    # twice the layers: the GEMM part of compute twice as long
    m8 = parse_model(SMALL.replace("layers=4", "layers=8"))
    p8 = plan_host(m8, 1, micro_batch=4, compute=fixed(SMALL.replace("layers=4", "layers=8"), 4), cores=2)
    g8 = sum(2.0 * M * K * N * c for M, K, N, c in gemm_shapes(m8, 4))
    assert p8.stage["gemm_s"] / p.stage["gemm_s"] == pytest.approx(g8 / gemm)
    assert p8.breakdown["compute"] > 1.8 * p.breakdown["compute"] - 0.02


def test_ranks_beyond_the_cores_share_them() -> None:
    hc = fixed(SMALL, 4)
    two = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2)
    four = plan_host(SMALL, 4, micro_batch=4, compute=hc, cores=2)
    assert two.stage["core_share"] == 1.0 and four.stage["core_share"] == 2.0
    assert four.breakdown["compute"] == pytest.approx(2 * two.breakdown["compute"])
    assert four.step_s > two.step_s
    # on 8 cores 4 ranks do not share: the same compute a rank as 2 ranks
    eight = plan_host(SMALL, 4, micro_batch=4, compute=hc, cores=8)
    assert eight.breakdown["compute"] == pytest.approx(two.breakdown["compute"])


def test_communication_is_exposed_without_a_spare_core_and_overlaps_with_one() -> None:
    hc = fixed(SMALL, 4)
    busy = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2)
    spare = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=4)
    assert not busy.stage["spare_core"] and spare.stage["spare_core"]
    total = sum(c["time_us"] * 1e-6 * c["per_step"] for c in busy.collectives)
    assert busy.breakdown["dp"] == pytest.approx(total)
    # with a core to spare the buckets go under the backward: the last one is exposed at least
    assert 0 < spare.breakdown["dp"] <= busy.breakdown["dp"]
    assert spare.breakdown["dp"] >= spare.collectives[-1]["time_us"] * 1e-6 - 1e-12


def test_ddp_buckets_are_torchs() -> None:
    m = parse_model(SMALL)
    b = _ddp_buckets(m, 25 << 20)
    assert sum(n for n, _ in b) == torch_params(m) * 4
    assert b[0][0] >= 1 << 20 and b[0][0] < (1 << 20) + 4 * 1024 * 256 * 2  # the first: 1 MiB and one tensor
    assert all(n <= (25 << 20) + 4 * 2048 * 256 for n, _ in b)
    assert [t for _, t in b] == sorted(t for _, t in b) and b[-1][1] == 1.0
    assert len(_ddp_buckets(m, 1 << 20)) > len(b)


def test_collectives_take_the_runtimes_path_and_gloo_its_measured_line() -> None:
    """interlink's collectives are priced on the runtime's path; gloo's by the line through its two measured
    calls (plan/calls.py: 1 KiB and LINE_BYTES): the ring's price at 1 KiB plus 1 ms a MiB beyond, and the
    call at 1 KiB (400 us) less the ring's price there in the torch_calls term: on the line at every size."""
    from interlink.model.params import default_params, host_profile, with_profile
    from interlink.plan.host import _price, call_cost

    hc = fixed(SMALL, 4)
    il = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2, system="fsdp")
    gl = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2, system="fsdp", backend="gloo")
    kinds = {(c["collective"], c["per_step"]) for c in il.collectives}
    assert ("all_gather", 8) in kinds and ("reduce_scatter", 4) in kinds  # per block, forward + backward
    assert all(c["protocol"] in ("host page", "shm") for c in il.collectives)
    assert all(c["algorithm"] == "gloo (measured)" and c["protocol"].startswith("tcp") for c in gl.collectives)
    params = with_profile(default_params(), host_profile())
    for c in gl.collectives:
        on_line = 400e-6 + (c["bytes"] - 1024) * 1e-3 / (1 << 20)
        total = c["time_us"] * 1e-6 + call_cost(hc, "gloo", c["collective"], 2, 2, params)
        assert total == pytest.approx(on_line, rel=1e-6), c
    # without the line (a profile measured before it): a ring over TCP
    assert _price("reduce_scatter", 1 << 22, 2, 2, "gloo", params).algorithm == "ring"
    # FSDP shards the optimizer
    ddp = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2)
    assert il.breakdown["optimizer"] == pytest.approx(ddp.breakdown["optimizer"] / 2)


def test_framework_work_measured_or_the_copies() -> None:
    with_fw = plan_host(SMALL, 2, micro_batch=4, compute=fixed(SMALL, 4), cores=2, system="fsdp")
    assert with_fw.breakdown["framework"] == pytest.approx(0.05)
    without = plan_host(SMALL, 2, micro_batch=4, compute=fixed(SMALL, 4, fw=False), cores=2, system="fsdp",
                        measure=False)
    assert without.breakdown["framework"] > 0 and any("not measured" in n for n in without.notes)


def test_bad_input() -> None:
    with pytest.raises(PlanError, match="ddp"):
        plan_host(SMALL, 2, system="zero2", compute=fixed(SMALL, 1))
    with pytest.raises(PlanError, match="gloo"):
        plan_host(SMALL, 2, backend="mpi", compute=fixed(SMALL, 1))


def test_cli_this_host_json(capsys) -> None:
    assert main(["plan", "-m", SMALL, "-t", "this", "-n", "4", "--zero", "3", "--micro-batch", "4",
                 "--backend", "gloo", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in ("step_s", "tokens_per_s", "tflops_per_gpu", "memory_gib", "breakdown", "collectives", "notes"):
        assert k in d
    assert d["layout"]["dp"] == 4 and d["layout"]["zero"] == 3 and d["gpu"] == "cpu"
    assert d["step_s"] == pytest.approx(sum(v for k, v in d["breakdown"].items() if k not in ("forward", "backward")))
    assert any("share them" in n or "each rank's compute" in n for n in d["notes"]) or d["stage"]["core_share"] == 1


def test_cli_this_host_text_and_errors(capsys) -> None:
    assert main(["plan", "-m", SMALL, "-n", "2", "--micro-batch", "4"]) == 0
    out = capsys.readouterr().out
    assert "DDP over interlink on 2 CPU ranks" in out and "all_reduce" in out and "step" in out
    for argv, msg in ((["--zero", "1"], "--zero 1"), (["--tp", "2"], "--tp"),
                      (["--global-batch", "5"], "--global-batch")):
        assert main(["plan", "-m", SMALL, "-n", "2", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and msg in err


def _walk(t) -> list[str]:
    """The node types of the autograd graph behind ``t`` (what its backward runs)."""
    seen, stack, out = set(), [t.grad_fn], []
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        out.append(type(n).__name__)
        stack.extend(f for f, _ in n.next_functions)
    return out


@pytest.mark.parametrize("spec", ["layers=1,hidden=64,heads=4,seq=16,vocab=128",
                                  "layers=3,hidden=32,heads=2,seq=8,vocab=64,ffn=48"])
def test_step_ops_are_torchs_graph(spec: str) -> None:
    """step_ops counts the autograd nodes of a real step of build_gpt, and which of them the timed kernels
    (kernel_fns, run as calibrate runs them) hold: torch's own graph, walked."""
    torch = pytest.importorskip("torch")
    m = parse_model(spec)
    net = build_gpt(m.layers, m.hidden, m.heads, m.seq, m.vocab, m.f)
    idx = torch.randint(0, m.vocab, (2, m.seq))
    nodes = _walk(net(idx, idx))
    ops = step_ops(m)
    assert len(nodes) == ops["nodes"] == ops["timed"] + ops["untimed"]
    assert nodes.count("AccumulateGrad") == len(param_shapes(m)) == sum(1 for _ in net.parameters())
    # each timed kernel's own nodes: its graph less the AccumulateGrads of inputs that are activations in the
    # model (the layer norm's weight and bias and the embedding's table are parameters there too)
    params_in = {"layer_norm": 2, "embedding": 1}
    own = {}
    for name, (make, fn) in kernel_fns(m, 2).items():
        ins = make()
        got = _walk(fn(*ins))
        own[name] = len(got) - (len(ins) - params_in.get(name, 0))
    L = m.layers
    timed = L * (own["attention"] + 2 * own["layer_norm"] + own["gelu"] + 2 * own["add"]) + \
        own["layer_norm"] + own["embedding"] + own["cross_entropy"]
    assert timed == ops["timed"]
    assert own["dispatch"] == DISPATCH_CHAIN  # the chain: one node a view (its input's AccumulateGrad aside)
    # untimed: per linear its Addmm node, the weight's transpose, two views, two AccumulateGrads
    assert nodes.count("AddmmBackward0") == L * (2 + m.mats)
    assert ops["untimed"] == 6 * nodes.count("AddmmBackward0") + 5


def test_dispatch_term_is_the_untimed_ops_at_the_chains_cost() -> None:
    m = parse_model(SMALL)
    p = plan_host(m, 1, micro_batch=4, compute=fixed(SMALL, 4), cores=2)
    assert p.stage["untimed_ops"] == step_ops(m)["untimed"] == 24 * m.layers + 5
    assert p.stage["dispatch_s"] == pytest.approx(step_ops(m)["untimed"] * 3e-6)  # 1 us forward + 2 backward
    assert p.stage["terms"]["dispatch"]["s"] == pytest.approx(p.stage["dispatch_s"])


def test_rates_are_those_measured_with_the_ranks_computing_at_once() -> None:
    """2 ranks on 2 cores compute at once: the plan takes the rates measured with 2 processes at once (here
    1.5x the alone ones); 4 ranks on 2 cores: those measured with 4 processes taking turns on the 2 cores (in
    CPU time, here the same 1.5x), and each core shared by two ranks."""
    hc = fixed(SMALL, 4, shared=1.5)
    one = plan_host(SMALL, 1, micro_batch=4, compute=hc, cores=2)
    two = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2)
    four = plan_host(SMALL, 4, micro_batch=4, compute=hc, cores=2)
    assert (one.stage["concurrent"], two.stage["concurrent"], four.stage["concurrent"]) == (1, 2, 4)
    from interlink.plan.host import concurrency
    assert [concurrency(n, 2) for n in (1, 2, 3, 8, 64)] == [1, 2, 3, 8, 8]
    assert [concurrency(n, 16) for n in (4, 16, 64)] == [4, 16, 16]
    assert two.breakdown["compute"] == pytest.approx(1.5 * one.breakdown["compute"])
    assert two.breakdown["optimizer"] == pytest.approx(1.5 * one.breakdown["optimizer"])
    assert four.breakdown["compute"] == pytest.approx(2 * two.breakdown["compute"])
    # rates measured alone only: the plan of 2 ranks does not take them (it asks for a measurement)
    alone = HostCompute(gemm={k: v for k, v in hc.gemm.items() if "@" not in k},
                        kernels={k: v for k, v in hc.kernels.items() if "@" not in k},
                        copy_gbps={k: v for k, v in hc.copy_gbps.items() if "@" not in k})
    assert alone.has(parse_model(SMALL), 4) and not alone.has(parse_model(SMALL), 4, 2)
    with pytest.raises(PlanError, match="2 processes at once"):
        plan_host(SMALL, 2, micro_batch=4, compute=alone, cores=2, measure=False)


def test_every_term_is_in_the_json_with_its_source(capsys) -> None:
    assert main(["plan", "-m", SMALL, "-t", "this", "-n", "2", "--zero", "3", "--micro-batch", "4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    terms = d["stage"]["terms"]
    assert set(terms) == {"gemm", "attention", "elementwise", "dispatch", "optimizer", "framework", "communication",
                          "torch_calls", "core_share", "slowest_rank"}
    assert all(t["source"] for t in terms.values())
    assert sum(t["s"] for n, t in terms.items() if "s" in t) == pytest.approx(d["step_s"])
    conc = d["stage"]["concurrent"]  # 2 ranks on this host's cores: 2 at once where it has 2
    assert f"measured with {conc} process" in terms["gemm"]["source"]


def test_calibrate_with_processes_at_once() -> None:
    """A real measurement of a tiny model with 2 processes at once: every rate under key@2, the plan of 2
    ranks takes them."""
    pytest.importorskip("torch")
    from interlink.plan.host import calibrate

    tiny = "layers=1,hidden=32,heads=2,seq=8,vocab=64"
    said: list[str] = []
    hc = calibrate(parse_model(tiny), 1, ranks=(2,), concurrent=2, reps=1, progress=said.append)
    assert hc.has(parse_model(tiny), 1, 2) and not hc.has(parse_model(tiny), 1)
    # the first measuring process's progress reaches the caller: every part (each GEMM, k of n, the other
    # kernels, AdamW, the copies, DDP's and FSDP2's steps), part k of n, with the time left of the whole
    gemms = [m for m in said if m.startswith("GEMM ")]
    n = len(gemm_shapes(parse_model(tiny), 1))
    assert len(gemms) == n and f", 1 of {n} (part 1 of {n + 4}; about " in gemms[0]
    parts = [m for m in said if "(part " in m]
    assert len(parts) == n + 4 and all(re.search(r"; about \d+ (s|min) left\)$", m) for m in parts), parts
    assert parts[-1].startswith("DDP's and FSDP2's own work a step on 2 ranks")
    assert hc.meta["concurrent"] == [2]
    p = plan_host(tiny, 2, micro_batch=1, compute=hc, cores=2, measure=False)
    assert p.step_s > 0 and p.stage["concurrent"] == 2 and p.stage["dispatch_s"] > 0
    # both processes' bare steps were kept round by round: the factor of the slowest is measured (>= 1)
    assert p.stage["slowest_x"] >= 1.0 and "slowest_x" in p.stage["terms"]["slowest_rank"]["source"]


def test_the_step_waits_for_the_slowest_rank() -> None:
    """slowest_x: the median over rounds of the slowest process's bare step, over one process's median step.
    A process that is 20% slower in every round makes the job's step 1.2 / 1.1 of a process's median (the
    mean of 1.0 and 1.2); one slow round in five changes nothing (medians); one process or none: 1."""
    from interlink.plan.host import slowest_x

    assert slowest_x([[0.1] * 5, [0.12] * 5]) == pytest.approx(0.12 / 0.11)
    assert slowest_x([[0.1, 0.1, 0.3, 0.1, 0.1], [0.1] * 5]) == pytest.approx(1.0)
    # alternating: each round one of the two is slow, so every round's job step is the slow one
    assert slowest_x([[0.1, 0.13] * 3, [0.13, 0.1] * 3]) == pytest.approx(0.13 / 0.115)
    assert slowest_x([[0.1] * 5]) == 1.0 and slowest_x([]) == 1.0 and slowest_x([[], []]) == 1.0
    # the plan adds the compute terms x (factor - 1) as its own term, and its total is the sum of its terms
    hc = fixed(SMALL, 4)
    base = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2, measure=False)
    for k, v in hc.kernels.items():
        if k.startswith("framework:"):
            v["slowest_x"] = 1.25
    slow = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2, measure=False)
    local = base.stage["compute_s"]
    assert base.breakdown["slowest_rank"] == 0.0
    assert slow.breakdown["slowest_rank"] == pytest.approx(0.25 * local)
    assert slow.step_s == pytest.approx(base.step_s + 0.25 * local, rel=1e-3)
    assert sum(t["s"] for t in slow.stage["terms"].values() if "s" in t) == pytest.approx(slow.step_s)


@pytest.mark.parametrize("ranks", [2, 4])
def test_fsdp_collectives_are_the_calls_fsdp2_makes(ranks: int, monkeypatch) -> None:
    """The plan's FSDP2 collectives are the calls torch's fully_shard issues in a step of build_gpt (counted on
    torch's fake process group, dist.all_gather_single / reduce_scatter_single patched): per block an
    all_gather before its forward and another before its backward, a reduce_scatter of its gradients; the
    root's once each; the sizes padded to a multiple of the ranks."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    calls: list[tuple[str, int]] = []
    for name, coll in (("all_gather_single", "all_gather"), ("reduce_scatter_single", "reduce_scatter")):
        orig = getattr(dist, name)

        def wrap(*a, _o=orig, _c=coll, **k):  # type: ignore[no-untyped-def]
            out = k["output"] if "output" in k else a[0]  # FSDP2 passes output= and input=
            inp = k["input"] if "input" in k else a[1]
            calls.append((_c, max(out.numel(), inp.numel()) * out.element_size()))
            return _o(*a, **k)

        monkeypatch.setattr(dist, name, wrap)
    tiny = "layers=2,hidden=32,heads=2,seq=8,vocab=64"
    m = parse_model(tiny)
    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size=ranks)
    try:
        net = build_gpt(m.layers, m.hidden, m.heads, m.seq, m.vocab, m.f)
        mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
        for blk in net.blocks:
            fully_shard(blk, mesh=mesh)
        fully_shard(net, mesh=mesh)
        idx = torch.randint(0, m.vocab, (1, m.seq))
        net(idx, idx).backward()  # the first step: lazy init
        calls.clear()
        net(idx, idx).backward()
    finally:
        dist.destroy_process_group()
    got: dict[tuple[str, int], int] = {}
    for c in calls:
        got[c] = got.get(c, 0) + 1
    p = plan_host(tiny, ranks, micro_batch=1, system="fsdp", compute=fixed(tiny, 1), cores=2, measure=False)
    assert got == {(c["collective"], c["bytes"]): c["per_step"] for c in p.collectives}


@pytest.mark.parametrize("system", ["ddp", "fsdp"])
@pytest.mark.parametrize("backend", ["interlink", "gloo"])
def test_torch_calls_term_is_every_call_of_the_plan_at_the_measured_cost(system: str, backend: str, capsys) -> None:
    """The torch_calls term: each collective call of the plan's list (DDP's buckets, FSDP2's all_gathers and
    reduce_scatters) at the per-call cost measured through torch's backend, less interlink's numpy API's
    call (interlink) or the plan's price of gloo's ring (gloo); in the step and in the JSON's terms."""
    from interlink.plan.host import call_cost

    assert main(["plan", "-m", SMALL, "-t", "this", "-n", "2", "--zero", "0" if system == "ddp" else "3",
                 "--micro-batch", "4", "--backend", backend, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    t = d["stage"]["terms"]["torch_calls"]
    n = sum(c["per_step"] for c in d["collectives"])
    assert n > 0 and t["calls"] == n
    kinds = {c["collective"] for c in d["collectives"]}
    assert kinds == ({"all_reduce"} if system == "ddp" else {"all_gather", "reduce_scatter"})
    assert set(t["per_call_s"]) == kinds
    if backend == "interlink":
        assert all(v == pytest.approx(140e-6) for v in t["per_call_s"].values())
    else:  # 400 us less the model's price of a 1 KiB ring over TCP: positive, below 400 us
        assert all(0 < v < 400e-6 for v in t["per_call_s"].values())
    assert t["s"] == pytest.approx(sum(c["per_step"] * t["per_call_s"][c["collective"]] for c in d["collectives"]))
    assert t["s"] > 0 and d["breakdown"]["torch_calls"] == pytest.approx(t["s"])
    assert "measure_calls" in t["source"] and backend in t["source"]
    hc = fixed(SMALL, 4)
    assert call_cost(hc, "interlink", "all_reduce", 2, 2, None) == pytest.approx(140e-6)


def test_torch_calls_missing_and_not_measured_is_named() -> None:
    hc = fixed(SMALL, 4)
    hc.calls.clear()
    p = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2, measure=False)
    assert p.stage["terms"]["torch_calls"]["s"] == 0 and "not measured" in p.stage["terms"]["torch_calls"]["source"]
    assert any("per-call cost" in n for n in p.notes)
    one = plan_host(SMALL, 1, micro_batch=4, compute=hc, cores=2, measure=False)  # no collectives, no calls
    assert one.stage["terms"]["torch_calls"]["calls"] == 0


def test_measure_calls_on_two_ranks() -> None:
    """A real measurement: every collective on both backends at 2 ranks, a positive time a call, and the
    call through torch on interlink costing more than the same call on interlink's numpy API."""
    pytest.importorskip("torch")
    from interlink.plan.calls import measure_calls
    from interlink.plan.host import HostCompute, call_cost

    got = measure_calls(2, calls=20, blocks=3)
    assert set(got) == {calls_key(b, c, 2) for b in ("interlink", "gloo") for c in CALL_COLLECTIVES}
    assert all(m["torch_s"] > 0 for m in got.values())
    assert all(m["api_s"] > 0 for k, m in got.items() if k.startswith("interlink:"))
    # gloo at its second size: 4 MiB takes longer than 1 KiB (the line's slope is positive)
    assert all(m["line_bytes"] == 4 << 20 and m["line_s"] > m["torch_s"] for k, m in got.items() if k.startswith("gloo:"))
    hc = HostCompute(calls=got)
    assert hc.has_calls(2) and not hc.has_calls(4)
    # through torch costs more than interlink's own call (sum over the three: robust to one noisy figure)
    assert sum(call_cost(hc, "interlink", c, 2, 2, None) for c in CALL_COLLECTIVES) > 0
    assert HostCompute.from_dict(hc.to_dict()).calls == got


def test_a_plan_that_must_measure_first_says_so_with_an_estimate(tmp_path, monkeypatch, capsys) -> None:
    """`interlink plan --topology this` of a model whose rates are not stored says on stderr, before measuring,
    what it measures, how many weight GEMMs and about how long they take, and where it keeps the rates;
    nothing when they are stored."""
    from interlink.cli.plan import _say_measuring

    monkeypatch.setenv("INTERLINK_HOST_COMPUTE", str(tmp_path / "none.json"))
    big = parse_model("layers=24,hidden=2048,heads=16,seq=2048,vocab=50257")
    _say_measuring(big, 1, 2, False)
    err = " ".join(capsys.readouterr().err.split())
    assert "measuring this host's compute at the model's shapes first" in err
    assert f"{len(gemm_shapes(big, 1))} weight GEMMs, about" in err and "GFLOP/s a core" in err
    # every part it will measure, with its time: the framework steps, a billion-parameter model's most
    assert "DDP's and FSDP2's own work on 2 ranks (27 training steps" in err
    assert "a collective call through torch.distributed on 2 ranks, about 15 s" in err
    total = re.search(r"About (\d+) (s|min) in all", err)
    assert total and "progress at least every 5 s with the time left" in err
    parts = measure_estimate(big, 1, 100.0, fw_ranks=(2,), calls=1)
    assert [w for w, _ in parts][-2:] == ["DDP's and FSDP2's steps on 2 ranks", "collective calls 1"]
    fw = dict(parts)["DDP's and FSDP2's steps on 2 ranks"]
    assert fw > sum(t for w, t in parts if w.startswith("GEMM"))  # 27 steps of the model outweigh its GEMMs
    assert str(tmp_path / "none.json") in err
    monkeypatch.setenv("INTERLINK_HOST_COMPUTE", str(tmp_path / "fixed.json"))
    (tmp_path / "fixed.json").write_text(json.dumps(fixed(SMALL, 4).to_dict()))
    _say_measuring(parse_model(SMALL), 4, 2, False)
    assert capsys.readouterr().err == ""
