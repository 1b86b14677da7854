"""interlink plan --topology this on a machine without GPUs: torch DDP / FSDP2 on CPU ranks of this host
(plan/host.py). The rates come from a fixed HostCompute (no measuring here) so that the checks are exact;
the comparison with real training is benchmarks/plan_host.py, a figure, not a test."""

from __future__ import annotations

import json

import pytest

from interlink.cli.main import main
from interlink.plan import PlanError, parse_model
from interlink.plan.host import (
    HostCompute,
    _ddp_buckets,
    gemm_shapes,
    kernel_shapes,
    param_shapes,
    plan_host,
    torch_params,
    _key,
)

SMALL = "layers=4,hidden=256,heads=4,seq=128,vocab=2048"
GFLOPS = 100.0


def fixed(model: str, b: int, fw: bool = True) -> HostCompute:
    """Rates of a made-up host: every GEMM at 100 GFLOP/s, every other kernel 1 ms forward, 2 backward."""
    m = parse_model(model)
    hc = HostCompute(meta={"host": "test", "date": "2026-11-28 00:00 UTC", "torch": "x"})
    for M, K, N, _ in gemm_shapes(m, b):
        hc.gemm[_key(M, K, N)] = {"forward_gflops": GFLOPS, "backward_gflops": GFLOPS}
    for name, shape in kernel_shapes(m, b).items():
        if name == "framework":
            for n in (2, 4, 8):
                if fw:
                    hc.kernels[f"{name}:{_key(*shape, n)}"] = {"plain_step_s": 0.1, "ddp_s": 0.005, "fsdp_s": 0.05}
            continue
        hc.kernels[f"{name}:{_key(*shape)}"] = {"forward_s": 1e-3, "backward_s": 2e-3}
    hc.copy_gbps[str(torch_params(m) * 4)] = 10.0
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


def test_collectives_take_the_runtimes_path_and_gloo_a_tcp_ring() -> None:
    hc = fixed(SMALL, 4)
    il = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2, system="fsdp")
    gl = plan_host(SMALL, 2, micro_batch=4, compute=hc, cores=2, system="fsdp", backend="gloo")
    kinds = {(c["collective"], c["per_step"]) for c in il.collectives}
    assert ("all_gather", 8) in kinds and ("reduce_scatter", 4) in kinds  # per block, forward + backward
    assert all(c["protocol"] in ("host page", "shm") for c in il.collectives)
    assert all(c["algorithm"] == "ring" and c["protocol"].startswith("tcp") for c in gl.collectives)
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
