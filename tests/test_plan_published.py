"""The planner against published training runs (interlink.plan.published; docs/reference.md, "Published
training runs"): step time within 15% of every run, 10% on average; memory per GPU within 10% of
Korthikanti 2022's Figure 1."""

from __future__ import annotations

import re

import pytest

from interlink.plan import plan_step
from interlink.plan.published import MOE_MEMORY, RUNS, memory_rows, predicted, run_plan

_PLANS: dict[str, object] = {}


def _plan(run):  # noqa: ANN001, ANN202
    if run.id not in _PLANS:
        _PLANS[run.id] = run_plan(run)
    return _PLANS[run.id]


def step_error(run) -> float:  # noqa: ANN001
    """Relative error of the plan's step time against the published one (the published figure is a step
    time, or a throughput: TFLOPS a GPU of the same FLOP count, so step = FLOPs / throughput)."""
    got = predicted(run, _plan(run))
    if run.metric == "step_s":
        return got / run.value - 1
    return run.value / got - 1


def test_the_table_spans_what_the_issue_asks() -> None:
    assert len(RUNS) >= 12
    gpus = [r.layout.gpus for r in RUNS]
    assert min(gpus) <= 8 and max(gpus) >= 10_000
    machines = {re.sub(r"^\d+x", "", r.topology).split(":")[0] for r in RUNS}
    assert {"dgx-a100", "dgx-h100"} <= machines
    assert len({r.model for r in RUNS}) >= 10
    assert all(r.source for r in RUNS)
    mixes = {(r.layout.tp > 1, r.layout.pp > 1, r.layout.dp > 1, r.layout.cp > 1, r.layout.zero) for r in RUNS}
    assert len(mixes) >= 5


@pytest.mark.parametrize("run", [r for r in RUNS if not r.miss], ids=lambda r: r.id)
def test_within_15_percent(run) -> None:  # noqa: ANN001
    err = step_error(run)
    assert abs(err) <= 0.15, f"{run.id}: plan {predicted(run, _plan(run)):.2f} vs published {run.value} ({err:+.1%})"


def test_mean_error_within_10_percent() -> None:
    errs = [abs(step_error(r)) for r in RUNS]
    assert sum(errs) / len(errs) <= 0.10, errs


@pytest.mark.parametrize("row", memory_rows(), ids=lambda r: r[0])
def test_memory_within_10_percent_of_korthikanti(row) -> None:  # noqa: ANN001
    name, spec, lay, topo, params_opt, acts = row
    p = plan_step(spec, lay, topo)
    state = p.state_gib.get("middle", p.state_gib.get("only"))
    assert state == pytest.approx(params_opt, rel=0.10), name
    assert p.memory_gib["activations"] == pytest.approx(acts, rel=0.10), name


@pytest.mark.parametrize("row", MOE_MEMORY, ids=lambda r: r[0])
def test_moe_memory_within_10_percent(row) -> None:  # noqa: ANN001
    rid, gib, _source = row
    (run,) = [r for r in RUNS if r.id == rid]
    assert _plan(run).memory_gib["total"] == pytest.approx(gib, rel=0.10), rid


@pytest.mark.parametrize("run", [r for r in RUNS if r.miss], ids=lambda r: r.id)
def test_known_misses_still_miss(run) -> None:  # noqa: ANN001
    """A row with a ``miss`` reason is outside 15% today; when the plan comes within, drop the reason."""
    assert abs(step_error(run)) > 0.15, f"{run.id} is within 15% now: remove its miss reason"


def test_search_finds_the_layout_meta_ran() -> None:
    """Searching every layout of Llama 3 405B on 16,384 H100s with 2,048 sequences a step ranks first the
    layout of the Llama 3 paper's Table 4 (TP 8, PP 16, DP 128; the interleaving depth it did not publish)."""
    from interlink.plan.search import search

    res = search("llama3-405b", 16384, "2048xdgx-h100", global_batch=2048, top=3)
    best = res.best.layout
    assert (best.tp, best.pp, best.dp, best.cp) == (8, 16, 128, 1), best.short()
    assert res.best.fits and res.not_fitting > 0


def test_every_dense_megatron_bridge_row_within_15_percent() -> None:
    """benchmarks/plan_bridge.py plans every row of Megatron-Bridge's performance pages it can lay out
    (benchmarks/data/megatron_bridge_perf.csv); its dense rows (Llama 3 8B, 70B, 3.1 405B on H100, B200 and
    GB200) are all within 15% of the published step time. The mixtures of experts are reported there, not
    asserted (docs/plan.md says why)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "plan_bridge.py"
    spec = importlib.util.spec_from_file_location("plan_bridge", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.rows()
    assert len(rows) == 268
    dense = [r for r in rows if "error" in r and r["model"].startswith("LLAMA")]
    assert len(dense) >= 25 and {r["system"] for r in dense} == {"DGX-H100", "DGX-B200", "DGX-GB200"}
    worst = max(dense, key=lambda r: abs(r["error"]))
    assert abs(worst["error"]) <= 0.15, worst
