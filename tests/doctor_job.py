"""The rank program of the doctor's hang tests: ``python doctor_job.py SCENARIO`` on every rank of a job
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, INTERLINK_SECRET and INTERLINK_DUMP_DIR in the environment).
Each scenario makes one kind of hang or slowness happen for real; tests/test_doctor_hang.py reads the
dumps with ``interlink doctor hang``.

  ok            6 all_reduces, then exit (dumps at exit)
  never_entered rank 2 skips call 4 and sleeps (until SIGTERM / SIGUSR1)
  mismatch      rank 1 calls broadcast where the others call all_reduce (call 4)
  stalled       call 4 is a 16 MiB all_reduce over the ring Schedule; rank 3 stops itself (SIGSTOP) inside it
  straggler     rank 1 sleeps 40 ms before each of calls 3..10
  dead          rank 2 kills itself (SIGKILL) before call 4
  traced        calls 4 and 5 are 1 MiB all_reduces over the ring Schedule (run with INTERLINK_TRACE)
  torch_*       the same with torch.distributed on gloo (torch's flight recorder, dumped on failure)
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np

TIMEOUT = float(os.environ.get("DOCTOR_JOB_TIMEOUT", "3"))


def interlink_job(scenario: str) -> None:
    import interlink

    g = interlink.init(timeout=TIMEOUT)
    rank = g.rank
    x = np.ones(2, dtype=np.float32)
    for _ in range(3):
        interlink.all_reduce(x)
    if scenario == "never_entered" and rank == 2:
        time.sleep(60)
    elif scenario == "mismatch" and rank == 1:
        interlink.broadcast(x, src=0)
    elif scenario == "dead" and rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    elif scenario == "stalled":
        big = np.ones(4 << 20, dtype=np.float32)
        if rank == 3:
            from interlink.runtime import api

            eng = api._CTX.engine

            def stop() -> None:  # once this rank is inside call 4's rounds, stop the process
                while not (eng.at and eng.at[0] == 4 and eng.at[1] >= 1):
                    time.sleep(0.0002)
                os.kill(os.getpid(), signal.SIGSTOP)

            threading.Thread(target=stop, daemon=True).start()
        interlink.all_reduce(big, algorithm="ring")
    elif scenario == "traced":  # INTERLINK_TRACE: host-page calls, then two ring all_reduces of 1 MiB
        big = np.ones(1 << 18, dtype=np.float32)
        for _ in range(2):
            interlink.all_reduce(big, algorithm="ring")
    elif scenario == "straggler":
        for _ in range(8):
            if rank == 1:
                time.sleep(0.04)
            interlink.all_reduce(x)
    else:
        interlink.all_reduce(x)
    for _ in range(2):
        interlink.all_reduce(x)
    interlink.destroy()


def torch_job(scenario: str) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT))
    rank = dist.get_rank()
    out = os.environ["INTERLINK_DUMP_DIR"]

    def dump(*_: object) -> None:
        data = torch._C._distributed_c10d._dump_fr_trace_json(True, True)
        with open(os.path.join(out, f"torch_fr_rank{rank}.json"), "wb") as f:
            f.write(data)

    signal.signal(signal.SIGUSR1, dump)
    x = torch.ones(2)
    try:
        for _ in range(3):
            dist.all_reduce(x)
        if scenario == "torch_never_entered" and rank == 2:
            time.sleep(60)
        elif scenario == "torch_mismatch" and rank == 1:
            dist.broadcast(x, src=0)
        elif scenario == "torch_dead" and rank == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        elif scenario == "torch_straggler":
            for _ in range(8):
                if rank == 1:
                    time.sleep(0.04)
                dist.all_reduce(x)
        else:
            dist.all_reduce(x)
        dist.all_reduce(x)
    except Exception:
        dump()
        os._exit(1)
    dump()
    dist.destroy_process_group()


if __name__ == "__main__":
    sc = sys.argv[1]
    (torch_job if sc.startswith("torch_") else interlink_job)(sc)
