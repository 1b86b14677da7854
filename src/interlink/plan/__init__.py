"""The planner: what a training step costs on a cluster, and which parallel layout is best.

    from interlink.plan import Layout, parse_model, plan_step, search
    r = plan_step(parse_model("gpt3-175b"), Layout(tp=8, pp=8, dp=16, global_batch=1536), "128xdgx-a100")
    r.step_s, r.tflops_per_gpu, r.mfu, r.memory_gib

Every collective of the step is the Schedule the runtime would run, on the group's ranks of the
topology, priced by :func:`interlink.model.predict`; compute comes from FLOPs (Narayanan et al. 2021)
at a named fraction of the GPU's peak, memory from Korthikanti et al. 2022. docs/plan.md.

Layering: imports interlink.errors, ops, algorithms, topology, model and sim only.
"""

from .job import PRESETS, Model, PlanError, parse_model
from .layout import Layout
from .step import Context, StepPlan, plan_step

__all__ = ["Model", "PRESETS", "PlanError", "parse_model", "Layout", "plan_step", "StepPlan", "Context"]
