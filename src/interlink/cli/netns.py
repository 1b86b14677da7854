"""``python -m interlink.cli.netns list|cleanup``: list or remove what emulated runs (``interlink run
--emulate-hosts``) left behind. The emulation itself is :mod:`interlink.launch.netns`."""

from __future__ import annotations

import sys
from typing import Sequence

from ..launch.netns import EmulationError, check_requirements, cleanup_stale, leftovers


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m interlink.cli.netns",
        description="List or remove what emulated runs (interlink run --emulate-hosts) left behind.")
    parser.add_argument("action", choices=("list", "cleanup"))
    parser.add_argument("prefix", nargs="?", default="il",
                        help="one run's prefix (il<pid>) or 'il' for every run (default)")
    parser.add_argument("--include-live", action="store_true",
                        help="cleanup: also remove namespaces whose owning process is still alive")
    args = parser.parse_args(argv)
    if args.action == "list":
        for item in leftovers(args.prefix):
            print(item)
        return 0
    try:
        check_requirements(need_tc=False)
    except EmulationError as exc:
        print(f"interlink netns: {exc}", file=sys.stderr)
        return 2
    for item in cleanup_stale(args.prefix, include_live=args.include_live):
        print(f"removed {item}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
