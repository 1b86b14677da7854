"""One training step priced: compute, every collective, overlap, the pipeline bubble, memory per GPU.

    from interlink.plan import plan_step, parse_model, Layout
    r = plan_step(parse_model("llama3-405b"), Layout(tp=8, pp=16, dp=128, global_batch=2048,
                  virtual_stages=7, zero=1), "2048xdgx-h100")
    r.step_s, r.mfu, r.memory_gib, r.breakdown

The step (Megatron-LM's, Narayanan et al. 2021 section 2-3, Korthikanti et al. 2022 section 4-5):

- each pipeline rank runs ``m`` micro-batches (global batch / (dp x micro-batch)) forward and backward in
  1F1B order; the slowest stage sets the pace. Per micro-batch a stage's forward is its layers' GEMMs (at
  the GPU's achievable fraction of peak), their memory-bound kernels (bytes / HBM bandwidth) and the
  tensor-, context- and expert-parallel collectives of each layer (exposed: they sit between dependent
  GEMMs; ``tp_overlap`` hides a fraction); backward is twice the compute with the same collectives;
  recomputation repeats the forward (full) or the attention core (selective);
- the pipeline takes ``(m + (p - 1) / v) x (t_f + t_b)`` (1F1B's bubble of p - 1 stage times, divided by
  the ``v`` virtual stages of the interleaved schedule: Narayanan 2021 section 2.2), plus the sends between
  stages, one each way per micro-batch and model chunk;
- the data-parallel gradient reduction (all-reduce, or ZeRO's reduce-scatter + all-gather) starts as the
  last micro-batch's backward produces gradient buckets: what does not fit under that backward is
  exposed (``overlap_grad_reduce``; without it all of it). ZeRO-3 (FSDP) gathers each layer's weights
  before its forward and backward and reduce-scatters its gradients, one layer ahead: exposed is what a
  layer's communication exceeds its compute by;
- the optimizer (Adam) streams 30 bytes a parameter the GPU updates through HBM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..model.cost import resolve_topology
from ..topology import Topology, TopologyError
from .comm import Priced, Pricer
from .hardware import (GEMM_K_REF, GpuSpec, attn_bwd_fraction, attn_triton_fraction, comm_sm_share, engine_fraction,
                       gemm_fraction, gemm_k0, gpu_spec, hbm_fraction)
from .job import Model, PlanError, bytes_per_param, parse_model
from .layout import Layout

__all__ = ["plan_step", "StepPlan", "Context"]

GIB = float(1 << 30)
#: bytes an Adam step moves per parameter it updates: read fp32 grad, master, m, v (16), write master, m,
#: v (12), write the 16-bit weight (2)
ADAM_BYTES = 30.0
#: bytes a memory-bound kernel moves per element of the s x b x h activations in one layer's forward
#: (two layer norms: read + write 2 B each, 8; two fused bias-dropout-residual adds: read input and
#: residual, write output and a 1-byte mask, 7 each, 14); backward moves twice as much
ELEMENTWISE_H = 22.0
#: ... per element of the MLP's inner activation (s x b x ffn): fused bias + GeLU reads and writes 2 B
#: each (4); SwiGLU reads two and writes one (6)
ELEMENTWISE_F = {"gelu": 4.0, "swiglu": 6.0}
#: ... per element of the attention scores (heads x s x s x b) without fused attention: scale-mask-softmax
#: reads and writes 2 B (4), dropout reads 2, writes 2 and a 1-byte mask (5)
ELEMENTWISE_SCORES = 9.0
#: ... per element an fp8 GEMM reads: Transformer Engine's current scaling (Megatron-Bridge's FP8-CS recipes)
#: reads the 16-bit input once for its amax (2 B), then casts and transposes it in one pass (read 2 B, write
#: 1 B row-wise and 1 B column-wise, the copy the backward's transposed GEMMs read): 6
FP8_CAST = 6.0
#: ... per element of a mixture of experts' routed rows (s x b x top_k x h): permuting the tokens to their
#: experts and back (gather, scatter-add weighted by the router's probabilities), the padding and the copies
#: around them, and what the experts' grouped GEMMs lose beyond their shape (``gemm_shape_slowdown``). Derived
#: from one published run (plan/published.py, Q30B-bf16): Qwen3-30B-A3B on 16 H100s, BF16, tp1 ep16 over
#: HybridEP, the experts' all-to-alls not overlapped, 24.71 s a step
ELEMENTWISE_MOE = 34.0
#: ... per element of the logits (s x b x vocab): fp32 softmax cross-entropy, read and write (8)
ELEMENTWISE_LOGITS = 8.0


@dataclass
class Context:
    """What many plans on one cluster share: the topology, its GPU and the collective price cache."""

    topo: Topology
    gpu: GpuSpec
    pricer: Pricer

    @classmethod
    def of(cls, topology: Topology | str | None, progress: Callable[[str], None] | None = None,
           memory_gib: float | None = None) -> "Context":
        try:
            topo = resolve_topology("this" if topology is None else topology)
        except (TopologyError, ValueError) as exc:
            raise PlanError(f"--topology: {exc}") from None
        gpus = [d for d in topo.devices if d.kind == "gpu"]
        if not gpus:
            raise PlanError(f"topology {topo.name!r} has no GPUs: name a GPU cluster, e.g. --topology 16xdgx-h100")
        return cls(topo, gpu_spec(gpus[0].name, memory_gib), Pricer(topo, progress=progress))

    @property
    def gpus_per_host(self) -> int:
        return int(self.topo.ranks_per_host or 8)


@dataclass
class StepPlan:
    model: Model
    layout: Layout
    topology: str
    gpu: str
    step_s: float
    tokens_per_s: float
    tflops_per_gpu: float       # model FLOPs (no recomputation) per GPU per second
    hw_tflops_per_gpu: float    # hardware FLOPs (with recomputation)
    mfu: float
    hfu: float
    memory_gib: dict[str, float]
    fits: bool
    breakdown: dict[str, float]
    collectives: list[dict[str, Any]]
    stage: dict[str, float]     # per micro-batch times of the slowest stage (forward, backward, p2p)
    state_gib: dict[str, float] = field(default_factory=dict)  # weights + gradients + optimizer by stage
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.to_dict(), "layout": self.layout.to_dict(), "topology": self.topology,
            "gpu": self.gpu, "gpus": self.layout.gpus, "step_s": self.step_s, "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu, "hw_tflops_per_gpu": self.hw_tflops_per_gpu, "mfu": self.mfu,
            "hfu": self.hfu, "memory_gib": self.memory_gib, "fits": self.fits, "breakdown": self.breakdown,
            "collectives": self.collectives, "stage": self.stage, "state_gib": self.state_gib,
            "notes": self.notes,
        }


def visit_probability(experts: int, top_k: int, held: int) -> float:
    """The chance that a token routed to ``top_k`` of ``experts`` experts, uniformly (as Megatron-Core's
    benchmarks force: ``moe_router_force_load_balancing``), visits at least one of ``held`` of them."""
    held = min(held, experts)
    return 1.0 - math.comb(experts - held, top_k) / math.comb(experts, top_k)


def _expert_dispatch(model: Model, L: Layout, ctx: "Context", price: Callable[..., Priced],
                     add: Callable[..., float], token_bytes: float, calls: float) -> float:
    """One all-to-all of the experts' tokens (a dispatch or a combine) of one layer and micro-batch,
    ``token_bytes`` the hidden states a rank routes; registers it with ``add`` and returns its time.

    ``alltoall`` (Megatron-Core's alltoall dispatcher): a copy of a token for each expert it visits, one
    all-to-all over the expert-parallel group. ``deepep`` (the flex dispatcher over DeepEP or HybridEP): a
    token crosses the network once for each other host it visits, to the GPU of the same local index there,
    which forwards it over NVLink to each GPU of its host the token visits, once a GPU however many of its
    experts the token visits; the two run at once (DeepEP's normal kernels), so the step takes the slower:
    an all-to-all over one GPU a host, and one over the group's GPUs of a host."""
    g = L.group("ep")
    k, E = model.top_k, model.experts
    if L.dispatcher == "alltoall":
        pr = price("all_to_all", token_bytes * k, g, kind="ep")
        add("ep", pr, calls, pr.time_s * calls)
        return pr.time_s
    per_host = ctx.gpus_per_host
    hosts: dict[int, list[int]] = {}
    for r in g:
        hosts.setdefault(r // per_host, []).append(r)
    nh, G = len(hosts), len(g)
    # the host with the fewest of the group's GPUs is the slowest to receive (each of its GPUs takes what the
    # other hosts send there): price that one; an even group is every host alike
    local = min(hosts.values(), key=len)
    n_min = len(local)
    e_rank = E / L.ep
    p_rank = visit_probability(E, k, round(e_rank))
    p_host = visit_probability(E, k, round(e_rank * n_min))
    parts = []
    if nh > 1:
        # one GPU a host (the first of each), a rank's buffer holding what goes to every host; an uneven group
        # sends a host of n_min GPUs the tokens of (G - n_min) senders over n_min receivers
        peers = [hs[0] for hs in hosts.values()]
        scale = (G - n_min) / ((nh - 1) * n_min)
        parts.append(price("all_to_all", token_bytes * p_host * nh * scale, peers, kind=None))
    if n_min > 1:
        # what reaches a host (from every host, its own included) goes on to the GPUs it visits there: a GPU
        # receives the copies of every token of the group that visits it, G x p_rank of a rank's tokens
        parts.append(price("all_to_all", token_bytes * G * p_rank, local, kind=None))
    slowest = max(parts, key=lambda pr: pr.time_s, default=None)
    for pr in parts:  # the faster one runs under the slower
        add("ep", pr, calls, pr.time_s * calls if pr is slowest else 0.0)
    return slowest.time_s if slowest is not None else 0.0


def _dtype_name(nbytes: int) -> str:
    return {1: "int8", 2: "bfloat16", 4: "float32"}[nbytes]


def layer_gemms(model: Model, L: Layout) -> list[tuple[float, int, float, float, float]]:
    """One layer's weight GEMMs on one GPU for one micro-batch, forward and backward: (FLOPs, groups, M, N, K)
    each, M x N outputs over K (a grouped GEMM: ``groups`` of M x N over K). The forward is Y[M,N] = X[M,K] W[K,N];
    its backward the data gradient dX[M,K] = dY[M,N] W^T (over N) and the weight gradient dW[K,N] = X^T dY (over
    the M tokens)."""
    tp, cp, ep = L.tp, L.cp, L.ep
    T = L.micro_batch * model.seq / cp  # tokens through a GPU's GEMMs (tensor parallelism splits N or K)
    h, q, kv, f = model.hidden, model.q_dim, model.kv_dim, model.f
    fwd: list[tuple[int, float, float, float]] = [(1, T, (q + 2 * kv) / tp, h), (1, T, h, q / tp)]
    if model.moe:
        etp = L.expert_tp if ep > 1 else tp
        t_in = T / tp * etp if (L.sp and tp > 1) else T  # tokens an expert-tensor group routes from
        local = model.experts / ep if ep > 1 else model.experts
        m_e = t_in * model.top_k / local  # tokens an expert receives, balanced
        fwd += [(int(local), m_e, f * (model.mats - 1) / etp, h), (int(local), m_e, h, f / etp)]
    else:
        fwd += [(1, T, f * (model.mats - 1) / tp, h), (1, T, h, f / tp)]
    out = []
    for g, m, n, k in fwd:
        fl = 2.0 * g * m * n * k
        out += [(fl, g, m, n, k), (fl, g, m, k, n), (fl, g, k, n, m)]
    return out


def gemm_shape_slowdown(model: Model, L: Layout, family: str) -> float:
    """How much longer this layer's weight GEMMs take than at the rate ``gemm.<family>`` states (which holds for
    GEMMs over ``GEMM_K_REF`` = 8,192): each output tile pays a fixed cost worth ``k0`` steps of its K loop
    (hardware.gemm_k0: fitted to DeepGEMM's published H800 FP8 table), so a GEMM over K runs at K / (K + k0)
    of the tile rate. Shapes from ``layer_gemms``, FLOP-weighted; 1.0 where the family has no k0."""
    k0 = gemm_k0(family, L.dtype)
    if k0 <= 0:
        return 1.0
    ref = GEMM_K_REF / (GEMM_K_REF + gemm_k0(family, "bf16"))  # the fractions were set on 16-bit runs
    gs = layer_gemms(model, L)
    return sum(fl * (k + k0) / k for fl, _g, _m, _n, k in gs) / sum(fl for fl, *_ in gs) * ref


def plan_step(model: Model | str, layout: Layout, topology: Topology | str | Context | None = None, *,
              progress: Callable[[str], None] | None = None, memory_gib: float | None = None,
              contention: bool = False) -> StepPlan:
    """Price one training step of ``model`` under ``layout`` on the first ``layout.gpus`` ranks of
    ``topology`` (a Topology, a spec such as ``2048xdgx-h100``, or a :class:`Context` to share prices).
    ``contention``: play every group of a kind at once in the simulator and slow each collective by what
    sharing links costs it (:meth:`Pricer.contention`)."""
    model = parse_model(model)
    ctx = topology if isinstance(topology, Context) else Context.of(topology, progress, memory_gib)
    topo, gpu, pricer = ctx.topo, ctx.gpu, ctx.pricer
    L = layout
    L.check(model, topo.nranks, ctx.gpus_per_host)
    notes: list[str] = []

    def price(collective: str, nbytes: float, grp: list[int], dtype: str = "bfloat16",
              kind: str | None = None) -> Priced:
        pr = pricer.price(collective, nbytes, grp, dtype)
        if contention and kind is not None and pr.time_s > 0:
            f = pricer.contention(collective, nbytes, L.all_groups(kind), dtype)
            if f > 1.0 + 1e-9:
                notes.append(f"{kind} {collective}: {f:.2f}x slower with every {kind} group at once (simulated)")
                pr = replace(pr, time_s=pr.time_s * f, busbw_gbps=pr.busbw_gbps / f)
        return pr

    tp, pp, cp, ep, v = L.tp, L.pp, L.cp, L.ep, L.virtual_stages
    b, m = L.micro_batch, L.micro_batches()
    sp = L.sp and tp > 1
    h, s = model.hidden, model.seq
    act_b = 2  # 16-bit activations
    peak = gpu.peak_tflops(L.dtype) * 1e12
    eng = engine_fraction(L.engine)  # the framework's layers against Megatron-LM's (hardware.COMPUTE_PARAMS)
    gemm_rate = peak * gemm_fraction(gpu.family) * eng
    attn_rate = gpu.bf16_tflops * 1e12 * gemm_fraction(gpu.family) * eng  # attention, the output layer: 16-bit
    hbm = gpu.hbm_gbps * 1e9 * hbm_fraction()
    hbm_layer = hbm * eng  # the layers' memory-bound kernels (the optimizer's step: hbm)

    # ---- compute of one layer, one micro-batch, per GPU ------------------------------------------
    gemm = model.layer_gemm_flops(b) / tp / cp
    attn = model.layer_attention_flops(b) / tp / cp  # s/cp queries against s keys on each CP rank
    ew_h = ELEMENTWISE_H * s * b * h / cp / (tp if sp else 1)
    ew_f = ELEMENTWISE_F[model.mlp] * s * b * model.f * model.top_k / tp / cp
    ew_sc = ELEMENTWISE_SCORES * model.heads * s * s * b / tp / cp if model.attention == "standard" else 0.0
    shape_x = gemm_shape_slowdown(model, L, gpu.family)  # this layer's GEMM shapes against the fraction's
    t_gemm = gemm / gemm_rate * shape_x
    core_rate = attn_rate if model.attention != "flash-triton" else \
        gpu.bf16_tflops * 1e12 * attn_triton_fraction(gpu.family) * eng  # its own rate, forward and backward
    t_attn = attn / core_rate * model.attention_share  # flash attention skips what the causal mask hides
    # fp8 GEMMs: each GEMM's activation input is cast to fp8 first (FP8_CAST bytes an element; Transformer Engine):
    # the inputs of QKV (h), the output projection (heads x head width) and the two MLP GEMMs (h, f)
    # (a mixture of experts' first MLP GEMM reads the routed rows: top_k x h a token)
    fc1_in = h * model.top_k if model.moe else h
    cast_mlp = FP8_CAST * s * b * (fc1_in + model.f * model.top_k) / tp / cp if L.dtype == "fp8" else 0.0
    ew_cast = (FP8_CAST * s * b * (h + model.q_dim) / tp / cp if L.dtype == "fp8" else 0.0) + cast_mlp
    # a mixture of experts' token permutation, unpermutation and the kernels around them, per routed element
    ew_moe = ELEMENTWISE_MOE * s * b * h * model.top_k / tp / cp if model.moe else 0.0
    t_ew = (ew_h + ew_f + ew_sc + ew_cast + ew_moe) / hbm_layer
    t_layer_f = t_gemm + t_attn + t_ew
    # the backward: twice the forward's FLOPs; fused attention's at its own (lower) fraction of peak
    bwd_x = gemm_fraction(gpu.family) / attn_bwd_fraction(gpu.family) if model.attention == "flash" else 1.0
    # (the Triton kernel's backward: FlashAttention's count, 2.5 forwards, the scores computed again)
    t_attn_b = (2.5 if model.attention == "flash-triton" else 2.0) * t_attn * bwd_x
    t_layer_b = 2.0 * (t_gemm + t_ew) + t_attn_b
    if L.recompute == "full":
        t_layer_b += t_layer_f
    elif L.recompute == "selective":
        t_layer_b += t_attn + ew_sc / hbm_layer
    elif L.recompute == "moe":
        # Megatron-Core's --recompute-modules moe: the experts' block forward again (router, GEMMs,
        # activation, permutation; its all-to-alls below)
        t_layer_b += model.moe_gemm_flops(b) / tp / cp / gemm_rate * shape_x + (ew_f + ew_moe + cast_mlp) / hbm_layer
    # the output layer stays a 16-bit GEMM under fp8 recipes (NVIDIA/Megatron-LM megatron/core/models/gpt/
    # gpt_model.py: tensor_parallel.ColumnParallelLinear unless an MXFP8 output projection is asked for)
    logits = (model.logits_flops(b) / tp / cp / attn_rate
              + ELEMENTWISE_LOGITS * s * b * model.vocab / tp / cp / hbm_layer)

    # ---- collectives of one layer, one micro-batch ------------------------------------------------
    colls: list[dict[str, Any]] = []

    def add(kind: str, pr: Priced, per_step: float, exposed: float | None = None) -> float:
        colls.append({"kind": kind, "collective": pr.collective, "ranks": pr.nranks, "bytes": pr.nbytes,
                      "algorithm": pr.algorithm, "protocol": pr.protocol, "time_us": pr.time_s * 1e6,
                      "busbw_gbps": pr.busbw_gbps, "per_step": per_step,
                      "exposed_s": pr.time_s * per_step if exposed is None else exposed})
        return pr.time_s

    act = s * b * h * act_b / cp  # one micro-batch's hidden states on a TP group
    t_tp_f = t_tp_rc = 0.0
    if tp > 1:
        g = L.group("tp")
        n_layers_step = model.layers / pp * m  # per pipeline rank
        # the blocks of a layer with tensor-parallel collectives: attention and the MLP; a mixture of experts
        # whose experts are not split over the tensor-parallel ranks (etp < tp) has the attention's only
        blocks = 1 if (model.moe and ep > 1 and L.expert_tp < tp) else 2
        # --recompute moe repeats the experts' block, its tensor-parallel collectives too where it has them
        moe_rc = L.recompute == "moe" and blocks == 2
        if sp:
            ag = price("all_gather", act, g, kind="tp")
            rs = price("reduce_scatter", act, g, kind="tp")
            t_tp_f = blocks * (ag.time_s + rs.time_s)
            calls = (blocks * (3 if L.recompute == "full" else 2) + (1 if moe_rc else 0)) * n_layers_step
            add("tp", ag, calls, ag.time_s * calls * (1.0 - L.tp_overlap))
            add("tp", rs, calls, rs.time_s * calls * (1.0 - L.tp_overlap))
        else:
            ar = price("all_reduce", act, g, kind="tp")
            t_tp_f = blocks * ar.time_s
            calls = (blocks * (3 if L.recompute == "full" else 2) + (1 if moe_rc else 0)) * n_layers_step
            add("tp", ar, calls, ar.time_s * calls * (1.0 - L.tp_overlap))
        t_tp_f *= (1.0 - L.tp_overlap)
        t_tp_rc = t_tp_f / 2 if moe_rc else 0.0  # one block's of the two
    t_cp_f = t_cp_b = 0.0
    if cp > 1:
        g = L.group("cp")
        kv = 2 * b * s * model.kv_dim * act_b / tp  # K and V of the whole sequence, gathered
        ag = price("all_gather", kv, g, kind="cp")
        rs = price("reduce_scatter", kv, g, kind="cp")
        n = model.layers / pp * m
        if L.cp_comm == "ring":
            # ring attention (Megatron-Core's context parallelism): K and V pass around the ring one block
            # a step while the attention of the block in hand runs; exposed is what the passing exceeds it by
            t_cp_f = max(0.0, ag.time_s - t_attn)
            t_cp_b = max(0.0, ag.time_s + rs.time_s - t_attn_b)
        else:
            # all-gather of K and V before the attention (Llama 3's context parallelism): exposed
            t_cp_f = ag.time_s
            t_cp_b = ag.time_s + rs.time_s
        add("cp", ag, n * (2 + (1 if L.recompute == "full" else 0)), t_cp_f * n * (2 + (L.recompute == "full")))
        add("cp", rs, n, max(0.0, t_cp_b - t_cp_f) * n)
    t_ep_f = 0.0
    rep = 1.5 if L.recompute in ("full", "moe") else 1.0  # the experts' all-to-alls, the recomputed ones too
    if model.moe and ep > 1:
        a2a = _expert_dispatch(model, L, ctx, price, add, s * b / cp / (tp if sp else 1) * h * act_b,
                               4 * rep * model.layers / pp * m)
        t_ep_f = 2 * a2a  # dispatch and combine
        if L.ep_overlap and m > 1:
            # Megatron-Core's overlap_moe_expert_parallel_comm: one micro-batch's forward runs beside
            # another's backward, layer by layer, each one's all-to-alls under the other's compute; while they
            # run, the dispatcher's kernels hold some of the SMs (hardware.py, ``ep_overlap_sms``)
            busy_c, comm = t_layer_f + t_layer_b, 4 * rep * a2a
            t_ep_f = (max(comm, busy_c + comm_sm_share(gpu.family) * comm) - busy_c) / (2 * rep)
        for c in colls:
            if c["kind"] == "ep":
                c["exposed_s"] = c["exposed_s"] * (t_ep_f / (2 * a2a) if a2a else 0.0)
    comm_layer_f = t_tp_f + t_cp_f + t_ep_f
    comm_layer_b = t_tp_f + t_cp_b + t_ep_f + (comm_layer_f if L.recompute == "full" else
                                                t_ep_f + t_tp_rc if L.recompute == "moe" else 0.0)

    # ---- ZeRO-3 (FSDP): gather each layer's weights, reduce-scatter its gradients, one layer ahead --
    # a layer's parameters on a GPU: the dense ones (attention, norms, the router) split over tp, and the
    # experts it holds (all of them split over tp without expert parallelism; E / ep of them split over etp)
    lp_exp = (model.experts / ep * model.expert_params() / L.expert_tp) if model.moe else 0.0
    lp_dense = (model.attention_params() + model.hidden * model.experts) / tp if model.moe else \
        model.layer_params() / tp
    lp = lp_dense + lp_exp
    edp = L.group("edp") if model.moe else []
    fsdp_f = fsdp_b = 0.0
    gbytes = L.grad_bytes()
    comp = L.compress.lower()
    if comp == "fp8":
        gbytes = 1
    elif comp == "bf16":
        gbytes = 2
    gfactor = 1.0
    if comp.startswith("powersgd:"):
        r = int(comp.split(":")[1])
        hh, ff = h, model.f
        gfactor = min(1.0, r * (hh + ff) / (hh * ff))
    dpcp = L.group("dpcp")
    if L.zero == 3 and (len(dpcp) > 1 or len(edp) > 1):
        # the dense parameters over the ranks that hold them (data x context), the experts over theirs (edp);
        # one after the other on the same stream
        parts = [(lp_dense, dpcp, "dpcp")] + ([(lp_exp, edp, "edp")] if lp_exp else [])
        gathers, scatters = [], []
        for nparams, grp, kind in parts:
            if len(grp) > 1 and nparams > 0:
                gathers.append(price("all_gather", nparams * 2, grp, kind=kind))
                scatters.append(price("reduce_scatter", nparams * gbytes * gfactor, grp, _dtype_name(gbytes), kind))
        t_ag = sum(pr.time_s for pr in gathers)
        t_rs = sum(pr.time_s for pr in scatters)
        comp_f = t_layer_f + comm_layer_f
        comp_b = t_layer_b + comm_layer_b
        fsdp_f = max(0.0, t_ag - comp_f)
        fsdp_b = max(0.0, t_ag * (2 if L.recompute == "full" else 1) + t_rs - comp_b)
        n = model.layers / pp * m
        for pr in gathers:
            add("fsdp", pr, n * (2 + (1 if L.recompute == "full" else 0)), fsdp_f * n * pr.time_s / t_ag if t_ag else 0.0)
        for pr in scatters:
            add("fsdp", pr, n, fsdp_b * n * pr.time_s / t_rs if t_rs else 0.0)

    # ---- a stage: its layers and (last stage) the logits ------------------------------------------
    # layers per stage: ceil(L / p) each; where p x ceil(L / p) > L the last stage (it holds the logits),
    # then the first (the embedding), then the ones after it hold one layer less (Llama 3 paper, 3.3.2)
    per_stage = math.ceil(model.layers / pp)
    short = pp * per_stage - model.layers
    layers_of = [per_stage] * pp
    for k in ([pp - 1, 0] + list(range(1, pp - 1)))[:short]:
        layers_of[k] -= 1
    last_layers = layers_of[-1]
    f_layer = t_layer_f + comm_layer_f + fsdp_f
    b_layer = t_layer_b + comm_layer_b + fsdp_b
    t_f = max(max(layers_of[:-1] or [0]) * f_layer, last_layers * f_layer + logits)
    t_b = max(max(layers_of[:-1] or [0]) * b_layer, last_layers * b_layer + 2 * logits)

    # ---- pipeline: 1F1B (interleaved: v chunks) and the sends between stages ----------------------
    t_p2p = 0.0
    if pp > 1:
        nbytes = act / (tp if (L.scatter_gather or sp) else 1)
        pair = [L.group("pp")[0], L.group("pp")[1]]
        snd = price("broadcast", nbytes, pair)
        t_p2p = snd.time_s
        sends = 2 * (m * v + pp - 1)
        add("pp", snd, 2 * m * v, t_p2p * sends)
    bubble = (pp - 1) / v * (t_f + t_b) if pp > 1 else 0.0
    busy = m * (t_f + t_b)
    p2p_exposed = 2 * (m * v + pp - 1) * t_p2p if pp > 1 else 0.0

    # ---- data-parallel gradient reduction and ZeRO's parameter gather ------------------------------
    stage_params = per_stage * lp + model.embedding_params() / tp  # the first stage: its layers, the embedding
    dense_params, expert_params = stage_params, 0.0
    if model.moe and ep > 1:
        expert_params = per_stage * lp_exp
        dense_params = stage_params - expert_params
    dp_time = 0.0
    gather_time = 0.0
    if len(dpcp) > 1 and L.zero < 3:
        groups = [(dpcp, dense_params, "dpcp")]
        if expert_params:
            groups.append((L.group("edp"), expert_params, "edp"))
        for grp, np_, kind in groups:
            if len(grp) < 2:
                continue
            gb = np_ * gbytes * gfactor
            if L.zero == 0:
                pr = price("all_reduce", gb, grp, _dtype_name(gbytes), kind)
                dp_time += pr.time_s
                add("dp", pr, 1, None)
            else:
                rs = price("reduce_scatter", gb, grp, _dtype_name(gbytes), kind)
                ag = price("all_gather", np_ * 2, grp, kind=kind)
                dp_time += rs.time_s
                gather_time += ag.time_s
                add("dp", rs, 1, None)
                add("dp", ag, 1, None)
        if gfactor < 1.0:
            notes.append(f"PowerSGD rank {comp.split(':')[1]}: gradients {gfactor:.3f} of their size on the wire")
    buckets = max(1.0, stage_params * gbytes / (40 << 20))  # Megatron's 40 MB DDP buckets
    if L.overlap_grad_reduce:
        window = t_b  # the last micro-batch's backward of the first stage
        dp_exposed = max(dp_time / buckets, dp_time - window)
    else:
        dp_exposed = dp_time
    if L.overlap_param_gather:
        gather_exposed = max(gather_time / buckets, gather_time - t_f)
    else:
        gather_exposed = gather_time
    for c in colls:
        if c["kind"] == "dp":
            own = c["time_us"] * 1e-6
            tot = dp_time if c["collective"] != "all_gather" else gather_time
            ex = dp_exposed if c["collective"] != "all_gather" else gather_exposed
            c["exposed_s"] = ex * own / tot if tot else 0.0

    # ---- optimizer --------------------------------------------------------------------------------
    # (ZeRO shards the dense parameters' optimizer over dpcp, the experts' over edp)
    shard = len(dpcp) if L.zero >= 1 else 1
    eshard = len(edp) if (L.zero >= 1 and edp) else 1
    opt = ADAM_BYTES * (dense_params / shard + expert_params / eshard) / hbm

    step = busy + bubble + p2p_exposed + dp_exposed + gather_exposed + opt

    # ---- memory per GPU -----------------------------------------------------------------------------
    wb, gb_, ob = bytes_per_param(L.zero, len(dpcp))
    emb = model.embedding_params() / tp
    act_layer = model.activation_bytes(b, tp, sp, L.recompute, cp)
    inter = 1.0 + (pp - 1) / (pp * v) if v > 1 else 1.0
    extra = model.activation_bytes(b, tp, sp, "none", cp) if L.recompute == "full" else \
        model.moe_activation_bytes(b, tp, cp) if L.recompute == "moe" else 0.0  # the block recomputed
    logits_mem = ELEMENTWISE_LOGITS / 2 * s * b * model.vocab / tp / cp  # fp32 logits, on the last stage
    state = wb + gb_ + ob  # bytes a parameter: weights + gradients + optimizer
    # experts' parameters are sharded by ZeRO over their own data-parallel ranks (edp)
    ew, eg, eo = bytes_per_param(L.zero, len(edp)) if lp_exp else (wb, gb_, ob)
    # ZeRO-3: the gathered layer and the one prefetched (the experts only where edp shards them)
    z3 = 2 * 2 * (lp_dense + (lp_exp if len(edp) > 1 else 0.0)) if L.zero == 3 else 0.0
    best = None
    for k in range(pp):
        # stage k holds the activations of min(m, p - k) micro-batches in flight (1F1B; Narayanan 2021, 2.2.1)
        dense = layers_of[k] * lp_dense + (emb if k == 0 else 0.0) + \
            (emb if k == pp - 1 and (pp > 1 or not model.tied) else 0.0)
        expert = layers_of[k] * lp_exp
        wgo = (dense * wb + expert * ew + z3, dense * gb_ + expert * eg, dense * ob + expert * eo)
        acts = act_layer * layers_of[k] * min(m, pp - k) * inter + extra + (logits_mem if k == pp - 1 else 0.0)
        total = sum(wgo) + acts
        if best is None or total > best[0]:
            best = (total, wgo, acts)
    _, (w_b, g_b, o_b), acts = best
    memory = {"weights": w_b / GIB, "gradients": g_b / GIB, "optimizer": o_b / GIB, "activations": acts / GIB}
    memory["total"] = sum(memory.values())
    estate = ew + eg + eo

    def stage_gib(nlayers: int, embeddings: int) -> float:
        return (nlayers * (lp_dense * state + lp_exp * estate) + embeddings * emb * state) / GIB

    stages = {"first": stage_gib(layers_of[0], 1), "middle": stage_gib(layers_of[pp // 2], 0),
              "last": stage_gib(last_layers, 1)} if pp > 2 else \
        {"only": stage_gib(model.layers, 1 if model.tied else 2)} if pp == 1 else \
        {"first": stage_gib(layers_of[0], 1), "last": stage_gib(last_layers, 1)}
    fits = memory["total"] <= gpu.memory_gib

    # ---- results ------------------------------------------------------------------------------------
    seqs = L.sequences()
    gpus = L.gpus
    mf = model.model_flops(seqs)
    hf = model.hardware_flops(seqs, L.recompute)
    tflops = mf / step / gpus / 1e12
    hw = hf / step / gpus / 1e12
    bf16_peak = gpu.bf16_tflops * 1e12
    breakdown = {
        "compute": 0.0,
        "tp": m * per_stage * (2 * t_tp_f + (t_tp_f if L.recompute == "full" else t_tp_rc)),
        "cp": m * per_stage * (t_cp_f + t_cp_b + (t_cp_f if L.recompute == "full" else 0.0)),
        "ep": m * per_stage * 2 * t_ep_f * rep,
        "fsdp": m * per_stage * (fsdp_f + fsdp_b),
        "pp_bubble": bubble, "pp_p2p": p2p_exposed, "dp": dp_exposed, "zero_gather": gather_exposed,
        "optimizer": opt,
    }
    breakdown["compute"] = busy - breakdown["tp"] - breakdown["cp"] - breakdown["ep"] - breakdown["fsdp"]
    if not fits:
        notes.append(f"does not fit: {memory['total']:.1f} GiB per GPU of {gpu.memory_gib:.0f} GiB")
    return StepPlan(model, L, topo.name, gpu.family, step, seqs * s / step, tflops, hw, mf / step / gpus / bf16_peak,
                    hf / step / gpus / bf16_peak, memory, fits, breakdown, colls,
                    {"forward_s": t_f, "backward_s": t_b, "p2p_s": t_p2p, "layer_forward_s": t_layer_f,
                     "layer_backward_s": t_layer_b, "layer_attention_s": t_attn, "layer_attention_backward_s": t_attn_b,
                     "layer_comm_forward_s": comm_layer_f, "micro_batches": m}, stages, notes)
