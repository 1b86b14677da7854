"""Copies into the slots, plain against streaming stores (docs/collectives.md, "Copies into the slots").

    python3 benchmarks/slot_stream_ab.py lines [KIB]         # two processes on two cores: a copy over lines
                                                             # the other core holds, plain and streaming, and
                                                             # the other core's read of it (default 256 KiB)
    python3 benchmarks/slot_stream_ab.py ab COLL BYTES [N] [--ranks P]
                                                             # N jobs of each, alternating: INTERLINK_SLOT_STREAM=0
                                                             # (plain) against the default (measured); the
                                                             # median call of 1,200 a job, and how many of a
                                                             # rank's calls streamed their copy

`lines` tells which state the host is in: where the two cores share a cache the plain copy over the other's
lines costs about twice the streaming one (2-core AMD EPYC VM: 29 us for 256 KiB) and the read out of the
other core's cache is fast (7 us); where they do not, the plain copy is ~10x the streaming one (117 against
12 us) and the read 26-28 us.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import time

import numpy as np


def _lines_worker(role: int, fd: int, nbytes: int, streamed: bool, out) -> None:
    from interlink.transport import stream

    os.sched_setaffinity(0, {role % os.cpu_count()})
    mm = mmap.mmap(fd, nbytes + 4096)
    buf = np.frombuffer(mm, np.uint8, count=nbytes)
    flags = np.frombuffer(mm, np.int64, count=16, offset=nbytes)
    src, dst = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    tw, tr = [], []
    for rep in range(300):
        if role == 0:  # the writer: over lines the reader read last time
            while flags[8] < rep:
                pass
            t = time.perf_counter()
            if streamed:
                stream.copy(buf, src)
            else:
                buf[:] = src
            tw.append(time.perf_counter() - t)
            flags[0] = rep + 1
        else:  # the reader
            while flags[0] < rep + 1:
                pass
            t = time.perf_counter()
            dst[:] = buf
            tr.append(time.perf_counter() - t)
            flags[8] = rep + 1
    out.put((role, statistics.median(tw or tr) * 1e6))
    del buf, flags
    mm.close()


def lines(kib: int) -> None:
    import multiprocessing as mp

    nbytes = kib << 10
    for streamed in (False, True):
        fd = os.memfd_create("slot-stream-ab")
        os.ftruncate(fd, nbytes + 4096)
        q = mp.get_context("fork").Queue()
        ps = [mp.get_context("fork").Process(target=_lines_worker, args=(r, fd, nbytes, streamed, q)) for r in (0, 1)]
        [p.start() for p in ps]
        [p.join() for p in ps]
        got = dict(q.get() for _ in ps)
        os.close(fd)
        print(f"{kib} KiB, {'streaming' if streamed else 'plain'} copy over the other core's lines: {got[0]:.1f} us; "
              f"the other core's read of it: {got[1]:.1f} us", flush=True)


def _ab_worker(rank: int, world: int, env: dict, coll: str, nbytes: int, q) -> None:
    os.environ.update(env)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    import interlink as dist
    from interlink.bench import peers
    from interlink.runtime import api

    dist.init(timeout=120)
    inp, out = peers.buffers(coll, nbytes, world, rank)
    call = {"all_to_all": lambda: dist.all_to_all_single(out, inp),
            "all_gather": lambda: dist.all_gather_into_tensor(out, inp),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(out, inp),
            "all_reduce": lambda: dist.all_reduce(inp),
            "broadcast": lambda: dist.broadcast(inp, src=0)}[coll]
    ts = []
    for k in range(1200):
        inp.fill(k % 7)
        t = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t)
    core = getattr(api._CTX.fast, "core", None)
    q.put((rank, statistics.median(ts[200:]) * 1e6, core.stream_calls if core is not None else None))
    dist.destroy()


def ab(coll: str, nbytes: int, n: int, world: int) -> None:
    import multiprocessing as mp
    import secrets

    from interlink.launch.local import free_port

    ctx = mp.get_context("spawn")
    for i in range(n):
        row = []
        for mode in ("0", "auto"):
            env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "INTERLINK_SECRET": secrets.token_hex(16),
                   "INTERLINK_TRANSPORT": "shm", "INTERLINK_SLOT_STREAM": mode}
            q = ctx.Queue()
            ps = [ctx.Process(target=_ab_worker, args=(r, world, env, coll, nbytes, q)) for r in range(world)]
            [p.start() for p in ps]
            got = sorted(q.get() for _ in ps)
            [p.join() for p in ps]
            row.append((max(g[1] for g in got), got[0][2]))
        (plain, _), (auto, streamed) = row
        print(f"{time.strftime('%H:%M:%S')} {coll} {nbytes} B {world} ranks: plain {plain:.1f} us | measured {auto:.1f} us "
              f"(rank 0 streamed {streamed} of 1200 calls)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("lines")
    a.add_argument("kib", nargs="?", type=int, default=256)
    b = sub.add_parser("ab")
    b.add_argument("collective")
    b.add_argument("nbytes", type=int)
    b.add_argument("n", nargs="?", type=int, default=3)
    b.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    if args.cmd == "lines":
        lines(args.kib)
    else:
        ab(args.collective, args.nbytes, args.n, args.ranks)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    main()
