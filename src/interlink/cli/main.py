"""The ``interlink`` command line: one subcommand per module of this package.

Each subcommand module exposes ``add_parser(subparsers)``, which adds its parser and sets
``func`` (called with the parsed arguments, returns the exit status). Adding a subcommand is
writing ``cli/<name>.py`` and adding ``"<name>"`` to :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

SUBCOMMANDS: tuple[str, ...] = (
    "run",
    "algorithms",
    "bench",
    "topo",
    "predict",
    "simulate",
    "doctor",
    "plan",
)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="interlink",
        description="Collective communication for GPU clusters: launch jobs, benchmark the collectives, inspect and "
                    "verify algorithms, see topologies, predict and simulate collectives, plan a training step, "
                    "explain a hang.",
    )
    parser.add_argument("--version", action="version", version=f"interlink {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"{__package__}.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `interlink algorithms | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
