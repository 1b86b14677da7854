"""``interlink plan`` against published training runs, and its timings.

    python benchmarks/plan_published.py               # every run of interlink.plan.published: published, plan, error
    python benchmarks/plan_published.py --timing      # one plan and the layout search of Llama 3 405B on 16,384 H100

Markdown rows, as tests/test_plan_published.py checks them (within 15%, mean within 10%). Timings are
wall-clock seconds on this machine: the topology's construction (once per cluster), one plan on it, and the
search of every layout.
"""

from __future__ import annotations

import sys
import time

from interlink.plan import plan_step
from interlink.plan.published import MOE_MEMORY, RUNS, memory_rows, predicted, run_plan
from interlink.plan.search import search
from interlink.plan.step import Context


def table() -> None:
    print("| id | model | GPUs | layout | metric | published | plan | error (step time) | MFU | GiB/GPU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    errs = []
    for r in RUNS:
        p = run_plan(r)
        got = predicted(r, p)
        err = got / r.value - 1 if r.metric == "step_s" else r.value / got - 1
        errs.append(abs(err))
        name = r.model.split(",")[0] if "=" not in r.model.split(",")[0] else f"GPT h={p.model.hidden}"
        print(f"| {r.id} | {name} | {r.layout.gpus} | {r.layout.short()} | {r.metric} | {r.value:g} | {got:.2f} | "
              f"{err:+.1%} | {p.mfu:.1%} | {p.memory_gib['total']:.1f}{'' if p.fits else ' (over)'} |", flush=True)
    print(f"\nmean |error| {sum(errs) / len(errs):.1%}, max {max(errs):.1%} over {len(errs)} runs\n")
    print("| Korthikanti 2022 Figure 1 | params+optimizer GiB (published / plan) | activations GiB (published / plan) |")
    print("|---|---|---|")
    for name, spec, lay, topo, po, act in memory_rows():
        p = plan_step(spec, lay, topo)
        st = p.state_gib.get("middle", p.state_gib.get("only"))
        print(f"| {name} | {po:.2f} / {st:.2f} ({st / po - 1:+.1%}) | {act:.2f} / {p.memory_gib['activations']:.2f} "
              f"({p.memory_gib['activations'] / act - 1:+.1%}) |")
    print("\n| mixture of experts | GiB a GPU (published peak allocated / plan) |")
    print("|---|---|")
    for rid, gib, _src in MOE_MEMORY:
        (run,) = [r for r in RUNS if r.id == rid]
        tot = run_plan(run).memory_gib["total"]
        print(f"| {rid} | {gib:.2f} / {tot:.2f} ({tot / gib - 1:+.1%}) |")


def timing() -> None:
    from interlink.plan.layout import Layout

    t = time.perf_counter()
    ctx = Context.of("2048xdgx-h100")
    t_topo = time.perf_counter() - t
    lay = Layout(tp=8, pp=16, dp=128, sp=True, global_batch=2048, virtual_stages=7, zero=2, order="tp-cp-pp-dp")
    t = time.perf_counter()
    p = plan_step("llama3-405b", lay, ctx)
    t_plan = time.perf_counter() - t
    t = time.perf_counter()
    plan_step("llama3-405b", lay.with_(virtual_stages=1, micro_batch=2), ctx)
    t_plan2 = time.perf_counter() - t
    t = time.perf_counter()
    r = search("llama3-405b", 16384, ctx, global_batch=2048)
    t_search = time.perf_counter() - t
    print(f"topology 2048xdgx-h100 built: {t_topo:.1f} s")
    print(f"one plan (405B, tp8 pp16 dp128 v7, cold price cache): {t_plan:.2f} s -> {p.step_s:.2f} s/step, MFU {p.mfu:.1%}")
    print(f"one more plan on the same cluster (2 sequences a micro-batch, not interleaved): {t_plan2:.2f} s")
    print(f"search of every layout on 16,384 GPUs: {t_search:.1f} s ({r.considered} layouts, {r.not_fitting} do not fit, "
          f"{r.priced} priced in full); best {r.best.layout.short()} {r.best.step_s:.2f} s/step, MFU {r.best.mfu:.1%}")


if __name__ == "__main__":
    if "--timing" in sys.argv[1:]:
        timing()
    else:
        table()
