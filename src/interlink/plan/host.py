"""The plan of a training step on this host: CPU ranks training a transformer with torch (fp32, AdamW,
one thread a rank), data parallel with DDP or FSDP2, over ``backend="interlink"`` or gloo.

    from interlink.plan.host import plan_host
    r = plan_host("layers=4,hidden=256,heads=4,seq=128,vocab=2048", 4, system="fsdp", backend="interlink",
                  micro_batch=4)
    r.step_s, r.breakdown, r.collectives

``interlink plan --topology this`` on a machine without GPUs (``--zero 0`` DDP, ``--zero 3`` FSDP).
benchmarks/plan_host.py trains the same model with real processes and prints measured next to this.

Compute, per rank, from the model's FLOPs (plan/job.py: Narayanan et al. 2021's formulas) at rates
measured on this host (:class:`HostCompute`, :func:`calibrate`, a few seconds, kept next to the host
profile): each weight GEMM of the layer and the output layer at its own shape (M = micro-batch x seq
tokens), forward and backward (dX, dW and the bias's gradient) timed apart, in GFLOP/s; the other kernels
a step runs, each timed at the model's shape, forward and backward: the attention core
(``scaled_dot_product_attention``, causal, with the split into heads and back), layer norm, GeLU, the
residual add, the embedding, the fp32 cross-entropy over the vocabulary, and torch's AdamW over the
model's parameter tensors; the step's autograd ops no kernel timing holds (:func:`step_ops`) at the
per-op cost of a chain of tiny views; DDP's and FSDP2's own work as their step on torch's fake process
group less the bare model's (where it cannot be measured, their copies at the copy bandwidth). One torch
thread a rank (as torchrun's OMP_NUM_THREADS=1), timed in the thread's CPU time, with as many processes
measuring at once as the plan's ranks compute at once (:func:`concurrency`: the rates of ranks sharing the
memory bus and caches). Ranks beyond this host's cores (``os.sched_getaffinity``) share them: a rank's
compute takes ``ranks / cores`` times as long. ``stage["terms"]`` of the plan names each term and its
source.

Communication: DDP's buckets (torch's: the first 1 MiB, then ``bucket_mb``, filled in the order the
backward produces gradients) each an all_reduce; FSDP2's per-block all_gather of the parameters
(forward, and again in the backward: ``reshard_after_forward``) and reduce_scatter of the gradients, the
root's once. Each is priced by :func:`interlink.model.predict` on this host's CPU topology with the
calibrated host profile (``interlink bench --calibrate``), on the path the interlink runtime takes: the
host page's (:func:`interlink.algorithms.hostpath.host_path`, the runtime's own choice) where it takes
one, else the tuner's (the model's fastest). gloo: a ring over loopback TCP on the host model's TCP
parameters (``host.tcp.*``): gloo's all_reduce is a segmented ring, reduce-scatter then all-gather
(gloo/allreduce.cc); its all_gather and reduce_scatter are priced as the same ring (torch's gloo
reduce_scatter measured 1.3-1.5x its all_reduce of the same bytes on this host: the ring is optimistic
for it).

Overlap, as the two backends do on CPU: a collective runs under the backward only where the host has a
core to spare for it (at least two cores a rank: interlink's rule for running CPU collectives on its
runner thread, ``backends.torch.cores_scarce``; gloo's worker threads need the same core). Without one,
every collective is exposed (interlink runs them inline; gloo's thread takes the core from the
backward). With one, DDP's buckets go as they fill (the last exposed, never less than it), FSDP's
gathers one block ahead.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .job import Model, PlanError, parse_model
from .layout import Layout
from .step import GIB, StepPlan

__all__ = ["HostCompute", "calibrate", "host_compute", "plan_host", "host_cores", "compute_path", "concurrency",
           "step_ops", "call_cost", "calibrate_calls", "DDP_BUCKET_BYTES", "DISPATCH_CHAIN", "SYSTEMS", "BACKENDS"]

SYSTEMS = ("ddp", "fsdp")
BACKENDS = ("interlink", "gloo")
F32 = 4
#: DDP (gradient_as_bucket_view=False, torch's default): each gradient copied into its bucket (r+w 8),
#: the bucket divided by the world size (8), copied back into the gradient (8)
DDP_BUCKET_BYTES = 24.0
#: DDP's first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
FIRST_BUCKET = 1 << 20
#: autograd nodes a chain of tiny views is timed over (the per-op dispatch cost, :func:`kernel_fns`)
DISPATCH_CHAIN = 256


#: a kernel whose first call takes longer than this is timed 3 times (the median), not ``reps`` times: a
#: billion-parameter model's weight GEMMs take seconds each on a CPU core, and their spread is small
LONG_KERNEL_S = 1.0
#: copy bandwidth (GB/s, read + write, one core) the up-front estimate of a measurement assumes for its
#: memory-bound parts (AdamW, the copies) until they are measured
GUESS_COPY_GBPS = 5.0
#: seconds the up-front estimate allows for measuring a collective call through torch at a rank count
#: (plan/calls.py: two backends' processes started, 5 blocks of 200 calls; 12 s at 2 ranks on 2 cores)
CALLS_S = 15.0
#: a training step of build_gpt on one core takes about this many times its model FLOPs at the GEMMs' rate
#: (autograd, attention and the elementwise kernels run slower than the GEMMs: 2.7 for a 20M-parameter
#: model at seq 512, less where the GEMMs weigh more)
STEP_SLOWDOWN = 2.0
#: seconds to start the processes that measure at once (spawned, each importing torch: 5-8 s on 2 cores)
START_S = 8.0


def host_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def compute_path() -> str:
    """Where this host's compute rates are kept: INTERLINK_HOST_COMPUTE, else next to the host profile
    (``~/.cache/interlink/host_compute.json``)."""
    env = os.environ.get("INTERLINK_HOST_COMPUTE")
    if env:
        return os.path.expanduser(env)
    from ..model.params import profile_path

    return os.path.join(os.path.dirname(profile_path()), "host_compute.json")


# ---- the shapes a step computes --------------------------------------------------------------------


def _host_shape(model: Model) -> None:
    """The torch GPT this host measures (build_gpt) has heads that span the hidden width: a model whose
    head_dim says otherwise is refused with the fix."""
    if model.q_dim != model.hidden:
        raise PlanError(f"--topology this trains a GPT whose heads span hidden ({model.hidden}); head_dim="
                        f"{model.head_dim} x {model.heads} heads does not: drop head_dim, or plan on a GPU cluster")


def gemm_shapes(model: Model, b: int) -> list[tuple[int, int, int, int]]:
    """(M, K, N, count) of every weight GEMM of a step's forward, M = b x seq tokens: per layer QKV,
    output projection, the MLP's matrices; the output layer (tied: x @ E^T)."""
    M, h = b * model.seq, model.hidden
    out = {}
    for k, n, c in ((h, h + 2 * model.kv_dim, 1), (h, h, 1), (h, model.f, model.mats - 1), (model.f, h, 1)):
        out[(M, k, n)] = out.get((M, k, n), 0) + c * model.layers
    out[(M, h, model.vocab)] = out.get((M, h, model.vocab), 0) + 1
    return [(m, k, n, c) for (m, k, n), c in out.items()]


