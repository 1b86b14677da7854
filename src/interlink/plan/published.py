"""Published training runs the planner is checked against (tests/test_plan_published.py), each with its
source; docs/reference.md ("Published training runs") lists them.

``metric`` says what the source published: ``step_s`` (seconds per iteration), ``hw_tflops`` (TFLOPS per
GPU counting recomputation: Narayanan 2021's equation 3), ``tflops`` (model TFLOPS per GPU, as MFU
counts). ``memory_gib``: published memory per GPU (Korthikanti 2022, Figure 1: parameters + optimizer
state, and activations, of the most loaded pipeline stage without the embedding).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .job import Model, PRESETS, parse_model
from .layout import Layout

__all__ = ["Run", "RUNS", "NEMO_RUNS", "MOE_RUNS", "MLM_RUNS", "MOE_MEMORY", "run_plan"]

NARAYANAN = ("Narayanan et al. 2021, arXiv:2104.04473, Table 1 (DGX A100 80GB, Selene, 8 HDR NICs a node); "
             "configs: NVIDIA/Megatron-LM examples/academic_paper_scripts/sc21/run_table_1.sh")
KORTHIKANTI = ("Korthikanti et al. 2022, arXiv:2205.05198, Table 5 (DGX A100 80GB); configs: "
               "calculon-ai/calculon validation/seqsel/tab5/*.json")
BRIDGE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 25.11 NeMo container, DGX-H100, FP8-CS "
          "(Megatron-Core's model TFLOPS: causal attention counted half)")
BRIDGE_EPO = ("NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md, 'HybridEP "
              "Production-Shape Benchmark' (Qwen3-30B-A3B, 16 H100, BF16, TP1 EP16, MBS1 GBS1024, flex dispatcher "
              "over HybridEP, forced balance)")
BRIDGE_MOE = ("NVIDIA-NeMo/Megatron-Bridge docs/training/moe-optimization.md, 'Short-run H100 sanity check' (the "
              "canonical 16 H100 Qwen3-30B-A3B BF16 recipe: HybridEP, EP overlap; 299.352 TFLOPS over steps 41-50)")
BRIDGE_2604 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 26.04.01 NeMo container, DGX-H100, FP8-CS, "
               "forced balance (recipes: src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py)")
BRIDGE_2509 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 25.09 NeMo container, DGX-H100, FP8")
MODELZOO = ("yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md, H100 table (256 H100, IB 8x50 GB/s, BF16, "
            "sequence 4,096, GBS 2048, ETP 1)")
NEMO2407 = ("NVIDIA/NeMo docs/source/performance/performance_summary.md, NeMo 24.07 container, DGX-H100, FP8, "
            "pre-training")
_LLAMA2 = "seq=4096,vocab=32000,mlp=swiglu,"
BRIDGE_BW = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 26.04.01 NeMo container, MXFP8, forced "
             "balance")
MODELZOO_LONG = ("yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md, H100 'Long Context' table (32 "
                 "nodes of 8 H100, IB 8x50 GB/s, BF16, DeepEP, TP 4, PP 8, VPP 4, EP 8, GBS 256, recompute of "
                 "layernorm and moe, forced balance)")
MODELZOO_MIX = ("yanring/Megatron-MoE-ModelZoo best_practice/Mixtral/run_mixtral_8x22B.sh (layout: "
                "runtime_configs/benchmarking/runtime.conf, Mixtral-8x22B: TP 2, PP 8, EP 8, VPP 1, MBS 1, GBS 256, "
                "16 nodes, alltoall; model_configs/benchmarking/Mixtral-8x22B.yaml: ETP 1, BF16, sequence 4,096)")
LLAMA3 = ("Llama 3 paper, arXiv:2407.21783, Table 4 (H100 80GB, 400 Gb/s RoCE; 16M tokens a batch); "
          "glennklockwood.com/garden/llama-3.1 quotes the same table")


@dataclass(frozen=True)
class Run:
    id: str
    model: str            # preset or key=value spec
    layout: Layout
    topology: str
    metric: str           # step_s, hw_tflops, tflops
    value: float
    source: str
    memory_gib: dict[str, float] = field(default_factory=dict)
    miss: str = ""        # why the plan is not within 15% yet ("" where it is)

    def model_obj(self) -> Model:
        return parse_model(self.model)


def _gpt(layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048) -> str:
    return f"layers={layers},hidden={hidden},heads={heads},seq={seq},vocab={vocab},attention=standard"


def _nar(id_: str, layers: int, hidden: int, heads: int, tp: int, pp: int, gpus: int, gbs: int, mbs: int,
         v: int, tflops: float, overlap: bool) -> Run:
    dp = gpus // (tp * pp)
    lay = Layout(tp=tp, pp=pp, dp=dp, micro_batch=mbs, global_batch=gbs, virtual_stages=v, recompute="full",
                 zero=0, dtype="fp16", overlap_grad_reduce=overlap, overlap_param_gather=False)
    return Run(id_, _gpt(layers, hidden, heads), lay, f"{gpus // 8}xdgx-a100", "hw_tflops", tflops, NARAYANAN)


def _kor(id_: str, preset: str, tp: int, pp: int, gbs: int, mbs: int, v: int, mode: str, step_s: float,
         mem: dict[str, float] | None = None) -> Run:
    sel = mode == "seqsel"
    lay = Layout(tp=tp, pp=pp, dp=1, micro_batch=mbs, global_batch=gbs, virtual_stages=v,
                 recompute="selective" if sel else "full", sp=sel, zero=0, dtype="fp16")
    m = PRESETS[preset]
    spec = _gpt(m.layers, m.hidden, m.heads)
    return Run(id_, spec, lay, f"{max(1, tp * pp // 8)}xdgx-a100", "step_s", step_s, KORTHIKANTI, mem or {})


def _llama(id_: str, gpus: int, cp: int, seq: int, tflops: float, v: int) -> Run:
    tp, pp = 8, 16
    dp = gpus // (tp * pp * cp)
    seqs = (16 << 20) // seq
    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, sp=True, micro_batch=1, global_batch=seqs, virtual_stages=v,
                 zero=2, recompute="none", dtype="bf16", order="tp-cp-pp-dp", cp_comm="allgather")
    spec = "llama3-405b" + (f",seq={seq}" if seq != 8192 else "")
    return Run(id_, spec, lay, f"{gpus // 8}xdgx-h100:net=roce-400g", "tflops", tflops, LLAMA3)


RUNS: tuple[Run, ...] = (
    # Narayanan 2021 Table 1: GPT weak scaling on A100, full recomputation, fp16; torch DDP (overlapped)
    # up to 18B, Megatron's local DDP (not overlapped) above; interleaved where the script sets layers per
    # virtual stage
    _nar("N1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, 1, 137, True),
    _nar("N3.6B", 30, 3072, 32, 2, 1, 64, 512, 16, 1, 138, True),
    _nar("N7.5B", 36, 4096, 32, 4, 1, 128, 512, 16, 1, 142, True),
    _nar("N18B", 40, 6144, 48, 8, 1, 256, 1024, 8, 1, 135, True),
    _nar("N39B", 48, 8192, 64, 8, 2, 512, 1536, 4, 1, 138, False),
    _nar("N76B", 60, 10240, 80, 8, 4, 1024, 1792, 2, 3, 140, False),
    _nar("N145B", 80, 12288, 96, 8, 8, 1536, 2304, 2, 2, 148, False),
    _nar("N310B", 96, 16384, 128, 8, 16, 1920, 2160, 1, 2, 155, False),
    _nar("N530B", 105, 20480, 128, 8, 35, 2520, 2520, 1, 3, 163, False),
    _nar("N1T", 128, 25600, 160, 8, 64, 3072, 3072, 1, 1, 163, False),
    # Megatron-LM README (2021): GPT-3 175B on 1024 A100, TP 8 x PP 16, batch 1536: 138 TFLOPS a GPU
    Run("M175B", _gpt(96, 12288, 96), Layout(tp=8, pp=16, dp=8, micro_batch=1, global_batch=1536, recompute="full",
                                               zero=0, dtype="fp16", overlap_grad_reduce=False,
                                               overlap_param_gather=False),
        "128xdgx-a100", "hw_tflops", 138,
        "NVIDIA/Megatron-LM README (2021, commit 69e251455e): 175B on 1024 A100, ~32 s an iteration, 138 TFLOPS"),
    # Korthikanti 2022 Table 5: full recomputation against sequence parallelism + selective recomputation
    _kor("K22B-full", "megatron-22b", 8, 1, 4, 4, 1, "full", 1.42),
    _kor("K22B-sel", "megatron-22b", 8, 1, 4, 4, 1, "seqsel", 1.10),
    _kor("K175B-full", "gpt3-175b", 8, 8, 64, 1, 3, "full", 18.13),
    _kor("K175B-sel", "gpt3-175b", 8, 8, 64, 1, 3, "seqsel", 13.75),
    _kor("K530B-full", "megatron-530b", 8, 35, 280, 1, 3, "full", 49.05),
    _kor("K530B-sel", "megatron-530b", 8, 35, 280, 1, 3, "seqsel", 37.83),
    _kor("K1T-full", "megatron-1t", 8, 64, 512, 1, 1, "full", 94.42),
    _kor("K1T-sel", "megatron-1t", 8, 64, 512, 1, 1, "seqsel", 71.49),
    # Llama 3 405B on H100 (Table 4): 8K sequences on 8K and 16K GPUs; 128K sequences with CP 16
    _llama("L405B-8K", 8192, 1, 8192, 430, 7),
    _llama("L405B-16K", 16384, 1, 8192, 400, 7),
    _llama("L405B-16K-cp16", 16384, 16, 131072, 380, 7),
    # Megatron-DeepSpeed: BLOOM 176B on Jean Zay (48 nodes of 8 A100 80GB; 4 x 100 Gb/s Omni-Path a node, here
    # 8 x EDR 100 Gb/s), TP 4, PP 12, DP 8, micro-batch 2, global batch 2048, ZeRO 1, bf16, full recomputation.
    # This row sets engine.deepspeed (plan/hardware.py): a fit, not a check
    Run("BLOOM", _gpt(70, 14336, 112, vocab=250680),
        Layout(tp=4, pp=12, dp=8, micro_batch=2, global_batch=2048, zero=1, recompute="full", dtype="bf16",
               engine="deepspeed"),
        "48xdgx-a100:net=ib-edr", "hw_tflops", 150,
        "BigScience, BLOOM 176B model card (bigscience.notion.site): 'training throughput: about 150 TFLOPs', 384 "
        "A100 80GB, one copy of the model on 48 GPUs; TP 4 x PP 12: BLOOM paper, arXiv:2211.05100; micro-batch 2, "
        "global batch 2048, the embedding partitioned like a block (first and last stage 5 layers, the others 6): "
        "bigscience-workshop/bigscience train/tr11-176B-ml"),
    # DeepSpeed + Megatron: MT-NLG 530B on 280, 350, 420 DGX A100 nodes, TP 8, PP 35, global batch 1920
    *[Run(f"MTNLG-{n}", _gpt(105, 20480, 128, vocab=50272),
          Layout(tp=8, pp=35, dp=n * 8 // 280, micro_batch=1, global_batch=1920, zero=1, recompute="full",
                 dtype="bf16", engine="deepspeed"), f"{n}xdgx-a100", "step_s", t,
          "Smith et al., 'Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B', arXiv:2201.11990, section "
          f"2.4: {t} s an iteration on {n} DGX A100 nodes ({tf} TFLOPS a GPU), as cli99/llm-analysis "
          "examples/megatron-turing-nlg quotes it; DeepSpeed's pipeline engine: --engine deepspeed, whose rate "
          "the BLOOM row sets (without it the plan is 19-22% fast)")
      for n, t, tf in ((280, 60.1, 126), (350, 50.2, 121), (420, 44.4, 113))],
    # GPT-NeoX-20B on 12 servers of 8 A100-SXM4-40GB (4 HDR HCAs a server, here the first DGX A100's 8), TP 2, PP 4,
    # DP 12, micro-batch 4 x 32 accumulated, ZeRO 1, fp16, activation checkpointing, DeepSpeed's pipeline engine.
    # 117 TFLOPS a GPU by gpt-neox's get_flops (Narayanan's hardware count with recomputation; its vocabulary term
    # is added to the total instead of multiplied, so it counts no output layer): 96 x 1536 x 2048 x 44 x 6144^2 x
    # (1 + 2048 / 36864) / (117e12 x 96) = 47.14 s an iteration
    Run("NEOX20B", _gpt(44, 6144, 64, vocab=50432) + ",tied=False",
        Layout(tp=2, pp=4, dp=12, micro_batch=4, global_batch=1536, zero=1, recompute="full", dtype="fp16",
               engine="deepspeed"),
        "12xdgx-a100-40gb", "step_s", 47.14,
        "Black et al., 'GPT-NeoX-20B', arXiv:2204.06745, section 3 (96 A100-SXM4-40GB, 117 TFLOPS a GPU); layout and "
        "batch: EleutherAI/gpt-neox configs/20B.yml; the TFLOPS formula: megatron/logging.py get_flops"),
    # Megatron-Bridge (NeMo 25.11) on DGX-H100 in FP8: model TFLOPS a GPU
    Run("B8B-fp8", "llama3-8b", Layout(tp=1, dp=8, zero=3, global_batch=128, dtype="fp8"), "dgx-h100", "tflops", 744,
        BRIDGE + ", Llama 3 8B, 8 GPUs, FSDP"),
    Run("B70B-fp8", "llama3-70b", Layout(tp=4, pp=8, dp=2, sp=True, global_batch=128, virtual_stages=5, dtype="fp8"),
        "8xdgx-h100", "tflops", 719, BRIDGE + ", Llama 3 70B, 64 GPUs"),
    Run("B405B-fp8", "llama3-405b", Layout(tp=8, pp=8, cp=2, dp=8, sp=True, global_batch=512, virtual_stages=8,
                                           dtype="fp8"),
        "128xdgx-h100", "tflops", 737, BRIDGE + ", Llama 3.1 405B, 1,024 GPUs"),
    # the same page on DGX-B200 (the GEMM fraction for B200 is an estimate, no row set it)
    Run("B200-405B-fp8", "llama3-405b", Layout(tp=4, pp=8, cp=2, dp=2, sp=True, global_batch=64, virtual_stages=8,
                                               dtype="fp8"),
        "16xhgx-b200", "tflops", 1667, BRIDGE.replace("DGX-H100", "DGX-B200") + ", Llama 3.1 405B, 128 GPUs"),
    Run("B200-8B-fp8", "llama3-8b", Layout(tp=1, dp=8, micro_batch=2, global_batch=128, dtype="fp8"), "hgx-b200",
        "tflops", 1576, BRIDGE.replace("DGX-H100", "DGX-B200") + ", Llama 3 8B, 8 GPUs"),
)


def _nemo(id_: str, model: str, gpus: int, gbs: int, mbs: int, tp: int, pp: int, cp: int, vp: int, seq: int,
          tokens: float, miss: str = "") -> Run:
    """A NeMo 24.07 DGX-H100 FP8 row: its tokens a second a GPU as a step time (the page's model TFLOPS count
    the attention differently by model; tokens are tokens)."""
    lay = Layout(tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), sp=tp > 1, micro_batch=mbs, global_batch=gbs,
                 virtual_stages=vp, dtype="fp8")
    return Run(id_, model, lay, f"{gpus // 8}xdgx-h100" if gpus > 8 else "dgx-h100", "step_s",
               round(gbs * seq / (tokens * gpus), 4), NEMO2407 + f": {tokens:,.0f} tokens/s a GPU", miss=miss)


_OLD = ("NeMo 24.07 (mid-2024) on a model 4,096 wide: the plan's rates are those of 2025's stacks (the same "
        "Llama 3 8B ran at 697 TFLOPS a GPU on NeMo 24.07 and 744 on NeMo 25.11) and it does not price the "
        "host's kernel launches that pace layers this small")
#: NeMo 24.07's pre-training table (DGX-H100, FP8): an independent set, none of it sets a parameter
NEMO_RUNS: tuple[Run, ...] = (
    _nemo("N24-GPT3-5B", "layers=24,hidden=4096,heads=32,seq=2048,vocab=50304", 64, 2048, 4, 1, 1, 1, 1, 2048,
          22521),
    _nemo("N24-GPT3-20B", "layers=44,hidden=6144,heads=48,seq=2048,vocab=50304", 64, 256, 2, 2, 1, 1, 1, 2048, 5851),
    _nemo("N24-GPT3-175B", "gpt3-175b", 128, 256, 1, 4, 8, 1, 6, 2048, 726),
    _nemo("N24-GPT3-175B-512", "gpt3-175b", 512, 2048, 2, 4, 8, 1, 6, 2048, 782),
    _nemo("N24-LLAMA2-7B", _LLAMA2 + "layers=32,hidden=4096,heads=32,ffn=11008", 8, 128, 1, 1, 1, 1, 1, 4096,
          16847),
    _nemo("N24-LLAMA2-13B", _LLAMA2 + "layers=40,hidden=5120,heads=40,ffn=13824", 16, 128, 1, 1, 4, 1, 10, 4096,
          8646),
    _nemo("N24-LLAMA2-70B", _LLAMA2 + "layers=80,hidden=8192,heads=64,kv_heads=8,ffn=28672", 64, 128, 1, 4, 4, 1,
          20, 4096, 1707),
    _nemo("N24-Nemotron4-340B", "layers=96,hidden=18432,heads=96,kv_heads=8,ffn=73728,seq=4096,vocab=256000", 128,
          32, 1, 8, 8, 1, 12, 4096, 322),
    _nemo("N24-LLAMA3-8B", "llama3-8b", 8, 128, 1, 1, 1, 2, 1, 8192, 12036,
          miss="the plan's step 20% short: " + _OLD),
    _nemo("N24-LLAMA3-70B", "llama3-70b", 64, 128, 1, 4, 4, 2, 5, 8192, 1533),
)

#: Mixtures of experts on H100 (Megatron-Core, tokens forced to balance over the experts). The first row sets
#: step.ELEMENTWISE_MOE; the rest are predictions from it
_Q30 = dict(tp=1, dp=16, ep=16, global_batch=1024, dispatcher="deepep")
_Q235 = dict(tp=2, pp=8, dp=16, ep=32, virtual_stages=4, sp=True)
MOE_RUNS: tuple[Run, ...] = (
    Run("Q30B-bf16", "qwen3-30b-a3b", Layout(**_Q30), "2xdgx-h100", "tflops", 244.039,
        BRIDGE_EPO + ", EP overlap off: 24.71 s a step (sets ELEMENTWISE_MOE)"),
    Run("Q30B-bf16-ov", "qwen3-30b-a3b", Layout(**_Q30, ep_overlap=True), "2xdgx-h100", "tflops", 287.305,
        BRIDGE_EPO + ", EP overlap on: 20.99 s"),
    Run("Q30B-bf16-recipe", "qwen3-30b-a3b", Layout(**_Q30, ep_overlap=True), "2xdgx-h100", "tflops", 299.352,
        BRIDGE_MOE),
    Run("Q30B-fp8-pp2", "qwen3-30b-a3b", Layout(tp=1, pp=2, dp=8, ep=8, virtual_stages=24, micro_batch=2,
                                                 global_batch=512, dtype="fp8"), "2xdgx-h100", "tflops", 241,
        BRIDGE_2509 + ", Qwen3-30B-A3B, 16 GPUs, TP1 PP2 VP24 EP8, MBS2 GBS512"),
    Run("Q30B-fp8", "qwen3-30b-a3b", Layout(**_Q30, dtype="fp8"), "2xdgx-h100", "tflops", 206,
        BRIDGE_2604 + ", Qwen3-30B-A3B, 16 GPUs, TP1 EP16, MBS1 GBS1024, HybridEP, no EP overlap",
        miss="the plan's step 19% short (254 TFLOPS a GPU): FP8 makes the plan faster than BF16 (244 for the BF16 run above) where the "
             "published FP8 run is slower than the published BF16 ones (244-299): the FP8 casts and scaling of a "
             "model 2,048 wide cost more than the plan's 6 bytes an element"),
    Run("Q235B-fp8", "qwen3-235b-a22b", Layout(**_Q235, global_batch=8192, dtype="fp8", ep_overlap=True),
        "32xdgx-h100", "tflops", 253,
        BRIDGE_2604 + ", Qwen3-235B-A22B, 256 GPUs, TP2 PP8 VP4 EP32, MBS1 GBS8192, alltoall dispatcher, EP overlap"),
    Run("Q235B-deepep", "qwen3-235b-a22b", Layout(**_Q235, global_batch=2048, dispatcher="deepep"), "32xdgx-h100",
        "tflops", 245, MODELZOO + ", TP2 EP32 PP8 VPP4 DP16, DeepEP: 19.7 s"),
    Run("Q235B-deepep-ov", "qwen3-235b-a22b", Layout(**_Q235, global_batch=2048, dispatcher="deepep",
                                                     ep_overlap=True), "32xdgx-h100", "tflops", 276,
        MODELZOO + ", the same with 1F1B overlap: 17.6 s"),
    Run("Q235B-fsdp", "qwen3-235b-a22b", Layout(tp=2, dp=128, ep=8, etp=1, sp=True, zero=3, recompute="full",
                                                micro_batch=4, global_batch=2048, dispatcher="deepep"),
        "32xdgx-h100", "tflops", 276, MODELZOO + ", TP2 EP8 DP128 FSDP, MBS4, full recompute, DeepEP: 17.6 s",
        miss="the plan's step 44% long: ZeRO-3 gathers each layer's experts over their 32 data-parallel ranks, "
             "one a host (605 MB in 12.9 ms, and reduce-scatters 1.2 GB of fp32 gradients), more than a layer's "
             "compute; the run's gradient precision and prefetch depth are not published (bf16 gradients: +16.6%)"),
    Run("Q235B-tp4", "qwen3-235b-a22b", Layout(tp=4, pp=8, dp=8, ep=8, etp=1, virtual_stages=4, sp=True,
                                               global_batch=2048, dispatcher="deepep"), "32xdgx-h100", "tflops", 167,
        MODELZOO + ", TP4 EP8 PP8 VPP4 DP8 (EDP 4), DeepEP: 29.0 s",
        miss="the plan's step 39% short (274 TFLOPS a GPU): 1,024 tokens a GPU a layer (sequence 4,096 over TP4) is too little work to "
             "keep an H100 busy; the host's kernel launches set the pace there, which the plan does not price"),
    # Blackwell: Megatron-Bridge 26.04.01 on DGX-B200 and DGX-GB200, MXFP8 (the B200 GEMM fraction is an estimate)
    Run("B200-Q30B", "qwen3-30b-a3b", Layout(tp=1, dp=8, ep=8, micro_batch=4, global_batch=512, dtype="fp8",
                                            dispatcher="deepep"), "hgx-b200", "tflops", 619,
        BRIDGE_BW + ", DGX-B200, Qwen3-30B-A3B, 8 GPUs, TP1 EP8, MBS4 GBS512"),
    Run("GB200-Q30B", "qwen3-30b-a3b", Layout(tp=1, dp=8, ep=8, micro_batch=4, global_batch=512, dtype="fp8",
                                             dispatcher="deepep"), "1xgb200-nvl72:gpus=8", "tflops", 599,
        BRIDGE_BW + ", DGX-GB200, Qwen3-30B-A3B, 8 GPUs, TP1 EP8, MBS4 GBS512"),
    Run("GB200-Q235B", "qwen3-235b-a22b", Layout(tp=1, pp=8, dp=32, ep=32, virtual_stages=3, global_batch=8192,
                                                dtype="fp8", dispatcher="deepep"), "4xgb200-nvl72", "tflops", 840,
        BRIDGE_BW + ", DGX-GB200, Qwen3-235B-A22B, 256 GPUs, TP1 PP8 VP3 EP32, MBS1 GBS8192"),
    # its recipe (scripts/performance/configs/qwen/qwen3_workload_base_configs.py at 39d02fe, B200 V1/V2): the
    # default alltoall dispatcher, no EP overlap, no CUDA graphs; the GB200 run's: HybridEP and CUDA graphs of the
    # attention, router and preprocessing
    Run("B200-Q235B", "qwen3-235b-a22b", Layout(tp=1, pp=8, dp=32, ep=8, global_batch=8192, dtype="fp8",
                                               dispatcher="alltoall"), "32xhgx-b200", "tflops", 560,
        BRIDGE_BW + ", DGX-B200, Qwen3-235B-A22B, 256 GPUs, TP1 PP8 EP8, MBS1 GBS8192",
        miss="the plan's step 25% short: the published B200 run is a third slower than the same model on GB200 "
             "(560 against 840 TFLOPS a GPU, the plan within 4% there) where the plan has the two close; the B200 "
             "recipe runs the alltoall dispatcher without CUDA graphs (the GB200 one HybridEP with graphs), and the "
             "plan prices no host's kernel launches"),
    # GPT-OSS 120B on 64 H100s, BF16, TP 1, PP 4, EP 8, alltoall dispatcher (compared by tokens a second)
    Run("OSS120B", "gpt-oss-120b", Layout(tp=1, pp=4, dp=16, ep=8, global_batch=1280), "8xdgx-h100", "step_s",
        round(1280 * 4096 / (5824 * 64), 4),
        "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 26.04.01 NeMo container, DGX-H100, BF16, GPT OSS "
        "120B, 64 GPUs, TP1 PP4 EP8, MBS1 GBS1280 (recipe src/megatron/bridge/perf_recipes/gpt_oss/h100/gpt_oss.py): "
        "5,824 tokens/s a GPU",
        miss="the plan's step 31% short: layers 2,880 wide with 4,096 tokens a GPU (small expert GEMMs, many "
             "small kernels); the attention sinks and biases are not priced, and ELEMENTWISE_MOE is Qwen3's"),
    Run("OSS120B-mb4", "gpt-oss-120b", Layout(tp=1, pp=4, dp=16, ep=8, micro_batch=4, global_batch=512),
        "8xdgx-h100", "step_s", round(512 * 4096 / (5630 * 64), 4),
        "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 25.11 NeMo container, DGX-H100, GPT OSS "
        "120B, 64 GPUs, BF16, TP1 PP4 EP8, MBS4 GBS512: 5,630 tokens/s a GPU"),
    # Mixtral 8x22B on 16 DGX H100 (Megatron-MoE-ModelZoo's benchmarking defaults: TP2 PP8 EP8 ETP1, MBS1 GBS256,
    # alltoall dispatcher, BF16); the token-drop run pads every expert to capacity 1.0, so the experts' work is
    # balanced as the plan has it (the dropless run, aux-loss routing: about 455)
    Run("MIX8x22B", "mixtral-8x22b", Layout(tp=2, pp=8, dp=8, ep=8, etp=1, sp=True, global_batch=256,
                                            dispatcher="alltoall"), "16xdgx-h100", "tflops", 470,
        MODELZOO_MIX + ": 'Token Drop training, perf should be around 470TFLOPS for H100' (--moe-expert-capacity-"
        "factor 1.0 --moe-pad-expert-input-to-capacity)",
        miss="the plan's step 17% long (401 TFLOPS a GPU): the run reaches 47.5% MFU through a 1F1B bubble of 7 "
             "stage times in 39 (PP 8, 32 micro-batches, no interleaving), which puts its GEMMs near 0.71 of the "
             "BF16 peak where the plan's H100 fraction is 0.62 (set from the Megatron-LM README's dense weak "
             "scaling)"),
    # the same page's long sequences: TP 4, PP 8, VPP 4, EP 8, CP 1-8, global batch 256, forced balance;
    # `--recompute-granularity selective --recompute-modules layernorm moe` (the experts' block recomputed)
    *(Run(f"Q235B-{seq // 1024}K", f"qwen3-235b-a22b,seq={seq}",
          Layout(tp=4, pp=8, dp=8 // cp, cp=cp, ep=8, etp=1, virtual_stages=4, sp=True, global_batch=256,
                 recompute="moe", dispatcher="deepep"), "32xdgx-h100", "tflops", tf,
          MODELZOO_LONG + f": sequence {seq:,}, CP {cp}")
      for seq, cp, tf in ((16384, 1, 295), (32768, 2, 335), (65536, 4, 368), (131072, 8, 389))),
)

MLM_H100 = ("NVIDIA/Megatron-LM README and images/model_table.png at f2e5db402c (2024-07-15, Megatron-Core r0.8.0): "
            "GPT weak scaling on H100, vocabulary 131,072, sequence 4,096, --overlap-grad-reduce --overlap-param-gather "
            "--tp-comm-overlap; per-GPU TFLOPS as core_r0.8.0's num_floating_point_operations counts them (every "
            "attention score)")


def _mlm(id_: str, heads: int, hidden: int, layers: int, tp: int, pp: int, dp: int, gbs: int, tflops: float,
         miss: str = "") -> Run:
    """A row of the Megatron-LM README's H100 weak-scaling table, compared as a step time: the table's TFLOPS a
    GPU through core_r0.8.0's FLOP formula (GPT: 4h GeLU MLP, MHA, untied output layer). What the page states
    is planned as stated (TP, PP, DP, global batch, the overlaps: TP's collectives hidden, --tp-overlap 1); what
    it does not is the planner's default (micro-batch 1, no interleaving, no recomputation, BF16, sequence
    parallelism with TP, the distributed optimizer)."""
    spec = f"layers={layers},hidden={hidden},heads={heads},seq=4096,vocab=131072,tied=False"
    # core_r0.8.0's count is the model's FLOPs with every attention score counted (as standard attention runs)
    flops = parse_model(spec + ",attention=standard").model_flops(gbs)
    gpus = tp * pp * dp
    lay = Layout(tp=tp, pp=pp, dp=dp, sp=tp > 1, micro_batch=1, global_batch=gbs, dtype="bf16", zero=1,
                 tp_overlap=1.0)
    return Run(id_, spec, lay, f"{gpus // 8}xdgx-h100", "step_s", round(flops / (tflops * 1e12 * gpus), 4),
               MLM_H100 + f": {tflops} TFLOPS a GPU on {gpus} GPUs", miss=miss)


_SMALL = ("a model {w} wide with 4,096 tokens a GPU a micro-batch: the plan's step {e} short, as NeMo 24.07's "
          "small models were; the host's kernel launches, which pace layers this small, are not priced")
#: the Megatron-LM README's H100 weak-scaling table (the 462B row is the run behind ``gemm.h100``'s derivation;
#: the other eight are predictions)
MLM_RUNS: tuple[Run, ...] = (
    _mlm("MLM-1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8, miss=_SMALL.format(w="2,048", e="26%")),
    _mlm("MLM-7.1B", 32, 4096, 30, 2, 1, 48, 192, 465.9, miss=_SMALL.format(w="4,096", e="20%")),
    _mlm("MLM-16B", 48, 6144, 32, 4, 1, 48, 192, 489.1),
    _mlm("MLM-32B", 56, 7168, 48, 8, 1, 48, 192, 459.6),
    _mlm("MLM-70B", 64, 8192, 84, 8, 2, 48, 384, 419.7),
    _mlm("MLM-119B", 80, 10240, 92, 8, 4, 48, 768, 420.5),
    _mlm("MLM-177B", 96, 12288, 96, 8, 6, 48, 1152, 432.8),
    _mlm("MLM-314B", 128, 16384, 96, 8, 8, 48, 1536, 474.4),
    _mlm("MLM-462B", 144, 18432, 112, 8, 16, 48, 3072, 459.9),
)

TORCHTITAN = ("pytorch/torchtitan docs/performance.md (Llama 3 rows at 4d88a8a, 2024-12-03; Llama 2 rows at 3faaa1a, "
              "2024-08-23): FSDP2 on 64 A100 80GB")


def _titan(id_: str, model: str, mbs: int, recompute: str, seq: int, tokens: float, miss: str = "") -> Run:
    """A torchtitan row on 64 A100 80GB: 1-D FSDP2 (ZeRO-3) over every GPU, BF16, local batch ``mbs`` (global
    batch 64 x mbs), its tokens a second a GPU as a step time. The page does not name the network: planned on
    eight DGX A100 (8 x 200 Gb/s a node)."""
    lay = Layout(tp=1, pp=1, dp=64, micro_batch=mbs, global_batch=64 * mbs, zero=3, recompute=recompute,
                 dtype="bf16")
    return Run(id_, model, lay, "8xdgx-a100", "step_s", round(mbs * seq / tokens, 4),
               TORCHTITAN + f": {tokens:,.0f} tokens/s a GPU, local batch {mbs}, activation checkpointing "
               f"{recompute}", miss=miss)


#: torchtitan's published FSDP2 rows on A100 that the planner lays out as run (its "selective" checkpointing,
#: of every other layer or of the operators that are not matrix products, is not the plan's): an
#: independent set from outside the Megatron family, none of it sets a parameter
TITAN_RUNS: tuple[Run, ...] = (
    _titan("TT-L2-13B", _LLAMA2 + "layers=40,hidden=5120,heads=40,ffn=13824", 2, "none", 4096, 2162,
           miss="no recomputation: the plan's step 15% short, as MosaicML's MPT rows without activation "
                "checkpointing (docs/plan.md); with full recomputation the same FSDP2 runs are within 8%"),
    _titan("TT-L2-70B", _LLAMA2 + "layers=80,hidden=8192,heads=64,kv_heads=8,ffn=28672", 2, "full", 4096, 353),
    _titan("TT-L3-70B", "llama3-70b", 1, "full", 8192, 331),
)

#: every run the planner is checked against: the dense ones, NeMo 24.07's, the mixtures of experts, then the
#: Megatron-LM README's H100 weak scaling and torchtitan's FSDP2 rows
RUNS = RUNS + NEMO_RUNS + MOE_RUNS + MLM_RUNS + TITAN_RUNS

#: Published memory a GPU of a mixture of experts' run: (run id, GiB, source). PyTorch's peak allocated memory,
#: which holds the transient buffers (the dispatcher's, the logits' softmax) besides what the plan counts
MOE_MEMORY: tuple[tuple[str, float, str], ...] = (
    ("Q30B-bf16-ov", 62.166, BRIDGE_EPO + ": 'rank-0 peak allocated memory was 62.166 GiB' (EP overlap on)"),
)

#: Korthikanti 2022 Figure 1 (also calculon-ai/calculon calculon/llm/validation.py, seqsel_fig1): GiB per
#: GPU of parameters + optimizer state and of activations, without and with sequence parallelism +
#: selective recomputation (no recomputation at all in "none")
MEMORY: tuple[tuple[str, str, int, int, int, int, int, str, float, float], ...] = (
    # preset, mode, tp, pp, batch, micro, v, topology, params+optimizer GiB, activations GiB
    ("megatron-22b", "none", 8, 1, 4, 4, 1, "dgx-a100", 45.5625, 59.25),
    ("megatron-22b", "seqsel", 8, 1, 4, 4, 1, "dgx-a100", 45.5625, 9.5625),
    ("gpt3-175b", "none", 8, 8, 64, 1, 3, "8xdgx-a100", 45.5625, 66.84375),
    ("gpt3-175b", "seqsel", 8, 8, 64, 1, 3, "8xdgx-a100", 45.5625, 12.3515625),
    ("megatron-530b", "none", 8, 35, 280, 1, 3, "35xdgx-a100", 31.640625, 114.0234375),
    ("megatron-530b", "seqsel", 8, 35, 280, 1, 3, "35xdgx-a100", 31.640625, 23.076171875),
    ("megatron-1t", "none", 8, 64, 512, 1, 1, "64xdgx-a100", 32.958984375, 131.25),
    ("megatron-1t", "seqsel", 8, 64, 512, 1, 1, "64xdgx-a100", 32.958984375, 26.5625),
)


def run_plan(run: Run, ctx: Any = None) -> Any:
    from .step import plan_step

    return plan_step(run.model_obj(), run.layout, ctx if ctx is not None else run.topology)


def predicted(run: Run, plan: Any) -> float:
    """The plan's figure in the run's metric."""
    if run.metric == "step_s":
        return plan.step_s
    if run.metric == "hw_tflops":
        return plan.hw_tflops_per_gpu
    return plan.tflops_per_gpu


def memory_rows() -> list[tuple[str, str, Layout, str, float, float]]:
    out = []
    for preset, mode, tp, pp, gbs, mbs, v, topo, po, act in MEMORY:
        sel = mode == "seqsel"
        lay = Layout(tp=tp, pp=pp, dp=1, micro_batch=mbs, global_batch=gbs, virtual_stages=v,
                     recompute="selective" if sel else "none", sp=sel, zero=0, dtype="fp16")
        m = PRESETS[preset]
        out.append((f"{preset}-{mode}", _gpt(m.layers, m.hidden, m.heads), lay, topo, po, act))
    return out
