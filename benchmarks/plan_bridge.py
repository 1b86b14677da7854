"""`interlink plan` against every pre-training row of Megatron-Bridge's performance pages that the planner can
lay out: a wide check beside the curated rows of benchmarks/plan_published.py (which tests assert).

    python3 benchmarks/plan_bridge.py            # the table and the count within 15%
    python3 benchmarks/plan_bridge.py --json F   # the rows as JSON too

Data: benchmarks/data/megatron_bridge_perf.csv, the rows of NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md
and docs/performance-summary-archive.md at commit 4ab94dfad36641cabdeb96452b21bf676aac4772 (releases 25.09 to
26.08; tokens a second a GPU and model TFLOPS a GPU as printed; the pages force the experts' load to balance).

How a row becomes a plan (the pages print no more than this, so the rest is the planner's default):
- models: Llama 3 8B / 70B, Llama 3.1 405B, Qwen3-30B-A3B, Qwen3-235B-A22B and GPT-OSS 120B by preset (the
  others, DeepSeek-V3, Nemotron 3, Kimi K2, are not presets); systems DGX-H100, DGX-B200 and DGX-GB200 (B300 and
  GB300 have no topology preset); BF16 as bf16, FP8-CS / MXFP8 / FP8-MX as fp8; NVFP4 and rows whose precision
  the page does not state are skipped;
- dp = GPUs / (tp pp cp), sequence parallelism where tp > 1, ZeRO-3 where the FSDP column is set (else the
  distributed optimizer, ZeRO-1), expert parallelism over the DeepEP/HybridEP dispatcher, no EP overlap, no
  recomputation (the recipes' recompute and overlap settings are not on the page);
- the error is of the step time, from tokens a second (global batch x sequence / (tokens a second x GPUs)).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from interlink.plan import Layout, PlanError  # noqa: E402
from interlink.plan.published import Run, run_plan  # noqa: E402

DATA = HERE / "data" / "megatron_bridge_perf.csv"
MODELS = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3-405b",
          "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b", "GPT OSS 120B": "gpt-oss-120b"}
DEFAULT_SEQ = {"llama3-8b": 8192, "llama3-70b": 8192, "llama3-405b": 8192}


def _int(x: str, default: int = 1) -> int:
    return int(x) if x.strip().isdigit() else default


def topology(system: str, gpus: int) -> str | None:
    if system == "DGX-H100":
        return f"{gpus // 8}xdgx-h100" if gpus > 8 else "dgx-h100"
    if system == "DGX-B200":
        return f"{gpus // 8}xhgx-b200" if gpus > 8 else "hgx-b200"
    if system == "DGX-GB200":
        return f"{math.ceil(gpus / 72)}xgb200-nvl72" if gpus >= 72 else f"1xgb200-nvl72:gpus={gpus}"
    return None


def rows() -> list[dict]:
    out = []
    for r in csv.DictReader(open(DATA)):
        model, topo = MODELS.get(r["model"]), topology(r["system"], _int(r["gpus"]))
        prec = r["precision"].upper()
        why = ("not a planner preset" if model is None else "no topology preset" if topo is None else
               "NVFP4" if "FP4" in prec else "precision not stated" if not prec else "")
        item = {"release": r["release"], "system": r["system"], "precision": r["precision"], "model": r["model"],
                "gpus": _int(r["gpus"]), "tokens_s_gpu": float(r["tokens_per_s_per_gpu"] or 0), "skipped": why}
        if why:
            out.append(item)
            continue
        g, tp, pp, cp, ep = _int(r["gpus"]), _int(r["tp"]), _int(r["pp"]), _int(r["cp"]), _int(r["ep"])
        seq, gbs, mbs = _int(r["seq"]), _int(r["gbs"]), _int(r["mbs"])
        kw = dict(tp=tp, pp=pp, cp=cp, dp=g // (tp * pp * cp), sp=tp > 1, micro_batch=mbs, global_batch=gbs,
                  virtual_stages=_int(r["vp"]), dtype="bf16" if prec.startswith("BF16") else "fp8",
                  zero=3 if _int(r["fsdp"], 0) > 0 else 1)
        if ep > 1:
            kw.update(ep=ep, dispatcher="deepep")
        spec = model + (f",seq={seq}" if seq != DEFAULT_SEQ.get(model, 4096) else "")
        item["layout"] = " ".join(f"{k}{v}" for k, v in (("tp", tp), ("pp", pp), ("cp", cp), ("vp", kw["virtual_stages"]),
                                                           ("ep", ep), ("mb", mbs), ("gbs", gbs), ("zero", kw["zero"])))
        published = gbs * seq / (item["tokens_s_gpu"] * g)
        try:
            plan = run_plan(Run(r["model"], spec, Layout(**kw), topo, "step_s", published, DATA.name))
        except PlanError as e:
            item["skipped"] = f"refused: {e}"
            out.append(item)
            continue
        item.update(published_step_s=round(published, 3), plan_step_s=round(plan.step_s, 3),
                    error=plan.step_s / published - 1, fits=plan.fits)
        out.append(item)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    got = rows()
    planned = [r for r in got if "error" in r]
    print("| release | system | precision | model | GPUs | layout | published s | plan s | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in planned:
        print(f"| {r['release']} | {r['system']} | {r['precision']} | {r['model']} | {r['gpus']} | {r['layout']} | "
              f"{r['published_step_s']} | {r['plan_step_s']} | {r['error'] * 100:+.1f}% |")
    errs = [abs(r["error"]) for r in planned]
    print(f"\n{len(planned)} rows planned of {len(got)}: {sum(e <= 0.15 for e in errs)} within 15%, mean |error| "
          f"{100 * sum(errs) / max(1, len(errs)):.1f}%")
    by: dict[str, list[float]] = {}
    for r in planned:
        by.setdefault(r["model"], []).append(abs(r["error"]))
    for m, es in by.items():
        print(f"  {m}: {sum(e <= 0.15 for e in es)} of {len(es)} within 15%, mean {100 * sum(es) / len(es):.1f}%")
    skipped: dict[str, int] = {}
    for r in got:
        if r["skipped"]:
            key = r["skipped"].split(":")[0]
            skipped[key] = skipped.get(key, 0) + 1
    print("skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(got, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
