"""A Chrome/Perfetto timeline of one planned step: per pipeline stage a compute lane (forward and backward
of each micro-batch in 1F1B order) and a communication lane (sends between stages, the exposed gradient
reduction and parameter gather), then the optimizer.

The pipeline is played, not drawn from the formula: stage k runs min(p - k - 1, M) forwards, then one
forward and one backward in turn, then the remaining backwards; a forward waits for the previous stage's
forward of that micro-batch and the send, a backward for the next stage's backward and the send. An
interleaved plan (v virtual stages) is played as 1F1B over M = m x v chunks of a v-th of a stage each,
which has the interleaved schedule's busy time and its bubble of (p - 1) / v stage times.
:func:`pipeline_makespan` is the same play without the events (tests compare it with the formula).
"""

from __future__ import annotations

import json
from typing import Any

from .step import StepPlan

__all__ = ["play_1f1b", "pipeline_makespan", "chrome_trace", "write_trace"]


def play_1f1b(p: int, M: int, t_f: float, t_b: float, t_send: float = 0.0) -> list[list[tuple[str, int, float, float]]]:
    """Per stage, its ops (``"F"`` or ``"B"``, micro-batch, start, end) in the order it runs them."""
    order: list[list[tuple[str, int]]] = []
    for k in range(p):
        w = min(p - k - 1, M)
        ops = [("F", j) for j in range(w)]
        f, bk = w, 0
        while f < M or bk < M:
            if f < M:
                ops.append(("F", f))
                f += 1
            if bk < M:
                ops.append(("B", bk))
                bk += 1
        order.append(ops)
    done: dict[tuple[str, int, int], float] = {}
    pos = [0] * p
    free = [0.0] * p
    out: list[list[tuple[str, int, float, float]]] = [[] for _ in range(p)]
    remaining = sum(len(o) for o in order)
    while remaining:
        progressed = False
        for k in range(p):
            while pos[k] < len(order[k]):
                op, j = order[k][pos[k]]
                if op == "F":
                    dep = done.get(("F", k - 1, j)) if k > 0 else 0.0
                    if dep is None:
                        break
                    ready = dep + (t_send if k > 0 else 0.0)
                    dur = t_f
                else:
                    dep = done.get(("B", k + 1, j)) if k < p - 1 else done.get(("F", k, j))
                    if dep is None:
                        break
                    ready = dep + (t_send if k < p - 1 else 0.0)
                    dur = t_b
                start = max(free[k], ready)
                end = start + dur
                done[(op, k, j)] = end
                free[k] = end
                out[k].append((op, j, start, end))
                pos[k] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the 1F1B order has no cycles
            raise RuntimeError("1F1B play is stuck")
    return out


def pipeline_makespan(p: int, M: int, t_f: float, t_b: float, t_send: float = 0.0) -> float:
    return max(ops[-1][3] for ops in play_1f1b(p, M, t_f, t_b, t_send) if ops)


def chrome_trace(plan: StepPlan, max_stages: int = 16) -> dict[str, Any]:
    """The trace of one step of ``plan`` as a Chrome trace-event JSON object (times in microseconds)."""
    L = plan.layout
    v = L.virtual_stages
    m = int(plan.stage["micro_batches"])
    p = L.pp
    M = m * v
    t_f, t_b = plan.stage["forward_s"] / v, plan.stage["backward_s"] / v
    stages = play_1f1b(p, M, t_f, t_b, plan.stage["p2p_s"]) if p > 1 else play_1f1b(1, m, t_f * v, t_b * v)
    ev: list[dict[str, Any]] = []
    us = 1e6
    show = list(range(p)) if p <= max_stages else sorted({0, 1, p // 2, p - 2, p - 1})
    for k in show:
        ev.append({"ph": "M", "name": "process_name", "pid": k, "args": {"name": f"stage {k}"}})
        ev.append({"ph": "M", "name": "thread_name", "pid": k, "tid": 0, "args": {"name": "compute"}})
        ev.append({"ph": "M", "name": "thread_name", "pid": k, "tid": 1, "args": {"name": "communication"}})
        for op, j, s, e in stages[k]:
            name = ("forward" if op == "F" else "backward") + f" mb{j // v if v > 1 else j}" + \
                (f" chunk{j % v}" if v > 1 else "")
            ev.append({"ph": "X", "name": name, "cat": "compute", "pid": k, "tid": 0, "ts": s * us,
                       "dur": (e - s) * us})
            if p > 1 and plan.stage["p2p_s"] > 0 and ((op == "F" and k < p - 1) or (op == "B" and k > 0)):
                ev.append({"ph": "X", "name": "send " + ("activations" if op == "F" else "gradients"),
                           "cat": "pp", "pid": k, "tid": 1, "ts": e * us, "dur": plan.stage["p2p_s"] * us})
    end = max(ops[-1][3] for ops in stages if ops)
    bd = plan.breakdown
    t = end
    for name in ("dp", "zero_gather", "optimizer"):
        d = bd.get(name, 0.0)
        if d <= 0:
            continue
        for k in show:
            ev.append({"ph": "X", "name": {"dp": "gradient reduction (exposed)", "zero_gather":
                                           "parameter all-gather (exposed)", "optimizer": "optimizer"}[name],
                       "cat": name, "pid": k, "tid": 1 if name != "optimizer" else 0, "ts": t * us, "dur": d * us})
        t += d
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"model": plan.model.name or plan.model.spec(), "layout": L.short(),
                          "topology": plan.topology, "step_s": plan.step_s, "played_s": t}}


def write_trace(plan: StepPlan, path: str) -> None:
    with open(path, "w") as fh:
        json.dump(chrome_trace(plan), fh)
