"""The parallel layout: degrees, sharding, recomputation, batch, and which ranks form each group.

Ranks map onto the grid of degrees in ``order``, innermost first (Megatron-LM's default
``tp-cp-ep-dp-pp``: tensor parallelism inside a host, pipeline stages outermost). The experts' layers
have their own grid over the same ranks of a pipeline stage (Megatron-Core's parallel folding, Liu et al.
2025, arXiv:2504.14960): the stage's ``tp x cp x dp`` ranks, in the order above, split innermost first into
expert tensor parallelism (``etp``: by default ``tp`` where ``ep`` divides ``cp x dp``, as Megatron-Core's
default ``expert_tensor_parallel_size``, else 1), expert parallelism (``ep``) and the experts' data
parallelism (the rest). With ``etp`` = ``tp`` the experts' groups are the ``ep`` innermost of the
context- and data-parallel ranks; with ``etp`` = 1 they may span the tensor-parallel ranks too
(Qwen3-235B-A22B on 256 H100s: tp2 ep32).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from .job import Model, PlanError

__all__ = ["Layout", "DIMS", "parse_order"]

DIMS = ("tp", "cp", "dp", "pp")
RECOMPUTE = ("none", "selective", "full", "moe")
DISPATCHERS = ("alltoall", "deepep")  # Megatron-Core's alltoall dispatcher; its flex one over DeepEP/HybridEP
ENGINES = ("megatron", "deepspeed")  # hardware.engine_fraction: the rate of each framework's layers


def parse_order(order: str) -> tuple[str, ...]:
    parts = [p.strip().lower() for p in order.replace(",", "-").split("-") if p.strip()]
    dims = tuple(p for p in parts if p != "ep")
    if sorted(dims) != sorted(DIMS):
        raise PlanError(f"--order {order!r} must name tp, cp, dp and pp once each, innermost first "
                        f"(e.g. tp-cp-ep-dp-pp); ep always sits inside dp")
    return dims


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 0                     # expert tensor parallelism; 0: tp where ep divides cp x dp, else 1
    sp: bool = False
    zero: int = 1
    recompute: str = "none"
    micro_batch: int = 1
    global_batch: int = 0            # sequences per step; 0: one micro-batch per data-parallel rank
    virtual_stages: int = 1          # interleaved 1F1B: model chunks per pipeline rank
    compress: str = "none"           # gradient compression: none, fp8, bf16, powersgd:R
    order: str = "tp-cp-ep-dp-pp"
    overlap_grad_reduce: bool = True  # DP gradient buckets overlap the last micro-batch's backward
    overlap_param_gather: bool = True  # ZeRO-1/2's parameter all-gather overlaps the next forward
    tp_overlap: float = 0.0          # fraction of tensor-parallel communication hidden under GEMMs
    scatter_gather: bool = True      # pipeline sends split over the TP ranks (Narayanan 2021, section 4.1)
    cp_comm: str = "ring"            # ring: K/V passed around under the attention; allgather: gathered first
    dispatcher: str = "alltoall"     # the experts' token dispatcher: alltoall (a copy a token-expert pair) or
    #                                  deepep (DeepEP/HybridEP: a token crosses the network once per host it
    #                                  visits and reaches each GPU it visits once)
    ep_overlap: bool = False         # the experts' all-to-alls under another micro-batch's compute (Megatron-Core's
    #                                  overlap_moe_expert_parallel_comm)
    engine: str = "megatron"         # the training framework's kernels and schedule: megatron, deepspeed
    dtype: str = "bf16"              # bf16, fp16, fp8 (fp8 GEMMs; 16-bit weights and activations)
    grad_dtype: str = ""             # "" : fp32 (Megatron's main grads; fp16 jobs reduce fp16)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """Expert tensor parallelism: ``etp``, or by default ``tp`` where ``ep`` divides ``cp x dp``
        (Megatron-Core's default), else 1 (the experts' groups folded over the tensor-parallel ranks)."""
        if self.ep <= 1:
            return self.tp  # no expert parallelism: the experts are split as the MLP is
        if self.etp:
            return self.etp
        return self.tp if (self.cp * self.dp) % max(1, self.ep) == 0 else 1

    @property
    def dims(self) -> tuple[str, ...]:
        return parse_order(self.order)

    def sequences(self) -> int:
        return self.global_batch or self.dp * self.micro_batch

    def micro_batches(self) -> int:
        """Micro-batches each pipeline runs per step (gradient accumulation steps)."""
        return self.sequences() // (self.dp * self.micro_batch)

    def grad_bytes(self) -> int:
        g = self.grad_dtype or ("fp16" if self.dtype == "fp16" else "fp32")
        return {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}.get(g, 4)

    def check(self, model: Model, gpus_available: int | None = None, gpus_per_host: int | None = None) -> None:
        """Raise :class:`PlanError` naming the fix when the layout cannot run ``model``."""
        for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "virtual_stages"):
            if int(getattr(self, k)) < 1:
                raise PlanError(f"--{k.replace('_', '-')} must be >= 1, got {getattr(self, k)}")
        if self.zero not in (0, 1, 2, 3):
            raise PlanError(f"--zero must be 0, 1, 2 or 3, got {self.zero}")
        if self.recompute not in RECOMPUTE:
            raise PlanError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        if self.dtype not in ("bf16", "fp16", "fp8"):
            raise PlanError(f"--dtype must be bf16, fp16 or fp8, got {self.dtype!r}")
        parse_order(self.order)
        if model.heads % self.tp:
            raise PlanError(f"{model.heads} attention heads do not divide by --tp {self.tp}: use a --tp dividing "
                            f"{model.heads}")
        if model.kv % self.tp and self.tp % model.kv:
            raise PlanError(f"{model.kv} key/value heads and --tp {self.tp}: one must divide the other")
        if model.f % self.tp:
            raise PlanError(f"ffn {model.f} does not divide by --tp {self.tp}")
        if self.pp > model.layers:
            raise PlanError(f"--pp {self.pp} is more stages than the model's {model.layers} layers")
        if self.virtual_stages > 1:
            if self.pp == 1:
                raise PlanError("--virtual-stages needs --pp > 1 (interleaving is a pipeline schedule)")
            if self.pp * self.virtual_stages > model.layers:
                raise PlanError(f"--pp {self.pp} x --virtual-stages {self.virtual_stages} chunks is more than the "
                                f"model's {model.layers} layers")
        if self.virtual_stages > 1 and self.dp * self.micro_batch and \
                (self.sequences() // (self.dp * self.micro_batch)) % self.pp:
            raise PlanError(f"--virtual-stages needs the micro-batches of a step ({self.sequences()} / (dp {self.dp} x "
                            f"micro-batch {self.micro_batch})) to be a multiple of --pp {self.pp}, as Megatron-LM's "
                            f"interleaved schedule does: change --global-batch or --micro-batch")
        if self.cp_comm not in ("ring", "allgather"):
            raise PlanError(f"--cp-comm must be ring or allgather, got {self.cp_comm!r}")
        if self.dispatcher not in DISPATCHERS:
            raise PlanError(f"--dispatcher must be one of {', '.join(DISPATCHERS)}, got {self.dispatcher!r}")
        if self.engine not in ENGINES:
            raise PlanError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if model.seq % self.cp:
            raise PlanError(f"sequence {model.seq} does not divide by --cp {self.cp}")
        if self.etp < 0:
            raise PlanError(f"--etp must be >= 1, got {self.etp}")
        if self.recompute == "moe" and not model.moe:
            raise PlanError("--recompute moe needs a mixture-of-experts model (experts=E,top_k=K)")
        if self.ep > 1:
            if not model.moe:
                raise PlanError("--ep needs a mixture-of-experts model (experts=E,top_k=K)")
            if model.experts % self.ep:
                raise PlanError(f"{model.experts} experts do not divide by --ep {self.ep}")
            block = self.tp * self.cp * self.dp
            if block % (self.ep * self.expert_tp):
                raise PlanError(f"--ep {self.ep} x --etp {self.expert_tp} must divide the {block} ranks of a pipeline "
                                f"stage (tp {self.tp} x cp {self.cp} x dp {self.dp}): the experts' groups are folded "
                                f"over them; change --ep or --etp")
            if self.expert_tp not in (1, self.tp):
                raise PlanError(f"--etp {self.expert_tp}: use --etp 1 or --etp {self.tp} (= --tp); other splits of the "
                                f"experts are not priced")
            if self.tp > 1 and not self.sp:
                raise PlanError("--ep with --tp > 1 needs sequence parallelism (--sp), as Megatron-Core requires")
        elif self.etp and self.etp != self.tp:
            raise PlanError("--etp needs --ep > 1 and a mixture-of-experts model")
        seqs = self.sequences()
        if seqs % (self.dp * self.micro_batch):
            raise PlanError(f"--global-batch {seqs} is not a multiple of --dp {self.dp} x --micro-batch "
                            f"{self.micro_batch} = {self.dp * self.micro_batch}")
        if self.compress != "none":
            c = self.compress.lower()
            if not (c in ("fp8", "bf16") or (c.startswith("powersgd:") and c[9:].isdigit() and int(c[9:]) > 0)):
                raise PlanError(f"--compress {self.compress!r}: use none, fp8, bf16 or powersgd:R (R >= 1)")
        if gpus_available is not None and self.gpus > gpus_available:
            raise PlanError(f"the layout needs {self.gpus} GPUs (tp {self.tp} x cp {self.cp} x dp {self.dp} x pp "
                            f"{self.pp}) but the topology has {gpus_available}: use a larger cluster "
                            f"(e.g. --topology {-(-self.gpus // (gpus_per_host or 8))}xdgx-h100) or smaller degrees")

    # ---- groups ----------------------------------------------------------------------------------

    def sizes(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}

    def strides(self) -> dict[str, int]:
        out, s = {}, 1
        for d in self.dims:
            out[d] = s
            s *= self.sizes()[d]
        return out

    def group(self, kind: str, rank: int = 0) -> list[int]:
        """The ranks of ``rank``'s group of ``kind``: tp, cp, dp, pp; dpcp (the ranks that hold the same
        dense weights: data and context parallel); and the experts' grid over the stage's tp x cp x dp
        ranks: etp (expert tensor parallel), ep (expert parallel), edp (the ranks that hold the same
        experts)."""
        st, sz = self.strides(), self.sizes()
        coord = {d: (rank // st[d]) % sz[d] for d in self.dims}
        base = rank - sum(coord[d] * st[d] for d in self.dims)
        if kind in DIMS:
            others = base + sum(coord[d] * st[d] for d in self.dims if d != kind)
            return [others + i * st[kind] for i in range(sz[kind])]
        if kind in ("ep", "edp", "etp"):
            # the stage's tp x cp x dp ranks in order, split etp (innermost), ep, then the experts' dp; with
            # etp = tp the tensor-parallel ranks come first whatever --order says, so the experts' tensor groups
            # are the tensor-parallel groups
            inner = [d for d in self.dims if d != "pp"]
            if self.expert_tp == self.tp:
                inner = ["tp"] + [d for d in inner if d != "tp"]
            idx, mul = 0, 1
            for d in inner:
                idx += coord[d] * mul
                mul *= sz[d]
            etp, ep = self.expert_tp, self.ep
            e_t, e_p, e_d = idx % etp, (idx // etp) % ep, idx // (etp * ep)
            if kind == "etp":
                idxs = [i + etp * (e_p + ep * e_d) for i in range(etp)]
            elif kind == "ep":
                idxs = [e_t + etp * (j + ep * e_d) for j in range(ep)]
            else:
                idxs = [e_t + etp * (e_p + ep * j) for j in range(mul // (etp * ep))]
            stage = base + coord["pp"] * st["pp"]
            out = []
            for i in idxs:
                r = stage
                for d in inner:
                    r += (i % sz[d]) * st[d]
                    i //= sz[d]
                out.append(r)
            return sorted(out) if kind == "edp" else out
        if kind == "dpcp":
            others = base + sum(coord[d] * st[d] for d in self.dims if d not in ("dp", "cp"))
            return sorted(others + j * st["dp"] + c * st["cp"] for j in range(self.dp) for c in range(self.cp))
        raise ValueError(kind)

    def all_groups(self, kind: str) -> list[list[int]]:
        """Every group of ``kind`` (see :meth:`group`), each once, in order of its lowest rank."""
        seen: set[int] = set()
        out = []
        for r in range(self.gpus):
            if r not in seen:
                g = self.group(kind, r)
                seen.update(g)
                out.append(g)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpus"] = self.gpus
        d["micro_batches"] = self.micro_batches()
        d["etp"] = self.expert_tp
        return d

    def short(self) -> str:
        s = f"tp{self.tp} pp{self.pp} dp{self.dp}"
        if self.cp > 1:
            s += f" cp{self.cp}"
        if self.ep > 1:
            s += f" ep{self.ep}"
            if self.expert_tp != self.tp:
                s += f" etp{self.expert_tp}"
            if self.dispatcher != "alltoall":
                s += f" {self.dispatcher}"
            if self.ep_overlap:
                s += " ep-overlap"
        if self.virtual_stages > 1:
            s += f" v{self.virtual_stages}"
        s += f" mb{self.micro_batch} zero{self.zero} {self.recompute}" + (" sp" if self.sp else "")
        return s + ("" if self.engine == "megatron" else f" {self.engine}")

    def with_(self, **kw: Any) -> "Layout":
        return replace(self, **kw)
