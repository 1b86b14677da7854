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

__all__ = ["GpuSpec", "GPUS", "gpu_spec", "COMPUTE_PARAMS"]


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
    # Narayanan et al. 2021, Figure 17 and section 5.9: a 145B GPT layer on A100 runs its GEMMs at about
    # 70% of the 312 TFLOPS peak in end-to-end training (163 TFLOPS a GPU with recomputation at 52%, with
    # the pipeline bubble and communication around it)
    "gemm.a100": (0.70, "A100 training GEMMs: ~218 of 312 TFLOPS (Narayanan 2021, 52% of peak end to end at "
                        "1T parameters with a 12% pipeline bubble and exposed tensor-parallel all-reduces)"),
    "gemm.a800": (0.70, "as A100"),
    # H100: training GEMMs at 60-65% of the dense peak (Megatron-LM README: 47% MFU end to end for the largest
    # weak-scaling models on H100, with bubble and communication around it)
    "gemm.h100": (0.62, "H100 training GEMMs: ~610 of 989 TFLOPS (Megatron-LM README, weak scaling on H100: "
                        "47% MFU end to end)"),
    "gemm.h800": (0.62, "as H100"),
    "gemm.h200": (0.64, "H100's with faster HBM"),
    "gemm.b200": (0.60, "estimate: Blackwell training GEMMs at H100's fraction"),
    "gemm.default": (0.60, "estimate for an unknown GPU"),
    # memory-bound kernels (layer norm, dropout, residual adds, activation functions, softmax) stream at
    # about 80% of the datasheet HBM bandwidth (STREAM-like kernels on A100/H100 reach 80-90%)
    "hbm": (0.80, "memory-bound kernels at 80% of the HBM datasheet bandwidth (STREAM-like copy on A100/H100)"),
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


def gemm_fraction(family: str) -> float:
    key = f"gemm.{family}"
    return COMPUTE_PARAMS.get(key, COMPUTE_PARAMS["gemm.default"])[0]


def hbm_fraction() -> float:
    return COMPUTE_PARAMS["hbm"][0]
