"""interlink and MPICH in the same processes, taking turns (benchmarks/RESULTS.md section 20).

    python benchmarks/mpich_same_process.py broadcast 64K,256K [--ranks 2] [--turns 20] [--touch]

The project's VM moves between a fast and a slow mode every few seconds (a 64 KiB copy between the two
cores takes 7 or 35 us; RESULTS section 20), so two systems measured one after the other in separate
jobs can land in different modes. Here both run inside one MPI job: the script starts itself under
MPICH's mpiexec, every rank initialises interlink as well (the MPICH launcher's variables and a
MASTER_ADDR/MASTER_PORT for interlink's rendezvous), and each turn times interlink's calls then MPICH's
on the same buffers, a few milliseconds apart. Rank 0 prints, per size, both systems' median and
minimum over the turns and the median of the per-turn ratio MPICH time / interlink time (> 1:
interlink faster).

--touch: each rank writes its input before every call (outside the timing), as an application does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _rank(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    import interlink as dist
    from interlink.bench.peers import aligned_empty
    from interlink.cli.bench import parse_size

    comm = MPI.COMM_WORLD
    dist.init()
    r, p = dist.get_rank(), dist.get_world_size()
    ops = {"all_reduce": MPI.SUM, "reduce_scatter": MPI.SUM}
    for nb in (parse_size(s) for s in args.sizes.split(",")):
        n = max(p, nb // 4 // p * p)
        # page-aligned, as compare.py's: MPICH's out-of-place copies are not timed on 4K-aliased buffers
        x, o, blk = aligned_empty(n), aligned_empty(n), aligned_empty(n // p)
        for a in (x, o, blk):
            a.fill(0)
        inp = blk if args.collective == "all_gather" else x
        ours, theirs = {
            "broadcast": (lambda: dist.broadcast(x, src=0), lambda: comm.Bcast(x, root=0)),
            "all_reduce": (lambda: dist.all_reduce(x), lambda: comm.Allreduce(MPI.IN_PLACE, x, op=ops["all_reduce"])),
            "all_gather": (lambda: dist.all_gather_into_tensor(o, blk), lambda: comm.Allgather(blk, o)),
            "reduce_scatter": (lambda: dist.reduce_scatter_tensor(blk, x),
                               lambda: comm.Reduce_scatter_block(x, blk, op=ops["reduce_scatter"])),
        }[args.collective]
        iters = int(min(1000, max(3, (256 << 20) // max(nb, 1))))

        def timed(call) -> float:
            for k in range(max(3, iters // 10)):
                if args.touch:
                    inp.fill(k % 7)
                call()
            comm.Barrier()
            if not args.touch:
                t0 = time.perf_counter()
                for _ in range(iters):
                    call()
                took = time.perf_counter() - t0
            else:
                took = 0.0
                for k in range(iters):
                    inp.fill(k % 7)  # small values: sums stay exact; all_reduce in place starts afresh
                    t0 = time.perf_counter()
                    call()
                    took += time.perf_counter() - t0
            return comm.allreduce(took / iters * 1e6, op=MPI.MAX)

        pairs = [(timed(ours), timed(theirs)) for _ in range(args.turns)]
        if r == 0:
            ratio = [m / i for i, m in pairs]
            line = (f"{args.collective} {p} ranks {nb >> 10} KiB{' touched' if args.touch else ''}: "
                    f"interlink med {statistics.median(i for i, _ in pairs):.1f} min {min(i for i, _ in pairs):.1f} us"
                    f" | mpich med {statistics.median(m for _, m in pairs):.1f} min {min(m for _, m in pairs):.1f} us"
                    f" | mpich/interlink per turn: med {statistics.median(ratio):.2f}")
            print(line, flush=True)
    dist.destroy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("collective", choices=["broadcast", "all_reduce", "all_gather", "reduce_scatter"])
    ap.add_argument("sizes", help="bytes of the largest buffer per call, comma-separated (64K,256K)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--touch", action="store_true", help="write the input before every call (outside the timing)")
    args = ap.parse_args()
    if os.environ.get("INTERLINK_SAME_PROCESS_CHILD") != "1":
        from interlink.bench.peers import relaunch_under_mpiexec

        return relaunch_under_mpiexec(__file__, args.ranks, "INTERLINK_SAME_PROCESS_CHILD", sys.argv[1:])
    _rank(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