def attention_shape(model: Model, b: int) -> tuple[int, int, int, int]:
    """(b, heads, seq, head size) of the attention core."""
    return (b, model.heads, model.seq, model.hidden // model.heads)


def _key(*xs: int) -> str:
    return "x".join(str(int(x)) for x in xs)


def at(key: str, concurrent: int) -> str:
    """The key of a rate measured with ``concurrent`` processes at once (``key@P``; alone: ``key``)."""
    return key if concurrent <= 1 else f"{key}@{int(concurrent)}"


#: at most this many processes measure at once for ranks beyond the cores (each imports torch: ~0.8 GB)
OVERSUB_PROCESSES = 8


def concurrency(ranks: int, cores: int) -> int:
    """How many processes measure the rates the plan of ``ranks`` ranks uses: as many as the ranks (at most
    OVERSUB_PROCESSES where they exceed the cores), sharing the memory bus and caches as the ranks do in a
    step, and, beyond the cores, taking turns on them as the ranks do: each kernel timed in its thread's CPU
    time, which then holds what the turns cost (the caches refilled after each switch: 4 processes of the
    4-layer model of benchmarks/plan_host.py on 2 cores took 15% more CPU time a step than 2 did). The core
    share (:func:`plan_host`: ranks / cores) turns that CPU time into the step's."""
    r, c = max(1, int(ranks)), max(1, int(cores))
    return r if r <= c else min(r, max(c, OVERSUB_PROCESSES))


def measure_scale(P: int, cores: int) -> float:
    """How much longer a measurement takes with ``P`` processes on ``cores`` than its estimate for one a core."""
    return max(1.0, P / max(1, cores))


def param_shapes(model: Model) -> list[tuple[int, ...]]:
    """The parameter tensors of the GPT stack the plan prices (benchmarks/plan_host.py builds it): per block
    two layer norms (weight, bias), QKV, the output projection and the MLP's matrices (weight, bias); the
    tied embedding and the final layer norm."""
    h, f, q = model.hidden, model.f, model.hidden + 2 * model.kv_dim
    block = [(h,), (h,), (q, h), (q,), (h, h), (h,), (h,), (h,)] + [(f, h), (f,)] * (model.mats - 1) + [(h, f), (h,)]
    return [(model.vocab, h)] + block * model.layers + [(h,), (h,)]


def torch_params(model: Model) -> int:
    """The parameters of the torch model (:func:`param_shapes`: every bias and layer norm counted)."""
    return sum(math.prod(s) for s in param_shapes(model))


def block_params(model: Model) -> int:
    """The parameters of one block of the torch model."""
    return (torch_params(model) - model.vocab * model.hidden - 2 * model.hidden) // model.layers


def kernel_shapes(model: Model, b: int) -> dict[str, tuple[int, ...]]:
    """The kernels besides the weight GEMMs a step runs, each at the model's shape (M = b x seq tokens)."""
    M, h = b * model.seq, model.hidden
    return {"attention": attention_shape(model, b), "layer_norm": (M, h), "gelu": (M, model.f), "add": (M, h),
            "cross_entropy": (M, model.vocab), "embedding": (M, model.vocab, h),
            "adamw": (torch_params(model),), "dispatch": (DISPATCH_CHAIN,),
            "framework": (model.layers, h, model.heads, model.seq, model.vocab, model.f, b)}


@dataclass
class HostCompute:
    """Compute rates of this host, one torch thread, measured by :func:`calibrate`: GFLOP/s of each GEMM
    shape (``MxKxN``: forward, backward = dX + dW + the bias gradient), seconds of each other kernel at its
    shape (``name:shape``: forward, backward), copy bandwidth GB/s at the size (bytes) of the gradients."""

    gemm: dict[str, dict[str, float]] = field(default_factory=dict)
    kernels: dict[str, dict[str, float]] = field(default_factory=dict)
    copy_gbps: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    #: seconds a collective call through torch.distributed takes on this host (plan/calls.py: measure_calls),
    #: keyed calls_key(backend, collective, ranks)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def source(self) -> str:
        m = self.meta
        conc = "".join(f", {c} at once" for c in m.get("concurrent", []) if c > 1)
        return f"measured on {m.get('host', '?')} {m.get('date', '?')} (torch {m.get('torch', '?')}, 1 thread a " \
            f"process{conc})" + \
            (f", {self.path}" if self.path else "")

    def to_dict(self) -> dict[str, Any]:
        return {"interlink_host_compute": 2, "gemm": self.gemm, "kernels": self.kernels,
                "copy_gbps": self.copy_gbps, "meta": self.meta, "calls": self.calls}

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: str = "") -> "HostCompute":
        return cls(dict(d.get("gemm", {})), dict(d.get("kernels", {})), dict(d.get("copy_gbps", {})),
                   dict(d.get("meta", {})), path, dict(d.get("calls", {})))

    def has_calls(self, ranks: int) -> bool:
        """The per-call cost through torch's backend measured at ``ranks`` ranks (both backends)."""
        from .calls import CALL_COLLECTIVES, calls_key

        return ranks < 2 or all(calls_key(b, c, ranks) in self.calls and (b != "gloo" or "line_s" in
                                                                           self.calls[calls_key(b, c, ranks)])
                                for b in BACKENDS for c in CALL_COLLECTIVES)

    def kernel(self, name: str, shape: tuple[int, ...], concurrent: int = 1) -> dict[str, float]:
        return self.kernels[at(f"{name}:{_key(*shape)}", concurrent)]

    def rate(self, M: int, K: int, N: int, concurrent: int = 1) -> dict[str, float]:
        return self.gemm[at(_key(M, K, N), concurrent)]

    def has(self, model: Model, b: int, concurrent: int = 1) -> bool:
        """Every rate the plan of ``model`` at micro-batch ``b`` needs, measured with ``concurrent``
        processes at once."""
        c = concurrent
        return all(at(_key(m, k, n), c) in self.gemm for m, k, n, _ in gemm_shapes(model, b)) and \
            all(at(f"{k}:{_key(*v)}", c) in self.kernels for k, v in kernel_shapes(model, b).items()
                if k != "framework") and \
            at(str(torch_params(model) * F32), c) in self.copy_gbps

    def bandwidth(self, nbytes: float, concurrent: int = 1) -> float:
        """Copy bandwidth (bytes/s, read + write) at the measured size nearest ``nbytes`` (log scale),
        measured with ``concurrent`` processes at once."""
        mine = {int(k.split("@")[0]): v for k, v in self.copy_gbps.items()
                if (int(k.split("@")[1]) if "@" in k else 1) == concurrent}
        if not mine:
            raise PlanError("no copy bandwidth measured: run the calibration (interlink plan --topology this "
                            "--recalibrate)")
        best = min(mine, key=lambda k: abs(math.log(max(1.0, float(k)) / max(1.0, nbytes))))
        return mine[best] * 1e9


# ---- measuring (torch, one thread) -----------------------------------------------------------------


