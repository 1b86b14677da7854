"""Calibration, the measuring half: start local ranks, time interlink's own collectives, hand the
samples to the model's fit (:mod:`interlink.model.calibrate`) and save this host's profile.

    interlink bench --calibrate [--ranks N] [--transport shm|tcp]   measure, fit, write the profile
    python -m interlink.bench.calibrate --worker JSON                (one rank; started by the above)

What is measured and how it is fitted: :mod:`interlink.model.calibrate`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..model.calibrate import (BUDGET_BYTES, CASES, DEFAULT_PASSES, DEFAULT_RANKS, DEFAULT_REPS, DIRECT_SIZES,
                               FAST_SIZES, SIZES, TRANSPORTS, Sample, fit_profile, report_lines, to_samples)
from ..algorithms.hostpath import HostLimits
from ..model.params import Profile

__all__ = ["calibrate", "measure", "plan", "run_points", "wait_quiet", "merge_passes", "report_lines",
           "DEFAULT_REPS", "TRANSPORTS"]

MARKER = "@@interlink-calibrate "


# ---- one rank's measurements ------------------------------------------------------------------------


def _emit(ev: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(ev) + "\n")
    sys.stdout.flush()


def measure(cases: Sequence[tuple[str, Optional[str], int]], reps: int = DEFAULT_REPS,
            on_point: Optional[Callable[[dict], None]] = None) -> list[dict]:
    """Run inside every rank after interlink.init(): time each (collective, algorithm, nbytes).

    Returns (on every rank) dicts with collective, algorithm, nbytes, count, times (seconds per
    repetition, max over ranks)."""
    import interlink as il  # the public API, inside the rank

    p = il.get_world_size()
    out = []
    for coll, algo, size in cases:
        count = max(size // 4, 1)
        buf = np.zeros(count, dtype=np.float32)
        kw = {"algorithm": algo} if algo else {}
        if coll == "all_reduce":
            call = lambda: il.all_reduce(buf, **kw)  # noqa: E731
        elif coll == "broadcast":
            call = lambda: il.broadcast(buf, 0, **kw)  # noqa: E731
        else:
            raise ValueError(f"calibration measures all_reduce and broadcast, not {coll}")
        nbytes = count * 4
        iters = int(min(50, max(2, BUDGET_BYTES // max(nbytes, 1))))
        for _ in range(2):
            call()
        times = np.zeros(reps, dtype=np.float64)
        for k in range(reps):
            il.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                call()
            times[k] = (time.perf_counter() - t0) / iters
        path = algo or _last_path(coll)
        il.all_reduce(times, "max")
        pt = {"collective": coll, "algorithm": path, "nbytes": nbytes, "count": count, "nranks": p,
              "iters": iters, "times": times.tolist()}
        out.append(pt)
        if on_point is not None:
            on_point(pt)
    return out


def _last_path(collective: str) -> str:
    """The path the world group's last call took, from its flight recorder's signature: a host-page
    Schedule ('slots', 'slots_once', 'two_phase', 'peer_buffers') or the Schedule's algorithm. The model prices each
    from its own steps (slots_once: one rank reduces, the others copy)."""
    from ..runtime import api
    from .sweep import path_taken

    return (path_taken(api._world(), collective) if api.is_initialized() else None) or "slots"


def _worker(spec: Mapping[str, Any]) -> None:
    import interlink as il

    g = il.init()
    try:
        cases = [(c, a, int(s)) for c, a, s in spec["cases"]]
        lead = g.rank == 0
        measure(cases, int(spec.get("reps", DEFAULT_REPS)), (lambda pt: _emit(pt)) if lead else None)
    finally:
        il.destroy()


def shm_limits() -> HostLimits:
    """The host page's limits of the runtime here (runtime.policy.host_limits: algorithms.hostpath.HostLimits,
    the streaming threshold 0 where copies never stream): the fit records them with the profile
    (HostLimits.to_params; the model itself never imports the runtime)."""
    from ..runtime import policy

    return policy.host_limits()


# ---- the whole measurement (parent process) -------------------------------------------------------



# ---- the whole measurement (parent process) -------------------------------------------------------


def plan(transport: str, sizes: Sequence[int] = SIZES, fast_sizes: Sequence[int] = FAST_SIZES,
         cases: Sequence[tuple[str, str, int]] = CASES) -> list[tuple[str, Optional[str], int]]:
    out: list[tuple[str, Optional[str], int]] = [(c, a, s) for c, a, top in cases for s in sizes if s <= top]
    if transport == "shm":
        lim = shm_limits()
        big, direct = lim.slot_bytes, lim.peer_buffers_all_reduce_min
        out += [("all_reduce", None, s) for s in fast_sizes if s <= big]
        out += [("all_reduce", None, s) for s in DIRECT_SIZES if s > max(big, direct)]
    return out


def run_points(nranks: int, transport: str, cases: Sequence[tuple[str, Optional[str], int]], reps: int,
               on_point: Optional[Callable[[dict], None]] = None,
               on_message: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Start ``nranks`` local ranks over ``transport`` and measure ``cases`` (rank 0's points)."""
    from ..launch.local import launch

    env = dict(os.environ)
    env["INTERLINK_TRANSPORT"] = transport
    env.pop("INTERLINK_ALGO", None)
    points: list[dict] = []
    tail: list[str] = []

    class Sink:
        def __init__(self, err: bool) -> None:
            self.err = err

        def write(self, data: bytes) -> int:
            for line in data.decode("utf-8", "replace").splitlines():
                _, _, rest = line.partition("] ")
                if not self.err and rest.startswith(MARKER):
                    pt = json.loads(rest[len(MARKER):])
                    pt["transport"] = transport
                    points.append(pt)
                    if on_point is not None:
                        on_point(pt)
                else:
                    tail.append(line)
                    del tail[:-8]
                    if on_message is not None:
                        on_message(line)
            return len(data)

        def flush(self) -> None:
            pass

    spec = {"cases": [[c, a, s] for c, a, s in cases], "reps": reps}
    rc = launch(["-m", "interlink.bench.calibrate", "--worker", json.dumps(spec)], nranks, env=env,
                stdout=Sink(False), stderr=Sink(True))  # type: ignore[arg-type]
    if rc != 0:
        raise RuntimeError(f"calibration ranks ({nranks} over {transport}) failed with status {rc}"
                           + (":\n" + "\n".join(tail) if tail else ""))
    return points



