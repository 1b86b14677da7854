"""The flight recorder's cost on the latency path: 8-byte all_reduce with and without it, in one job.

    interlink run -n 2 benchmarks/recorder_overhead.py [--turns 30] [--block 1000]

Three versions of the call through the host page (``Group._call_small``) are swapped in turn on the world
group, every rank at the same call, blocks of ``--block`` calls each, the order rotated every turn:

- ``none``: the call without any recorder (the baseline);
- ``ring``: the runtime's call, the recorder as it is (runtime/recorder.py ``CallRing``: two list stores
  and one clock read at the start, one store at the end);
- ``record``: the recorder as it was before the CallRing, a ``Record`` object per call appended to a deque
  and two clock reads (the same code, restated here).

Rank 0 prints, per version, the median microseconds per call over the turns and the median of the
per-turn ratios to ``none`` (1.000: no cost). In-process blocks keep the machine's drift (other jobs,
frequency) out of the comparison, which a job-against-job A/B on a shared host does not.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
import types
from time import perf_counter

import numpy as np


class _OldRecord:
    __slots__ = ("seq", "plan", "start", "state", "duration")

    def __init__(self, seq, plan, start):
        self.seq, self.plan, self.start, self.state, self.duration = seq, plan, start, "running", 0.0


def _none(self, kind, sc, a, out, timeout):
    if self.ctx.broken is not None:
        self._check_usable("x")
    self.seq = seq = self.seq + 1
    tn = sc.tune
    if tn is not None:
        sc = self._fast.pick(tn)
    self._fast.hot(sc, a, out, seq, self.ctx.timeout if timeout is None else timeout)


def _record(self, kind, sc, a, out, timeout):
    if self.ctx.broken is not None:
        self._check_usable("x")
    self.seq = seq = self.seq + 1
    tn = sc.tune
    if tn is not None:
        sc = self._fast.pick(tn)
    rec = _OldRecord(seq, sc, perf_counter())
    self._old.append(rec)
    try:
        self._fast.hot(sc, a, out, seq, self.ctx.timeout if timeout is None else timeout)
    except BaseException:
        rec.state = "failed"
        raise
    rec.state = "done"
    rec.duration = perf_counter() - rec.start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--block", type=int, default=1000)
    args = ap.parse_args()
    import interlink
    from interlink.runtime.group import Group

    g = interlink.init()
    if g._fast is None:
        raise SystemExit("the host page is off (ranks on several hosts, or INTERLINK_FAST=0): nothing to measure")
    g._old = collections.deque(maxlen=32)
    versions = {"none": types.MethodType(_none, g), "ring": types.MethodType(Group._call_small, g),
                "record": types.MethodType(_record, g)}
    x = np.zeros(2, dtype=np.float32)  # (sums stay 0: no overflow warnings)
    for _ in range(2000):
        interlink.all_reduce(x)
    res: dict[str, list[float]] = {k: [] for k in versions}
    names = list(versions)
    for t in range(args.turns):
        order = names[t % 3:] + names[:t % 3]
        for k in order:
            g._call_small = versions[k]
            for _ in range(50):  # settle
                interlink.all_reduce(x)
            t0 = time.perf_counter()
            for _ in range(args.block):
                interlink.all_reduce(x)
            res[k].append((time.perf_counter() - t0) / args.block * 1e6)
    del g._call_small
    if g.rank == 0:
        base = res["none"]
        print(f"8 B all_reduce (float32 x 2), {g.size} ranks, {args.turns} turns of {args.block} calls per version: "
              f"us per call (median over turns), ratio to none (median of per-turn ratios)")
        for k, v in res.items():
            r = statistics.median(a / b for a, b in zip(v, base))
            print(f"  {k:7s} {statistics.median(v):7.3f} us   {r:.3f}")
    interlink.destroy()


if __name__ == "__main__":
    main()
