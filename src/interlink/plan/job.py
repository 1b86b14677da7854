"""The job: a transformer's shape, its parameters, FLOPs and memory per GPU.

A model is ``Model(layers, hidden, heads, seq, vocab, kv_heads, ffn, experts, top_k, mlp, tied)``, from a
preset name (:data:`PRESETS`), a ``key=value,...`` string or a JSON file (:func:`parse_model`).

FLOPs (two per multiply-add), forward pass of one micro-batch of ``b`` sequences of ``s`` tokens, per
layer, with ``q = heads * head_dim`` (``head_dim`` defaults to ``hidden / heads``, so q = h) and
``d = kv_heads * head_dim`` (Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", arXiv:2104.04473, section 5.1, generalised to grouped-query
attention, any FFN width, gated MLPs and mixture of experts)::

    QKV projection      2 b s h (q + 2 d)
    attention           4 b s^2 q              (scores Q K^T and their product with V, causal mask not discounted)
    output projection   2 b s q h
    MLP                 2 b s h f m k          (m = 2 matrices, 3 for SwiGLU; k = experts a token visits)
    router              2 b s h E              (mixture of experts)
    logits              2 b s h V              (once, on the last pipeline stage)

A GPT layer (d = h, f = 4h, m = 2) gives Narayanan's 24 b s h^2 + 4 b s^2 h. Backward is twice the
forward; full recomputation repeats the layers' forward, selective recomputation repeats the attention
core only (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198, section 5). *Model* FLOPs (MFU) count forward + backward; *hardware* FLOPs add the
recomputation.

Memory per GPU (Korthikanti 2022, section 4): weights 2 B a parameter, gradients 4 B (fp32 main grads,
Megatron's default), Adam 12 B (fp32 master weights, momentum, variance); ZeRO stage 1 shards the
optimizer over the data-parallel group, stage 2 the gradients too, stage 3 the weights too. Activations of
one layer and micro-batch, in bytes, ``s b h (34 + 5 a s / h)`` for a GPT layer, split as
Korthikanti's equation 2 does into the part tensor parallelism shards (Q, K, V, the MLP's inner
activations, the softmax and its dropout) and the part it replicates unless sequence parallelism shards
it too (layer norms, dropout masks, the inputs of the QKV and MLP blocks): :meth:`Model.activation_bytes`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = ["Model", "PRESETS", "parse_model", "PlanError"]


class PlanError(ValueError):
    """Bad input to the planner: the message says what is wrong and how to fix it."""


#: the attention implementations a model's ``attention`` names
ATTENTION_KERNELS = ("flash", "flash-triton", "standard")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer. ``ffn`` 0 means 4 x hidden; ``kv_heads`` 0 means ``heads`` (no GQA).

    ``mlp``: "gelu" (two matrices) or "swiglu" (three). ``experts`` > 1: each MLP is a mixture of
    ``experts`` experts of which a token visits ``top_k``. ``tied``: the output layer shares the embedding.
    ``attention``: "flash" (fused, the s x s scores never stored: today's kernels, cuDNN's or FlashAttention-2/3),
    "flash-triton" (fused too: FlashAttention's 2022 Triton kernel, which llm-foundry's ``attn_impl: triton`` ran
    for MosaicML's MPT benchmarks; its own rates, ``hardware.attn_triton_fraction``) or "standard" (softmax and
    dropout as separate kernels over the scores, as Megatron-LM in 2021-2022)."""

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    kv_heads: int = 0
    ffn: int = 0
    experts: int = 1
    top_k: int = 1
    mlp: str = "gelu"
    tied: bool = True
    attention: str = "flash"
    head_dim: int = 0
    window: int = 0          # sliding-window attention: a query attends to the last ``window`` tokens (0: all)
    full_every: int = 0      # with a window: every ``full_every``-th layer attends to the whole sequence (0: none)
    name: str = ""

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "seq", "vocab"):
            if int(getattr(self, f)) < 1:
                raise PlanError(f"model {f} must be >= 1, got {getattr(self, f)}")
        if self.head_dim < 0:
            raise PlanError(f"head_dim must be >= 0 (0: hidden / heads), got {self.head_dim}")
        if not self.head_dim and self.hidden % self.heads:
            raise PlanError(f"hidden {self.hidden} is not a multiple of heads {self.heads}: pick heads dividing hidden, "
                            f"or give head_dim")
        if self.kv and self.heads % self.kv:
            raise PlanError(f"heads {self.heads} is not a multiple of kv_heads {self.kv}")
        if self.mlp not in ("gelu", "swiglu"):
            raise PlanError(f"mlp must be gelu or swiglu, got {self.mlp!r}")
        if self.attention not in ATTENTION_KERNELS:
            raise PlanError(f"attention must be one of {', '.join(ATTENTION_KERNELS)}, got {self.attention!r}")
        if self.window < 0 or self.full_every < 0:
            raise PlanError(f"window and full_every must be >= 0, got {self.window} and {self.full_every}")
        if not 1 <= self.top_k <= max(1, self.experts):
            raise PlanError(f"top_k {self.top_k} must be between 1 and experts {self.experts}")

    # ---- shape ---------------------------------------------------------------------------------

    @property
    def fused(self) -> bool:
        """The attention is one fused kernel (the s x s scores never stored, the causal half skipped)."""
        return self.attention != "standard"

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def f(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def hd(self) -> int:
        """One attention head's width (``head_dim``; 0: hidden / heads)."""
        return self.head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        """The width of the queries and of the attention's output: heads x head width (= hidden unless
        ``head_dim`` says otherwise, as in Qwen3's 32 heads of 128 on a hidden of 2048)."""
        return self.heads * self.hd

    @property
    def kv_dim(self) -> int:
        return self.kv * self.hd

    @property
    def mats(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    @property
    def moe(self) -> bool:
        return self.experts > 1

    # ---- parameters ----------------------------------------------------------------------------

    def attention_params(self) -> int:
        h, q = self.hidden, self.q_dim
        return h * (q + 2 * self.kv_dim) + q * h + 4 * h  # QKV, output, biases and two layer norms (approx.)

    def expert_params(self) -> int:
        """The parameters of one expert's MLP (of the MLP where there are no experts)."""
        return self.mats * self.hidden * self.f

    def layer_params(self) -> int:
        return self.attention_params() + self.experts * self.expert_params() + \
            (self.hidden * self.experts if self.moe else 0)

    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def params(self) -> int:
        """Every parameter: layers, the embedding and (untied) the output layer."""
        return self.layers * self.layer_params() + self.embedding_params() * (1 if self.tied else 2)

    def active_params(self) -> int:
        """The parameters a token passes through (mixture of experts: ``top_k`` experts of a layer)."""
        per = self.attention_params() + self.top_k * self.expert_params()
        return self.layers * per + self.embedding_params() * (1 if self.tied else 2)

    # ---- FLOPs (forward, one micro-batch of b sequences, per layer unless said) ----------------

    def layer_gemm_flops(self, b: int) -> float:
        """Forward FLOPs of one layer's weight matrices (QKV, output, MLP, router) for ``b`` sequences."""
        h, s, q = self.hidden, self.seq, self.q_dim
        return 2.0 * b * s * h * ((q + 2 * self.kv_dim) + q) + self.moe_gemm_flops(b)

    def moe_gemm_flops(self, b: int) -> float:
        """Forward FLOPs of one layer's MLP (a mixture of experts: the ``top_k`` experts a token visits and the
        router) for ``b`` sequences."""
        return 2.0 * b * self.seq * self.hidden * (self.f * self.mats * self.top_k + (self.experts if self.moe else 0))

    def layer_attention_flops(self, b: int) -> float:
        """Forward FLOPs of the attention core (Q K^T and scores x V)."""
        return 4.0 * b * self.seq * self.seq * self.q_dim

    def logits_flops(self, b: int) -> float:
        return 2.0 * b * self.seq * self.hidden * self.vocab

    @property
    def attention_share(self) -> float:
        """The share of the attention core's FLOPs that run: fused (flash) attention skips the blocks the
        causal mask hides (half), and MFU counts them so (NVIDIA/Megatron-LM megatron/training/training.py,
        ``num_floating_point_operations``: "causal mask (only half of the mask is non-zero)"); standard
        attention computes every score, as Narayanan 2021's equation 3 counts them. With a sliding ``window``
        a windowed layer's query i attends to min(i + 1, window) keys; ``full_every`` layers attend fully."""
        if not self.fused:
            return 1.0
        if not self.window or self.window >= self.seq:
            return 0.5
        # a window of W tokens: query i attends to min(i + 1, W) keys, s W - W (W - 1) / 2 pairs of the s^2
        s, w = self.seq, self.window
        windowed = min(0.5, (s * w - w * (w - 1) / 2) / (s * s))
        full = 1.0 / self.full_every if self.full_every else 0.0  # the share of layers that attend to everything
        return full * 0.5 + (1.0 - full) * windowed

    def model_flops(self, sequences: int) -> float:
        """Forward + backward FLOPs of ``sequences`` sequences (no recomputation): what MFU counts."""
        per = self.layers * (self.layer_gemm_flops(1) + self.attention_share * self.layer_attention_flops(1)) \
            + self.logits_flops(1)
        return 3.0 * per * sequences

    def hardware_flops(self, sequences: int, recompute: str) -> float:
        """Model FLOPs plus what ``recompute`` repeats: "full" one more forward of every layer (Narayanan
        2021's equation 3: 96 B s l h^2 (1 + s / 6h + V / 16 l h) for a GPT), "selective" the attention core."""
        extra = 0.0
        if recompute == "full":
            extra = self.layers * (self.layer_gemm_flops(1) + self.attention_share * self.layer_attention_flops(1))
        elif recompute == "selective":
            extra = self.layers * self.attention_share * self.layer_attention_flops(1)
        elif recompute == "moe":
            extra = self.layers * self.moe_gemm_flops(1)
        return self.model_flops(sequences) + extra * sequences

    # ---- activations (bytes of one layer, one micro-batch, 16-bit values) ----------------------

    def activation_bytes(self, b: int, tp: int = 1, sp: bool = False, recompute: str = "none",
                         cp: int = 1) -> float:
        """Korthikanti 2022's activation memory of one layer for one micro-batch, per GPU.

        Replicated across tensor-parallel ranks unless ``sp``: the inputs of the attention and MLP blocks
        (2 s b h each), the two layer norms' inputs (4 s b h), the two dropout masks (2 s b h) = 10 s b h.
        Sharded by ``tp``: Q and the attention output (4 s b q), K and V (4 s b d), the MLP's inner
        activations (2 s b f per stored tensor: input and output of the activation, 4 s b f for GeLU,
        6 s b f for SwiGLU's gate, up and product, times ``top_k`` experts), and with standard attention
        the softmax output, its dropout mask and output (5 a s^2 b). A GPT layer: 34 s b h + 5 a s^2 b.
        ``recompute``: "full" keeps the layer's input only (2 s b h), "selective" drops the 5 a s^2 b
        term (as flash attention does), "moe" the experts' inner activations (their block recomputed from
        its input). ``cp`` shards the sequence."""
        h, s = self.hidden, self.seq / cp
        sbh = s * b * h
        if recompute == "full":
            return 2.0 * sbh / (tp if sp else 1)
        replicated = 10.0 * sbh
        inner = 0.0 if recompute == "moe" else self.moe_activation_bytes(b, 1, cp)
        sharded = 4.0 * s * b * self.q_dim + 4.0 * s * b * self.kv_dim + inner
        if self.attention == "standard" and recompute != "selective":
            sharded += 5.0 * self.heads * s * self.seq * b
        return replicated / (tp if sp else 1) + sharded / tp

    def moe_activation_bytes(self, b: int, tp: int = 1, cp: int = 1) -> float:
        """The MLP's (the experts') inner activations of one layer and micro-batch, per GPU: 2 s b f a stored
        tensor (GeLU: its input and output; SwiGLU: gate, up and product), times ``top_k``."""
        return 2.0 * self.seq / cp * b * self.f * (2 if self.mats == 2 else 3) * self.top_k / tp

    # ---- serialisation -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["params"] = self.params()
        return d

    def spec(self) -> str:
        """The ``key=value`` form that :func:`parse_model` reads back."""
        d = asdict(self)
        return ",".join(f"{k}={v}" for k, v in d.items() if k != "name" and v not in ("", None))


def _m(name: str, **kw: Any) -> Model:
    return Model(name=name, **kw)


#: Named models. GPT-3 (Brown et al. 2020, Table 2.1), Llama 3 (Llama 3 paper, arXiv:2407.21783, Table 3),
#: Mixtral 8x7B (arXiv:2401.04088, Table 1), Megatron's 1T and 530B (Narayanan 2021, Table 1; MT-NLG),
#: the 22B of Korthikanti 2022 (Table 3) and two Qwen3 mixtures of experts.
PRESETS: dict[str, Model] = {
    "gpt3-175b": _m("gpt3-175b", layers=96, hidden=12288, heads=96, seq=2048, vocab=51200),
    "llama3-8b": _m("llama3-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192,
                    vocab=128256, mlp="swiglu", tied=False),
    "llama3-70b": _m("llama3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, seq=8192,
                     vocab=128256, mlp="swiglu", tied=False),
    "llama3-405b": _m("llama3-405b", layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, seq=8192,
                      vocab=128256, mlp="swiglu", tied=False),
    "mixtral-8x7b": _m("mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=4096,
                       vocab=32000, mlp="swiglu", tied=False, experts=8, top_k=2),
    # Mixtral 8x22B (Mistral AI's config.json; yanring/Megatron-MoE-ModelZoo model_configs/benchmarking/
    # Mixtral-8x22B.yaml): 56 layers 6,144 wide, 48 heads, 8 KV heads, 8 experts of 16,384, 2 a token
    "mixtral-8x22b": _m("mixtral-8x22b", layers=56, hidden=6144, heads=48, kv_heads=8, ffn=16384, seq=4096,
                        vocab=32000, mlp="swiglu", tied=False, experts=8, top_k=2),
    "megatron-1t": _m("megatron-1t", layers=128, hidden=25600, heads=160, seq=2048, vocab=51200),
    "megatron-530b": _m("megatron-530b", layers=105, hidden=20480, heads=128, seq=2048, vocab=51200),
    "megatron-22b": _m("megatron-22b", layers=48, hidden=6144, heads=64, seq=2048, vocab=51200),
    # Qwen3 (Yang et al. 2025, "Qwen3 Technical Report", arXiv:2505.09388, Tables 1-2; config.json of
    # Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B): 128 experts of which a token visits 8, heads of 128
    # whatever the hidden width (head_dim), 30.5B / 3.3B and 235B / 22B parameters in all / a token visits
    "qwen3-30b-a3b": _m("qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn=768,
                        experts=128, top_k=8, seq=4096, vocab=151936, mlp="swiglu", tied=False),
    "qwen3-235b-a22b": _m("qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128,
                          ffn=1536, experts=128, top_k=8, seq=4096, vocab=151936, mlp="swiglu", tied=False),
    # gpt-oss-120b (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", arXiv:2508.10925, section 2; its
    # config.json): 36 layers 2,880 wide, 64 query heads of 64, 8 KV heads, 128 experts of which a token visits 4,
    # every other layer's attention banded to 128 tokens; 116.8B parameters
    "gpt-oss-120b": _m("gpt-oss-120b", layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880,
                       experts=128, top_k=4, seq=4096, vocab=201088, mlp="swiglu", tied=False, window=128,
                       full_every=2),
}
ALIASES = {"gpt3": "gpt3-175b", "gpt-3": "gpt3-175b", "gpt3-175B": "gpt3-175b", "llama3-405B": "llama3-405b",
           "mixtral": "mixtral-8x7b", "megatron-1T": "megatron-1t", "1t": "megatron-1t"}

_INT = {f.name for f in fields(Model) if f.type in ("int", int)}
_KEYS = {f.name for f in fields(Model)} | {"ffn_hidden", "kv", "seq_len", "num_layers"}


def parse_model(spec: str | Model) -> Model:
    """A model from a preset name, ``layers=L,hidden=H,heads=A,seq=S,vocab=V[,...]``, a JSON file of those
    keys (optionally ``"preset": NAME`` with overrides), or ``PRESET,key=value`` (a preset with overrides)."""
    if isinstance(spec, Model):
        return spec
    text = str(spec).strip()
    if not text:
        raise PlanError("empty --model: name a preset (" + ", ".join(PRESETS) + ") or give layers=...,hidden=...")
    if text.endswith(".json") or os.path.isfile(text):
        try:
            with open(text) as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise PlanError(f"cannot read model file {text!r}: {exc}") from None
        if not isinstance(data, dict):
            raise PlanError(f"model file {text!r} must hold a JSON object of layers, hidden, heads, seq, vocab ...")
        base = data.pop("preset", None)
        return _build(base, {k: v for k, v in data.items() if k != "params"}, text)
    parts = [p.strip() for p in text.split(",") if p.strip()]
    base = None
    if parts and "=" not in parts[0]:
        base = parts.pop(0)
    kv: dict[str, Any] = {}
    for p in parts:
        if "=" not in p:
            raise PlanError(f"model term {p!r} is not key=value (e.g. layers=32,hidden=4096,heads=32,seq=2048,vocab=50257)")
        k, v = p.split("=", 1)
        kv[k.strip()] = v.strip()
    return _build(base, kv, text)


def _build(base: str | None, kv: dict[str, Any], text: str) -> Model:
    kv = dict(kv)
    for k in list(kv):
        if k not in _KEYS:
            raise PlanError(f"unknown model key {k!r} in {text!r}; keys: layers, hidden, heads, seq, vocab, kv_heads, "
                            f"ffn, experts, top_k, mlp, tied, attention, head_dim, window, full_every")
    for old, new in (("ffn_hidden", "ffn"), ("kv", "kv_heads"), ("seq_len", "seq"), ("num_layers", "layers")):
        if old in kv:
            kv[new] = kv.pop(old)
    for k in list(kv):
        if k in _INT:
            try:
                kv[k] = int(str(kv[k]).replace("_", ""))
            except ValueError:
                raise PlanError(f"model key {k} needs an integer, got {kv[k]!r}") from None
        elif k == "tied":
            kv[k] = str(kv[k]).lower() in ("1", "true", "yes")
    if base is not None:
        key = ALIASES.get(base, base).lower()
        if key not in PRESETS:
            raise PlanError(f"unknown model preset {base!r}; presets: {', '.join(PRESETS)} (or layers=...,hidden=...)")
        return replace(PRESETS[key], **kv)
    missing = [k for k in ("layers", "hidden", "heads", "seq", "vocab") if k not in kv]
    if missing:
        raise PlanError(f"model {text!r} lacks {', '.join(missing)}: give layers=L,hidden=H,heads=A,seq=S,vocab=V "
                        f"or a preset ({', '.join(PRESETS)})")
    return Model(**kv)


def bytes_per_param(zero: int, dp: int, grad_bytes: int = 4) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter a GPU holds under ZeRO ``zero`` over ``dp`` ranks:
    16-bit weights, ``grad_bytes`` gradients (fp32 main grads: 4), Adam's 12 (fp32 master, m, v)."""
    w, g, o = 2.0, float(grad_bytes), 12.0
    if zero >= 1:
        o /= dp
    if zero >= 2:
        g /= dp
    if zero >= 3:
        w /= dp
    return w, g, o


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)

