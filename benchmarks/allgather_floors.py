"""all_gather: MPICH, the one-copy floors by cross-memory attach, and interlink's two host paths, in one MPICH job.

    python benchmarks/allgather_floors.py 4M,16M [--ranks 4] [--turns 8]

Every rank runs, turn by turn on the same buffers (each turn: 3 warm-up calls, then 20 timed, the max
over ranks of the mean call):
  mpich     MPI_Allgather (mpi4py)
  push      the floor of interlink's ``fastd``: copy the own block into the output, write it into every
            peer's output by one process_vm_writev each, MPI_Barrier
  pull      the same, each peer's block read by process_vm_readv from its input
  ring      MPICH's ring by hand: p-1 steps, each reading from the left neighbour's output the block it
            received the step before (one process_vm_readv; a token to the right says the step is done)
  il_slots  interlink's all_gather through the host page's slots (the limit raised to this size; where
            a block fits a slot)
  il_fastd  interlink's all_gather by ``fastd`` (the slots' limit lowered to 64 KiB)
Rank 0 prints each one's median and minimum over the turns and the median per-turn ratio MPICH / it
(> 1: faster than MPICH). The script starts itself under MPICH's mpiexec (`pip install -e '.[compare]'`).
Sizes are the output's bytes (benchmarks/RESULTS.md section 27).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _rank(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    import interlink as dist
    from interlink.cli.bench import parse_size
    from interlink.runtime import api
    from interlink.transport import cma

    comm = MPI.COMM_WORLD
    r, p = comm.rank, comm.size
    cma.allow_peers()
    dist.init(rank=r, world_size=p)
    fp = api._world()._fast
    if fp is None:
        raise SystemExit("needs interlink's host page (INTERLINK_FAST not 0, shared memory)")
    limits = (fp.move_max, fp.move_max_ag)
    tok, tok2 = np.zeros(1, np.int64), np.zeros(1, np.int64)
    for nb in (parse_size(s) for s in args.sizes.split(",")):
        n = max(1, nb // 4 // p)
        out, blk = np.zeros(n * p, np.float32), np.full(n, r, np.float32)
        info = comm.allgather((os.getpid(), cma.address(out), cma.address(blk)))
        B, oa, ba = blk.nbytes, cma.address(out), cma.address(blk)

        def own() -> None:
            out[r * n:(r + 1) * n] = blk

        def mpich() -> None:
            comm.Allgather(blk, out)

        def push() -> None:
            own()
            for d in range(1, p):
                j = (r + d) % p
                cma.write(info[j][0], info[j][1] + r * B, ba, B)
            comm.Barrier()

        def pull() -> None:
            own()
            for d in range(1, p):
                j = (r - d) % p
                cma.read(info[j][0], info[j][2], oa + j * B, B)
            comm.Barrier()

        def ring() -> None:
            own()
            left, right = (r - 1) % p, (r + 1) % p
            for s in range(1, p):
                b = (r - s) % p
                cma.read(info[left][0], info[left][1] + b * B, oa + b * B, B)
                if s < p - 1:
                    comm.Sendrecv(tok, dest=right, recvbuf=tok2, source=left)
            comm.Barrier()

        def il(slots: bool):
            def call() -> None:
                fp.move_max, fp.move_max_ag = limits[0], max(limits[1], B) if slots else 64 << 10
                dist.all_gather_into_tensor(out, blk)
            return call

        fns = {"mpich": mpich, "push": push, "pull": pull, "ring": ring, "il_slots": il(True), "il_fastd": il(False)}
        if B > fp.page.fast_max:  # a block larger than a slot never goes through them
            del fns["il_slots"]
        res: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.turns):
            for k, f in fns.items():
                fp.shapes.clear()
                for _ in range(3):
                    f()
                comm.Barrier()
                t = time.perf_counter()
                for _ in range(20):
                    f()
                res[k].append(comm.allreduce((time.perf_counter() - t) / 20, op=MPI.MAX) * 1e6)
        fp.move_max, fp.move_max_ag = limits
        exp = np.repeat(np.arange(p, dtype=np.float32), n)
        ok = comm.allreduce(int(np.array_equal(out, exp)), op=MPI.MIN)
        if r == 0:
            m = np.array(res["mpich"])
            print(f"all_gather {p} ranks {nb >> 10} KiB ({'results checked' if ok else 'WRONG RESULT'}):")
            for k, v in res.items():
                print(f"  {k:9s} median {np.median(v):8.0f} us  min {min(v):8.0f} us"
                      + (f"  mpich/{k} {np.median(m / np.array(v)):.2f}" if k != "mpich" else ""))
    dist.destroy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", help="bytes of each rank's output, comma-separated (4M,16M)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--turns", type=int, default=8)
    args = ap.parse_args()
    if os.environ.get("INTERLINK_FLOORS_CHILD") != "1":
        from interlink.bench.peers import relaunch_under_mpiexec

        return relaunch_under_mpiexec(__file__, args.ranks, "INTERLINK_FLOORS_CHILD", sys.argv[1:])
    _rank(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
