"""The cost of one collective call through torch.distributed's backend on this host, measured.

The host plan (plan/host.py) prices each collective of a step by the cost model of interlink's own call
(or gloo's ring); a step's calls go through torch.distributed (its Python wrapper, the C++ process group,
the backend's Work and future; for ``backend="interlink"`` the Python ProcessGroup that hands the tensors
to interlink), which the model does not hold. :func:`measure_calls` times that path: ``ranks`` processes
(spawned) join ``init_process_group("interlink")`` and a gloo group of the same ranks, and time
back-to-back calls of each collective on a small float32 tensor (:data:`CALL_BYTES`), ``async_op=True``
and ``wait()`` at once (as DDP's reducer and FSDP2 issue them), on both backends, and the same call on
interlink's numpy API (synchronous: interlink's own call, in the calling thread, which the plan's cost
model prices), the sources taking turns in each block, the median of the blocks (rank 0's time a
call: a collective ends together on every rank). benchmarks/torch_call_cost.py prints the same calls at
more sizes, sync and async.

gloo's calls are timed at a second size too (:data:`LINE_BYTES`): gloo's algorithms are not interlink's
Schedules, and on this host its reduce_scatter_tensor takes longer than its all_reduce of the same input
(2 ranks, 16 MiB: 19.6 against 13.8 ms; 4 ranks: 40.6 against 27.4 ms; a ring reduce-scatter is half an
all_reduce), so the host plan prices a gloo collective by the line through its two measured times
(plan/host.py ``_price``) rather than by a ring over TCP.
"""

from __future__ import annotations

import datetime
import os
import statistics
import time
from typing import Any, Optional

__all__ = ["CALL_BYTES", "CALL_COLLECTIVES", "LINE_BYTES", "calls_key", "measure_calls"]

#: bytes of the tensor the calls are timed at (nccl-tests' S: all_reduce's tensor, all_gather's output,
#: reduce_scatter's input): small, so that the call's own cost dominates its data's
CALL_BYTES = 1024
CALL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
#: bytes of gloo's second timing (the line's far point): the size of a bucket or an FSDP block's parameters
LINE_BYTES = 4 << 20
SOURCES = ("interlink", "gloo", "api")


def calls_key(backend: str, collective: str, ranks: int) -> str:
    """HostCompute.calls' key of a collective on ``backend`` at ``ranks`` ranks."""
    return f"{backend}:{collective}:{int(ranks)}"


class _Done:
    """What a synchronous call of interlink's API gives the timing loop to wait on."""

    @staticmethod
    def wait() -> None:
        pass


_DONE = _Done()


def _call(src: str, collective: str, nbytes: int, ranks: int, gloo: Any) -> Any:
    """One call of ``collective`` on ``src`` (buffers made once), returning something to ``wait()`` on."""
    import numpy as np
    import torch
    import torch.distributed as dist

    import interlink

    n = max(ranks, nbytes // 4)
    n -= n % ranks
    if src == "api":
        if collective == "all_reduce":
            a = np.zeros(n, np.float32)
            return lambda: interlink.all_reduce(a) or _DONE
        if collective == "all_gather":
            o, i = np.empty(n, np.float32), np.ones(n // ranks, np.float32)
            return lambda: interlink.all_gather_into_tensor(o, i) or _DONE
        o, i = np.empty(n // ranks, np.float32), np.ones(n, np.float32)
        return lambda: interlink.reduce_scatter_tensor(o, i) or _DONE
    g = gloo if src == "gloo" else None
    if collective == "all_reduce":  # zeros: repeated in place, ones would grow to inf (numpy's overflow warning)
        t = torch.zeros(n)
        return lambda: dist.all_reduce(t, group=g, async_op=True)
    if collective == "all_gather":
        o, i = torch.empty(n), torch.ones(n // ranks)
        return lambda: dist.all_gather_into_tensor(o, i, group=g, async_op=True)
    o, i = torch.empty(n // ranks), torch.ones(n)
    return lambda: dist.reduce_scatter_tensor(o, i, group=g, async_op=True)


def _worker(rank: int, ranks: int, port: int, nbytes: int, calls: int, blocks: int, q: Any) -> None:
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # reduce_scatter_tensor's deprecation
    try:
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                          OMP_NUM_THREADS="1")
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("interlink")
        gloo = dist.new_group(backend="gloo")
        try:
            fns = {(s, c): _call(s, c, nbytes, ranks, gloo) for c in CALL_COLLECTIVES for s in SOURCES}
            # gloo at LINE_BYTES too (fewer calls: each takes milliseconds)
            fns.update({("gloo@line", c): _call("gloo", c, LINE_BYTES, ranks, gloo) for c in CALL_COLLECTIVES})
            for f in fns.values():  # the first calls of a shape set its path up
                for _ in range(5):
                    f().wait()
            times: dict[tuple[str, str], list[float]] = {k: [] for k in fns}
            for _ in range(blocks):
                for k, f in fns.items():
                    n_calls = max(3, calls // 20) if k[0] == "gloo@line" else calls
                    dist.barrier(group=gloo)
                    t0 = time.perf_counter()
                    for _ in range(n_calls):
                        f().wait()
                    times[k].append((time.perf_counter() - t0) / n_calls)
            if rank == 0:
                q.put(("ok", {f"{s}|{c}": statistics.median(v) for (s, c), v in times.items()}))
        finally:
            dist.barrier(group=gloo)
            dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        q.put(("error", f"rank {rank}: {type(e).__name__}: {e}"))


def _free_port() -> int:
    """A TCP port free on this host now (torch's store of the measuring processes listens on it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_calls(ranks: int, *, nbytes: int = CALL_BYTES, calls: int = 200, blocks: int = 5,
                  timeout: float = 600.0) -> dict[str, dict[str, Any]]:
    """Seconds a call through torch.distributed on ``ranks`` processes of this host: {calls_key(backend,
    collective, ranks): {"torch_s", "api_s" (interlink's numpy API, interlink only), "bytes", "calls",
    "blocks", "date", "load"; gloo also "line_s" at "line_bytes"}} for backend interlink and gloo (see the
    module docstring)."""
    import multiprocessing as mp
    import queue

    from .job import PlanError

    if ranks < 2:
        raise PlanError("the per-call cost through torch's backend is measured on 2 or more ranks")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    load = os.getloadavg()[0]
    procs = [ctx.Process(target=_worker, args=(r, ranks, port, nbytes, calls, blocks, q), daemon=True)
             for r in range(ranks)]
    for p in procs:
        p.start()
    res: Optional[tuple[str, Any]] = None
    try:
        deadline = time.monotonic() + timeout
        while res is None:
            try:
                res = q.get(timeout=1.0)
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    res = ("error", f"a measuring process ended with status {dead[0]}")
                elif time.monotonic() > deadline:
                    res = ("error", f"no answer in {timeout:.0f} s")
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    if res[0] != "ok":
        raise PlanError(f"measuring the per-call cost through torch's backend on {ranks} ranks failed: {res[1]}")
    t = res[1]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out: dict[str, dict[str, Any]] = {}
    for c in CALL_COLLECTIVES:
        for b in ("interlink", "gloo"):
            m = {"torch_s": t[f"{b}|{c}"], "bytes": nbytes, "calls": calls, "blocks": blocks, "date": date,
                 "load": round(load, 2)}
            if b == "interlink":
                m["api_s"] = t[f"api|{c}"]
            else:
                m["line_s"], m["line_bytes"] = t[f"gloo@line|{c}"], LINE_BYTES
            out[calls_key(b, c, ranks)] = m
    return out
