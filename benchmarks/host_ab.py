"""The turn-taking loop of the host page's in-process A/B benchmarks (slots_cma_ab.py, inline_ab.py,
fast2_ab.py).

Both settings of a FastPath knob run in one job, alternating turn by turn, so that both see the same
minutes of a noisy machine: each turn applies a setting on every rank, clears the call-shape cache,
makes ``warm`` calls, then times ``calls`` calls with each rank's input rewritten before every call
outside the timing (as an application's is); a turn's time is the max over ranks of the mean call.
Sizes are the largest buffer of a call (all_gather: its output), as in mpich_same_process.py.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Iterator

import numpy as np


def start():
    """init interlink and return (the module, rank, world size, the world's FastPath); exits with a message
    where the ranks have no host page."""
    import interlink as dist
    from interlink.runtime import api

    dist.init()
    r, p = dist.get_rank(), dist.get_world_size()
    fp = api._world()._fast
    if fp is None:
        raise SystemExit("needs ranks on one host with the host page (INTERLINK_FAST not 0, shared memory)")
    # each setting forces its path: no measuring of the two in the bands (FastPath.pick), the slots' limits'
    # nor the streaming threshold's
    fp.autotune = fp.autotune_stream = False
    return dist, r, p, fp


def turns(dist, fp, collective: str, sizes: list[int], settings: dict[str, Callable[[], None]], nturns: int,
          warm: int, calls: int, arena: bool = False) -> Iterator[tuple[int, dict[str, list[float]], set]]:
    """For each size: (size, {setting: [us per call, a turn each]}, the Schedules the calls ran)."""
    p = dist.get_world_size()
    for nb in sizes:
        n = max(p, nb // 4 // p * p)
        alloc = dist.zeros if arena else np.zeros  # arena: inputs in interlink.zeros (read in place)
        x, o, blk = alloc(n, np.float32), np.zeros(n, np.float32), alloc(n // p, np.float32)
        src = blk if collective == "all_gather" else x
        call = {"broadcast": lambda: dist.broadcast(x, src=0),
                "all_reduce": lambda: dist.all_reduce(x),
                "all_gather": lambda: dist.all_gather_into_tensor(o, blk),
                "reduce_scatter": lambda: dist.reduce_scatter_tensor(blk, x),
                "all_to_all": lambda: dist.all_to_all_single(o, x)}[collective]
        # rewrite the input before each call; an all_reduce's in-place result is scaled back by 1/p (it would
        # grow by p each call)
        touch = (lambda: np.multiply(x, 1.0 / p, out=x)) if collective == "all_reduce" else (lambda: np.add(src, 1, out=src))
        res: dict[str, list[float]] = {k: [] for k in settings}
        for _ in range(nturns):
            for name, apply in settings.items():
                apply()
                fp.shapes.clear()
                for _ in range(warm):
                    touch()
                    call()
                dist.barrier()
                tot = 0.0
                for _ in range(calls):
                    touch()
                    t = time.perf_counter()
                    call()
                    tot += time.perf_counter() - t
                y = np.array([tot / calls])
                dist.all_reduce(y, op="max")
                res[name].append(float(y[0]) * 1e6)
        ran = {sc.sigb.decode().split()[0] for sc in fp.shapes.values() if sc and sc.schedule is not None}
        yield nb, res, ran


def line(collective: str, p: int, nb: int, res: dict[str, list[float]], a: str, b: str, extra: str = "") -> str:
    """One result line: each setting's minimum and median over the turns, and the median per-turn a / b."""
    ratio = statistics.median(x / y for x, y in zip(res[a], res[b]))
    return (f"{collective} {p} ranks {nb >> 10:6d} KiB{extra}  " + "  ".join(
        f"{k}: min {min(v):7.1f} med {statistics.median(v):7.1f} us" for k, v in res.items()) + f"  {a}/{b} {ratio:.2f}")
