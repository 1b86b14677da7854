"""``interlink bench``: nccl-tests style benchmarks of the real collectives on local ranks.

    interlink bench                                   # all_reduce, 8 B .. 64 MiB, x2, default ranks
    interlink bench all_gather -b 8 -e 64M -f 4 --ranks 4 --transport tcp
    interlink bench all_reduce --dtype bfloat16 -o max --iters 50 -w 10 --algorithm ring --json out.json

It starts ``--ranks`` local ranks itself (the ``interlink run`` launcher: a free port on 127.0.0.1,
a fresh job secret, INTERLINK_TRANSPORT from --transport), each running
:func:`interlink.bench.sweep.sweep`; rank 0 streams its rows back as JSON lines, and this process
prints the nccl-tests table on stdout as it goes (see :mod:`interlink.bench.report`: the header when
the ranks are up, each row as soon as its size is done, the footer at the end), with notes under it
(why the model column says N/A for a row; that the model used default host parameters, with the
``--calibrate`` command), and a progress bar on stderr (rich when installed and stderr is a terminal;
otherwise one line per size, none when stdout and stderr are one stream: a terminal, ``2>&1 | tee``). A
failing rank stops the others and the command exits non-zero with that rank's error. Wrong results (#wrong > 0) print the table and exit 1, like nccl-tests.

Defaults: ``--ranks`` min(4, cpu count), at least 2; ``-b 8 -e 64M -f 2``; iterations auto: at most
20 timed (5 warmup) per size, capped so that at most 1 GiB is timed per size and mode
(``iters = clamp(1 GiB // size, 1, 20)``, ``warmup = clamp(iters // 4, 1, 5)``: 16/4 at 64 MiB);
explicit --iters/-w apply to every size. A bare ``interlink bench`` (24 sizes, 2 ranks) takes 5-25 s on
a 2-core machine (the most on one shared with other jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from typing import Any, Callable

from ..bench import report
from ..bench.sweep import AUTO_BYTES, BENCH_COLLECTIVES, MARKER, BenchConfig, parse_dtype

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
            "alltoall": "all_to_all", "send_recv": "sendrecv", "bcast": "broadcast"}


def parse_size(text: str) -> int:
    """Bytes from '8', '64K', '64M', '1G', '1.5M', '64KiB' (binary multiples, like nccl-tests)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: expected a number with an optional K/M/G suffix")
    return int(float(m.group(1)) * _SCALE[m.group(2).lower()])


def parse_collective(text: str) -> str:
    key = text.strip().lower().replace("-", "_")
    key = key[:-5] if key.endswith("_perf") else key  # nccl-tests binary names
    key = _ALIASES.get(key, _ALIASES.get(key.replace("_", ""), key))
    if key not in BENCH_COLLECTIVES:
        raise argparse.ArgumentTypeError(f"unknown collective {text!r}; expected one of {', '.join(BENCH_COLLECTIVES)}")
    return key


