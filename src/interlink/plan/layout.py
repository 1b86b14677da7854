"""The parallel layout: degrees, sharding, recomputation, batch, and which ranks form each group.

Ranks map onto the grid of degrees in ``order``, innermost first (Megatron-LM's default
``tp-cp-ep-dp-pp``: tensor parallelism inside a host, pipeline stages outermost). Expert parallelism is
carved out of the data-parallel ranks (the ``ep`` innermost of them), as Megatron-Core does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from .job import Model, PlanError

__all__ = ["Layout", "DIMS", "parse_order"]

DIMS = ("tp", "cp", "dp", "pp")
RECOMPUTE = ("none", "selective", "full")
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
    engine: str = "megatron"         # the training framework's kernels and schedule: megatron, deepspeed
    dtype: str = "bf16"              # bf16, fp16, fp8 (fp8 GEMMs; 16-bit weights and activations)
    grad_dtype: str = ""             # "" : fp32 (Megatron's main grads; fp16 jobs reduce fp16)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

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
        if self.engine not in ENGINES:
            raise PlanError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if model.seq % self.cp:
            raise PlanError(f"sequence {model.seq} does not divide by --cp {self.cp}")
        if self.ep > 1:
            if not model.moe:
                raise PlanError("--ep needs a mixture-of-experts model (experts=E,top_k=K)")
            if model.experts % self.ep:
                raise PlanError(f"{model.experts} experts do not divide by --ep {self.ep}")
            if self.dp % self.ep:
                raise PlanError(f"--ep {self.ep} must divide --dp {self.dp} (experts are spread over data-parallel ranks)")
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
        """The ranks of ``rank``'s group of ``kind``: tp, cp, dp, pp, ep (the innermost ``ep`` of dp),
        dpcp (the ranks that hold the same weights: data and context parallel), edp (an expert's
        data-parallel ranks: dpcp with step ep)."""
        st, sz = self.strides(), self.sizes()
        coord = {d: (rank // st[d]) % sz[d] for d in self.dims}
        base = rank - sum(coord[d] * st[d] for d in self.dims)
        if kind in DIMS:
            others = base + sum(coord[d] * st[d] for d in self.dims if d != kind)
            return [others + i * st[kind] for i in range(sz[kind])]
        if kind == "ep":
            d0 = coord["dp"] - coord["dp"] % self.ep
            others = base + sum(coord[d] * st[d] for d in self.dims if d != "dp")
            return [others + (d0 + i) * st["dp"] for i in range(self.ep)]
        if kind in ("dpcp", "edp"):
            others = base + sum(coord[d] * st[d] for d in self.dims if d not in ("dp", "cp"))
            step = self.ep if kind == "edp" else 1
            dps = [j for j in range(self.dp) if j % step == coord["dp"] % step]
            return sorted(others + j * st["dp"] + c * st["cp"] for j in dps for c in range(self.cp))
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
        return d

    def short(self) -> str:
        s = f"tp{self.tp} pp{self.pp} dp{self.dp}"
        if self.cp > 1:
            s += f" cp{self.cp}"
        if self.ep > 1:
            s += f" ep{self.ep}"
        if self.virtual_stages > 1:
            s += f" v{self.virtual_stages}"
        s += f" mb{self.micro_batch} zero{self.zero} {self.recompute}" + (" sp" if self.sp else "")
        return s + ("" if self.engine == "megatron" else f" {self.engine}")

    def with_(self, **kw: Any) -> "Layout":
        return replace(self, **kw)