def build_gpt(layers: int, hidden: int, heads: int, seq: int, vocab: int, ffn: int = 0) -> Any:
    """The torch model the plan prices: a pre-norm GPT stack whose FLOPs are :class:`Model`'s (each block
    LayerNorm, QKV, causal ``scaled_dot_product_attention``, output projection, residual add; LayerNorm,
    GeLU MLP, residual add; the output layer tied to the embedding; no position embedding, which adds no
    FLOPs the planner counts). ``forward(idx, target)`` returns the cross-entropy loss."""
    import torch.nn.functional as F
    from torch import nn

    f = ffn or 4 * hidden

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.fc1 = nn.Linear(hidden, f)
            self.fc2 = nn.Linear(f, hidden)

        def forward(self, x: Any) -> Any:
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
            q, k, v = (t.view(b, s, heads, h // heads).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden)

        def forward(self, idx: Any, target: Any) -> Any:
            x = self.emb(idx)
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln_f(x) @ self.emb.weight.t()
            return F.cross_entropy(logits.view(-1, vocab), target.view(-1))

    return GPT()


def fmt_left(s: float) -> str:
    """A duration for progress lines: seconds under two minutes, else minutes."""
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def measure_estimate(model: Model, b: int, gflops: float, *, reps: int = 7, fw_ranks: tuple[int, ...] = (),
                     rates: bool = True, calls: int = 0,
                     copy_gbps: float = GUESS_COPY_GBPS) -> list[tuple[str, float]]:
    """The parts of :func:`calibrate`'s measurement in the order it runs them, with the seconds each takes
    at ``gflops`` GFLOP/s a core (its GEMMs' rate) and ``copy_gbps`` for what is bound by memory: each
    weight GEMM shape (forward and backward, a warm-up call and ``reps`` timed ones each, 3 where a call
    takes over LONG_KERNEL_S), the other kernels, AdamW, the copies, DDP's and FSDP2's own work at each of
    ``fw_ranks`` (3 systems x reps + 2 training steps of the model on torch's fake process group) and
    ``calls`` rank counts of collective calls through torch (CALLS_S each). An estimate: the progress
    corrects it by the pace of the parts measured."""
    rate, bw = max(1e-3, gflops) * 1e9, max(1e-3, copy_gbps) * 1e9

    def timed(one: float) -> float:  # a warm-up call, then the timed ones (3 for a long kernel)
        return one * (1 + (min(reps, 3) if one > LONG_KERNEL_S else reps))

    out: list[tuple[str, float]] = []
    P = torch_params(model)
    adam = 28.0 * P / bw  # AdamW reads parameters, gradients and both moments, writes three
    if rates:
        for M, K, N, _ in gemm_shapes(model, b):
            f = 2.0 * M * K * N
            out.append((f"GEMM {M}x{K}x{N}", timed(f / rate) + timed(2 * f / rate)))
        B, A, S, D = attention_shape(model, b)
        att = 4.0 * B * A * S * S * D / rate  # QK^T and the weighted sum of V, forward
        M, V = b * model.seq, model.vocab
        ce = 24.0 * M * V / bw  # fp32 logits: softmax forward, its gradient
        out.append(("the other kernels", timed(att) + timed(4 * att) + timed(ce) + timed(3 * ce)))
        out.append(("AdamW", timed(adam)))
        out.append(("copies", sum(timed(2.0 * n / bw) for n in copy_sizes(model))))
    step = STEP_SLOWDOWN * model.model_flops(b) / rate
    for n in fw_ranks:
        if n > 1:
            out.append((f"DDP's and FSDP2's steps on {n} ranks", (reps + 2) * (3 * step + (2 + 1 / n) * adam)))
    out.extend((f"collective calls {i + 1}", CALLS_S) for i in range(calls))
    return out


class _Eta:
    """The time left of a measurement made of :func:`measure_estimate`'s parts: the estimates of the parts
    not done, the one under way less the time it has run, all scaled by how long the parts done took
    against their estimates."""

    def __init__(self, parts: list[tuple[str, float]]) -> None:
        self.est = [e for _, e in parts]
        self.i = -1
        self.t = time.monotonic()
        self.took = 0.0
        self.estimated = 0.0

    def start(self, i: int) -> None:
        now = time.monotonic()
        if 0 <= self.i < len(self.est):
            self.took += now - self.t
            self.estimated += self.est[self.i]
        self.i, self.t = i, now

    def left(self) -> float:
        k = min(5.0, max(0.2, self.took / self.estimated)) if self.estimated > 0 and self.took > 0.5 else 1.0
        cur = max(0.0, self.est[self.i] * k - (time.monotonic() - self.t)) if 0 <= self.i < len(self.est) else 0
        return cur + k * sum(self.est[self.i + 1:])

    def say(self) -> str:
        return f"about {fmt_left(self.left())} left"


def _gflops_now() -> float:
    """GFLOP/s of one thread on a 256^3 GEMM (a few ms): the rate the measurement's first estimate takes."""
    import torch

    a = torch.randn(256, 256)
    a.mm(a)
    t0 = time.thread_time()
    for _ in range(4):
        a.mm(a)
    return 4 * 2.0 * 256 ** 3 / max(1e-6, time.thread_time() - t0) / 1e9


def _framework(model: Model, b: int, ranks: int, reps: int,
               sync: Callable[[], None] = lambda: None) -> dict[str, float]:
    """DDP's and FSDP2's own work a step on ``ranks`` ranks (hooks, bucket copies; FSDP2's DTensor
    parameters, its copies into and out of its collectives, AdamW on its shards), measured as each wrapper's
    step in this process on torch's fake process group of ``ranks`` ranks (collectives that return at once:
    everything but the communication) less the same model's plain step, in the process's CPU time, the
    systems taking turns (``sync`` before each round: the processes measuring at once start it together).
    Nothing when torch.distributed is already initialised in this process or torch has no fake process
    group."""
    import torch
    import torch.distributed as dist

    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except ImportError:  # pragma: no cover - a torch without it
        return {}
    if not dist.is_available() or dist.is_initialized():
        return {}
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=ranks)
    try:
        torch.manual_seed(0)
        idx = torch.randint(0, model.vocab, (b, model.seq))
        tgt = torch.randint(0, model.vocab, (b, model.seq))

        def no_comm(state, bucket):  # type: ignore[no-untyped-def]  (DDP checks the annotations it finds)
            """DDP's comm hook without communication: the bucket divided by the ranks (as DDP's
            all_reduce hook divides it), returned as it is."""
            fut: Any = torch.futures.Future()
            fut.set_result(bucket.buffer().div_(ranks))
            return fut

        def make(kind: str) -> Any:
            net = build_gpt(model.layers, model.hidden, model.heads, model.seq, model.vocab, model.f)
            if kind == "ddp":
                net = DDP(net)
                net.register_comm_hook(None, no_comm)  # the fake group's futures carry no tensor
            elif kind == "fsdp":
                mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
                for blk in net.blocks:
                    fully_shard(blk, mesh=mesh)
                fully_shard(net, mesh=mesh)
            return net, torch.optim.AdamW(net.parameters(), lr=1e-4)

        systems = {k: make(k) for k in ("plain", "ddp", "fsdp")}
        times: dict[str, list[float]] = {k: [] for k in (*systems, "plain_opt")}
        for r in range(reps + 2):  # taking turns; the first two rounds warm up
            sync()
            for k, (net, opt) in systems.items():
                c0 = time.process_time()
                opt.zero_grad(set_to_none=True)
                net(idx, tgt).backward()
                c1 = time.process_time()
                opt.step()
                if r >= 2:
                    times[k].append(time.process_time() - c0)
                    if k == "plain":
                        times["plain_opt"].append(time.process_time() - c1)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        # FSDP2's AdamW runs on the shards (1 / ranks of the parameters), which the plan prices apart (AdamW's
        # measured time at that share): its own work is the rest
        fsdp_own = med["fsdp"] - (med["plain"] - med["plain_opt"]) - med["plain_opt"] / ranks
        return {"plain_step_s": med["plain"], "plain_optimizer_s": med["plain_opt"],
                "ddp_s": max(0.0, med["ddp"] - med["plain"]), "fsdp_s": max(0.0, fsdp_own),
                "plain_steps_s": list(times["plain"])}  # each round's (calibrate: the slowest process's)
    finally:
        dist.destroy_process_group()


def slowest_x(steps: list[list[float]]) -> float:
    """How much longer a synchronous step takes than one rank's: ``steps[p][r]`` is process p's plain step in
    round r, the processes starting each round together (calibrate's barrier), as ranks start each step
    after the last one's collectives. A data-parallel step waits for the slowest rank, so the job's step in a
    round is the slowest process's; the factor is the median over rounds of that, over the median step of a
    process (the mean of the processes' medians). 1.0 with one process or no rounds."""
    from statistics import median

    rows = [list(v) for v in steps if v]
    n = min((len(v) for v in rows), default=0)
    if len(rows) < 2 or n == 0:
        return 1.0
    one = sum(median(v[:n]) for v in rows) / len(rows)
    job = median([max(v[r] for v in rows) for r in range(n)])
    return max(1.0, job / one) if one > 0 else 1.0


def kernel_fns(model: Model, b: int) -> dict[str, tuple[Callable[[], tuple], Callable[..., Any]]]:
    """The kernels besides the weight GEMMs, as :func:`calibrate` times them: name -> (inputs, fn), each
    ``fn(*inputs())`` at the model's shape (kernel_shapes), recording for autograd as in training. The
    ``dispatch`` entry is a chain of DISPATCH_CHAIN views of a one-element tensor: what torch pays a
    step's op and its autograd node beyond the kernel's own work."""
    import torch
    import torch.nn.functional as F

    ks = kernel_shapes(model, b)
    B, A, S, D = ks["attention"]
    M, h = ks["layer_norm"]
    Mv, V = ks["cross_entropy"]
    _, Ve, he = ks["embedding"]
    tgt = torch.randint(0, V, (Mv,))
    ids = torch.randint(0, Ve, (M,))

    def attn(qkv):  # the block's split into heads, the causal attention, the output back to (b, s, h)
        q, k, v = (t.view(B, S, A, D).transpose(1, 2) for t in qkv.split(A * D, dim=-1))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, S, A * D)

    def chain(x):
        for i in range(DISPATCH_CHAIN):
            x = x.view((1, 1) if i % 2 == 0 else (1,))
        return x

    def g(*shape):
        return lambda: tuple(torch.randn(*s, requires_grad=True) for s in shape)

    return {
        "attention": (g((B, S, 3 * A * D)), attn),
        "layer_norm": (lambda: (torch.randn(M, h, requires_grad=True), torch.ones(h, requires_grad=True),
                                torch.zeros(h, requires_grad=True)),
                       lambda x, w, bb: F.layer_norm(x, (h,), w, bb)),
        "gelu": (g(ks["gelu"]), F.gelu),
        "add": (g((M, h), (M, h)), torch.add),
        "cross_entropy": (g((Mv, V)), lambda z: F.cross_entropy(z, tgt)),
        "embedding": (g((Ve, he)), lambda wt: F.embedding(ids, wt)),
        "dispatch": (g((1,)), chain),
    }