# ---- the command -----------------------------------------------------------------------------------


# ---- the command -----------------------------------------------------------------------------------


def _cpu_busy(interval: float = 1.0) -> float:
    """Fraction of this machine's CPU time spent busy over ``interval`` seconds (/proc/stat; 0 elsewhere)."""
    def snap() -> tuple[float, float]:
        with open("/proc/stat") as f:
            v = [float(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0.0)
        return sum(v), idle

    try:
        t0, i0 = snap()
        time.sleep(interval)
        t1, i1 = snap()
    except (OSError, ValueError, IndexError):
        return 0.0
    return 0.0 if t1 <= t0 else 1.0 - (i1 - i0) / (t1 - t0)


def wait_quiet(max_wait: float = 60.0, busy: float = 0.2, log: Optional[Callable[[str], None]] = None) -> float:
    """Wait (at most ``max_wait`` seconds) until the machine is quiet (less than ``busy`` of its CPU time
    used by others), so that measurements on a shared machine are not taken during someone else's burst.
    Returns the seconds waited."""
    t0 = time.time()
    while time.time() - t0 < max_wait:
        if _cpu_busy() < busy:
            break
        time.sleep(1.0)
    waited = time.time() - t0
    if log is not None and waited > 2:
        log(f"interlink calibrate: waited {waited:.0f} s for a quiet machine")
    return waited


def merge_passes(points: Iterable[Mapping[str, Any]]) -> list[dict]:
    """One point per (transport, ranks, collective, algorithm, bytes) with the repetitions of every pass."""
    out: dict[tuple, dict] = {}
    for pt in points:
        key = (pt["transport"], pt["nranks"], pt["collective"], pt["algorithm"], pt["nbytes"])
        if key in out:
            out[key]["times"] = list(out[key]["times"]) + list(pt["times"])
        else:
            out[key] = dict(pt)
    return list(out.values())


def calibrate(ranks: Sequence[int] = DEFAULT_RANKS, transports: Sequence[str] = TRANSPORTS, *,
              sizes: Sequence[int] = SIZES, reps: int = DEFAULT_REPS, passes: int = DEFAULT_PASSES,
              save: bool = True, path: Optional[str] = None, log: Optional[Callable[[str], None]] = None,
              quiet_wait: float = 30.0) -> tuple[Profile, list[Sample]]:
    """Measure (``passes`` times over the whole plan, so that a burst of load on a shared machine
    spoils at most one pass; each point is the median of all its repetitions; before each run, wait
    up to ``quiet_wait`` seconds for the machine to be quiet), fit and (by default) save this host's
    profile. Returns (profile, samples)."""
    say = log or (lambda m: None)
    points: list[dict] = []
    t0 = time.time()
    for k in range(max(1, passes)):
        for transport in transports:
            for p in ranks:
                say(f"interlink calibrate: pass {k + 1}/{passes}: {p} ranks over {transport} ...")
                if quiet_wait > 0:
                    wait_quiet(quiet_wait, log=say)
                points += run_points(p, transport, plan(transport, sizes), reps, on_message=say)
    samples = to_samples(merge_passes(points))
    prof = fit_profile(samples, ranks=ranks, transports=transports, reps=reps, passes=passes,
                       seconds=time.time() - t0, save=save, path=path, limits=shm_limits())
    return prof, samples


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--worker":
        try:
            _worker(json.loads(argv[1]))
        except KeyboardInterrupt:
            return 130
        return 0
    print("usage: interlink bench --calibrate [--ranks N]  (this module runs one rank: --worker JSON)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