def default_ranks() -> int:
    return max(2, min(4, os.cpu_count() or 2))


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bench",
        help="nccl-tests style bandwidth/latency sweep of a collective on local ranks",
        description="Benchmark a collective in nccl-tests form: for each size from -b to -e (times -f) run "
                    "-w warmup and --iters timed iterations out-of-place and in-place on -n/--ranks local processes, "
                    "check the results (#wrong) and print size, count, type, redop, root, time (us, max over "
                    "ranks), algbw and busbw (GB/s = 1e9 B/s, nccl-tests' bus bandwidth factors) per size.",
        epilog="Sizes take binary K/M/G suffixes (64K = 65536). Per-rank counts follow nccl-tests: size/typesize "
               "for all_reduce, broadcast, reduce, sendrecv; size/typesize/nranks for all_gather, reduce_scatter, "
               "all_to_all, gather, scatter. Default iterations: at most 20 (+5 warmup) per size, capped so that "
               f"at most {AUTO_BYTES >> 20} MiB are timed per size and mode. Exit status: 0, 1 when any "
               "result is wrong, the failing rank's status when a rank fails, 2 for bad arguments. As in every "
               "interlink command, -n is the number of ranks (nccl-tests' -n, iterations, is --iters here).",
    )
    p.add_argument("collective", nargs="?", default="all_reduce", type=parse_collective,
                   help=f"one of {', '.join(BENCH_COLLECTIVES)} (default all_reduce); barrier prints its latency")
    p.add_argument("-b", "--minbytes", type=parse_size, default=8, metavar="SIZE", help="smallest size (default 8)")
    p.add_argument("-e", "--maxbytes", type=parse_size, default=64 * 1024**2, metavar="SIZE",
                   help="largest size (default 64M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2, metavar="F", help="size multiplier (default 2)")
    p.add_argument("--iters", type=int, default=None, metavar="N",
                   help="timed iterations per size (default auto: <= 20, fewer for large sizes)")
    p.add_argument("-w", "--warmup_iters", "--warmup", dest="warmup", type=int, default=None, metavar="W",
                   help="warmup iterations per size (default auto: <= 5)")
    p.add_argument("--datatype", dest="dtype", default="float32", help=argparse.SUPPRESS)  # the old spelling
    p.add_argument("-d", "--dtype", dest="dtype", default="float32", metavar="DTYPE",
                   help="float32 (float), float16 (half), float64 (double), bfloat16, int8, uint8, int32, uint32, "
                        "int64, uint64, ... (default float32)")
    p.add_argument("-o", "--op", default="sum", metavar="OP", help="sum, prod, min, max, avg, band, bor, bxor (default sum)")
    p.add_argument("-r", "--root", type=int, default=0, metavar="R", help="root of rooted collectives (default 0)")
    p.add_argument("-c", "--check", type=int, default=1, choices=(0, 1), metavar="0|1",
                   help="check results and report #wrong (default 1)")
    p.add_argument("-n", "--ranks", type=int, default=None, metavar="N",
                   help=f"local ranks to start (default min(4, cpus), at least 2: {default_ranks()} here)")
    p.add_argument("--nranks", dest="ranks", type=int, default=None, help=argparse.SUPPRESS)  # predict's spelling
    p.add_argument("--transport", choices=("shm", "tcp"), default=None,
                   help="shm (default between ranks of one host) or tcp (loopback sockets)")
    p.add_argument("--algorithm", default=None, metavar="A",
                   help="force an algorithm (see `interlink algorithms`); default: INTERLINK_ALGO or the built-in choice")
    p.add_argument("--json", dest="json_path", nargs="?", const="-", default=None, metavar="FILE",
                   help="print {collective, nranks, rows: [...]} as JSON instead of the table; with FILE, write it "
                        "there as well as the table ('-': stdout)")
    p.add_argument("--emulate-hosts", type=int, default=None, metavar="H",
                   help="run on H emulated hosts (network namespaces, as `interlink run --emulate-hosts`; root and "
                        "iproute2) with --nproc-per-host ranks each; the predicted column models those hosts and link")
    p.add_argument("--nproc-per-host", type=int, default=None, metavar="P", help="ranks per emulated host (default 2)")
    p.add_argument("--link-rate", default=None, metavar="RATE", help="emulated link rate, e.g. 1gbit (tc tbf)")
    p.add_argument("--link-delay", default=None, metavar="DELAY", help="emulated link delay, e.g. 1ms (needs netem)")
    p.add_argument("--nics", type=int, default=1, metavar="K",
                   help="NICs per emulated host, each shaped to --link-rate (NIC k of every host on rail k); a TCP "
                        "lane per NIC, rings a channel per NIC, the model column models them")
    p.add_argument("--calibrate", action="store_true",
                   help="measure this host's transports (shm, tcp; 2 and --ranks ranks, default 2 and 4), fit the "
                        "cost model's host parameters and write the profile (INTERLINK_PROFILE or "
                        "~/.cache/interlink/profile.json) that predictions and the tuner use")
    p.set_defaults(func=run)
    return p


# ---- progress on stderr ---------------------------------------------------------------------------


class _Progress:
    """A rich progress bar when rich is importable and stderr is a terminal; else a line per size."""

    def __init__(self, collective: str, rows_shown: bool = False) -> None:
        self.collective = collective
        self.rows_shown = rows_shown  # the table's rows go to the same terminal: no line a size besides them
        self._rich = None
        self._task = None
        self._lock = threading.Lock()
        if sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            except ImportError:
                pass
            else:
                self._rich = Progress(TextColumn("[bold]interlink bench[/] {task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=True,
                                      redirect_stdout=False, redirect_stderr=False)  # stdout is the table

    def __enter__(self) -> "_Progress":
        if self._rich is not None:
            self._rich.start()
            self._task = self._rich.add_task(f"{self.collective}: starting ranks", total=None)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._rich is not None:
            self._rich.stop()

    def message(self, text: str) -> None:
        """A line for stderr (rank output, launcher messages), above the bar when there is one."""
        with self._lock:
            if self._rich is not None:
                self._rich.console.print(text, markup=False, highlight=False)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()

    def table(self, lines: list[str]) -> None:
        """Lines of the table for stdout, printed now (nccl-tests prints each row as its size finishes).
        With the bar on the same terminal they go through its console, above the bar."""
        with self._lock:
            if self._rich is not None and sys.stdout.isatty():
                for ln in lines:
                    self._rich.console.print(ln, markup=False, highlight=False, soft_wrap=True)
            else:
                sys.stdout.write("\n".join(lines) + "\n")
                sys.stdout.flush()

    def started(self, total: int, nranks: int, transport: str) -> None:
        if self._rich is not None:
            self._rich.update(self._task, total=total, completed=0,
                              description=f"{self.collective}, {nranks} ranks, {transport}")
        else:
            self.message(f"interlink bench: {self.collective}, {nranks} ranks, {transport}: "
                         f"{total} size{'' if total == 1 else 's'}")

    def row(self, index: int, total: int, row: dict) -> None:
        if self._rich is not None:
            self._rich.update(self._task, completed=index + 1,
                              description=f"{self.collective}: {_human(row['size'])} done")
            return
        if self.rows_shown:
            return
        t = row.get("oop_time_us")
        bw = row.get("oop_busbw")
        self.message(f"interlink bench: [{index + 1}/{total}] {row['size']} B: "
                     f"{'N/A' if t is None else f'{t:.1f}'} us, busbw "
                     f"{'N/A' if bw is None else f'{bw / 1e9:.2f}'} GB/s")


def _one_stream() -> bool:
    """Whether stdout and stderr reach the reader together (a terminal, or one file or pipe: ``2>&1 | tee``):
    a progress line per size would then repeat each row of the table."""
    if sys.stdout.isatty() and sys.stderr.isatty():
        return True
    try:
        a, b = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _human(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


class _LineSink:
    """A binary stream for the launcher: splits whole lines and hands them to ``on_line``."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self.on_line = on_line

    def write(self, data: bytes) -> int:
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                self.on_line(line)
            except Exception as exc:  # noqa: BLE001 - never kill the launcher's pump thread
                sys.stderr.write(f"interlink bench: cannot handle output line: {exc}\n")
        return len(data)

    def flush(self) -> None:
        pass


# ---- the command ------------------------------------------------------------------------------


def calibrate(args: argparse.Namespace) -> int:
    """``interlink bench --calibrate``: measure, fit, save the profile, print the fit."""
    from ..bench import calibrate as cal

    n = args.ranks if args.ranks is not None else 4
    if n < 2:
        print("interlink bench: --calibrate needs --ranks >= 2", file=sys.stderr)
        return 2
    ranks = (2, n) if n > 2 else (2,)
    transports = (args.transport,) if args.transport else cal.TRANSPORTS
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        prof, samples = cal.calibrate(ranks, transports, log=say)
    except (RuntimeError, OSError) as exc:
        print(f"interlink bench: calibration failed: {exc}", file=sys.stderr)
        return 1
    print("\n".join(cal.report_lines(prof, samples)))
    return 0


#: how the cost model's notes start when it priced a CPU host without a calibrated profile
_DEFAULTS_NOTE = "host parameters: defaults"


def _na_reason(collective: str, algorithm: str, exc: Exception) -> str:
    """Why the model has no price for a row that ran ``algorithm`` (the model's own refusal)."""
    return str(exc).strip() or type(exc).__name__


def _span(sizes: list[int]) -> str:
    return f"{sizes[0]} B" if len(sizes) == 1 else f"{min(sizes)}..{max(sizes)} B"


class ModelColumn:
    """The table's model column, one row at a time: ``pred_busbw`` (bytes/s), the cost model's bus bandwidth
    for the row's algorithm on this host (its calibrated profile if any, else the built-in CPU host
    parameters) or None where the model cannot price the row; and the notes printed under the table
    (why N/A; that the host parameters were defaults). ``available`` is False when the model cannot be
    imported: then rows get no column at all."""

    def __init__(self, collective: str, nranks: int, transport: str, topology: Any = None) -> None:
        self.collective = collective
        self.tcp = transport == "tcp"
        self.missing: dict[tuple[str, str], list[int]] = {}  # (path, why N/A) -> the sizes
        self.defaults = False  # some prediction used the default (uncalibrated) host parameters
        try:
            from ..model import predict
            from ..model.tuner import group_topology
        except ImportError:
            self.available = False
            return
        self.available = True
        self._predict = predict
        self.topology = group_topology((1, nranks), nranks) if topology is None else topology

    def add(self, row: dict) -> None:
        """Set ``row["pred_busbw"]`` (nothing when the model is unavailable)."""
        if not self.available:
            return
        algo = row.get("algorithm")
        row["pred_busbw"] = None
        if row.get("type") == "-":  # a barrier moves no bytes: no bandwidth to predict
            return
        if self.collective == "sendrecv" or algo is None:
            sr = self.collective == "sendrecv"
            key = ("sendrecv", "point to point: the model prices collectives") if sr else ("?", "no algorithm")
            self.missing.setdefault(key, []).append(int(row["size"]))
            return
        try:
            pred = self._predict(self.collective, row["size"], self.topology, algorithm=algo,
                                 dtype=row.get("type", "float32") if row.get("type") != "-" else "float32",
                                 root=max(0, int(row.get("root", 0))),
                                 transport="tcp" if self.tcp else None)
        except Exception as exc:  # noqa: BLE001 - a column of predictions must never break the benchmark
            why = _na_reason(self.collective, str(algo), exc)
            self.missing.setdefault((str(algo), why), []).append(int(row["size"]))
            return
        row["pred_busbw"] = pred.busbw_gbps * 1e9
        if any(n.startswith(_DEFAULTS_NOTE) for n in pred.notes):
            self.defaults = True
            row["pred_uncalibrated"] = True  # marked "*" in the table

    def warm(self, dtype: str) -> None:
        """Make one prediction and forget it: the model's first one loads the host parameters and builds its
        caches (about 20 ms, after 45 ms for the topology), which the benchmark does before its ranks time
        anything (a parent busy on a 2-core host preempted a rank: one of the first rows read 5x its time)."""
        if not self.available or self.collective == "sendrecv":
            return
        try:
            self._predict(self.collective, 1 << 20, self.topology, dtype=dtype,
                          transport="tcp" if self.tcp else None)
        except Exception:  # noqa: BLE001 - warming must never break the benchmark
            pass

    def notes(self) -> list[str]:
        """One line each (no '#'): why the model column says N/A, and how to calibrate the model."""
        out = []
        if self.missing:
            out.append("model N/A where the cost model cannot price the path a row ran: " + "; ".join(
                f"{algo!r} at {_span(sizes)} ({why})" for (algo, why), sizes in self.missing.items()))
        if self.defaults:
            from ..model.params import profile_path

            out.append(f"* the model column uses default host parameters (no calibrated profile at {profile_path()}): "
                       "run `interlink bench --calibrate` (about 8 minutes) to fit them to this host")
        return out


def add_predictions(rows: list, collective: str, nranks: int, transport: str, algorithm: Any = None,
                    topology: Any = None) -> list[str]:
    """Add ``pred_busbw`` (bytes/s) to each row (see :class:`ModelColumn`; nothing is added when the model is
    unavailable); returns the notes to print under the table."""
    col = ModelColumn(collective, nranks, transport, topology)
    for row in rows:
        col.add(row)
    return col.notes()


def _emulated_topology(hosts: int, per_host: int, rate: Any, delay: Any, nics: int = 1) -> Any:
    """The topology the model column prices for ``--emulate-hosts`` (None: the model cannot build it)."""
    from ..topology import TopologyError, parse_topology

    net = rate or os.environ.get("INTERLINK_NET") or "eth-25g"
    spec = (f"{hosts}xcpu-host:ranks={per_host},cores={max(1, (os.cpu_count() or 1) // hosts)},net={net}"
            + (f",delay={delay}" if delay and rate else "") + (f",nics={nics}" if nics > 1 else ""))
    try:
        return parse_topology(spec)
    except TopologyError:
        return None


def run(args: argparse.Namespace) -> int:
    from .. import __version__
    from ..launch.local import LaunchError, launch

    if getattr(args, "calibrate", False):
        return calibrate(args)
    hosts = getattr(args, "emulate_hosts", None)
    per_host = getattr(args, "nproc_per_host", None) or 2
    if hosts is not None:
        if hosts < 1 or per_host < 1:
            print("interlink bench: --emulate-hosts and --nproc-per-host must be >= 1", file=sys.stderr)
            return 2
        nranks = hosts * per_host
    else:
        nranks = args.ranks if args.ranks is not None else default_ranks()
    cfg = BenchConfig(collective=args.collective, min_bytes=args.minbytes, max_bytes=args.maxbytes,
                      factor=args.stepfactor, iters=args.iters, warmup=args.warmup, dtype=args.dtype,
                      op=args.op, root=args.root, check=bool(args.check), algorithm=args.algorithm)
    try:
        cfg.validate(nranks)
    except (ValueError, TypeError) as exc:
        print(f"interlink bench: {exc}", file=sys.stderr)
        return 2

    env = dict(os.environ)
    if args.transport is not None:
        env["INTERLINK_TRANSPORT"] = args.transport
    topology = (_emulated_topology(hosts, per_host, args.link_rate, args.link_delay, getattr(args, "nics", 1) or 1)
                if hosts is not None and hosts > 1 else None)
    dtype_name = str(parse_dtype(cfg.dtype))
    show_table = args.json_path != "-"  # '-': the JSON goes to stdout instead of the table

    # the model column is built and warmed before the ranks start (imports, the topology, a first
    # prediction: ~70 ms of CPU that, during the ranks' first timed sizes, took a core from one of them)
    pre_transport = "tcp" if args.transport == "tcp" else "shm"
    premodel = ModelColumn(cfg.collective, nranks, pre_transport, topology)
    premodel.warm(dtype_name)

    # the table is printed as it goes, like nccl-tests: its header when the ranks are up, each row as
    # soon as its size is done (predicted column included), the footer and notes at the end
    state: dict[str, Any] = {"rows": [], "start": None, "end": False, "meta": None, "model": None, "extras": []}
    with _Progress(cfg.collective, rows_shown=show_table and _one_stream()) as progress:

        def started(ev: dict) -> None:
            state["start"] = ev
            state["meta"] = {"version": __version__, "collective": cfg.collective, "nranks": ev["nranks"],
                             "transport": ev["transport"], "dtype": "-" if cfg.collective == "barrier" else dtype_name,
                             "op": cfg.op, "root": cfg.root,
                             "algorithm": cfg.algorithm, "min_bytes": cfg.min_bytes, "max_bytes": cfg.max_bytes,
                             "factor": cfg.factor, "iters": cfg.iters, "warmup": cfg.warmup, "check": cfg.check,
                             "auto_bytes": AUTO_BYTES}
            model = (premodel if (ev["nranks"], ev["transport"]) == (nranks, pre_transport)
                     else ModelColumn(cfg.collective, ev["nranks"], ev["transport"], topology))
            if hosts is not None and hosts > 1 and topology is None:
                model.available = False  # the emulated hosts could not be modelled: no column
            state["model"] = model
            state["extras"] = report.extra_columns([{"pred_busbw": None}] if model.available else [])
            if show_table:
                progress.table(report.header(state["meta"]) + report.column_header(state["extras"]))
            progress.started(ev["sizes"], ev["nranks"], ev["transport"])

        def row_done(ev: dict) -> None:
            row = ev["row"]
            state["model"].add(row)
            state["rows"].append(row)
            if show_table:
                progress.table([report.format_row(row, state["extras"])])
            progress.row(ev["index"], ev["total"], row)

        def on_stdout(line: str) -> None:
            if line.startswith("[host "):  # emulated hosts: "[host k] [rank r] ..."
                line = line.partition("] ")[2]
            prefix, _, rest = line.partition("] ")
            if prefix == "[rank 0" and rest.startswith(MARKER):
                ev = json.loads(rest[len(MARKER):])
                kind = ev.get("event")
                if kind == "start":
                    started(ev)
                elif kind == "row":
                    row_done(ev)
                elif kind == "end":
                    state["end"] = True
            else:
                progress.message(line)  # anything else a rank prints goes to stderr: stdout stays the table

        def on_stderr(line: str) -> None:
            if line.startswith("interlink run:"):
                line = "interlink bench:" + line[len("interlink run:"):]
            progress.message(line)

        cmd = ["-m", "interlink.bench.sweep", json.dumps(cfg.to_dict())]
        try:
            if hosts is not None:
                from ..launch.netns import EmulationError, launch_emulated

                try:
                    rc = launch_emulated(cmd, hosts, per_host, rate=args.link_rate, delay=args.link_delay,
                                         nics=getattr(args, "nics", 1), env=env,
                                         stdout=_LineSink(on_stdout), stderr=_LineSink(on_stderr))  # type: ignore[arg-type]
                except EmulationError as exc:
                    print(f"interlink bench: {exc}", file=sys.stderr)
                    return 2
            else:
                rc = launch(cmd, nranks, env=env,
                            stdout=_LineSink(on_stdout), stderr=_LineSink(on_stderr))  # type: ignore[arg-type]
        except LaunchError as exc:
            print(f"interlink bench: {exc}", file=sys.stderr)
            return 2
    if rc != 0:
        return rc
    if not state["end"] or state["start"] is None:
        print("interlink bench: rank 0 exited without reporting results", file=sys.stderr)
        return 1

    rows = state["rows"]
    meta = dict(state["meta"], dtype=rows[0]["type"] if rows else dtype_name)
    notes = state["model"].notes()
    if show_table:
        from .text import note_lines

        lines = report.footer(rows, cfg.check) + [ln for n in notes for ln in note_lines("# note: ", n)]
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    else:
        for n in notes:
            print(f"interlink bench: note: {n}", file=sys.stderr)
    if args.json_path:
        try:
            report.write_json(args.json_path, meta, rows)
        except OSError as exc:
            print(f"interlink bench: cannot write {args.json_path}: {exc}", file=sys.stderr)
            return 1
    if cfg.check and report.total_wrong(rows) > 0:
        print(f"interlink bench: {report.total_wrong(rows)} wrong values", file=sys.stderr)
        return 1
    return 0
