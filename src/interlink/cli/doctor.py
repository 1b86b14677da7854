"""``interlink doctor``: check this machine, explain a hang from flight-recorder dumps.

    interlink doctor                      environment checks: transports, /dev/shm, ptrace scope, NICs, ...
    interlink doctor hang DIR             merge every rank's dump in DIR into verdicts with their evidence
    interlink doctor hang DIR --ranks 8   the job had 8 ranks (names the ranks that left no dump)
    interlink doctor ... --json           the same as JSON

Dumps: run the job with INTERLINK_DUMP_DIR=DIR (interlink writes interlink-rank<R>.json on a failed call,
SIGUSR1, SIGTERM and at exit), or put torch's flight-recorder dumps there (one file per rank, the rank
at the end of the name). docs/doctor.md says what each verdict means.
"""

from __future__ import annotations

import argparse
import json
import sys
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
    p.set_defaults(func=_env)
    return p


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