def _measure(model: Model, b: int, reps: int, fw_ranks: tuple[int, ...], sync: Callable[[], None],
             progress: Optional[Callable[[str], None]], rates: bool = True) -> dict[str, Any]:
    """Every rate of :class:`HostCompute` for ``model`` at micro-batch ``b`` in this process, one torch
    thread, median of ``reps`` timings each in the thread's CPU time (what a core does, whatever else
    waits for it); ``sync()`` before each timing, so that processes measuring at once time the same kernel
    together (``rates`` False: DDP's and FSDP2's own work only). Returns {"gemm", "kernels", "copy_gbps"}
    keyed as HostCompute's, without ``@P``."""
    import torch

    torch.set_num_threads(1)
    gemm: dict[str, dict[str, float]] = {}
    kernels: dict[str, dict[str, float]] = {}
    copy: dict[str, float] = {}

    def med(fn: Callable[[], Any]) -> float:
        t0 = time.thread_time()
        fn()
        # a kernel that takes over a second (a billion-parameter model's GEMMs): the median of 3, not of reps
        n = reps if time.thread_time() - t0 < LONG_KERNEL_S else min(reps, 3)
        sync()
        ts = []
        for _ in range(n):
            t0 = time.thread_time()
            fn()
            ts.append(time.thread_time() - t0)
        ts.sort()
        return ts[len(ts) // 2]

    shapes = gemm_shapes(model, b) if rates else []
    # the parts of this measurement with their estimated seconds (at a 256^3 GEMM's rate), for the time left
    parts = measure_estimate(model, b, _gflops_now() if progress else 1.0, reps=reps, fw_ranks=fw_ranks,
                             rates=rates)
    eta = _Eta(parts)
    part = 0

    def say(what: str) -> None:
        nonlocal part
        eta.start(part)
        part += 1
        if progress:
            progress(f"{what} (part {part} of {len(parts)}; {eta.say()})")

    for i, (M, K, N, _) in enumerate(shapes):
        say(f"GEMM {M}x{K}x{N}, {i + 1} of {len(shapes)}")
        x, w, bias, g = torch.randn(M, K), torch.randn(N, K), torch.randn(N), torch.randn(M, N)
        fl = 2.0 * M * K * N
        tf = med(lambda: torch.addmm(bias, x, w.t()))  # nn.Linear's forward
        tb = med(lambda: (g.mm(w), g.t().mm(x), g.sum(0)))  # its backward: dX, dW, the bias's gradient
        gemm[_key(M, K, N)] = {"forward_gflops": fl / tf / 1e9, "backward_gflops": 2 * fl / tb / 1e9}
    ks = kernel_shapes(model, b)
    if rates:
        say("attention, layer norm, GeLU, adds, embedding, cross-entropy, dispatch")
    for name, (make, fn) in (kernel_fns(model, b) if rates else {}).items():
        # forward (recording for autograd, as in training), and forward + backward: the difference
        ins = make()
        out = fn(*ins)
        grad = torch.randn_like(out) if out.dim() else None
        tf = med(lambda: fn(*ins))
        tfb = med(lambda: fn(*ins).backward(grad))
        kernels[f"{name}:{_key(*ks[name])}"] = {"forward_s": tf, "backward_s": max(0.0, tfb - tf)}
    if rates:
        say(f"AdamW on {ks['adamw'][0]:,} parameters")
    ps = [] if not rates else [torch.nn.Parameter(torch.randn(*sh)) for sh in param_shapes(model)]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(ps, lr=1e-4)
    if rates:
        kernels[f"adamw:{_key(*ks['adamw'])}"] = {"forward_s": med(opt.step), "backward_s": 0.0}
    del ps, opt
    if rates:
        say(f"copy bandwidth at {len(copy_sizes(model))} sizes to {copy_sizes(model)[-1] / 2**20:,.0f} MiB")
    for n in copy_sizes(model) if rates else ():
        src, dst = torch.randn(n // F32), torch.empty(n // F32)
        copy[str(n)] = 2.0 * n / med(lambda: dst.copy_(src)) / 1e9
    for n in fw_ranks:
        if n < 2:
            continue
        say(f"DDP's and FSDP2's own work a step on {n} ranks: {3 * (reps + 2)} training steps on torch's fake "
            f"process group")
        fw = _framework(model, b, n, reps, sync)
        if fw:
            kernels[framework_key(model, b, n)] = fw
    return {"gemm": gemm, "kernels": kernels, "copy_gbps": copy}


def copy_sizes(model: Model) -> list[int]:
    """Sizes (bytes) the copy bandwidth is measured at: from 256 KiB by fours below the gradients' size,
    and that size (the bucket and shard sizes of the plan's collectives fall between)."""
    top = torch_params(model) * F32
    out, n = [], 1 << 18
    while n < top:
        out.append(n)
        n *= 4
    return out + [top]


def _measure_worker(model: Model, b: int, reps: int, fw_ranks: tuple[int, ...], rates: bool, barrier: Any,
                    q: Any, first: bool = False) -> None:
    """One of the processes :func:`calibrate` starts to measure with several at once; the ``first`` sends its
    progress to the parent."""
    try:
        say = (lambda msg: q.put(("progress", msg))) if first else None
        q.put(("ok", _measure(model, b, reps, fw_ranks, lambda: barrier.wait(600), say, rates)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        barrier.abort()
        q.put(("error", f"{type(e).__name__}: {e}"))


def calibrate(model: Model, b: int, into: Optional[HostCompute] = None, *, reps: int = 7,
              ranks: tuple[int, ...] = (2, 4), concurrent: int = 1, rates: bool = True,
              progress: Optional[Callable[[str], None]] = None) -> HostCompute:
    """Measure this host's rates at the shapes of ``model`` with micro-batch ``b`` (a few seconds), one
    torch thread as the ranks run, and DDP's and FSDP2's own work at each of ``ranks``, with ``concurrent``
    processes measuring at once (:func:`concurrency`: as many as the plan's ranks compute at the same
    instant, so that the rates are those of ranks sharing the memory bus and caches; each kernel timed by
    all of them together, their mean kept). Adds to ``into`` under ``key@concurrent``."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is in the test extras
        raise PlanError("measuring this host's compute needs torch: pip install torch") from None
    hc = into or HostCompute()
    P = max(1, int(concurrent))
    fw_ranks = tuple(n for n in ranks if n > 1)
    if P == 1:
        threads = torch.get_num_threads()
        try:
            got = [_measure(model, b, reps, fw_ranks, lambda: None, progress, rates)]
        finally:
            torch.set_num_threads(threads)
    else:
        import multiprocessing as mp

        if progress:
            est = START_S + measure_scale(P, host_cores()) * sum(
                t for _, t in measure_estimate(model, b, _gflops_now(), reps=reps, fw_ranks=fw_ranks, rates=rates))
            progress(f"starting {P} processes to measure at once (the ranks sharing this host; about "
                     f"{fmt_left(est)} left)")
        ctx = mp.get_context("spawn")
        q, barrier = ctx.Queue(), ctx.Barrier(P)
        procs = [ctx.Process(target=_measure_worker, args=(model, b, reps, fw_ranks, rates, barrier, q, i == 0),
                             daemon=True) for i in range(P)]
        for p in procs:
            p.start()
        res: list[tuple[str, Any]] = []
        try:
            import queue

            deadline = time.monotonic() + 1800
            while len(res) < P:
                try:
                    got1 = q.get(timeout=1.0)
                    if got1[0] == "progress":  # the first process's progress, relayed
                        if progress:
                            progress(got1[1])
                        continue
                    res.append(got1)
                except queue.Empty:
                    dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                    if dead or time.monotonic() > deadline:
                        barrier.abort()
                        res.append(("error", f"a measuring process ended with status {dead[0]}" if dead else
                                    "no answer in 30 minutes"))
                        break
        finally:
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()
        bad = [r for k, r in res if k != "ok"]
        if bad:
            raise PlanError(f"measuring this host's rates with {P} processes at once failed: {bad[0]}")
        got = [r for _, r in res]
    for part in ("gemm", "kernels"):
        for k in got[0][part]:
            getattr(hc, part)[at(k, P)] = {f: sum(g[part][k][f] for g in got) / len(got) for f in got[0][part][k]
                                           if f != "plain_steps_s"}
            if part == "kernels" and k.startswith("framework:"):
                getattr(hc, part)[at(k, P)]["slowest_x"] = slowest_x([g[part][k].get("plain_steps_s", []) for g in got])
    for k in got[0]["copy_gbps"]:
        hc.copy_gbps[at(k, P)] = sum(g["copy_gbps"][k] for g in got) / len(got)
    hc.meta.update(host=socket.gethostname(), date=datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"), torch=torch.__version__, cores=host_cores(), threads=1,
        load=round(os.getloadavg()[0], 2))
    hc.meta.setdefault("concurrent", [])
    if P not in hc.meta["concurrent"]:
        hc.meta["concurrent"] = sorted([*hc.meta["concurrent"], P])
    return hc


def calibrate_framework(model: Model, b: int, hc: HostCompute, ranks: tuple[int, ...], *, reps: int = 7,
                        concurrent: int = 1, progress: Optional[Callable[[str], None]] = None) -> HostCompute:
    """DDP's and FSDP2's own work at each of ``ranks`` (:func:`_framework`), with ``concurrent`` processes
    measuring at once, added to ``hc`` (the whole calibration at that concurrency where its rates are
    missing too)."""
    return calibrate(model, b, hc, reps=reps, ranks=ranks, concurrent=concurrent,
                     rates=not hc.has(model, b, concurrent), progress=progress)


def calibrate_calls(hc: HostCompute, ranks: int, *,
                    progress: Optional[Callable[[str], None]] = None) -> HostCompute:
    """The per-call cost through torch's backend at ``ranks`` ranks (:func:`interlink.plan.calls.measure_calls`:
    interlink and gloo, a few seconds), added to ``hc.calls``."""
    from .calls import measure_calls

    if progress:
        progress(f"a collective call through torch.distributed on {ranks} ranks (interlink, gloo; about "
                 f"{fmt_left(CALLS_S)} left)")
    hc.calls.update(measure_calls(ranks))
    return hc


def call_cost(hc: HostCompute, backend: str, collective: str, ranks: int, cores: int, params: Any) -> float:
    """Seconds a collective call through torch.distributed's ``backend`` costs beyond the plan's price of
    interlink's own call (or of gloo's ring): the measured call (calls.measure_calls) less, for interlink,
    the same call on interlink's numpy API measured with it, for gloo (which has no API outside torch) the
    plan's price of gloo's ring at the measured size; never below zero."""
    from .calls import calls_key

    m = hc.calls[calls_key(backend, collective, ranks)]
    if backend == "interlink":
        ref = float(m["api_s"])
    else:
        ref = _price(collective, int(m["bytes"]), ranks, cores, "gloo", params).time_s
    return max(0.0, float(m["torch_s"]) - ref)


def framework_key(model: Model, b: int, ranks: int, concurrent: int = 1) -> str:
    return at("framework:" + _key(*kernel_shapes(model, b)["framework"], ranks), concurrent)


def load_compute(path: Optional[str] = None) -> Optional[HostCompute]:
    p = path or compute_path()
    try:
        with open(p) as fh:
            return HostCompute.from_dict(json.load(fh), p)
    except (OSError, ValueError):
        return None


def save_compute(hc: HostCompute, path: Optional[str] = None) -> str:
    p = path or compute_path()
    os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
    tmp = f"{p}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(hc.to_dict(), fh, indent=1)
    os.replace(tmp, p)
    hc.path = p
    return p


def host_compute(model: Model | str, b: int, *, ranks: tuple[int, ...] = (2, 4), recalibrate: bool = False,
                 path: Optional[str] = None, cores: Optional[int] = None,
                 progress: Optional[Callable[[str], None]] = None) -> HostCompute:
    """This host's rates for ``model`` at micro-batch ``b`` and DDP's and FSDP2's own work at ``ranks``, each
    measured with as many processes at once as that many ranks compute at once on this host's ``cores``
    (:func:`concurrency`): the stored ones (:func:`compute_path`), what is not stored yet measured and added
    (``recalibrate``: all measured again)."""
    model = parse_model(model)
    _host_shape(model)
    cores = int(cores or host_cores())
    hc = (None if recalibrate else load_compute(path)) or HostCompute()
    changed = False
    for P in sorted({concurrency(n, cores) for n in ranks}):
        fw = tuple(n for n in ranks if n > 1 and concurrency(n, cores) == P)
        if not hc.has(model, b, P):
            calibrate(model, b, hc, ranks=fw, concurrent=P, progress=progress)
            changed = True
        missing = tuple(n for n in fw if framework_key(model, b, n, P) not in hc.kernels)
        if missing:
            calibrate_framework(model, b, hc, missing, concurrent=P, progress=progress)
            changed = True
    for n in ranks:
        if not hc.has_calls(n):
            calibrate_calls(hc, n, progress=progress)
            changed = True
    if changed:
        try:
            save_compute(hc, path)
        except OSError:
            pass
    return hc


def step_ops(model: Model) -> dict[str, int]:
    """The autograd graph of one step of :func:`build_gpt` (the nodes its backward runs; each node is also
    one op dispatched forward), and how many of them no kernel of :func:`kernel_fns` or the GEMM timings
    was timed with. Per block: 2 + mats linears (QKV, output projection, the MLP's matrices), each an
    AddmmBackward, the weight's TBackward, the two views of a (b, s, h) input and output, and the
    AccumulateGrads of weight and bias: 6 untimed nodes; the timed kernels' own nodes: the attention's 10
    (split, three views, four transposes, the attention, the reshape), two layer norms with their weights'
    and biases' AccumulateGrads (6), GeLU, two adds. Outside the blocks: the output layer's MmBackward,
    TBackward and three views untimed; the embedding with its AccumulateGrad, the final layer norm's 3, the
    cross-entropy's log-softmax and NLL timed (tests/test_plan_host.py walks torch's graph for it)."""
    linears = 2 + model.mats
    per_block_untimed = 6 * linears
    per_block_timed = 10 + 2 * 3 + 1 + 2
    outside_untimed, outside_timed = 5, 2 + 3 + 2
    L = model.layers
    return {"nodes": L * (per_block_untimed + per_block_timed) + outside_untimed + outside_timed,
            "timed": L * per_block_timed + outside_timed, "untimed": L * per_block_untimed + outside_untimed}


def _calls_term(hc: HostCompute, backend: str, ranks: int, t_calls: float, n_calls: float,
                per_call: dict[str, float]) -> dict[str, Any]:
    """The torch_calls term: the step's collective calls x each one's cost through torch's backend."""
    from .calls import CALL_BYTES, calls_key

    m = next((hc.calls[k] for k in (calls_key(backend, c, ranks) for c in per_call) if k in hc.calls), {})
    less = "interlink's numpy API's same call" if backend == "interlink" else "the plan's price of gloo's ring"
    src = (f"{n_calls:g} collective calls a step x the cost of one through torch.distributed on {backend}: "
           f"async_op=True + wait() of {m.get('bytes', CALL_BYTES)} B on {ranks} ranks less {less}, measured "
           f"{m.get('date', '?')} (load {m.get('load', '?')}) by interlink.plan.calls.measure_calls "
           f"(interlink plan --topology this --recalibrate; benchmarks/torch_call_cost.py)") if per_call else \
        "not measured (interlink plan --topology this --recalibrate)"
    return {"s": t_calls, "calls": n_calls, "per_call_s": dict(per_call), "source": src}


def _terms(gemm: float, attn: float, ew: float, disp: float, opt: float, fw_s: float, comm: float, share: float,
           conc: int, untimed: int, system: str, fw: dict, calls: dict[str, Any], slow_s: float = 0.0,
           slow_x: float = 1.0) -> dict[str, dict[str, Any]]:
    """The step's terms (seconds a rank, after the core share) and where each comes from."""
    rates = f"measured with {conc} process{'es' if conc > 1 else ''} at once (interlink plan --topology this " \
        f"--recalibrate; interlink.plan.host.calibrate)"
    return {
        "gemm": {"s": gemm * share, "source": f"weight GEMMs' FLOPs (Model) at GFLOP/s {rates}"},
        "attention": {"s": attn * share, "source": f"scaled_dot_product_attention forward + backward {rates}"},
        "elementwise": {"s": ew * share, "source": f"layer norm, GeLU, adds, embedding, cross-entropy {rates}"},
        "dispatch": {"s": disp * share, "source": f"{untimed} autograd ops no kernel timing holds (step_ops) x the "
                                                  f"per-op cost of a chain of {DISPATCH_CHAIN} views {rates}"},
        "optimizer": {"s": opt * share, "source": f"torch AdamW over the parameter tensors a rank holds {rates}"},
        "framework": {"s": fw_s * share, "source": (f"{system}'s step less the bare model's, torch's fake process "
                                                    f"group, {rates}") if fw else "the copies at the copy bandwidth"},
        "slowest_rank": {"s": slow_s, "x": slow_x, "source": (
            f"the step waits for its slowest rank: the compute terms x {slow_x:.3f} - 1, the median over rounds of "
            f"the slowest of {conc} processes' bare model step over one process's median (slowest_x), {rates}")
            if "slowest_x" in fw else "not measured (one process, or a calibration from before it was measured): 0"},
        "communication": {"s": comm, "source": "the collectives' exposed time (interlink.model.predict)"},
        "torch_calls": calls,
        "core_share": {"x": share, "source": "ranks / cores (os.sched_getaffinity) where ranks exceed the cores"},
    }


# ---- the plan ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Comm:
    collective: str
    nbytes: int
    time_s: float
    algorithm: str
    transport: str


def _price(collective: str, nbytes: int, ranks: int, cores: int, backend: str, params: Any,
           line: Optional[dict] = None) -> _Comm:
    """One collective of ``nbytes`` (nccl-tests' S) on ``ranks`` local ranks: the path the interlink runtime
    takes (the host page's where algorithms.hostpath says so, else the tuner's), or gloo's. gloo's
    algorithms are not interlink's Schedules: with ``line`` (measure_calls' gloo figures of the collective
    at ranks: ``torch_s`` at ``bytes``, ``line_s`` at ``line_bytes``) its time is the ring's price at
    ``bytes`` (the rest of that call is the torch_calls term) plus the measured slope beyond; without, a
    ring over TCP."""
    from ..algorithms import hostpath
    from ..model import ModelError, predict
    from ..model.cost import cpu_topology

    topo = cpu_topology(ranks, cores=cores, name="this-host")
    if backend == "gloo":
        p = predict(collective, nbytes, topo, algorithm="ring", transport="tcp", params=params, fast_path=False)
        if line and "line_s" in line:
            b0, b1 = int(line["bytes"]), int(line["line_bytes"])
            slope = max(0.0, (float(line["line_s"]) - float(line["torch_s"])) / max(1, b1 - b0))
            ring0 = predict(collective, b0, topo, algorithm="ring", transport="tcp", params=params,
                            fast_path=False).time_us * 1e-6
            return _Comm(collective, nbytes, ring0 + slope * max(0, nbytes - b0), "gloo (measured)", "tcp (gloo)")
        return _Comm(collective, nbytes, p.time_us * 1e-6, "ring", "tcp (gloo)")
    limits = hostpath.HostLimits.from_params(params)
    payload = nbytes // ranks if collective == "all_gather" else nbytes
    path = hostpath.host_path(collective, payload, ranks, limits, reduce_once=ranks > 2 * cores, itemsize=F32)
    if path is not None:
        try:
            p = predict(collective, nbytes, topo, algorithm=path, params=params)
            return _Comm(collective, nbytes, p.time_us * 1e-6, path, "host page")
        except ModelError:  # the model does not price that path here: the tuner's choice
            pass
    p = predict(collective, nbytes, topo, params=params, fast_path=False)
    return _Comm(collective, nbytes, p.time_us * 1e-6, p.algorithm, "shm")


def _ddp_buckets(model: Model, bucket_bytes: float) -> list[tuple[int, float]]:
    """DDP's buckets in the order the backward fills them (DDP rebuilds its buckets after the first step in
    the order gradients arrive): (bytes, the fraction of the backward done when the bucket is full).
    Gradients arrive from the output layer down: the final layer norm, each block from the last (its MLP,
    then its attention), the tied embedding last; a bucket closes once it holds its limit (the first
    FIRST_BUCKET, then ``bucket_bytes``)."""
    h, f = model.hidden, model.f
    kvd = model.kv_dim
    block = [h * f + h, f * h * (model.mats - 1) + f * (model.mats - 1), 2 * h, h * h + h,
             (h + 2 * kvd) * h + h + 2 * kvd, 2 * h]  # fc2, fc1, ln2, proj, qkv, ln1
    L = model.layers
    grads: list[tuple[int, float]] = [(2 * h, 0.0)]  # ln_f, ready first
    for k in range(L):
        for j, n in enumerate(block):
            grads.append((n, (k + (j + 1) / len(block)) / (L + 1)))
    grads.append((model.embedding_params(), 1.0))
    out = []
    size, limit = 0.0, FIRST_BUCKET
    for n, t in grads:
        size += n * F32
        if size >= limit:
            out.append((int(size), t))
            size, limit = 0.0, bucket_bytes
    if size:
        out.append((int(size), grads[-1][1]))
    return out


def plan_host(model: Model | str, ranks: int, *, system: str = "ddp", backend: str = "interlink",
              micro_batch: int = 1, bucket_mb: float = 25.0, compute: Optional[HostCompute] = None,
              cores: Optional[int] = None, params: Any = None, profile: Any = None, measure: bool = True,
              progress: Optional[Callable[[str], None]] = None) -> StepPlan:
    """One training step of ``model`` on ``ranks`` CPU ranks of this host (see the module docstring).
    ``compute``: this host's rates (default :func:`host_compute`, measured once when missing); ``cores``:
    default :func:`host_cores`; ``params``: the cost model's parameters (default: the built-in ones with
    the calibrated host profile, or ``profile``); ``measure``: measure what ``compute`` lacks (else the
    copies stand for DDP's and FSDP2's own work where it was not measured)."""
    from ..model.params import default_params, host_profile, with_profile

    model = parse_model(model)
    _host_shape(model)
    if system not in SYSTEMS:
        raise PlanError(f"data parallelism on this host is ddp (--zero 0) or fsdp (--zero 3), not {system!r}")
    if backend not in BACKENDS:
        raise PlanError(f"--backend must be interlink or gloo, not {backend!r}")
    if ranks < 1 or micro_batch < 1:
        raise PlanError("ranks and --micro-batch must be >= 1")
    cores = int(cores or host_cores())
    conc = concurrency(ranks, cores)
    hc = compute or host_compute(model, micro_batch, ranks=(ranks,), cores=cores, progress=progress)
    if not hc.has(model, micro_batch, conc):
        if not measure:
            raise PlanError(f"this host's compute rates lack the model's shapes measured with {conc} processes at "
                            f"once: measure them (interlink plan --topology this --recalibrate)")
        hc = calibrate(model, micro_batch, hc, ranks=(ranks,), concurrent=conc, progress=progress)
    if params is None:
        prof = host_profile() if profile is None else profile
        params = with_profile(default_params(), prof)
    b, s, L = micro_batch, model.seq, model.layers
    notes: list[str] = []

    # ---- compute of one rank on a core, at the rates measured with ``conc`` ranks computing at once ------
    gemm_f = gemm_b = 0.0
    for M, K, N, c in gemm_shapes(model, b):
        r = hc.rate(M, K, N, conc)
        fl = 2.0 * M * K * N * c
        gemm_f += fl / (r["forward_gflops"] * 1e9)
        gemm_b += 2 * fl / (r["backward_gflops"] * 1e9)
    ks = kernel_shapes(model, b)
    k = {name: hc.kernel(name, shape, conc) for name, shape in ks.items() if name != "framework"}
    per_layer = ("attention", "layer_norm", "layer_norm", "gelu", "add", "add")
    attn_f, attn_b = k["attention"]["forward_s"] * L, k["attention"]["backward_s"] * L
    # the rest: per layer two layer norms, GeLU, two residual adds (their backward: the gradients of the
    # two paths summed, one add); outside the layers the embedding, the final layer norm, the cross-entropy
    ew_f = L * sum(k[n]["forward_s"] for n in per_layer[1:]) + k["embedding"]["forward_s"] + \
        k["layer_norm"]["forward_s"] + k["cross_entropy"]["forward_s"]
    ew_b = L * (2 * k["layer_norm"]["backward_s"] + k["gelu"]["backward_s"] + 2 * k["add"]["forward_s"]) + \
        k["embedding"]["backward_s"] + k["layer_norm"]["backward_s"] + k["cross_entropy"]["backward_s"]
    # the step's autograd ops no kernel above was timed with (step_ops: each linear's node, its weight's
    # transpose, the views around it, its two AccumulateGrads; the output layer's), at the per-op cost of a
    # chain of tiny views, forward and backward
    untimed = step_ops(model)["untimed"]
    disp_f = untimed * k["dispatch"]["forward_s"] / DISPATCH_CHAIN
    disp_b = untimed * k["dispatch"]["backward_s"] / DISPATCH_CHAIN
    P = torch_params(model)
    fsdp = system == "fsdp" and ranks > 1
    local = P / ranks if fsdp else P
    opt = k["adamw"]["forward_s"] * local / P
    # DDP's / FSDP2's own work a step on these ranks, measured without communication (calibrate: _framework);
    # where it could not be measured, the copies around the collectives at the copy bandwidth (DDP's buckets; FSDP2's copy-in /
    # copy-out of its all_gathers and reduce_scatters, twice a step, and of its gradients)
    fw = hc.kernels.get(framework_key(model, b, ranks, conc), {})
    if ranks > 1 and not fw and measure:
        calibrate_framework(model, b, hc, (ranks,), concurrent=conc, progress=progress)
        fw = hc.kernels.get(framework_key(model, b, ranks, conc), {})
    bw_par = hc.bandwidth(P * F32, conc)
    if ranks == 1:
        copies = 0.0
    elif f"{system}_s" in fw:
        copies = fw[f"{system}_s"]
    else:
        notes.append(f"{system}'s own work not measured on this host: its copies at the copy bandwidth only")
        copies = (DDP_BUCKET_BYTES if system == "ddp" else 2 * (8.0 / ranks + 8.0) + 16.0 + 8.0 / ranks) * P / bw_par
    share = max(1.0, ranks / cores)  # ranks beyond the cores share them
    if share > 1:
        notes.append(f"{ranks} ranks on {cores} cores: each rank's compute takes {share:.2f}x as long")
    t_fwd = (gemm_f + attn_f + ew_f + disp_f) * share
    t_bwd = (gemm_b + attn_b + ew_b + disp_b) * share
    t_opt = opt * share
    t_copies = copies * share
    # the step waits for the slowest rank: the processes measuring at once differ (calibrate: slowest_x)
    slow = float(fw.get("slowest_x", 1.0)) if ranks > 1 else 1.0
    t_slow = (t_fwd + t_bwd + t_opt + t_copies) * (slow - 1.0)

    # ---- communication -----------------------------------------------------------------------------------
    spare = cores >= 2 * ranks
    colls: list[dict[str, Any]] = []
    if ranks > 1 and not hc.has_calls(ranks) and measure:  # gloo's measured line prices its collectives
        calibrate_calls(hc, ranks, progress=progress)
    from .calls import calls_key

    def price(collective: str, nbytes: int) -> _Comm:
        line = hc.calls.get(calls_key(backend, collective, ranks)) if backend == "gloo" else None
        return _price(collective, nbytes, ranks, cores, backend, params, line)

    def add(kind: str, c: _Comm, calls: float, exposed: float) -> None:
        colls.append({"kind": kind, "collective": c.collective, "ranks": ranks, "bytes": c.nbytes,
                      "algorithm": c.algorithm, "protocol": c.transport, "time_us": c.time_s * 1e6,
                      "busbw_gbps": 0.0, "per_step": calls, "exposed_s": exposed})

    comm_exposed = 0.0
    if ranks > 1 and system == "ddp":
        t_end = 0.0
        for nbytes, frac in _ddp_buckets(model, bucket_mb * (1 << 20)):
            c = price("all_reduce", nbytes)
            if spare:  # goes when full, one at a time; what runs past the backward is exposed
                start = max(t_end, frac * t_bwd)
                t_end = start + c.time_s
                ex = min(c.time_s, max(0.0, t_end - max(start, t_bwd)))
            else:
                ex = c.time_s
            comm_exposed += ex
            add("dp", c, 1, ex)
    elif fsdp:
        blk = block_params(model) * F32
        root = (P - L * block_params(model)) * F32
        ag = price("all_gather", -(-blk // ranks) * ranks)
        rs = price("reduce_scatter", -(-blk // ranks) * ranks)
        ag_r = price("all_gather", -(-root // ranks) * ranks)
        rs_r = price("reduce_scatter", -(-root // ranks) * ranks)
        lf, lb = t_fwd / (L + 1), t_bwd / (L + 1)
        if spare:  # one block ahead: exposed by what a block's communication exceeds its compute
            ex_ag = max(0.0, ag.time_s - lf) * L + max(0.0, ag.time_s + rs.time_s - lb) * L
            ex_ag_only = max(0.0, ag.time_s - lf) * L
            exs = (ex_ag_only, ex_ag - ex_ag_only, ag_r.time_s, rs_r.time_s)
        else:
            exs = (2 * L * ag.time_s, L * rs.time_s, ag_r.time_s, rs_r.time_s)
        add("fsdp", ag, 2 * L, exs[0])
        add("fsdp", rs, L, exs[1])
        add("fsdp", ag_r, 1, exs[2])
        add("fsdp", rs_r, 1, exs[3])
        comm_exposed = sum(exs)
    if ranks > 1 and not spare:
        notes.append(f"no core to spare for communication ({cores} cores, {ranks} ranks): every collective "
                     f"is exposed")

    # ---- each collective call's cost through torch.distributed's backend (the thread issuing it pays it) -----
    n_calls = sum(c["per_step"] for c in colls)
    per_call: dict[str, float] = {}
    if colls and not hc.has_calls(ranks) and measure:
        calibrate_calls(hc, ranks, progress=progress)
    if colls and hc.has_calls(ranks):
        for c in colls:
            if c["collective"] not in per_call:
                per_call[c["collective"]] = call_cost(hc, backend, c["collective"], ranks, cores, params)
            c["call_s"] = per_call[c["collective"]]
    elif colls:
        notes.append(f"the per-call cost through torch's backend not measured on {ranks} ranks: not counted "
                     f"(interlink plan --topology this --recalibrate)")
    t_calls = sum(c["per_step"] * c.get("call_s", 0.0) for c in colls)

    step = t_fwd + t_bwd + t_opt + t_copies + t_slow + comm_exposed + t_calls
    tokens = ranks * b * s
    mf = model.model_flops(ranks * b)
    breakdown = {"compute": t_fwd + t_bwd, "forward": t_fwd, "backward": t_bwd, "optimizer": t_opt,
                 "framework": t_copies, "slowest_rank": t_slow, ("dp" if system == "ddp" else "fsdp"): comm_exposed,
                 "torch_calls": t_calls}
    # memory per rank (fp32): weights, gradients, AdamW's two moments; FSDP shards all three
    wgt = local * F32
    mem = {"weights": wgt / GIB, "gradients": wgt / GIB, "optimizer": 2 * wgt / GIB,
           "activations": L * model.activation_bytes(b) * 2 / GIB}  # Korthikanti's 16-bit bytes, fp32 here
    mem["total"] = sum(mem.values())
    lay = Layout(dp=ranks, zero=3 if system == "fsdp" else 0, micro_batch=b, global_batch=ranks * b)
    notes.append(f"compute rates: {hc.source}")
    src = [pp.source for pp in params if pp.name.startswith("host.") and pp.source.startswith("calibrated")]
    notes.append("host communication parameters: " + (src[0] if src else "defaults (no calibrated profile: "
                                                      "interlink bench --calibrate)"))
    return StepPlan(model, lay, f"this host ({cores} cores, {backend})", "cpu", step, tokens / step,
                    mf / step / ranks / 1e12, mf / step / ranks / 1e12, 0.0, 0.0, mem, True, breakdown, colls,
                    {"forward_s": t_fwd, "backward_s": t_bwd, "compute_s": t_fwd + t_bwd + t_opt + t_copies,
                     "local_s": t_fwd + t_bwd + t_opt,
                     "core_share": share, "spare_core": spare, "micro_batches": 1,
                     "gemm_s": (gemm_f + gemm_b) * share, "attention_s": (attn_f + attn_b) * share,
                     "elementwise_s": (ew_f + ew_b) * share, "dispatch_s": (disp_f + disp_b) * share,
                     "untimed_ops": untimed, "concurrent": conc, "slowest_x": slow,
                     "terms": _terms(gemm_f + gemm_b, attn_f + attn_b, ew_f + ew_b, disp_f + disp_b, opt, copies,
                                     comm_exposed, share, conc, untimed, system, fw,
                                     _calls_term(hc, backend, ranks, t_calls, n_calls, per_call), t_slow, slow)},
                    {}, notes)
