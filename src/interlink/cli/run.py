"""``interlink run``: start the ranks of a job on this node (torchrun-like).

    interlink run -n 4 train.py --lr 0.1
    interlink run -n 4 -m mypkg.train
    interlink run -n 8 --nnodes 2 --node-rank 0 --master node0:29500 train.py   # INTERLINK_SECRET set

See :mod:`interlink.cli.launcher` for the environment every rank gets.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .launcher import DEFAULT_GRACE, LaunchError, launch


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "run",
        help="launch N ranks of a Python script on this node",
        description="Launch N ranks of a Python script (or -m module) on this node. Every rank gets RANK, "
                    "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK, MASTER_ADDR, MASTER_PORT "
                    "and INTERLINK_SECRET; its output lines are prefixed with [rank K]. When a rank fails, the "
                    "others are stopped and the failure is reported. On one node a free port and a fresh job "
                    "secret are chosen; with --nnodes > 1, --master and INTERLINK_SECRET (in the environment, "
                    "the same on every node) are required.",
    )
    p.add_argument("-n", "--nproc-per-node", dest="nproc", type=int, required=True, metavar="N",
                   help="ranks to start on this node")
    p.add_argument("--nnodes", type=int, default=1, metavar="M", help="number of nodes (default 1)")
    p.add_argument("--node-rank", type=int, default=0, metavar="K", help="this node's index, 0..M-1 (default 0)")
    p.add_argument("--master", metavar="HOST:PORT",
                   help="address of the job's rendezvous on node 0 (default on one node: 127.0.0.1 and a free port)")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE, metavar="SECONDS",
                   help=f"after SIGTERM, wait this long before SIGKILL (default {DEFAULT_GRACE:g})")
    p.add_argument("-m", "--module", action="store_true",
                   help="run the target as a module (python -m TARGET) instead of a script")
    p.add_argument("target", metavar="script.py|module", help="the script (or with -m, the module) to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    cmd = (["-m", args.target] if args.module else [args.target]) + list(args.args)
    try:
        return launch(cmd, args.nproc, nnodes=args.nnodes, node_rank=args.node_rank, master=args.master,
                      grace=args.grace)
    except LaunchError as exc:
        print(f"interlink run: {exc}", file=sys.stderr)
        return 2
