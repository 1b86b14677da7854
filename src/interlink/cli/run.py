"""``interlink run``: start the ranks of a job on this node (torchrun-like).

    interlink run -n 4 train.py --lr 0.1
    interlink run -n 4 -m mypkg.train
    interlink run -n 8 --nnodes 2 --node-rank 0 --master node0:29500 train.py   # INTERLINK_SECRET set
    interlink run --emulate-hosts 2 --nproc-per-host 2 --link-rate 1gbit train.py  # root: netns hosts

See :mod:`interlink.launch.local` for the environment every rank gets.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..launch.local import DEFAULT_GRACE, LaunchError, launch


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "run",
        help="launch N ranks of a Python script on this node",
        description="Launch N ranks of a Python script (or -m module) on this node. Every rank gets RANK, "
                    "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK, MASTER_ADDR, MASTER_PORT "
                    "and INTERLINK_SECRET; its output lines are prefixed with [rank K]. When a rank fails, the "
                    "others are stopped and the failure is reported. On one node a free port and a fresh job "
                    "secret are chosen; with --nnodes > 1, --master and INTERLINK_SECRET (in the environment, "
                    "the same on every node) are required. With --emulate-hosts H (root, Linux), H hosts are emulated "
                    "on this machine as network namespaces joined by (optionally shaped) veth links, and "
                    "--nproc-per-host ranks start on each (see docs/multinode.md).",
    )
    p.add_argument("-n", "--ranks", "--nproc-per-node", "--nproc-per-host", dest="nproc", type=int, metavar="N",
                   help="ranks to start on this node (required; with --emulate-hosts: on each emulated host)")
    p.add_argument("--nnodes", type=int, default=1, metavar="M", help="number of nodes (default 1)")
    p.add_argument("--node-rank", type=int, default=0, metavar="K", help="this node's index, 0..M-1 (default 0)")
    p.add_argument("--master", metavar="HOST:PORT",
                   help="address of the job's rendezvous on node 0 (default on one node: 127.0.0.1 and a free port)")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE, metavar="SECONDS",
                   help=f"after SIGTERM, wait this long before SIGKILL (default {DEFAULT_GRACE:g})")
    emu = p.add_argument_group(
        "emulated hosts",
        "run the job on H emulated hosts: network namespaces linked by veth pairs (a bridge for H > 2), "
        "so that ranks on different hosts talk TCP over the links; needs root and iproute2; everything "
        "made is removed when the job ends (docs/multinode.md)")
    emu.add_argument("--emulate-hosts", type=int, metavar="H",
                     help="emulate H hosts (2..253) on this machine, -n/--nproc-per-host ranks on each")
    emu.add_argument("--link-rate", metavar="RATE",
                     help="shape every host's link to RATE in each direction (tc units: 1gbit, 100mbit, 10gbit)")
    emu.add_argument("--nics", type=int, default=1, metavar="K",
                     help="NICs per emulated host, each shaped to --link-rate; NIC k of every host on rail k "
                          "(default 1); the ranks get INTERLINK_IFNAME listing them and open a TCP lane per NIC")
    emu.add_argument("--link-delay", metavar="TIME",
                     help="one-way delay between hosts (1ms, 200us); needs the netem qdisc, refused without it")
    p.add_argument("-m", "--module", action="store_true",
                   help="run the target as a module (python -m TARGET) instead of a script")
    p.add_argument("target", metavar="script.py|module", help="the script (or with -m, the module) to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=run, run_parser=p)
    return p


def run(args: argparse.Namespace) -> int:
    parser = getattr(args, "run_parser", None)

    def usage_error(message: str) -> int:
        if parser is not None:
            parser.error(message)  # exits 2 with the usage line, like any argparse error
        print(f"interlink run: error: {message}", file=sys.stderr)
        return 2

    if args.nproc is None:
        return usage_error("the following arguments are required: -n/--nproc-per-node"
                           + (" (or --nproc-per-host)" if getattr(args, "emulate_hosts", None) else ""))
    cmd = (["-m", args.target] if args.module else [args.target]) + list(args.args)
    emulate = getattr(args, "emulate_hosts", None)
    if emulate is None:
        if getattr(args, "link_rate", None) is not None or getattr(args, "link_delay", None) is not None \
                or getattr(args, "nics", 1) != 1:
            return usage_error("--link-rate, --link-delay and --nics need --emulate-hosts")
    else:
        if args.nnodes != 1 or args.node_rank != 0 or args.master is not None:
            return usage_error("--emulate-hosts makes its own nodes: do not combine it with --nnodes, "
                               "--node-rank or --master")
        from ..launch.netns import EmulationError, launch_emulated

        try:
            return launch_emulated(cmd, emulate, args.nproc, rate=args.link_rate, delay=args.link_delay,
                                   nics=args.nics, grace=args.grace)
        except EmulationError as exc:
            print(f"interlink run: {exc}", file=sys.stderr)
            return 2
    try:
        return launch(cmd, args.nproc, nnodes=args.nnodes, node_rank=args.node_rank, master=args.master,
                      grace=args.grace)
    except LaunchError as exc:
        print(f"interlink run: {exc}", file=sys.stderr)
        return 2
