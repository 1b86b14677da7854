"""``interlink doctor``: check this machine, explain a hang from flight-recorder dumps.

    interlink doctor                      environment checks: transports, /dev/shm, ptrace scope, NICs, ...
    interlink doctor hang DIR             merge every rank's dump in DIR into verdicts with their evidence
    interlink doctor hang DIR --ranks 8   the job had 8 ranks (names the ranks that left no dump)
    interlink doctor nccl-tests LOG -t 2xdgx-h100   nccl-tests output: what the hardware allows, best explanation
    interlink doctor trace DIR -o t.json  every rank's recorded calls on one timeline, beside the model's
    interlink doctor perf                 this host's sweep against the model, the term behind each gap
    interlink doctor ... --json           the same as JSON

Dumps: run the job with INTERLINK_DUMP_DIR=DIR (interlink writes interlink-rank<R>.json on a failed call,
SIGUSR1, SIGTERM and at exit), or put torch's flight-recorder dumps there (one file per rank, the rank
at the end of the name). docs/doctor.md says what each verdict means.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "doctor",
        help="check this machine; explain a hang from flight-recorder dumps",
        description="Without a subcommand: check this machine's environment (each line pass/warn/fail with what "
                    "to do). `interlink doctor hang DIR`: read every rank's flight-recorder dump in DIR "
                    "(interlink's INTERLINK_DUMP_DIR files or torch's) and say who is stuck and why.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--ranks", "-n", type=int, metavar="N", help="ranks you will run on this host (checks ranks per core)")
    sub = p.add_subparsers(dest="doctor_cmd", metavar="CHECK")
    h = sub.add_parser("hang", help="verdicts from every rank's flight-recorder dump in DIR",
                       description="Merge the dumps in DIR (missing ranks named) into verdicts: dead, never-entered, "
                                   "mismatch, stalled, straggler, missing-dump; each with its evidence.")
    h.add_argument("dir", metavar="DIR", help="directory of dumps (or one dump file)")
    h.add_argument("--ranks", "-n", type=int, metavar="N", help="the job's ranks (default: what the dumps say)")
    h.add_argument("--json", action="store_true", help="print JSON")
    h.set_defaults(func=_hang)
    t = sub.add_parser("trace", help="every rank's recorded calls on one Chrome/Perfetto timeline, beside the model's",
                       description="Merge the flight-recorder dumps in DIR into one Chrome/Perfetto trace: a track per "
                                   "rank (clocks aligned), and per call the time the cost model predicts from the "
                                   "moment the last rank entered it.")
    t.add_argument("dir", metavar="DIR", help="directory of dumps")
    t.add_argument("-o", "--output", default="interlink-trace.json", metavar="FILE",
                   help="the trace file (default interlink-trace.json)")
    t.add_argument("--topology", "-t", default="this", metavar="SPEC",
                   help="the topology the model prices the calls on (default this host)")
    t.add_argument("--no-model", action="store_true", help="the measured tracks only")
    t.set_defaults(func=_trace)
    f = sub.add_parser("perf", help="sweep the collectives on this host and explain every gap to the model",
                       description="Run `interlink bench` for each collective on this host and compare each size with "
                                   "what the model says this host allows; every gap over 25% is named by its term "
                                   "(latency, bandwidth or reduction, ranks sharing cores, loopback TCP).")
    f.add_argument("--ranks", "-n", type=int, default=2, metavar="N", help="ranks (default 2)")
    f.add_argument("--ops", default="all_reduce,all_gather,broadcast", metavar="LIST",
                   help="collectives, comma-separated (default all_reduce,all_gather,broadcast)")
    f.add_argument("-b", "--minbytes", default="8", metavar="SIZE", help="smallest size (default 8)")
    f.add_argument("-e", "--maxbytes", default="4M", metavar="SIZE", help="largest size (default 4M)")
    f.add_argument("-f", "--stepfactor", default="8", metavar="F", help="size multiplier (default 8)")
    f.add_argument("--transport", choices=("shm", "tcp"), default=None, help="as interlink bench")
    f.add_argument("--json", action="store_true", help="print JSON")
    f.set_defaults(func=_perf)
    n = sub.add_parser("nccl-tests", help="what the hardware allows for an nccl-tests log, and the explanation that "
                                          "fits the measured curve best",
                       description="Read nccl-tests output (any *_perf binary, any version's columns) and rank "
                                   "explanations by pricing variants of the cluster with the model (NVLS off, NVLink "
                                   "slower, P2P over PCIe or through host memory, PCIe slower, GPU Direct RDMA off, a "
                                   "slower network, one NIC, TCP sockets, one algorithm or protocol): how well each "
                                   "fits the measured curve, within the model's error, and how common its kind of "
                                   "cause is.")
    n.add_argument("log", metavar="LOG", help="the nccl-tests output (a file; - for stdin)")
    n.add_argument("--topology", "-t", metavar="SPEC",
                   help="the cluster (dgx-h100, 2xdgx-h100, 2xdgx-h100:gpus=4, a file); default: guessed from the "
                        "log's GPU model, hosts and ranks")
    n.add_argument("--op", metavar="COLLECTIVE", help="the collective (default: from the log, else all_reduce)")
    n.add_argument("--top", type=int, default=5, metavar="K", help="explanations shown (default 5)")
    n.add_argument("--plot", metavar="FILE.svg", help="also write a plot: measured busbw and the first three "
                                                     "explanations' predicted busbw against the size")
    n.add_argument("--json", action="store_true", help="print JSON")
    n.set_defaults(func=_nccl_tests)
    p.set_defaults(func=_env)
    return p


def _trace(args: argparse.Namespace) -> int:
    from ..doctor import dumps as dmod, trace

    try:
        ds = dmod.load_dir(args.dir)
    except (OSError, dmod.DumpError) as e:
        print(f"interlink doctor trace: {e}", file=sys.stderr)
        return 2
    n = trace.write_trace(ds, args.output, None if args.topology == "this" else args.topology, not args.no_model)
    print(f"{args.output}: {n} events from {len(ds)} rank(s); open it in ui.perfetto.dev or chrome://tracing")
    return 0


class _PerfProgress:
    """Progress of `doctor perf` on stderr (stdout stays the report): a rich bar over every size of every sweep
    when rich is importable and stderr is a terminal, as `interlink bench` and `interlink plan` draw theirs;
    else plain lines: one as each collective's sweep starts, and while one runs, a line at most every
    ``HEARTBEAT_S`` with the sizes done. From the first size done on, each says the time left (the seconds so
    far over the sizes done, times the sizes left)."""

    HEARTBEAT_S = 5.0
    PREFIX = "interlink doctor perf: "

    def __init__(self, ops: list[str], sizes: int, clock: Any = time.monotonic) -> None:
        self.ops, self.sizes, self.clock = ops, sizes, clock
        self.total = len(ops) * sizes
        self.done = 0
        self.t0 = clock()
        self.last = self.t0
        self.rich: Any = None
        self.task: Any = None
        if sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                           TimeRemainingColumn)
            except ImportError:
                pass
            else:
                self.rich = Progress(TextColumn("[bold]interlink doctor perf[/] {task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TextColumn("sizes"), TimeElapsedColumn(),
                                     TextColumn("left"), TimeRemainingColumn(), console=Console(stderr=True),
                                     transient=True, redirect_stdout=False, redirect_stderr=False)
                self.rich.start()
                self.task = self.rich.add_task("", total=self.total)

    def _clock(self) -> str:
        now = self.clock() - self.t0
        left = f", about {now / self.done * (self.total - self.done):.0f} s left" if self.done else ""
        return f"{now:.0f} s so far{left}"

    def _say(self, text: str) -> None:
        self.last = self.clock()
        print(self.PREFIX + text, file=sys.stderr, flush=True)

    def sweep(self, k: int, op: str, detail: str) -> None:
        """Collective ``k`` (0-based) starts its sweep."""
        self.op, self.k = op, k
        if self.rich is not None:
            self.rich.update(self.task, description=f"[{k + 1}/{len(self.ops)}] {op}")
        else:
            self._say(f"[{k + 1}/{len(self.ops)}] {op} {detail} ({self._clock()})")

    def size(self, index: int, nbytes: str) -> None:
        """Size ``index`` (0-based) of the running sweep is done."""
        self.done = self.k * self.sizes + index + 1
        if self.rich is not None:
            self.rich.update(self.task, completed=self.done,
                             description=f"[{self.k + 1}/{len(self.ops)}] {self.op}: {nbytes} B done")
        elif self.clock() - self.last >= self.HEARTBEAT_S and index + 1 < self.sizes:
            self._say(f"[{self.k + 1}/{len(self.ops)}] {self.op}: {index + 1} of {self.sizes} sizes done, "
                      f"{nbytes} B last ({self._clock()})")

    def close(self, finished: bool = True) -> None:
        """Stop the bar (idempotent); plain lines: say when every sweep is done."""
        if self.rich is not None:
            self.rich.stop()
            self.rich = None
        elif finished and self.total:
            self._say(f"{self.done} of {self.total} sizes measured in {self.clock() - self.t0:.0f} s")
        self.total = 0


def _sweep_sizes(lo: int, hi: int, factor: int) -> int:
    """How many sizes `interlink bench -b lo -e hi -f factor` measures."""
    n, s = 0, max(1, lo)
    while s <= hi:
        n, s = n + 1, s * max(2, factor)
    return max(1, n)


def _perf(args: argparse.Namespace) -> int:
    import os
    import re
    import subprocess
    import tempfile

    from ..doctor import perf
    from .bench import parse_size

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    results = []
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    try:
        nsizes = _sweep_sizes(parse_size(args.minbytes), parse_size(args.maxbytes), int(args.stepfactor))
    except (ValueError, argparse.ArgumentTypeError):
        nsizes = 1  # `interlink bench` says what is wrong with the size
    progress = _PerfProgress(ops, nsizes)
    size_line = re.compile(r"^interlink bench: \[(\d+)/(\d+)\] (\d+) B:")
    try:
        for k, op in enumerate(ops):
            # each collective's sweep is an `interlink bench` run of its own; its line a size on stderr drives
            # the progress
            progress.sweep(k, op, f"on {args.ranks} ranks, {args.minbytes} to {args.maxbytes} bytes")
            before = perf.load_average()
            with tempfile.TemporaryDirectory(prefix="interlink-perf-") as d:
                out = os.path.join(d, "bench.json")
                cmd = [sys.executable, "-m", "interlink", "bench", op, "--ranks", str(args.ranks), "--minbytes",
                       args.minbytes, "--maxbytes", args.maxbytes, "--stepfactor", args.stepfactor, "--check", "0",
                       "--json", out] + (["--transport", args.transport] if args.transport else [])
                err: list[str] = []
                with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as run:
                    assert run.stderr is not None
                    for line in run.stderr:
                        m = size_line.match(line)
                        if m:
                            progress.size(int(m.group(1)) - 1, m.group(3))
                        else:
                            err.append(line)
                if run.returncode != 0 or not os.path.exists(out):
                    progress.close(finished=False)
                    print(f"interlink doctor perf: `{' '.join(cmd[1:])}` failed:\n{''.join(err)[-2000:]}",
                          file=sys.stderr)
                    return 2
                with open(out) as f:
                    data = json.load(f)
            n = int(data.get("nranks", args.ranks))
            # the load of the other jobs: the 1-minute average before the sweep (the sweep's own ranks raise it)
            points = perf.explain_rows(data["rows"], op, n, cores, data.get("transport", "shm"),
                                       perf.model_latency(op, n), before)
            results.append((op, n, points))
        progress.close()
    finally:
        progress.close(finished=False)
    note = perf.host_note()
    if args.json:
        print(json.dumps({"cores": cores, "note": note, "collectives": [
            {"collective": op, "ranks": n, "points": [p.as_dict() for p in pts]} for op, n, pts in results]}, indent=1))
    else:
        for op, n, pts in results:
            print(perf.report(op, n, pts))
        if note:
            print(note)
    return 0


def _nccl_tests(args: argparse.Namespace) -> int:
    from ..doctor import ncclt

    try:
        text = sys.stdin.read() if args.log == "-" else open(args.log, errors="replace").read()
        log = ncclt.parse(text, args.op)
    except (OSError, ValueError) as e:
        print(f"interlink doctor nccl-tests: {e}", file=sys.stderr)
        return 2
    topo = None if args.topology in (None, "this") else args.topology
    spec, fits = ncclt.explain(log, topo)
    if args.plot:
        with open(args.plot, "w", encoding="utf-8") as f:
            f.write(ncclt.svg(log, spec, fits))
    if args.json:
        print(json.dumps({"collective": log.collective, "ranks": log.nranks, "ranks_from": log.ranks_from, "hosts": log.hosts, "gpu": log.gpu,
                          "topology": spec, "measured": [[r.nbytes, r.time_us, r.busbw] for r in log.rows],
                          "explanations": [{"name": f.variant.name, "cause": f.variant.what, "kind": f.variant.kind,
                                            "error": f.error, "score": f.score, "prior": f.prior,
                                            "latency_us": f.latency_us, "same_curve": f.same_as,
                                            "predicted": f.predicted} for f in fits]}, indent=1))
    else:
        print(ncclt.report(log, spec, fits, args.top, guessed=topo is None))
    return 0


def _hang(args: argparse.Namespace) -> int:
    from ..doctor import dumps as dmod, hang

    try:
        ds = dmod.load_dir(args.dir)
    except (OSError, dmod.DumpError) as e:
        print(f"interlink doctor hang: {e}", file=sys.stderr)
        return 2
    verdicts = hang.analyze(ds, args.ranks)
    expected = hang.expected_ranks(ds, args.ranks)
    if args.json:
        print(json.dumps({"ranks": expected, "dumps": [{"rank": d.rank, "path": d.path, "source": d.source,
                                                        "reason": d.reason} for d in ds],
                          "verdicts": [v.as_dict() for v in verdicts]}, indent=1))
    else:
        print(hang.report(verdicts, ds, expected))
    return 1 if verdicts else 0


def _env(args: argparse.Namespace) -> int:
    from ..doctor import env

    checks = env.run_checks(getattr(args, "ranks", None))
    if args.json:
        print(json.dumps([c.as_dict() for c in checks], indent=1))
    else:
        print(env.report(checks))
    return 1 if any(c.status == "fail" for c in checks) else 0
