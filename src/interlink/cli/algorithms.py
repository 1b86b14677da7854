"""``interlink algorithms``: list, verify and show the registered collective algorithms.

    interlink algorithms                                   list (collective, algorithm, summary)
    interlink algorithms --verify [--max-ranks N] [--full] [--jobs J] [--json] [--collective C] [--algorithm A]
    interlink algorithms --show COLLECTIVE ALGORITHM --nranks P --count N [--root R]
                         [--param KEY=VALUE ...] [--save FILE]
"""

from __future__ import annotations

import argparse
import os
import json
import sys
import time
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "algorithms",
        help="list, verify and show collective algorithms",
        description="List the registered (collective, algorithm) pairs, verify them against the reference "
                    "executor, or print one Schedule.",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--verify", action="store_true",
                      help="check every pair symbolically and numerically; exit 1 on any failure")
    mode.add_argument("--show", nargs=2, metavar=("COLLECTIVE", "ALGORITHM"),
                      help="print the Schedule of one algorithm, round by round for every rank")
    p.add_argument("--max-ranks", type=int, default=17, metavar="N", help="--verify: nranks 1..N (default 17)")
    p.add_argument("--full", action="store_true", help="--verify: every dtype x op on every case (slow)")
    p.add_argument("--jobs", "-j", type=int, default=0, metavar="J",
                   help="--verify: worker processes (default: this machine's cores; 1: in this process)")
    p.add_argument("--json", action="store_true", help="--verify/list: print JSON on stdout")
    p.add_argument("--collective", action="append", metavar="C", help="only this collective (repeatable)")
    p.add_argument("--algorithm", action="append", metavar="A", help="only this algorithm (repeatable)")
    p.add_argument("--nranks", "-n", "--ranks", dest="nranks", type=int, metavar="P", help="--show: number of ranks")
    p.add_argument("--count", type=int, metavar="N", help="--show: per-rank count in elements")
    p.add_argument("--root", type=int, default=0, metavar="R", help="--show: root rank (default 0)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="--show: builder parameter, e.g. local_size=2 or segments=4 (repeatable)")
    p.add_argument("--save", metavar="FILE", help="--show: also write the Schedule as JSON to FILE")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    if args.verify:
        return _verify(args)
    if args.show:
        return _show(args)
    return _list(args)


# ---- list -------------------------------------------------------------------------------------


def _selected(args: argparse.Namespace):
    from ..algorithms.verify import load_entries

    ents, failures = load_entries()
    for f in failures:
        print(f"warning: {f['failures'][0]}", file=sys.stderr)
    return [e for e in ents
            if (not args.collective or e.collective in args.collective)
            and (not args.algorithm or e.algorithm in args.algorithm)]


def _list(args: argparse.Namespace) -> int:
    ents = _selected(args)
    if args.json:
        print(json.dumps([{"collective": e.collective, "algorithm": e.algorithm, "summary": e.summary,
                           "params": list(e.params)} for e in ents], indent=1))
        return 0
    try:
        if not sys.stdout.isatty():  # piped: plain lines, whole summaries (rich would wrap them at 80 columns)
            raise ImportError
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        import shutil
        import textwrap

        wc = max((len(e.collective) for e in ents), default=10)
        wa = max((len(e.algorithm) for e in ents), default=9)
        width = max(60, shutil.get_terminal_size((100, 24)).columns)  # piped: COLUMNS, else 100
        print(f"{'collective':<{wc}}  {'algorithm':<{wa}}  summary")
        for e in ents:
            params = f" [params: {', '.join(e.params)}]" if e.params else ""
            # the summary wrapped under its own column (every word kept), so a piped table fits the width
            print(textwrap.fill(f"{e.collective:<{wc}}  {e.algorithm:<{wa}}  {e.summary}{params}", width=width,
                                subsequent_indent=" " * (wc + wa + 4), break_long_words=False,
                                break_on_hyphens=False))
        return 0
    table = Table(title=f"interlink algorithms ({len(ents)})")
    table.add_column("collective", no_wrap=True)
    table.add_column("algorithm", no_wrap=True)
    table.add_column("params")
    table.add_column("summary")
    for e in ents:
        table.add_row(e.collective, e.algorithm, ", ".join(e.params), e.summary)
    Console().print(table)
    return 0


# ---- verify -----------------------------------------------------------------------------------


def _verify(args: argparse.Namespace) -> int:
    from ..algorithms.verify import verify_all

    if args.max_ranks < 1:
        print("interlink algorithms: --max-ranks must be >= 1", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    progress = sys.stderr if args.json else sys.stdout
    jobs = args.jobs or (os.cpu_count() or 1)
    from ..algorithms.verify import ALLTOALLV

    sel = _selected(args)
    total = len(sel)
    if (not args.collective or ALLTOALLV[0] in args.collective) and (not args.algorithm or ALLTOALLV[1] in args.algorithm):
        total += 1  # all_to_all/pairwise_v: built per rank, not in the registry, verified after it
    whole = not args.collective and not args.algorithm
    print(f"interlink algorithms: verifying {total} (collective, algorithm) pairs on nranks 1..{args.max_ranks}, "
          f"{jobs} worker(s); a line per pair, in registry order, as it is done"
          f"{' (every pair to 17 ranks: about 25 s on 2 cores)' if whole else ''}",
          file=sys.stderr, flush=True)
    done = [0]
    # the name column fits the longest "[i/n] collective/algorithm" (all_gather/recursive_doubling: 37 wide)
    width = max([len(f"[{total}/{total}] {e.collective}/{e.algorithm}") for e in sel] + [34])

    def line(res: dict) -> None:
        done[0] += 1
        name = f"[{done[0]}/{total}] {res['collective']}/{res['algorithm']}"
        nf = len(res["failures"])
        status = "ok  " if nf == 0 else "FAIL"
        tail = "" if nf == 0 else f", {nf} failed"
        print(f"{status} {name:<{width}} {res['cases']:>5} cases{tail}", file=progress, flush=True)
        for msg in res["failures"][:5]:
            print(f"       {msg}", file=progress)
        if nf > 5:
            print(f"       ... and {nf - 5} more", file=progress)

    results = verify_all(args.max_ranks, collectives=args.collective, algorithms=args.algorithm,
                         full=args.full, on_result=line, jobs=jobs)
    dt = time.perf_counter() - t0
    nfail = sum(len(r["failures"]) for r in results)
    bad = sum(1 for r in results if r["failures"])
    ncases = sum(r["cases"] for r in results)
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
    if not results:
        print("no algorithm matched", file=sys.stderr)
        return 1
    print(f"{len(results)} pairs, {ncases} cases, nranks 1..{args.max_ranks}"
          f"{' (full dtype x op matrix)' if args.full else ''}: "
          f"{'all passed' if nfail == 0 else f'{nfail} failures in {bad} pairs'} in {dt:.1f} s",
          file=progress)
    return 1 if nfail else 0


# ---- show -------------------------------------------------------------------------------------


def _parse_value(v: str) -> object:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return {"none": None, "true": True, "false": False}.get(v.lower(), v)


def _chunk(c) -> str:
    return f"{c.buffer}[{c.offset}:{c.end}]"


def _step(s) -> str:
    from ..algorithms.schedule import Copy, Recv, Send

    if isinstance(s, Send):
        return f"send {_chunk(s.src)} -> {s.peer}"
    if isinstance(s, Recv):
        return f"recv{'+reduce' if s.reduce else ''} {_chunk(s.dst)} <- {s.peer}"
    if isinstance(s, Copy):
        return f"copy {_chunk(s.src)} -> {_chunk(s.dst)}"
    return f"reduce {_chunk(s.dst)} op= {_chunk(s.src)}"


def format_schedule(s) -> str:
    """A Schedule as text: a header, then every rank's rounds, one line per round."""
    bufs = " ".join(f"{k}={v}" for k, v in s.buffers.items())
    meta = " ".join(f"{k}={v}" for k, v in s.meta.items())
    lines = [
        f"{s.collective}/{s.algorithm}  nranks={s.nranks} count={s.count} root={s.root}",
        f"rounds={s.nrounds} (with communication: {s.comm_rounds})  buffers: {bufs}" + (f"  meta: {meta}" if meta else ""),
        f"elements sent per rank: {s.sent_per_rank()}",
        f"largest send per round: {s.max_sent_per_round()}",
    ]
    wk = len(str(max(s.nrounds - 1, 0)))
    for r in range(s.nranks):
        lines.append(f"rank {r}:")
        for k, rnd in enumerate(s.ranks[r]):
            body = "; ".join(_step(st) for st in rnd.steps) or "-"
            lines.append(f"  round {k:>{wk}}: {body}")
    return "\n".join(lines)


def _show(args: argparse.Namespace) -> int:
    from ..algorithms.registry import get_schedule

    collective, algorithm = args.show
    if args.nranks is None or args.count is None:
        print("interlink algorithms --show needs --nranks and --count", file=sys.stderr)
        return 2
    params = {}
    for kv in args.param:
        if "=" not in kv:
            print(f"interlink algorithms: --param expects KEY=VALUE, got {kv!r}", file=sys.stderr)
            return 2
        k, v = kv.split("=", 1)
        params[k.strip()] = _parse_value(v.strip())
    try:
        s = get_schedule(collective, algorithm, args.nranks, args.count, root=args.root, **params)
    except (ValueError, TypeError) as exc:
        print(f"interlink algorithms: {exc}", file=sys.stderr)
        return 2
    print(format_schedule(s))
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            f.write(s.dumps())
        print(f"saved to {args.save}", file=sys.stderr)
    return 0
