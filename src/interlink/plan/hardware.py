"""What a GPU computes: peak dense tensor throughput, memory, and the fractions of them a training step's
kernels reach (named parameters, each with its source).

The GPU of a plan is the topology's (its device name, e.g. ``H100-SXM5-80GB``), looked up by family
(:func:`interlink.model.params.gpu_family`). HBM bandwidth is the cost model's own
(``gpu.hbm_gbps.*`` in :mod:`interlink.model.params`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..model.params import default_params, gpu_family
from .job import PlanError

__all__ = ["GpuSpec", "GPUS", "gpu_spec", "COMPUTE_PARAMS", "comm_sm_share"]


@dataclass(frozen=True)
class GpuSpec:
    family: str
    bf16_tflops: float      # dense, per GPU
    fp8_tflops: float       # dense; 0: no fp8 tensor cores
    memory_gib: float
    hbm_gbps: float
    source: str

    def peak_tflops(self, dtype: str) -> float:
        if dtype == "fp8":
            if not self.fp8_tflops:
                raise PlanError(f"{self.family} has no fp8 tensor cores: use --dtype bf16")
            return self.fp8_tflops
        return self.bf16_tflops


#: Datasheet peaks (dense, no sparsity). Memory is the HBM size the device name states (80GB parts: 80 GiB).
GPUS: dict[str, tuple[float, float, float, str]] = {
    "a100": (312.0, 0.0, 80.0, "NVIDIA A100 datasheet: 312 TFLOPS BF16/FP16 dense"),
    "a800": (312.0, 0.0, 80.0, "A800: as A100"),
    "h100": (989.4, 1978.9, 80.0, "NVIDIA H100 SXM5 datasheet: 989 TFLOPS BF16, 1,979 FP8 dense"),
    "h800": (989.4, 1978.9, 80.0, "H800 SXM5: as H100 SXM5"),
    "h200": (989.4, 1978.9, 141.0, "NVIDIA H200 datasheet: as H100 SXM5, 141 GB HBM3e"),
    "b200": (2250.0, 4500.0, 180.0, "NVIDIA DGX B200 datasheet: 72 PFLOPS FP8 / 8 GPUs = 4.5 dense (sparse halved)"),
}

#: The fractions of peak a step's kernels reach. One number per GPU family for the weight and attention
#: matrix multiplications, one for memory-bound kernels; both apply to every model shape (the shape enters
#: through the memory-bound kernels, whose bytes grow as s b h where the FLOPs grow as s b h^2).
COMPUTE_PARAMS: dict[str, tuple[float, str]] = {
    # A100: Narayanan 2021's 1T row runs at 52% of peak end to end (163 of 312 TFLOPS, counting recomputation)
    # with a 1F1B bubble of 63 / 512 stage times (12%) and exposed tensor-parallel all-reduces (~5%) around its
    # GEMMs: 0.52 / 0.88 / 0.95 / (GEMMs' share of the rest) ~ 0.70. Set from that one row; the other A100
    # rows of tests/test_plan_published.py are predictions from it
    "gemm.a100": (0.70, "derived from Narayanan 2021 Table 1's 1T row (52% of peak with a 12% bubble): ~218 of 312 "
                        "TFLOPS in the GEMMs"),
    "gemm.a800": (0.70, "as A100"),
    # H100: the Megatron-LM README's weak scaling on H100 reaches 47% MFU at its largest model; GEMMs take
    # about three quarters of such a step in plans (the rest: communication, bubble, memory-bound kernels):
    # 0.47 / 0.76 ~ 0.62. The Llama 3 and Megatron-Bridge rows are predictions from it
    "gemm.h100": (0.62, "derived from the Megatron-LM README (47% MFU end to end on H100, largest weak-scaling "
                        "model): ~610 of 989 TFLOPS in the GEMMs"),
    "gemm.h800": (0.62, "as H100"),
    "gemm.h200": (0.62, "as H100 (the same SMs; faster HBM enters through the memory-bound kernels)"),
    # B200 / GB200: an estimate, not fitted; Megatron-Bridge's Llama 3 rows on them check it
    # (benchmarks/plan_bridge.py: 2 B200 and 16 GB200 rows, -14.9% to +8.5%)
    "gemm.b200": (0.60, "estimate: Blackwell training GEMMs at about H100's fraction; checked by Megatron-Bridge's "
                        "Llama 3 rows on B200 and GB200 (-14.9% to +8.5%, benchmarks/plan_bridge.py)"),
    "gemm.default": (0.60, "estimate for an unknown GPU"),
    # fused attention's backward (dQ, dK, dV: twice the forward's FLOPs) runs at a lower fraction of peak than
    # its forward: on H100 at head dim 128, sequence 8k, cuDNN's backward reaches 518 TFLOPS and FlashAttention-3's
    # 559, against 610-640 forward (Shah et al. 2024, FlashAttention-3, arXiv:2407.08608, the backward figure
    # at head dim 128). The plan's flash-attention forward stays at the GEMM fraction (0.62 x 989 = 613 TFLOPS);
    # Megatron-Core with Transformer Engine runs cuDNN's fused attention on Hopper, so its backward is priced at
    # cuDNN's 518 of 989 (0.52). Standard (unfused) attention's batched GEMMs keep the GEMM fraction both ways
    "attn_bwd.h100": (0.52, "cuDNN fused attention backward, H100 SXM5, head dim 128, seq 8k: 518 TFLOPS "
                            "(FlashAttention-3, Shah et al. 2024, arXiv:2407.08608)"),
    "attn_bwd.h800": (0.52, "as H100"),
    "attn_bwd.h200": (0.52, "as H100 (the same SMs)"),
    "attn_bwd.b200": (0.50, "estimate: H100's backward over forward fraction (0.52 / 0.62) at B200's GEMM "
                            "fraction (0.60); no published B200 attention backward checked"),
    # FlashAttention's Triton kernel of 2022 (flash_attn_triton.py, triton 2.0.0.dev20221202, Ampere code on
    # every GPU), which llm-foundry's attn_impl: triton ran for MosaicML's MPT benchmarks: its author's notes
    # say its forward is about CUDA FlashAttention's, its backward slower, and it was tested on A100 only; the
    # FlashAttention-2 paper (Dao 2023, arXiv:2307.08691) finds FlashAttention-2 1.3-2.5x faster than it. One
    # fraction of the 16-bit peak per family for its forward and backward (FlashAttention's FLOP convention:
    # the backward 2.5 forwards, the causal half skipped), each set from one row of llm-foundry's tables
    # (benchmarks/plan_mpt.py: the longest sequence, where attention is most of the step); the other rows check it
    "attn_triton.a100": (0.338, "set from llm-foundry's MPT-7B at 65,536 tokens on 8 A100 80GB (1,013 tokens a "
                                 "second a GPU): 105 TFLOPS, benchmarks/plan_mpt.py"),
    "attn_triton.h100": (0.187, "set from llm-foundry's MPT-7B at 65,536 tokens on 8 H100 80GB (1,956 tokens a "
                                 "second a GPU): 185 TFLOPS, benchmarks/plan_mpt.py"),
    # the training framework: every fraction above is Megatron-LM's (its rows set them). Megatron-DeepSpeed
    # (DeepSpeed's pipeline engine and its 1F1B schedule around Megatron's layers) reaches less of them: BLOOM
    # 176B on it ran at 150 TFLOPS a GPU where the plan of Megatron-LM's rates gives 169.7 (0.884). This one
    # run sets it; MT-NLG 530B's three runs on 280-420 DGX A100 (DeepSpeed's pipeline too) are its check
    "engine.deepspeed": (0.884, "BLOOM 176B on Megatron-DeepSpeed, 384 A100: 150 TFLOPS a GPU (BigScience "
                                "model card) against the plan's 169.7 at Megatron-LM's rates"),
    "engine.megatron": (1.0, "the rates above are Megatron-LM's"),
    # a mixture of experts' all-to-alls overlapped with another micro-batch's compute (--ep-overlap) run on SMs the
    # compute then lacks: Megatron-Core's DeepEP dispatcher takes 20 (moe_deepep_num_sms's default); an H100
    # has 132, a B200 148, an A100 108. Checked on Qwen3-30B-A3B on 16 H100s (tests/test_plan_published.py)
    "ep_overlap_sms": (20.0, "DeepEP's SMs in Megatron-Core: moe_deepep_num_sms, 'historical default 20' "
                             "(NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py)"),
    "sms.a100": (108.0, "NVIDIA A100 whitepaper: 108 SMs"),
    "sms.h100": (132.0, "NVIDIA H100 SXM5 datasheet: 132 SMs"),
    "sms.b200": (148.0, "NVIDIA Blackwell B200: 148 SMs"),
    # GEMM shape: an output tile's fixed cost (prologue, epilogue) in steps of its K loop. DeepGEMM's published
    # H800 FP8 table (deepseek-ai/DeepGEMM README at 55ab91f, 'Normal GEMMs for dense models', M 4,096, N 7,168):
    # K 16,384 at 1,426 TFLOPS, K 2,048 at 1,168; K / (K + k0) fits both at k0 = 534 (and gives 0.77 / 0.51 of
    # the K 16,384 rate at K 1,536 / 512, published 0.79 / 0.53). A 16-bit K step takes twice an 8-bit one's
    # time, the fixed cost the same: half the steps. Hopper's figure; Blackwell's an estimate (the same
    # form); A100's GEMM fraction holds for every shape (no per-shape row held)
    "gemm_k0.h100": (534.0, "DeepGEMM README (55ab91f): H800 FP8, M 4096, N 7168: K 16384 1426 TFLOPS, K 2048 "
                            "1168 TFLOPS -> K / (K + 534)"),
    "gemm_k0.b200": (534.0, "estimate: Hopper's per-tile cost (no published Blackwell per-shape table checked)"),
    # memory-bound kernels (layer norm, dropout, residual adds, activation functions, softmax, fp8 casts)
    "hbm": (0.80, "estimate: streaming kernels at 80% of the HBM datasheet bandwidth (STREAM-like copies reach "
                  "80-90% on A100 and H100)"),
}


def gpu_spec(device_name: str, memory_gib: float | None = None) -> GpuSpec:
    """The compute spec of a topology's GPU by its device name (``A100-SXM4-80GB``)."""
    fam = gpu_family(device_name)
    if fam not in GPUS:
        raise PlanError(f"no compute figures for GPU {device_name!r}; known: {', '.join(GPUS)}")
    bf16, fp8, mem, src = GPUS[fam]
    m = re.search(r"(\d+)\s*GB", device_name or "")
    if memory_gib is None and m:
        memory_gib = float(m.group(1))
    hbm = default_params().hbm_gbps(device_name)
    return GpuSpec(fam, bf16, fp8, float(memory_gib or mem), hbm, src)


