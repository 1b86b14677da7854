"""``interlink predict``: the cost model's prediction for one collective, size and topology.

    interlink predict all_reduce --size 1G --topology dgx-h100
    interlink predict all_reduce --size 64M --topology 16xdgx-h100 --algorithm ring --json
    interlink predict broadcast --size 1M --nranks 4                  # this machine (calibrated profile)

Prints the predicted time, algbw and busbw (nccl-tests definitions, GB/s = 1e9 B/s), the chosen
algorithm and protocol, the runner-up, and a table of every algorithm (its best protocol; ``--all``:
every algorithm x protocol). ``--json`` prints the prediction as one JSON object instead.

On GPU topologies without ``--algorithm`` two lines say which is which: ``best on paper`` (the fastest Schedule
interlink has: the time above) and ``nccl default`` (what a user running NCCL gets: NCCL's tuner's pick,
:mod:`interlink.model.nccl`, priced by the model, with the time nccl-tests would print); the JSON has them as
``best_on_paper`` and ``nccl_default``.

Sizes round down to whole elements per rank, as nccl-tests counts them; a size that gives no element
per rank (0, or 3 bytes of float32) is an error (exit status 2) naming the smallest valid size, so
that a question is never silently answered for 0 bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from .bench import parse_collective, parse_size

#: the --help text on sizes shared by ``predict`` and ``simulate``
SIZE_EPILOG = ("Sizes take binary K/M/G suffixes (64K = 65536), as nccl-tests: the size is the bytes of the largest "
               "buffer, rounded down to whole elements per rank (size / typesize, and / nranks for all_gather, "
               "reduce_scatter, all_to_all, gather, scatter). A size that rounds down to 0 elements per rank "
               "(e.g. 0, or 3 bytes of float32) is an error (exit status 2) that names the smallest valid size.")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "predict",
        help="predict a collective's time and bus bandwidth on a topology (the cost model)",
        description="Predict time, algbw and busbw of a collective with the alpha-beta-gamma cost model: every "
                    "registered algorithm (x protocol LL/LL128/Simple on GPU topologies, plus NVLS where the "
                    "NVSwitch has it) is evaluated on the topology and the fastest is chosen.",
        epilog=SIZE_EPILOG + " Topologies: a preset (dgx-h100), a cluster (16xdgx-h100:oversub=2), a .yaml/.json "
               "file, or 'this' (default: this machine; a CPU host uses the profile of `interlink bench --calibrate`).",
    )
    p.add_argument("collective", type=parse_collective, help="all_reduce, broadcast, reduce, all_gather, ...")
    p.add_argument("--size", "-s", type=parse_size, required=True, metavar="BYTES",
                   help="bytes of the largest buffer (8, 64K, 1M, 8G); at least one element per rank")
    p.add_argument("--topology", "-t", default="this", metavar="SPEC", help="topology (default 'this': this machine)")
    p.add_argument("--nranks", "-n", "--ranks", type=int, default=None, metavar="N",
                   help="ranks (default: every rank of the topology; the first N otherwise)")
    p.add_argument("--algorithm", "-a", default=None, metavar="A", help="only this algorithm (or nvls, fast)")
    p.add_argument("--dtype", "-d", default="float32", metavar="D", help="element type (default float32)")
    p.add_argument("--root", type=int, default=0, help="root of rooted collectives (default 0)")
    p.add_argument("--transport", choices=("shm", "tcp"), default=None,
                   help="CPU hosts: the transport between ranks of a host (default shm)")
    p.add_argument("--params", default=None, metavar="FILE",
                   help="YAML/JSON file overriding model parameters (see interlink.model.params)")
    p.add_argument("--no-profile", action="store_true", help="ignore this host's calibrated profile")
    p.add_argument("--all", action="store_true", help="table of every algorithm x protocol")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.set_defaults(func=run)
    return p


def _gbs(v: float) -> str:
    return f"{v:.2f}"


def _time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.2f} us"


def min_size(collective: str, itemsize: int, nranks: int) -> int:
    """The smallest size in bytes that gives ``collective`` one element per rank (nccl-tests' counting)."""
    from ..model.cost import PER_RANK_SPLIT

    return itemsize * (max(1, nranks) if collective in PER_RANK_SPLIT else 1)


def size_error(collective: str, nbytes: int, dtype: str, nranks: int, *, what: str = "--size") -> str | None:
    """Why ``nbytes`` is no size for ``collective`` (it rounds down to 0 elements per rank), naming the
    smallest valid size; None when it gives at least one element per rank (barrier takes any size)."""
    from ..model.cost import PER_RANK_SPLIT, itemsize_of

    if collective == "barrier":
        return None
    isz = itemsize_of(dtype)
    smallest = min_size(collective, isz, nranks)
    if nbytes >= smallest:
        return None
    split = collective in PER_RANK_SPLIT
    how = f"{nbytes} // {isz} // {nranks} ranks" if split else f"{nbytes} // {isz}"
    per = f" ({isz} B x {nranks} ranks)" if split else ""
    return (f"{what} {nbytes} gives {collective} 0 elements of {dtype} per rank ({how}, rounded down as "
            f"nccl-tests counts); the smallest valid size is {smallest} bytes{per}: use {what} {smallest} or more")


def run(args: argparse.Namespace) -> int:
    from ..model import ModelError, load_params, predict
    from ..model.cost import resolve_topology
    from ..model.params import default_params, host_profile, with_profile
    from ..topology import TopologyError

    if args.collective == "sendrecv":
        print("interlink predict: sendrecv is point to point; predict a collective", file=sys.stderr)
        return 2
    try:
        nranks = args.nranks if args.nranks is not None else resolve_topology(args.topology).nranks
        if args.nranks is not None and "ranks=" in str(args.topology):
            slots = resolve_topology(args.topology).nranks  # the spec says how many ranks its hosts hold
            if args.nranks > slots:
                raise ValueError(f"topology {args.topology!r} holds {slots} ranks; cannot place {args.nranks} "
                                 f"(raise its ranks= or its host count)")
        bad = size_error(args.collective, args.size, args.dtype, nranks) if nranks >= 1 else None
        if bad:
            raise ValueError(bad)
        params = None
        if args.params:
            base = default_params() if args.no_profile else with_profile(default_params(), host_profile())
            params = load_params(args.params, base)
        pred = predict(args.collective, args.size, args.topology, nranks=args.nranks, algorithm=args.algorithm,
                       dtype=args.dtype, root=args.root, params=params,
                       profile=False if args.no_profile else None, transport=args.transport)
    except (ModelError, TopologyError, ValueError) as exc:
        print(f"interlink predict: {exc}", file=sys.stderr)
        return 2
    nccl = None
    if args.algorithm is None and pred.mode == "gpu":
        from ..model.nccl import nccl_default

        try:
            nccl = nccl_default(args.collective, args.size, args.topology, nranks=args.nranks, dtype=args.dtype,
                                params=params if params is not None else None)
        except (ModelError, TopologyError, ValueError) as exc:
            pred = dataclasses.replace(pred, notes=pred.notes + (f"NCCL's choice not priced: {exc}",))
    if args.json:
        d = pred.to_dict()
        if pred.mode == "gpu" and args.algorithm is None:
            b = pred.best
            d["best_on_paper"] = {"algorithm": b.algorithm, "protocol": b.protocol, "time_us": b.time_us,
                                  "algbw_gbps": b.algbw_gbps, "busbw_gbps": b.busbw_gbps,
                                  "what": "the fastest Schedule interlink has (the time_us above)"}
            d["nccl_default"] = None if nccl is None else {
                **nccl.to_dict(), "what": "what a user running NCCL gets: NCCL's tuner's pick, priced by this model"}
        print(json.dumps(d, indent=2))
        return 0
    out = sys.stdout
    proto = f"/{pred.protocol}" if pred.mode == "gpu" else ""
    from .text import note

    out.write(note("# interlink predict: ", f"{pred.collective}, {pred.nbytes} B ({pred.count} x {pred.dtype} per "
                                            f"rank), {pred.nranks} ranks on {pred.topology} ({pred.mode})") + "\n")
    out.write(f"time      {_time(pred.time_us)}\n")
    out.write(f"algbw     {_gbs(pred.algbw_gbps)} GB/s\n")
    out.write(f"busbw     {_gbs(pred.busbw_gbps)} GB/s\n")
    out.write(f"algorithm {pred.algorithm}{proto}\n")
    ru = pred.runner_up
    if ru is not None:
        rproto = f"/{ru.protocol}" if pred.mode == "gpu" else ""
        out.write(f"runner-up {ru.algorithm}{rproto}: {_time(ru.time_us)} "
                  f"({ru.time_us / pred.time_us:.2f}x), busbw {_gbs(ru.busbw_gbps)} GB/s\n")
    if args.algorithm is None and pred.mode == "gpu":
        from .text import note

        b = pred.best
        out.write(note("best on paper  ", f"{b.algorithm}/{b.protocol}: {_time(b.time_us)}, busbw "
                                          f"{_gbs(b.busbw_gbps)} GB/s (the fastest Schedule interlink has)") + "\n")
        if nccl is not None:
            out.write(note("nccl default   ", f"{nccl.algorithm}/{nccl.protocol}: {_time(nccl.time_us)}, busbw "
                                              f"{_gbs(nccl.busbw_gbps)} GB/s (what a user running NCCL gets: NCCL's "
                                              f"tuner's pick, priced by this model; nccl-tests would print "
                                              f"{_time(nccl.nccl_tests_us)})") + "\n")
        else:
            out.write(note("nccl default   ", "- (no NCCL choice to price: NCCL runs all_to_all, gather and scatter "
                                              "as grouped send/receive, and interlink has no Schedule of NCCL's ring "
                                              "reduce)") + "\n")
    rows = list(pred.table) if args.all else pred.per_algorithm()
    out.write("#\n")
    out.write(f"# {'algorithm':<20} {'protocol':>8} {'time (us)':>12} {'algbw':>9} {'busbw':>9} {'channels':>8}  method\n")
    for c in rows:
        # the rows of the 'best on paper' and 'nccl default' lines, marked by their first word ('nccl' with NCCL's
        # protocol where the row shows another), so that a marked row stays within 100 columns
        mark = []
        if args.algorithm is None and pred.mode == "gpu" and c is pred.best:
            mark.append("best")
        if nccl is not None and c.algorithm == nccl.algorithm and (args.all is False or c.protocol == nccl.protocol):
            mark.append("nccl" + (f" ({nccl.protocol})" if nccl.protocol != c.protocol else ""))
        out.write(f"  {c.algorithm:<20} {c.protocol if pred.mode == 'gpu' else '-':>8} {c.time_us:12.2f} "
                  f"{_gbs(c.algbw_gbps):>9} {_gbs(c.busbw_gbps):>9} {c.channels:>8}  {c.method}"
                  f"{'  ' + c.note if c.note else ''}{'  <- ' + ', '.join(mark) if mark else ''}\n")
    from .text import note

    for n in pred.notes:
        out.write(note("# note: ", n) + "\n")
    return 0
