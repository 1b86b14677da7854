"""`interlink plan` against MosaicML's MPT training benchmarks: every row of llm-foundry's benchmark tables, a
check from outside the Megatron family (PyTorch FSDP through Composer, no tensor or pipeline parallelism) beside
the curated rows of benchmarks/plan_published.py (which tests assert) and Megatron-Bridge's pages
(benchmarks/plan_bridge.py).

    python3 benchmarks/plan_mpt.py            # the table, and per GPU table the count within 15%
    python3 benchmarks/plan_mpt.py --json F   # the rows as JSON too

Data: benchmarks/data/llm_foundry_mpt.csv, the 216 rows of mosaicml/llm-foundry
scripts/train/benchmarking/README.md at commit 495218376830947dce625efabc4d86be7c47cc45 (2024-04-22): MPT 125M to
70B, sequences of 512 to 65,536 tokens, 8 to 512 GPUs, H100 80GB (BF16 and FP8), A100 80GB and A100 40GB (both
with 8 x 200 Gb/s RoCE a node), tokens a second a GPU as printed.

How a row becomes a plan (what the table prints, the rest from the model files):
- the model: llm-foundry's scripts/train/yamls/pretrain/mpt-<size>.yaml (n_layers, d_model, n_heads, a GeLU MLP
  of 4 d_model, vocabulary 50,368, the output layer tied to the embedding) and the attention the benchmark script
  ran (scripts/train/benchmarking/submit_benchmarks.py when the tables were measured: attn_impl triton,
  FlashAttention's 2022 Triton kernel): attention=flash-triton, whose rates (hardware.attn_triton_fraction) the
  two MPT-7B rows at 65,536 tokens set;
- the layout: data parallel over every GPU, FULL_SHARD as ZeRO-3 and SHARD_GRAD_OP as ZeRO-2, activation
  checkpointing as full recomputation, micro-batch and global batch as printed, BF16 (amp_bf16 and bf16) or FP8;
- the machines: dgx-h100 (8 NDR NICs a node, as the page's H100 clusters: "3200 Gbps" is not stated for them),
  dgx-a100 and dgx-a100-40gb with net=roce-200g (the page's 1,600 Gbps a node);
- the error is of the step time, from tokens a second a GPU (global batch x sequence / (that x GPUs)).
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from interlink.plan import Layout, PlanError  # noqa: E402
from interlink.plan.job import parse_model  # noqa: E402
from interlink.plan.step import plan_step  # noqa: E402

DATA = HERE / "data" / "llm_foundry_mpt.csv"
SOURCE = ("mosaicml/llm-foundry scripts/train/benchmarking/README.md at 495218376830947dce625efabc4d86be7c47cc45; "
          "models: scripts/train/yamls/pretrain/mpt-*.yaml")
#: llm-foundry's MPT sizes: (n_layers, d_model, n_heads)
MPT = {"125m": (12, 768, 12), "350m": (24, 1024, 16), "760m": (24, 1536, 12), "1b": (24, 2048, 16),
       "3b": (32, 2560, 20), "7b": (32, 4096, 32), "13b": (40, 5120, 40), "30b": (48, 7168, 56),
       "70b": (80, 8192, 64)}
MACHINE = {"h100_80gb": ("dgx-h100", ""), "a100_80gb": ("dgx-a100", "net=roce-200g"),
           "a100_40gb": ("dgx-a100-40gb", "net=roce-200g")}
TOLERANCE = 0.15


def topology(gpu: str, gpus: int) -> str:
    preset, opts = MACHINE[gpu]
    if gpus <= 8:
        return preset if gpus == 8 else f"{preset}:gpus={gpus}"
    return f"{gpus // 8}x{preset}" + (f":{opts}" if opts else "")


def plan_row(r: dict) -> dict:
    layers, hidden, heads = MPT[r["model"]]
    seq, gpus = int(r["seq"]), int(r["gpus"])
    spec = f"layers={layers},hidden={hidden},heads={heads},seq={seq},vocab=50368,attention=flash-triton"
    zero = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}[r["sharding"]]
    lay = Layout(tp=1, pp=1, dp=gpus, micro_batch=int(r["micro_batch"]), global_batch=int(r["global_batch"]),
                 zero=zero, recompute="full" if r["checkpointing"] == "True" else "none",
                 dtype="fp8" if "fp8" in r["precision"] else "bf16")
    published = int(r["global_batch"]) * seq / (float(r["tokens_per_s_per_gpu"]) * gpus)
    out = {"table": r["table"], "model": f"mpt-{r['model']}", "seq": seq, "gpus": gpus, "gpu": r["gpu"],
           "layout": lay.short(), "published_step_s": published}
    try:
        p = plan_step(parse_model(spec), lay, topology(r["gpu"], gpus))
    except PlanError as e:
        out["error"] = str(e)
        return out
    out.update(plan_step_s=p.step_s, err=p.step_s / published - 1, mfu=p.mfu, published_mfu=float(r["mfu"]) / 100,
               fits=p.fits)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    args = ap.parse_args()
    rows = [plan_row(r) for r in csv.DictReader(open(DATA))]
    print(f"# interlink plan against llm-foundry's MPT benchmarks ({SOURCE})")
    print("| table | model | seq | GPUs | layout | published step (s) | plan (s) | error | MFU published / plan |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "err" not in r:
            print(f"| {r['table']} | {r['model']} | {r['seq']} | {r['gpus']} | {r['layout']} | "
                  f"{r['published_step_s']:.3f} | not planned: {r['error']} | | |")
            continue
        print(f"| {r['table']} | {r['model']} | {r['seq']} | {r['gpus']} | {r['layout']} | {r['published_step_s']:.3f} | "
              f"{r['plan_step_s']:.3f} | {r['err'] * 100:+.1f}% | {r['published_mfu'] * 100:.1f}% / {r['mfu'] * 100:.1f}% |")
    print()
    print("| table | rows planned | within 15% | mean error | mean abs error | range |")
    print("|---|---|---|---|---|---|")
    for table in dict.fromkeys(r["table"] for r in rows):
        errs = [r["err"] for r in rows if r["table"] == table and "err" in r]
        if not errs:
            continue
        ok = sum(abs(e) <= TOLERANCE for e in errs)
        print(f"| {table} | {len(errs)} | {ok} | {statistics.mean(errs) * 100:+.1f}% | "
              f"{statistics.mean(abs(e) for e in errs) * 100:.1f}% | {min(errs) * 100:+.1f}% to {max(errs) * 100:+.1f}% |")
    planned = [r for r in rows if "err" in r]
    ok = sum(abs(r["err"]) <= TOLERANCE for r in planned)
    print(f"\n{ok} of {len(planned)} planned rows within 15% ({len(rows) - len(planned)} not planned)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"source": SOURCE, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
