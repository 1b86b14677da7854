"""The cost of one small collective call through torch.distributed: backend="interlink" against gloo and
against interlink's own numpy API, in one run.

    python benchmarks/torch_call_cost.py [--ranks 2] [--sizes 8,1024,65536] [--ops all_reduce,all_gather,
        reduce_scatter] [--modes sync,async] [--calls 200] [--blocks 7] [--json FILE] [--profile OP:SIZE:MODE]

Starts ``--ranks`` processes (spawn) that call ``init_process_group("interlink")`` and make a gloo group
over the same ranks. Each block times ``--calls`` back-to-back calls of every (collective, size, mode)
on each of:

  interlink -- ``dist.all_reduce(t)`` / ``dist.all_gather_into_tensor(o, t)`` / ``dist.reduce_scatter_tensor(o, t)``
               of float32 CPU tensors on the default group (backend="interlink")
  gloo      -- the same calls with ``group=`` a gloo group of the same ranks
  numpy     -- interlink's own API on numpy arrays of the same size (``interlink.all_reduce(a)``, ...)
  tnumpy    -- (only with --sources) the same API on numpy views of torch tensors (``t.numpy()``): torch's
               memory, interlink's call

``sync``: the call with ``async_op=False``; ``async``: ``async_op=True`` and ``.wait()`` at once (numpy:
``async_op=True`` and the interlink Work's ``wait()``). The sources take turns inside each block (so a
burst of load from other jobs hits them alike); printed: microseconds a call, the median over blocks of
rank 0's time per call (a collective ends together on every rank), and the ratio to the numpy API.
``size`` is the bytes of a rank's input for all_reduce and reduce_scatter, of its output for all_gather.

``--profile all_reduce:8:sync`` runs cProfile over the calls of that cell on backend="interlink" (rank 0)
and prints the functions taking the most time (where a call's microseconds go).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore", category=FutureWarning)

from interlink.launch.local import free_port

OPS = ("all_reduce", "all_gather", "reduce_scatter")
SOURCES = ("interlink", "gloo", "numpy")  # and "tnumpy" (--sources): the numpy API on torch's memory


def _calls(src: str, op: str, nbytes: int, ranks: int, async_op: bool, gloo):  # noqa: ANN001
    """A function making one call of ``op`` on ``src`` (its buffers made once)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    import interlink

    n = max(1, nbytes // 4)
    if op != "all_reduce":
        n = max(ranks, n - n % ranks)
    if src in ("numpy", "tnumpy"):
        # tnumpy: interlink's numpy API on numpy views of torch tensors (torch's allocator, numpy's call)
        mk = (lambda k, fill: (torch.ones(k) if fill else torch.empty(k)).numpy()) if src == "tnumpy" else \
            (lambda k, fill: np.ones(k, np.float32) if fill else np.empty(k, np.float32))
        if op == "all_reduce":
            a = mk(n, True)
            return lambda: interlink.all_reduce(a, async_op=async_op)
        if op == "all_gather":
            o, i = mk(n, False), mk(n // ranks, True)
            return lambda: interlink.all_gather_into_tensor(o, i, async_op=async_op)
        o, i = mk(n // ranks, False), mk(n, True)
        return lambda: interlink.reduce_scatter_tensor(o, i, async_op=async_op)
    g = gloo if src == "gloo" else None
    if op == "all_reduce":
        t = torch.ones(n)
        return lambda: dist.all_reduce(t, group=g, async_op=async_op)
    if op == "all_gather":
        o, i = torch.empty(n), torch.ones(n // ranks)
        return lambda: dist.all_gather_into_tensor(o, i, group=g, async_op=async_op)
    o, i = torch.empty(n // ranks), torch.ones(n)
    return lambda: dist.reduce_scatter_tensor(o, i, group=g, async_op=async_op)


def _time(fn, calls: int, async_op: bool) -> float:  # noqa: ANN001
    """Seconds a call, over ``calls`` calls (each async one waited for at once)."""
    if async_op:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn().wait()
        return (time.perf_counter() - t0) / calls
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def _worker(rank: int, world: int, port: int, args: dict, q) -> None:  # noqa: ANN001
    warnings.filterwarnings("ignore", category=FutureWarning)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      OMP_NUM_THREADS="1")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if args.get("switch"):
        sys.setswitchinterval(args["switch"])
    dist.init_process_group("interlink")
    gloo = dist.new_group(backend="gloo")
    try:
        cells = [(op, s, m) for op in args["ops"] for s in args["sizes"] for m in args["modes"]]
        fns = {(src, *c): _calls(src, c[0], c[1], world, c[2] == "async", gloo) for c in cells for src in args["sources"]}
        for f in fns.values():  # warm up every path (the first call of a shape sets it up)
            for _ in range(3):
                w = f()
                if w is not None:
                    w.wait()
        if args["profile"]:
            import cProfile
            import io
            import pstats

            op, s, m = args["profile"]
            f = fns[("interlink", op, s, m)]
            dist.barrier(group=gloo)
            prof = cProfile.Profile()
            prof.enable()
            t = _time(f, args["calls"], m == "async")
            prof.disable()
            if rank == 0:
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
                q.put(("profile", f"{op} {s} B {m}: {t * 1e6:.1f} us a call under cProfile\n{out.getvalue()}"))
            return
        times: dict = {k: [] for k in fns}
        for _ in range(args["blocks"]):
            for c in cells:
                for src in args["sources"]:
                    dist.barrier(group=gloo)
                    times[(src, *c)].append(_time(fns[(src, *c)], args["calls"], c[2] == "async"))
        if rank == 0:
            q.put(("times", {"|".join(map(str, k)): v for k, v in times.items()}))
    finally:
        dist.barrier(group=gloo)
        dist.destroy_process_group()


def run(ranks: int, sizes: list, ops: list, modes: list, sources: list, calls: int, blocks: int,
        profile=None, switch: float = 0.0) -> dict:  # noqa: ANN001
    """The per-call times (seconds, a list over blocks) of every cell, keyed "source|op|size|mode"; with
    ``profile`` (op, size, mode) cProfile's text instead."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    args = dict(sizes=sizes, ops=ops, modes=modes, sources=sources, calls=calls, blocks=blocks, profile=profile,
                switch=switch)
    procs = [ctx.Process(target=_worker, args=(r, ranks, port, args, q)) for r in range(ranks)]
    for p in procs:
        p.start()
    kind, res = q.get(timeout=3600)
    for p in procs:
        p.join(120)
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"a rank failed: exit codes {[p.exitcode for p in procs]}")
    return {"profile": res} if kind == "profile" else res


def table(res: dict, sizes: list, ops: list, modes: list, sources: list) -> str:
    lines = [f"{'collective':<15}{'bytes':>7} {'mode':<6}" + "".join(f"{s + ' us':>13}" for s in sources) +
             "".join(f"{s + '/numpy':>14}" for s in sources if s != "numpy")]
    for op in ops:
        for s in sizes:
            for m in modes:
                med = {src: statistics.median(res[f"{src}|{op}|{s}|{m}"]) * 1e6 for src in sources}
                row = f"{op:<15}{s:>7} {m:<6}" + "".join(f"{med[src]:>13.1f}" for src in sources)
                if "numpy" in med:
                    row += "".join(f"{med[src] / med['numpy']:>13.2f}x" for src in sources if src != "numpy")
                lines.append(row)
    return "\n".join(lines)


def main(argv=None) -> int:  # noqa: ANN001
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", default="8,1024,65536", help="bytes, comma-separated")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--modes", default="sync,async")
    ap.add_argument("--sources", default=",".join(SOURCES))
    ap.add_argument("--calls", type=int, default=200, help="calls a block")
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--json", help="write the per-block times here")
    ap.add_argument("--switch-interval", type=float, default=0.0, metavar="S",
                    help="sys.setswitchinterval(S) in every rank (default: Python's, 0.005)")
    ap.add_argument("--profile", help="OP:SIZE:MODE: cProfile that cell on backend='interlink' instead")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",")]
    ops, modes, sources = a.ops.split(","), a.modes.split(","), a.sources.split(",")
    for o in ops:
        if o not in OPS:
            ap.error(f"--ops: {o} is not one of {OPS}")
    if a.profile:
        op, s, m = a.profile.split(":")
        print(run(a.ranks, [int(s)], [op], [m], ["interlink"], a.calls, 1, (op, int(s), m))["profile"])
        return 0
    load0 = os.getloadavg()[0]
    res = run(a.ranks, sizes, ops, modes, sources, a.calls, a.blocks, switch=a.switch_interval)
    print(f"{a.ranks} ranks, {a.calls} calls a block, median of {a.blocks} blocks (rank 0), load average "
          f"{load0:.1f} -> {os.getloadavg()[0]:.1f}, {os.cpu_count()} cpus, switch interval "
          f"{(a.switch_interval or sys.getswitchinterval()) * 1e3:g} ms")
    print(table(res, sizes, ops, modes, sources))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"ranks": a.ranks, "calls": a.calls, "blocks": a.blocks, "load": [load0, os.getloadavg()[0]],
                       "seconds_a_call": res}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