def _base(family: str) -> str:
    """The family whose per-family figures a variant takes (A800 as A100; H800 and H200: the same SMs as H100)."""
    return {"a800": "a100", "h800": "h100", "h200": "h100"}.get(family, family)


def gemm_fraction(family: str) -> float:
    key = f"gemm.{family}"
    return COMPUTE_PARAMS.get(key, COMPUTE_PARAMS["gemm.default"])[0]


#: the K the GEMM fractions above stand for: the plan prices a GEMM over K at (K + k0) / K of the time a
#: GEMM over GEMM_K_REF takes at the fraction's rate, relative to that (plan/step.py ``gemm_shape_slowdown``)
GEMM_K_REF = 8192.0


def gemm_k0(family: str, dtype: str) -> float:
    """An output tile's fixed cost in steps of the K loop (``gemm_k0.<family>``, an 8-bit K loop's; a 16-bit
    one's is half); 0 where the family has none."""
    base = _base(family)
    got = COMPUTE_PARAMS.get(f"gemm_k0.{base}")
    if got is None:
        return 0.0
    return got[0] if dtype == "fp8" else got[0] / 2


def attn_bwd_fraction(family: str) -> float:
    """The fraction of the 16-bit peak fused attention's backward reaches (the GEMM fraction where no
    published figure of the family's is held)."""
    got = COMPUTE_PARAMS.get(f"attn_bwd.{family}")
    return got[0] if got is not None else gemm_fraction(family)


def attn_triton_fraction(family: str) -> float:
    """The fraction of the 16-bit peak FlashAttention's 2022 Triton kernel reaches, forward and backward
    (``attn_triton.<family>``; a family without a figure of its own takes H100's, an estimate)."""
    base = _base(family)
    got = COMPUTE_PARAMS.get(f"attn_triton.{base}", COMPUTE_PARAMS["attn_triton.h100"])
    return got[0]


def comm_sm_share(family: str) -> float:
    """The share of a GPU's SMs a mixture of experts' dispatcher holds while it runs beside compute."""
    base = _base(family)
    sms = COMPUTE_PARAMS.get(f"sms.{base}", COMPUTE_PARAMS["sms.h100"])[0]
    return COMPUTE_PARAMS["ep_overlap_sms"][0] / sms


def engine_fraction(engine: str) -> float:
    """The rate a framework's layers run at, as a fraction of Megatron-LM's (``engine.<name>``)."""
    return COMPUTE_PARAMS[f"engine.{engine}"][0]


def hbm_fraction() -> float:
    return COMPUTE_PARAMS["hbm"][0]
