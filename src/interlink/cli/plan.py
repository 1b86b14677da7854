"""``interlink plan``: what a training step costs on a cluster, and which parallel layout is best.

    interlink plan --model llama3-405b --topology 2048xdgx-h100 --tp 8 --pp 16 --global-batch 2048 \\
        --virtual-stages 7 --zero 2                                  # one layout: step time, MFU, memory
    interlink plan --model gpt3-175b --topology dgx-a100 --gpus 1024 --global-batch 1536   # search, top 10
    interlink plan --model llama3-70b --topology dgx-h100 --sweep-gpus 8,64,512,4096 --global-batch 1024 --plot s.png
    interlink plan --model layers=32,hidden=4096,heads=32,seq=4096,vocab=50257 --topology 2xdgx-h100 --tp 8 --json
    interlink plan --model layers=4,hidden=256,heads=4,seq=128,vocab=2048 --topology this --ranks 4 --zero 3 \
        --micro-batch 4 --backend gloo                 # this host's CPU ranks: torch FSDP2 over gloo

With parallel degrees (--tp/--pp/--dp/--cp/--ep) the layout is priced; the data-parallel degree fills
--gpus when it is not given. Without degrees, every feasible layout on --gpus GPUs (default: all of the
topology's) is priced and the ten fastest that fit are ranked. A topology that names one machine
(``dgx-h100``) grows to as many of them as --gpus needs. ``--topology this`` on a machine without GPUs
plans torch's DDP (--zero 0) or FSDP2 (--zero 3) on CPU ranks of this host (plan/host.py). docs/plan.md
describes the model and its sources.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import threading
import time
from typing import Any

from .text import note

_DEGREES = ("tp", "pp", "dp", "cp", "ep")
#: one layout's plan plays concurrent groups in the simulator up to this many GPUs (about a second more)
CONTENTION_MAX_GPUS = 8192


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "plan",
        help="price a training step (compute, every collective, bubble, memory) or search the best layout",
        description="Price one training step of a transformer on a cluster: every collective is the Schedule the "
                    "runtime would run on the group's ranks, priced by the cost model; compute from FLOPs; "
                    "memory per GPU. Without parallel degrees, search every layout and rank them.",
        epilog="Models: a preset (gpt3-175b, llama3-8b, llama3-70b, llama3-405b, mixtral-8x7b, megatron-1t, "
               "megatron-530b, megatron-22b), PRESET,key=value to change it, layers=L,hidden=H,heads=A,seq=S,vocab=V "
               "and optionally kv_heads=, ffn=, experts=, top_k=, mlp=swiglu, attention=standard|flash-triton (all comma-separated, "
               "no spaces: docs/plan.md), or a JSON file of those keys.",
    )
    p.add_argument("--model", "-m", required=True, metavar="SPEC", help="preset, key=value list or JSON file")
    p.add_argument("--topology", "-t", default="this", metavar="SPEC",
                   help="cluster (2048xdgx-h100, 16xdgx-a100:net=roce-400g), a machine preset grown to --gpus, a "
                        "file, or 'this' (default)")
    p.add_argument("--gpus", "--ranks", "-n", dest="gpus", type=int, default=None, metavar="N",
                   help="GPUs (ranks) of the job (default: tp x pp x dp x cp, or all of the topology's)")
    for d, what in (("tp", "tensor"), ("pp", "pipeline"), ("dp", "data"), ("cp", "context"), ("ep", "expert")):
        p.add_argument(f"--{d}", type=int, default=None, metavar="N", help=f"{what}-parallel degree")
    p.add_argument("--etp", type=int, default=None, metavar="N",
                   help="expert tensor parallelism (default: --tp where --ep divides cp x dp, else 1: the experts' "
                        "groups folded over the tensor-parallel ranks too)")
    p.add_argument("--dispatcher", default="alltoall", choices=("alltoall", "deepep"),
                   help="the experts' token dispatcher: alltoall (Megatron-Core's: a copy for each expert a token "
                        "visits) or deepep (DeepEP/HybridEP, Megatron-Core's flex dispatcher: a token crosses the "
                        "network once per host it visits and reaches each GPU once)")
    p.add_argument("--ep-overlap", action="store_true",
                   help="the experts' all-to-alls under another micro-batch's compute (Megatron-Core's "
                        "overlap_moe_expert_parallel_comm)")
    p.add_argument("--sp", dest="sp", action="store_true", default=None,
                   help="sequence parallelism (default: on when --tp > 1)")
    p.add_argument("--no-sp", dest="sp", action="store_false", help="no sequence parallelism")
    p.add_argument("--zero", type=int, default=None, choices=(0, 1, 2, 3),
                   help="ZeRO stage: 0 all-reduce, 1 optimizer sharded (default), 2 + gradients, 3 FSDP")
    p.add_argument("--recompute", default=None, choices=("none", "selective", "full", "moe"),
                   help="activation recomputation (default none; moe: the experts' block, Megatron-Core's "
                        "--recompute-modules moe)")
    p.add_argument("--micro-batch", type=int, default=None, metavar="B", help="sequences per micro-batch (default 1)")
    p.add_argument("--global-batch", type=int, default=0, metavar="B", help="sequences per step "
                                                                             "(default: 4M tokens' worth)")
    p.add_argument("--global-tokens", type=float, default=0, metavar="T", help="tokens per step instead of "
                                                                                "--global-batch (e.g. 16e6)")
    p.add_argument("--virtual-stages", type=int, default=None, metavar="V", help="interleaved 1F1B: model chunks per "
                                                                                "pipeline rank (default 1)")
    p.add_argument("--compress", default="none", metavar="C", help="gradient compression: none, fp8, bf16, powersgd:R")
    p.add_argument("--order", default="tp-cp-ep-dp-pp", metavar="ORDER",
                   help="how groups map onto ranks, innermost first (default Megatron's tp-cp-ep-dp-pp)")
    p.add_argument("--cp-comm", default="ring", choices=("ring", "allgather"),
                   help="context parallelism: ring attention under the attention compute (default), or an exposed "
                        "all-gather of K and V (Llama 3)")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp8"), help="GEMM precision (default bf16)")
    p.add_argument("--engine", default="megatron", choices=("megatron", "deepspeed"),
                   help="the training framework: megatron (Megatron-LM, Megatron-Core, NeMo: the default) or deepspeed "
                        "(Megatron-DeepSpeed's pipeline engine: its layers at 0.884 of Megatron-LM's rate, from BLOOM)")
    p.add_argument("--no-overlap", action="store_true",
                   help="gradient reduction and parameter gather after the backward, not under it")
    p.add_argument("--tp-overlap", type=float, default=0.0, metavar="F",
                   help="fraction of tensor-parallel communication hidden under GEMMs (default 0)")
    p.add_argument("--contention", dest="contention", action="store_true", default=None,
                   help="play every group of a kind at once in the simulator and charge what sharing links costs "
                        "(default for one layout of up to 8,192 GPUs; never in the search)")
    p.add_argument("--no-contention", dest="contention", action="store_false",
                   help="price each group alone")
    p.add_argument("--memory", type=float, default=None, metavar="GIB", help="GPU memory (default: the GPU's)")
    p.add_argument("--top", type=int, default=10, help="search: layouts to list (default 10)")
    p.add_argument("--sweep-gpus", default=None, metavar="N,N,...", help="the best layout at each GPU count")
    p.add_argument("--plot", default=None, metavar="FILE", help="with --sweep-gpus: draw the scaling curve (PNG)")
    p.add_argument("--trace", default=None, metavar="FILE", help="write a Chrome/Perfetto trace of one step")
    p.add_argument("--backend", default="interlink", choices=("interlink", "gloo"),
                   help="--topology this without GPUs: torch.distributed's backend (default interlink)")
    p.add_argument("--bucket-mb", type=float, default=25.0, metavar="MB",
                   help="--topology this without GPUs: DDP's bucket_cap_mb (default 25, torch's)")
    p.add_argument("--recalibrate", action="store_true",
                   help="--topology this without GPUs: measure this host's compute rates again (else the stored "
                        "ones; measured once when there are none, at the model's own shapes: seconds for a small "
                        "model, hours for a billion-parameter one, most of it 27 training steps of the model; "
                        "the command says how long first)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)
    return p


class _Progress:
    """Progress on stderr, once something has taken more than two seconds: a line a message, each with the
    command's clock (rich installed and stderr a terminal: one line with a spinner, redrawn in place), and
    while a message stands longer than HEARTBEAT_S, again every HEARTBEAT_S (rich: every second) with how
    long it has run and, where the message says the time left ('about N s left', 'about N min left'), that
    time less what has passed since."""

    HEARTBEAT_S = 5.0

    def __init__(self, quiet: bool = False) -> None:
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.quiet = quiet
        self.msg: str | None = None
        self.msg_t = 0.0
        self.lock = threading.Lock()
        self.beat: threading.Thread | None = None
        self.done = threading.Event()
        self.rich: Any = None
        self.task: Any = None

    def elapsed(self) -> float:
        """Seconds since the command started: the one clock of its progress lines and its header."""
        return time.perf_counter() - self.t0

    def __call__(self, msg: str) -> None:
        now = self.elapsed()
        with self.lock:
            self.msg, self.msg_t = msg, now
        if self.beat is None and not self.quiet:  # from the first message: no wait past HEARTBEAT_S unsaid
            self.beat = threading.Thread(target=self._beat, name="interlink-plan-progress", daemon=True)
            self.beat.start()
        if self.quiet or now < 2.0 or now - self.last < 1.0:
            return
        self._emit(msg, now)

    def _emit(self, text: str, now: float) -> None:
        with self.lock:
            if self.done.is_set():
                return
            self.last = now
            if self.rich is None and sys.stderr.isatty():
                self._start_rich()
            if self.rich is not None:  # one line redrawn in place: the same clock as the plain lines
                self.rich.update(self.task, description=f"[{now:5.1f} s] {text}")
                return
            print(f"interlink plan: [{now:5.1f} s] {text}", file=sys.stderr, flush=True)

    def _start_rich(self) -> None:
        try:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn
        except ImportError:
            self.rich = None
            return
        # stdout stays the result's: rich draws on stderr and leaves stdout alone
        self.rich = Progress(SpinnerColumn(), TextColumn("[bold]interlink plan[/] {task.description}"),
                             console=Console(stderr=True), redirect_stdout=False, redirect_stderr=False)
        self.rich.start()
        self.task = self.rich.add_task("", total=None)

    @staticmethod
    def still(msg: str, since: float) -> str:
        """``msg`` ``since`` seconds after it was said: its time left less ``since``, and how long it has run."""
        m = re.search(r"about (\d+) (s|min) left", msg)
        if m:
            from ..plan.host import fmt_left

            left = int(m.group(1)) * (60 if m.group(2) == "min" else 1) - since
            msg = msg[:m.start()] + (f"about {fmt_left(left)} left" if left > 0 else "past the estimate") + \
                msg[m.end():]
        return f"{msg}, {since:.0f} s into it"

    def _beat(self) -> None:
        while not self.done.wait(0.5):
            with self.lock:
                msg, t = self.msg, self.msg_t
            now = self.elapsed()
            # rich redraws its one line in place: its clock ticks every second
            if msg is not None and now - self.last >= (1.0 if self.rich is not None else self.HEARTBEAT_S):
                self._emit(self.still(msg, now - t), now)

    def close(self) -> None:
        """Stop the progress before the result is printed (idempotent)."""
        with self.lock:
            self.done.set()
            if self.rich is not None:
                self.rich.stop()
                self.rich = None


def _topology(spec: str, gpus: int | None) -> str:
    """A bare machine preset grown to the GPUs asked for (dgx-h100 with 64 GPUs: 8xdgx-h100)."""
    from ..model.cost import resolve_topology

    if gpus is None or re.match(r"\s*\d+\s*x", spec) or spec.endswith((".yaml", ".yml", ".json")) \
            or spec in ("this", "local", "host"):
        return spec
    per = resolve_topology(spec).nranks
    if gpus <= per:
        return spec
    return f"{math.ceil(gpus / per)}x{spec}"


def _fmt_s(s: float) -> str:
    return f"{s:.3f} s" if s >= 1 else f"{s * 1e3:.2f} ms"


def run(args: argparse.Namespace) -> int:
    from ..model import ModelError
    from ..plan import Layout, PlanError, parse_model, plan_step
    from ..plan.search import search, sweep
    from ..plan.step import Context
    from ..topology import TopologyError

    prog = _Progress()
    try:
        model = parse_model(args.model)
        gb = args.global_batch
        if args.global_tokens:
            gb = max(1, int(args.global_tokens) // model.seq)
        given = {d: getattr(args, d) for d in _DEGREES if getattr(args, d) is not None}
        if args.sweep_gpus:
            try:
                counts = [int(x) for x in args.sweep_gpus.split(",") if x.strip()]
            except ValueError:
                raise PlanError(f"--sweep-gpus {args.sweep_gpus!r}: give GPU counts such as 8,64,512") from None
            if args.topology in ("this", "local", "host"):
                raise PlanError("--sweep-gpus needs a machine to repeat: --topology dgx-h100 (or dgx-a100, ...)")
            rows = sweep(model, counts, args.topology.split("x", 1)[-1] if args.topology[0].isdigit() else args.topology,
                         global_batch=gb or _default_batch(model), dtype=args.dtype, engine=args.engine, progress=prog,
                         fixed=_fixed(args), **_space(args))
            prog.close()
            return _print_sweep(args, model, rows)
        if args.topology in ("this", "local", "host") and _cpu_host():
            return _run_host(args, model, given, gb, prog)
        gpus = args.gpus
        topo_spec = _topology(args.topology, gpus)
        ctx = Context.of(topo_spec, prog, args.memory)
        if not given:
            n = gpus or ctx.topo.nranks
            res = search(model, n, ctx, global_batch=gb or _default_batch(model, n), dtype=args.dtype,
                         engine=args.engine, top=args.top,
                         progress=prog, fixed=_fixed(args), clock=prog.elapsed, **_space(args))
            prog.close()
            return _print_search(args, res)
        tp, pp, cp, ep = given.get("tp", 1), given.get("pp", 1), given.get("cp", 1), given.get("ep", 1)
        Layout(tp=tp, pp=pp, cp=cp).check(model)  # the model's divisibility first: its message names the flag
        if "dp" in given:
            dp = given["dp"]
            if gpus is not None and gpus != tp * pp * dp * cp:
                raise PlanError(f"--gpus {gpus} is not tp {tp} x pp {pp} x dp {dp} x cp {cp} = {tp * pp * dp * cp}: "
                                f"drop --gpus or --dp")
        else:
            n = gpus if gpus is not None else (ctx.topo.nranks if args.topology not in ("this",) else tp * pp * cp)
            if n % (tp * pp * cp):
                raise PlanError(f"{n} GPUs do not divide by --tp {tp} x --pp {pp} x --cp {cp}: change --gpus or the degrees")
            dp = n // (tp * pp * cp)
        lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sp=(tp > 1) if args.sp is None else args.sp,
                     zero=1 if args.zero is None else args.zero, recompute=args.recompute or "none",
                     micro_batch=args.micro_batch or 1, global_batch=gb or _default_batch(model, dp, args.micro_batch or 1),
                     virtual_stages=args.virtual_stages or 1, dtype=args.dtype, engine=args.engine,
                     **_options(args))
        contention = lay.gpus <= CONTENTION_MAX_GPUS if args.contention is None else args.contention
        result = plan_step(model, lay, ctx, contention=contention)
        prog.close()
        if args.trace:
            from ..plan.trace import write_trace

            write_trace(result, args.trace)
        return _print_plan(args, result)
    except BrokenPipeError:  # `interlink plan ... --json | head`: interlink.cli.main ends it quietly
        raise
    except (PlanError, ModelError, TopologyError, ValueError, OSError) as exc:
        prog.close()
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"interlink plan: {msg}", file=sys.stderr)
        return 2
    finally:
        prog.close()


def _cpu_host() -> bool:
    """Whether this machine's topology has no GPUs (its plan is the CPU host's: plan/host.py)."""
    from ..model.cost import resolve_topology

    return not any(d.kind == "gpu" for d in resolve_topology("this").devices)


def _gemm_rate() -> tuple[float, str]:
    """GFLOP/s of one torch thread on a 512 x 512 x 512 GEMM (a few ms), or a guess without torch."""
    try:
        import torch
    except ImportError:
        return 20.0, "a guess"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, w = torch.randn(512, 512), torch.randn(512, 512)
        a.mm(w)
        t0 = time.perf_counter()
        for _ in range(5):
            a.mm(w)
        return 5 * 2.0 * 512 ** 3 / (time.perf_counter() - t0) / 1e9, "a 512^3 GEMM timed now"
    finally:
        torch.set_num_threads(threads)


def _say_measuring(model: Any, mb: int, ranks: int, recalibrate: bool) -> None:
    """Before this host's compute is measured at a model's shapes (the first plan of a model, or
    --recalibrate): say so on stderr, what it measures and about how long each part takes
    (plan.host.measure_estimate: FLOPs at the rate of the GEMMs stored for other models, else of a 512^3 GEMM
    timed now; what memory bounds at plan.host.GUESS_COPY_GBPS), so a billion-parameter model's minutes
    (its framework steps: 27 training steps of the model) are expected. Nothing when all of it is stored."""
    import statistics

    from ..plan.host import (compute_path, concurrency, fmt_left, framework_key, gemm_shapes, host_cores,
                             load_compute, measure_estimate, measure_scale)

    cores = host_cores()
    P = concurrency(ranks, cores)
    hc = None if recalibrate else load_compute()
    rates = hc is None or not hc.has(model, mb, P)
    fw = ranks > 1 and (hc is None or framework_key(model, mb, ranks, P) not in hc.kernels)
    calls = ranks > 1 and (hc is None or not hc.has_calls(ranks))
    if not (rates or fw or calls):
        return
    stored = [g["forward_gflops"] for g in (load_compute() or hc or type("E", (), {"gemm": {}})()).gemm.values()]
    rate, how = (statistics.median(stored), "the GEMMs measured before") if stored else _gemm_rate()
    parts = measure_estimate(model, mb, rate, fw_ranks=(ranks,) if fw else (), rates=rates, calls=int(calls))
    k = measure_scale(P, cores)  # more processes than cores take turns
    parts = [(w, t * k if not w.startswith("collective calls") else t) for w, t in parts]
    total = sum(t for _, t in parts)
    n_gemm = len(gemm_shapes(model, mb))
    said = []
    if rates:
        said.append(f"{n_gemm} weight GEMMs, about {fmt_left(sum(t for w, t in parts if w.startswith('GEMM')))}")
        said.append("attention and the other kernels, AdamW and copies, about "
                    f"{fmt_left(sum(t for w, t in parts[n_gemm:n_gemm + 3]))}")
    if fw:
        said.append(f"DDP's and FSDP2's own work on {ranks} ranks (27 training steps of the model on torch's "
                    f"fake process group), about {fmt_left(sum(t for w, t in parts if w.startswith('DDP')))}")
    if calls:
        said.append(f"a collective call through torch.distributed on {ranks} ranks, about "
                    f"{fmt_left(sum(t for w, t in parts if w.startswith('collective')))}")
    print(note("interlink plan: ", f"measuring this host's compute at the model's shapes first ({P} process"
                                   f"{'es' if P > 1 else ''} at once): " + "; ".join(said) + f". About "
                                   f"{fmt_left(total)} in all at {rate:.0f} GFLOP/s a core ({how}); progress "
                                   f"at least every 5 s with the time left; kept in {compute_path()} for the "
                                   f"next plan of this model"), file=sys.stderr, flush=True)


def _run_host(args: argparse.Namespace, model: Any, given: dict, gb: int, prog: Any) -> int:
    """``--topology this`` on a machine without GPUs: DDP or FSDP2 on CPU ranks of this host."""
    from ..plan import PlanError
    from ..plan.host import host_compute, plan_host

    for d in ("tp", "pp", "cp", "ep"):
        if given.get(d, 1) != 1:
            raise PlanError(f"--{d} on this host: its CPU ranks are data parallel only (DDP: --zero 0, FSDP: --zero 3)")
    zero = 0 if args.zero is None else args.zero
    if zero not in (0, 3):
        raise PlanError(f"--zero {zero} on this host: plans torch's DDP (--zero 0) or FSDP2 (--zero 3)")
    if args.sweep_gpus:
        raise PlanError("--sweep-gpus needs a machine to repeat: --topology dgx-h100 (or dgx-a100, ...)")
    ranks = given.get("dp") or args.gpus
    if ranks is None:
        from ..plan.host import host_cores

        ranks = host_cores()
    if args.gpus is not None and ranks != args.gpus:
        raise PlanError(f"--gpus {args.gpus} and --dp {ranks} differ: give one of them")
    mb = args.micro_batch or 1
    if gb and gb != ranks * mb:
        raise PlanError(f"--global-batch {gb} on this host must be ranks {ranks} x --micro-batch {mb} = {ranks * mb} "
                        f"(no gradient accumulation): drop --global-batch")
    _say_measuring(model, mb, ranks, args.recalibrate)
    hc = host_compute(model, mb, ranks=(ranks,), recalibrate=args.recalibrate, progress=prog)
    result = plan_host(model, ranks, system="ddp" if zero == 0 else "fsdp", backend=args.backend, micro_batch=mb,
                       bucket_mb=args.bucket_mb, compute=hc, progress=prog)
    prog.close()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    o = sys.stdout
    st = result.stage
    o.write(note("# interlink plan: ", f"{model.name or model.spec()} ({model.params() / 1e6:.1f}M parameters), "
                                       f"{'DDP' if zero == 0 else 'FSDP2'} over {args.backend} on {ranks} CPU ranks "
                                       f"of {result.topology}") + "\n")
    o.write(f"step          {_fmt_s(result.step_s)}  (micro-batch {mb} a rank, fp32, AdamW)\n")
    o.write(f"tokens/s      {result.tokens_per_s:,.0f}\n")
    o.write(f"GFLOPS/rank   {result.tflops_per_gpu * 1e3:.1f} (model FLOPs)\n")
    mem = result.memory_gib
    o.write(f"memory/rank   {mem['total'] * 1024:.0f} MiB: weights {mem['weights'] * 1024:.0f}, gradients "
            f"{mem['gradients'] * 1024:.0f}, optimizer {mem['optimizer'] * 1024:.0f}, activations "
            f"{mem['activations'] * 1024:.0f}\n")
    o.write(f"#\n# breakdown of the step (seconds, share); compute: GEMMs {st['gemm_s']:.4f}, attention "
            f"{st['attention_s']:.4f}, the other kernels {st['elementwise_s']:.4f}, dispatch of "
            f"{st['untimed_ops']} untimed ops {st['dispatch_s']:.4f} (rates measured with {st['concurrent']} "
            f"process{'es' if st['concurrent'] > 1 else ''} at once)\n")
    for k, v in result.breakdown.items():
        if v > 0 and k not in ("forward", "backward"):
            o.write(f"  {k:<12} {v:10.4f}  {v / result.step_s:6.1%}\n")
    o.write("#\n# collectives (per call; the path the runtime takes on this host)\n")
    o.write(f"# {'collective':<15} {'bytes':>12} {'algorithm':<14} {'transport':<12} {'time':>11} {'calls':>6} "
            f"{'exposed':>10}\n")
    for c in result.collectives:
        o.write(f"  {c['collective']:<15} {c['bytes']:>12,} {c['algorithm']:<14} {c['protocol']:<12} "
                f"{_fmt_s(c['time_us'] * 1e-6):>11} {c['per_step']:6.0f} {_fmt_s(c['exposed_s']):>10}\n")
    for n in result.notes:
        o.write(note("# note: ", n) + "\n")
    return 0


def _default_batch(model: Any, dp: int = 1, mb: int = 1) -> int:
    """4M tokens' worth of sequences, rounded up to a multiple of dp x micro-batch."""
    seqs = max(1, (4 << 20) // model.seq)
    q = dp * mb
    return max(q, -(-seqs // q) * q)


def _fixed(args: argparse.Namespace) -> dict:
    out = {}
    for k in ("zero", "recompute", "micro_batch", "virtual_stages"):
        v = getattr(args, k)
        if v is not None:
            out[k] = v
    return out


def _options(args: argparse.Namespace) -> dict:
    """The Layout fields the flags set besides the degrees, batch and recomputation: one layout's, and the
    ones a search or a sweep keeps in every layout it tries."""
    return {"order": args.order, "compress": args.compress, "cp_comm": args.cp_comm, "tp_overlap": args.tp_overlap,
            "overlap_grad_reduce": not args.no_overlap, "overlap_param_gather": not args.no_overlap,
            "dispatcher": args.dispatcher, "ep_overlap": args.ep_overlap, "etp": args.etp or 0}


def _space(args: argparse.Namespace) -> dict:
    """The layout options given with a search or a sweep (those that differ from Layout's defaults)."""
    from ..plan import Layout

    default = Layout()
    return {"options": {k: v for k, v in _options(args).items() if v != getattr(default, k)}}


def _print_plan(args: argparse.Namespace, r: Any) -> int:
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return 0
    o = sys.stdout
    L = r.layout
    o.write(f"# interlink plan: {r.model.name or r.model.spec()} ({r.model.params() / 1e9:.1f}B parameters) on "
            f"{L.gpus} {r.gpu.upper()} GPUs of {r.topology}\n")
    o.write(f"layout        {L.short()}  ({L.micro_batches()} micro-batches of {L.micro_batch}, "
            f"global batch {L.sequences()} x {r.model.seq} tokens)\n")
    o.write(f"step          {_fmt_s(r.step_s)}\n")
    o.write(f"tokens/s      {r.tokens_per_s:,.0f}\n")
    o.write(f"TFLOPS/GPU    {r.tflops_per_gpu:.1f} (model), {r.hw_tflops_per_gpu:.1f} (with recomputation)\n")
    o.write(f"MFU           {r.mfu:.1%}\n")
    mem = r.memory_gib
    o.write(f"memory/GPU    {mem['total']:.1f} GiB: weights {mem['weights']:.1f}, gradients {mem['gradients']:.1f}, "
            f"optimizer {mem['optimizer']:.1f}, activations {mem['activations']:.1f}"
            f"{'' if r.fits else '  (does NOT fit)'}\n")
    o.write("#\n# breakdown of the step (seconds, share)\n")
    for k, v in r.breakdown.items():
        if v > 0:
            o.write(f"  {k:<12} {v:10.4f}  {v / r.step_s:6.1%}\n")
    o.write("#\n# collectives (per call; the Schedule the model picked on the group's ranks)\n")
    o.write(f"# {'kind':<5} {'collective':<15} {'ranks':>6} {'bytes':>12} {'algorithm':<12} {'time':>11} "
            f"{'busbw':>7} {'calls':>8} {'exposed':>10}\n")
    for c in r.collectives:
        o.write(f"  {c['kind']:<5} {c['collective']:<15} {c['ranks']:>6} {c['bytes']:>12,} "
                f"{c['algorithm'] + '/' + c['protocol']:<12} {_fmt_s(c['time_us'] * 1e-6):>11} "
                f"{c['busbw_gbps']:7.1f} {c['per_step']:8.0f} {_fmt_s(c['exposed_s']):>10}\n")
    for n in r.notes:
        o.write(note("# note: ", n) + "\n")
    if args.trace:
        o.write(f"# trace: {args.trace}\n")
    return 0


def _print_search(args: argparse.Namespace, res: Any) -> int:
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
        return 0 if res.ranked else 1
    o = sys.stdout
    o.write(note("# interlink plan: ", f"{res.model.name or res.model.spec()} on {res.gpus} GPUs of {res.topology}: "
                                       f"{res.considered} layouts, {res.not_fitting} do not fit, {res.priced} priced "
                                       f"in full; done at [{res.seconds:5.1f} s] (seconds since the command started, "
                                       f"the clock of the progress lines and of --json's seconds)") + "\n")
    if not res.ranked:
        o.write(note("", res.no_fit(_fixed(args))) + "\n")
        return 1
    o.write(f"# {'rank':>4} {'layout':<44} {'step':>10} {'MFU':>6} {'TFLOPS':>7} {'GiB':>6}\n")
    for i, p in enumerate(res.ranked, 1):
        o.write(f"  {i:>4} {p.layout.short():<44} {_fmt_s(p.step_s):>10} {p.mfu:6.1%} {p.tflops_per_gpu:7.1f} "
                f"{p.memory_gib['total']:6.1f}\n")
    o.write("# why the first wins\n")
    for w in res.why:
        o.write(f"  {w}\n")
    return 0


def _print_sweep(args: argparse.Namespace, model: Any, rows: list[dict]) -> int:
    plot_error = None
    if args.plot:
        try:
            _plot(args.plot, model, rows)
        except ImportError:
            plot_error = ("interlink plan: --plot needs matplotlib: pip install 'interlink[plot]' "
                          "(the table above is without the plot)")
            args.plot = None
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _sweep_table(args, model, rows)
    if plot_error:
        print(plot_error, file=sys.stderr)
        return 1
    return 0


def _sweep_table(args: argparse.Namespace, model: Any, rows: list[dict]) -> None:
    o = sys.stdout
    o.write(f"# interlink plan: {model.name or model.spec()}, the best layout at each GPU count\n")
    o.write(f"# {'GPUs':>6} {'layout':<44} {'step':>10} {'tokens/s':>12} {'MFU':>6} {'vs linear':>9}\n")
    cliff = None
    prev = None
    for r in rows:
        if "error" in r:
            o.write(note(f"  {r['gpus']:>6} ", r["error"]) + "\n")
            continue
        o.write(f"  {r['gpus']:>6} {r['layout']:<44} {_fmt_s(r['step_s']):>10} {r['tokens_per_s']:12,.0f} "
                f"{r['mfu']:6.1%} {r['efficiency']:9.1%}\n")
        if prev is not None and cliff is None and r["efficiency"] < prev["efficiency"] * 0.9:
            cliff = (prev["gpus"], r["gpus"])
        prev = r
    if cliff:
        o.write(f"# the cliff: efficiency drops more than 10% from {cliff[0]} to {cliff[1]} GPUs\n")
    if args.plot:
        o.write(f"# plot: {args.plot}\n")


def _plot(path: str, model: Any, rows: list[dict]) -> None:
    import matplotlib  # ImportError: the caller prints the table without the plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "error" not in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["gpus"] for r in ok]
    ax.plot(xs, [r["efficiency"] * 100 for r in ok], "o-", label="plan: best layout")
    ax.axhline(100, color="grey", lw=0.8, ls="--", label="linear")
    ax.set_xscale("log", base=2)
    # from 0: an autoscaled axis drew a 97%-100% band as a deep V
    ax.set_ylim(0, max([105.0] + [r["efficiency"] * 105 for r in ok]))
    ax.set_xlabel("GPUs")
    ax.set_ylabel("efficiency against linear (%)")
    ax.set_title(f"{model.name or 'model'}: scaling of a training step (interlink plan)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
