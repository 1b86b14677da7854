"""The layout search: every feasible layout of a model on N GPUs through :func:`plan_step`, ranked.

Layouts: tensor parallelism up to the GPUs of a host (dividing the heads), pipeline stages (powers of
two and divisors of the layers), context parallelism for sequences of 16K tokens and more, expert
parallelism for mixtures of experts (folded over the tensor-, context- and data-parallel ranks of a
stage: layout.py; Megatron-Core's alltoall dispatcher), the data parallelism that fills N, micro-batches
1-8, interleaving 1-8 (where the micro-batches of a step are a multiple of the stages), ZeRO 1, 2 and 3,
recomputation none/selective/full (selective only with standard attention: flash attention stores no
scores, so selective recomputation saves nothing); sequence parallelism whenever tp > 1.

Pricing every layout's collectives is the slow part, so the search first prices each layout with its
communication free (compute, bubble, optimizer: a lower bound of its step), drops those whose memory
does not fit (counted, never ranked), and then prices the collectives of the candidates in order of that
bound, stopping when the next bound is slower than the tenth best full price (branch and bound: the
ranking is the one pricing all of them would give).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from .comm import Priced
from .job import Model, PlanError, bytes_per_param, parse_model
from .layout import Layout
from .step import GIB, Context, StepPlan, plan_step

__all__ = ["search", "SearchResult", "layouts", "sweep"]


class _FreePricer:
    """Every collective free: the lower bound of a step."""

    def __init__(self, real) -> None:  # noqa: ANN001
        self.real = real

    def price(self, collective: str, nbytes: float, ranks, dtype: str = "bfloat16") -> Priced:  # noqa: ANN001
        return Priced(collective, len(ranks), int(nbytes), 0.0, "-", "-", 0.0)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(model: Model, gpus: int, *, gpus_per_host: int = 8, global_batch: int = 0, dtype: str = "bf16",
            engine: str = "megatron", zero: Iterable[int] = (1, 2, 3), recompute: Iterable[str] = ("none", "selective", "full"),
            micro_batches: Iterable[int] = (1, 2, 4, 8), virtual: Iterable[int] = (1, 2, 3, 4, 5, 6, 7, 8),
            fixed: dict | None = None, options: dict | None = None) -> list[Layout]:
    """Every layout of ``model`` on exactly ``gpus`` GPUs that :meth:`Layout.check` accepts. ``fixed``:
    degrees the user set (``{"tp": 8}``), kept. ``options``: the other Layout fields the user set, the same
    in every layout (``{"dispatcher": "deepep", "ep_overlap": True, "order": ...}``)."""
    options = dict(options or {})
    fixed = dict(fixed or {})
    gb = global_batch
    tps = [t for t in (1, 2, 4, 8, 16) if t <= gpus_per_host and model.heads % t == 0 and model.f % t == 0]
    pps = sorted({p for p in _divisors(model.layers) if p <= 128} | {p for p in (2, 4, 8, 16, 32, 64, 128)
                                                                       if p <= model.layers})
    cps = [c for c in (1, 2, 4, 8, 16, 32) if model.seq % c == 0 and model.seq // c >= 8192 or c == 1]
    eps = [e for e in _divisors(model.experts) if model.moe] or [1]
    out: list[Layout] = []
    for tp in ([fixed["tp"]] if "tp" in fixed else tps):
        for cp in ([fixed["cp"]] if "cp" in fixed else cps):
            for pp in ([fixed["pp"]] if "pp" in fixed else pps):
                if gpus % (tp * cp * pp):
                    continue
                dp = gpus // (tp * cp * pp)
                if "dp" in fixed and fixed["dp"] != dp:
                    continue
                seqs = gb or dp
                for ep in ([fixed["ep"]] if "ep" in fixed else eps):
                    if (tp * cp * dp) % ep:  # the experts' groups fold over the stage's tp x cp x dp ranks
                        continue
                    for mb in ([fixed["micro_batch"]] if "micro_batch" in fixed else micro_batches):
                        if seqs % (dp * mb):
                            continue
                        for v in ([fixed["virtual_stages"]] if "virtual_stages" in fixed else
                                  (virtual if pp > 1 else (1,))):
                            if pp * v > model.layers or (pp == 1 and v > 1):
                                continue
                            for z in ([fixed["zero"]] if "zero" in fixed else zero):
                                for rc in ([fixed["recompute"]] if "recompute" in fixed else recompute):
                                    if rc == "selective" and model.fused and "recompute" not in fixed:
                                        continue  # flash attention stores no scores: selective = none, slower
                                    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sp=tp > 1, zero=z,
                                                 recompute=rc, micro_batch=mb, global_batch=seqs,
                                                 virtual_stages=v, dtype=dtype, engine=engine, **options)
                                    try:
                                        lay.check(model)
                                    except PlanError:
                                        continue
                                    out.append(lay)
    return out


@dataclass
class SearchResult:
    model: Model
    gpus: int
    topology: str
    ranked: list[StepPlan]            # fastest first, only layouts that fit
    considered: int
    not_fitting: int
    priced: int                       # layouts whose collectives were priced
    seconds: float
    why: list[str] = field(default_factory=list)
    #: the layout that needs the least memory a GPU of those considered, and that memory (GiB), and the GPU's
    least: Optional[StepPlan] = None
    gpu_memory_gib: float = 0.0
    #: when a --zero or --recompute flag ruled out ZeRO-3 or full recomputation and nothing fitted: the layouts
    #: without those flags that fit, and the one of them needing the least memory (None: not searched)
    unfixed_fit: Optional[int] = None
    unfixed_least: Optional[StepPlan] = None

    def no_fit(self, fixed: Optional[dict] = None) -> str:
        """Why nothing fits, in numbers, and what would: the least memory a layout needs a GPU (its model
        states and activations) against the GPU's; the model states alone (weights, gradients, optimizer)
        against all the GPUs' memory; which of ZeRO-3 and full recomputation the search tried, and, where a
        flag ruled one out, whether a layout fits without that flag."""
        fixed = fixed or {}
        mem = self.gpu_memory_gib
        out = f"none of the {self.considered} layouts fits the GPUs' memory"
        if self.least is not None:
            m = self.least.memory_gib
            states = m["weights"] + m["gradients"] + m["optimizer"]
            out += (f": the least any needs is {m['total']:.1f} GiB a GPU ({self.least.layout.short()}: weights, "
                    f"gradients and optimizer {states:.1f} GiB, activations {m['activations']:.1f} GiB), "
                    f"against the GPU's {mem:g} GiB")
        per = sum(bytes_per_param(3, 1))  # 16-bit weights, fp32 gradients, Adam's fp32 master, m and v
        need = self.model.params() * per / GIB
        at_least = math.ceil(need / mem) if mem > 0 else 0
        out += (f". The weights, gradients and optimizer state alone take {need:,.0f} GiB ({per:g} bytes a "
                f"parameter): {need / self.gpus:,.1f} GiB a GPU on {self.gpus} GPUs even sharded over all of them")
        kinds = (("zero", 3, "ZeRO-3"), ("recompute", "full", "full recomputation"))
        tried = [what for key, val, what in kinds if fixed.get(key, val) == val]
        ruled = [(f"--{key} {fixed[key]}", what) for key, val, what in kinds if fixed.get(key, val) != val]
        if tried:
            out += f"; every layout was tried with {' and '.join(tried)}"
        if ruled:
            flags, what = " and ".join(f for f, _ in ruled), " and ".join(w for _, w in ruled)
            out += f"; {flags} rule{'s' if len(ruled) == 1 else ''} out {what}"
            if self.unfixed_fit:
                u = self.unfixed_least
                out += (f": without {'it' if len(ruled) == 1 else 'them'}, {self.unfixed_fit} layouts fit"
                        + (f" (the least memory: {u.memory_gib['total']:.1f} GiB a GPU, {u.layout.short()})"
                           if u is not None else "") + ". Drop the flag" + ("s" if len(ruled) > 1 else "")
                        + ", add GPUs or take GPUs with more memory")
                return out
            if self.unfixed_fit == 0:
                out += f": without {'it' if len(ruled) == 1 else 'them'} none fits either"
        if at_least > self.gpus:
            return out + (f". Add GPUs: the model states alone need at least {at_least} GPUs of {mem:g} GiB, "
                          f"before activations; or take GPUs with more memory (--memory GIB prices them)")
        return out + (". Add GPUs (the activations need room beside the states) or take GPUs with more memory "
                      "(--memory GIB prices them)")

    @property
    def best(self) -> StepPlan:
        return self.ranked[0]

    def to_dict(self) -> dict:
        return {"model": self.model.to_dict(), "gpus": self.gpus, "topology": self.topology,
                "considered": self.considered, "not_fitting": self.not_fitting, "priced": self.priced,
                "seconds": self.seconds, "why": self.why, "ranked": [p.to_dict() for p in self.ranked]}


def search(model: Model | str, gpus: int, topology: str | Context, *, global_batch: int = 0, dtype: str = "bf16",
           engine: str = "megatron", top: int = 10, progress: Callable[[str], None] | None = None, fixed: dict | None = None,
           clock: Callable[[], float] | None = None, **space) -> SearchResult:
    """Rank every feasible layout of ``model`` on ``gpus`` GPUs of ``topology`` (see the module docstring).
    ``clock``: seconds on the caller's clock (``interlink plan``: since the command started, the clock of its
    progress lines), which ``SearchResult.seconds`` reads at the end; default: seconds since this call."""
    t0 = time.perf_counter()
    clock = clock or (lambda: time.perf_counter() - t0)
    model = parse_model(model)
    ctx = topology if isinstance(topology, Context) else Context.of(topology, progress)
    if gpus > ctx.topo.nranks:
        raise PlanError(f"--gpus {gpus} is more than the topology's {ctx.topo.nranks} GPUs: use a larger cluster "
                        f"(e.g. --topology {math.ceil(gpus / ctx.gpus_per_host)}x...)")
    cands = layouts(model, gpus, gpus_per_host=ctx.gpus_per_host, global_batch=global_batch, dtype=dtype,
                    engine=engine, fixed=fixed, **space)
    if not cands:
        raise PlanError(f"no layout of {model.name or 'the model'} fills exactly {gpus} GPUs with global batch "
                        f"{global_batch or 'one sequence per data-parallel rank'}: change --gpus or --global-batch")
    free = Context(ctx.topo, ctx.gpu, _FreePricer(ctx.pricer))  # type: ignore[arg-type]
    bounds: list[tuple[float, Layout, StepPlan]] = []
    not_fit = 0
    least: Optional[StepPlan] = None
    last = time.perf_counter()
    for i, lay in enumerate(cands):
        p = plan_step(model, lay, free)
        if least is None or p.memory_gib["total"] < least.memory_gib["total"]:
            least = p
        if not p.fits:
            not_fit += 1
            continue
        bounds.append((p.step_s, lay, p))
        if progress is not None and time.perf_counter() - last > 2.0:
            last = time.perf_counter()
            progress(f"bounded {i + 1}/{len(cands)} layouts")
    bounds.sort(key=lambda x: x[0])
    best: list[StepPlan] = []
    priced = 0
    for lb, lay, _ in bounds:
        if len(best) >= top and lb > best[top - 1].step_s:
            break
        full = plan_step(model, lay, ctx)
        priced += 1
        best.append(full)
        best.sort(key=lambda p: p.step_s)
        if progress is not None and time.perf_counter() - last > 2.0:
            last = time.perf_counter()
            progress(f"priced {priced} layouts in full (of the {len(bounds)} that fit, fastest bound first: it "
                     f"stops at the first that cannot beat the top {top}); the best so far: step "
                     f"{fmt_step(best[0].step_s)} ({best[0].layout.short()})")
    ranked = best[:top]
    res = SearchResult(model, gpus, ctx.topo.name, ranked, len(cands), not_fit, priced,
                       clock(), least=least, gpu_memory_gib=float(ctx.gpu.memory_gib))
    ruled = {k: v for k, v in (fixed or {}).items() if (k, v) not in (("zero", 3), ("recompute", "full"))
             and k in ("zero", "recompute")}
    if not ranked and ruled:
        # nothing fits and a flag ruled out ZeRO-3 or full recomputation: would a layout fit without it?
        res.unfixed_fit = 0
        for lay in layouts(model, gpus, gpus_per_host=ctx.gpus_per_host, global_batch=global_batch, dtype=dtype,
                           engine=engine, fixed={k: v for k, v in fixed.items() if k not in ruled}, **space):  # type: ignore[union-attr]
            p = plan_step(model, lay, free)
            if p.fits:
                res.unfixed_fit += 1
                if res.unfixed_least is None or p.memory_gib["total"] < res.unfixed_least.memory_gib["total"]:
                    res.unfixed_least = p
    res.why = explain(ranked)
    return res


def fmt_step(s: float) -> str:
    """A step's time as the plan's tables print it: seconds from 1 s, else milliseconds."""
    return f"{s:.3f} s" if s >= 1 else f"{s * 1e3:.2f} ms"


def explain(ranked: list[StepPlan]) -> list[str]:
    """Why the first layout wins: where each runner-up loses time against it (the largest differences)."""
    if not ranked:
        return []
    a = ranked[0]
    out = [f"{a.layout.short()}: step {fmt_step(a.step_s)}, MFU {a.mfu:.1%}, {a.memory_gib['total']:.1f} GiB a GPU"]
    for b in ranked[1:4]:
        diffs = {k: b.breakdown.get(k, 0.0) - a.breakdown.get(k, 0.0) for k in a.breakdown}
        worst = sorted(diffs.items(), key=lambda kv: -kv[1])[:2]
        parts = ", ".join(f"{k} +{d * 1e3:.0f} ms" for k, d in worst if d > 0)
        out.append(f"vs {b.layout.short()} ({b.step_s / a.step_s:.3f}x): it loses {parts or 'nothing large'}")
    return out


def sweep(model: Model | str, counts: Iterable[int], machine: str, *, global_batch: int = 0, dtype: str = "bf16",
          engine: str = "megatron", progress: Callable[[str], None] | None = None, **space) -> list[dict]:
    """The best layout at each GPU count on ``N x machine`` clusters: tokens/s and the efficiency against
    linear scaling from the first count (the cliff is where it drops)."""
    model = parse_model(model)
    rows: list[dict] = []
    base = None
    for n in counts:
        per = 8
        hosts = max(1, math.ceil(n / per))
        spec = f"{hosts}x{machine}" if hosts > 1 or "x" not in machine else machine
        if progress is not None:
            progress(f"{n} GPUs on {spec}")
        try:
            r = search(model, n, spec, global_batch=global_batch, dtype=dtype, engine=engine, top=1, progress=progress,
                       **space)
        except PlanError as exc:
            rows.append({"gpus": n, "error": str(exc)})
            continue
        if not r.ranked:
            rows.append({"gpus": n, "topology": spec, "error": r.no_fit(space.get("fixed"))})
            continue
        p = r.best
        tps = p.tokens_per_s
        if base is None:
            base = (n, tps)
        eff = tps / (base[1] * n / base[0])
        rows.append({"gpus": n, "topology": spec, "layout": p.layout.short(), "step_s": p.step_s,
                     "tokens_per_s": tps, "tflops_per_gpu": p.tflops_per_gpu, "mfu": p.mfu,
                     "efficiency": eff, "search_s": r.seconds})
    return rows
