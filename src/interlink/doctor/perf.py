"""``interlink doctor perf``: this host's measured curve against the model, and the term behind each gap.

The rows are those of ``interlink bench --json`` (each with ``pred_busbw``, the model's bus bandwidth for
the row's algorithm on this host's calibrated profile). For each size the predicted time is split into
its latency part (the model's time for the smallest call of that algorithm and ranks: the per-call
overhead) and the rest (bytes moved, and reduced for reducing collectives). A point whose measured time is
within ``TOLERANCE`` (25%) of the predicted one is explained; otherwise the gap is named by the term that
dominates the prediction at that size, and the host's state:

- ``ranks sharing cores``: more ranks than cores (every wait hands the core to a peer);
- ``latency``: the per-call overhead dominates (waking peers, the host page's handshake, Python);
- ``bandwidth`` / ``bandwidth or reduction``: the bytes (and the reduction) dominate: the memory's copy
  rate, or another job using it;
- ``loopback TCP``: the ranks talk through the TCP transport;
- ``faster than the model``: the profile underestimates this host (recalibrate).

A busy host (load average above its cores) is said once: its measurements include other jobs' time.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Optional

TOLERANCE = 1.25
REDUCING = {"all_reduce", "reduce_scatter", "reduce"}


@dataclass
class Point:
    size: int
    algorithm: str
    measured_us: float
    predicted_us: Optional[float]
    ratio: Optional[float]
    verdict: str  # explained | slower | faster | not priced
    term: str = ""
    advice: str = ""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def explain_rows(rows: list[dict], collective: str, nranks: int, cores: int, transport: str = "shm",
                 latency_us: Optional[Callable[[str], Optional[float]]] = None,
                 load: Optional[float] = None) -> list[Point]:
    """One Point per row. ``latency_us(algorithm)``: the model's time for the smallest call of that algorithm
    (the per-call term); without it the smallest row's predicted time stands for it. ``load``: the host's
    load average during the sweep; above ``cores`` a gap is put down to the other jobs first."""
    out = []
    small: dict[str, float] = {}
    for r in rows:
        t = _pred_us(r)
        if t is not None:
            a = r.get("algorithm") or ""
            small[a] = min(small.get(a, t), t)
    for r in rows:
        a = r.get("algorithm") or ""
        meas = float(r["oop_time_us"])
        pred = _pred_us(r)
        if pred is None or pred <= 0:
            out.append(Point(r["size"], a, meas, None, None, "not priced"))
            continue
        ratio = meas / pred
        if 1 / TOLERANCE <= ratio <= TOLERANCE:
            out.append(Point(r["size"], a, meas, pred, ratio, "explained"))
            continue
        if ratio < 1:
            out.append(Point(r["size"], a, meas, pred, ratio, "faster", "faster than the model",
                             "the host profile underestimates this host: interlink bench --calibrate"))
            continue
        lat = latency_us(a) if latency_us is not None else None
        if lat is None:
            lat = small.get(a, pred)
        share = min(1.0, lat / pred)
        if transport == "tcp":
            term, advice = "loopback TCP", "ranks on one host should use shm (unset INTERLINK_TRANSPORT=tcp)"
        elif nranks > cores and share >= 0.5:
            term, advice = "ranks sharing cores", (f"{nranks} ranks on {cores} cores: every wait hands the core to a "
                                                   f"peer; run at most {cores} ranks here")
        elif share >= 0.5:
            term, advice = "latency", ("the per-call overhead (waking peers, the host page's handshake) is above the "
                                       "profile's: other load on the cores, power saving, or a stale profile "
                                       "(interlink bench --calibrate)")
        else:
            term = "bandwidth or reduction" if collective in REDUCING else "bandwidth"
            advice = ("the bytes move slower than the profile's copy rate: another job on the memory, NUMA "
                      "placement, or a stale profile (interlink bench --calibrate)")
        if load is not None and load > cores:
            term, advice = f"a busy host ({term} term)", (f"load average {load:.1f} on {cores} cores: other jobs take "
                                                           f"the cores and the memory; measure again when it is idle")
        out.append(Point(r["size"], a, meas, pred, ratio, "slower", term, advice))
    return out


def _pred_us(r: dict) -> Optional[float]:
    pb = r.get("pred_busbw")
    alg, bus = r.get("oop_algbw"), r.get("oop_busbw")
    if not pb or not r.get("size"):
        return None
    factor = (bus / alg) if alg and bus else 1.0
    algbw = pb / factor
    return r["size"] / algbw * 1e6 if algbw > 0 else None


def model_latency(collective: str, nranks: int) -> Callable[[str], Optional[float]]:
    """The model's time (us) for an 8-byte call of ``algorithm`` on this host's ranks: the per-call term."""
    cache: dict[str, Optional[float]] = {}

    def lat(algorithm: str) -> Optional[float]:
        if algorithm not in cache:
            from ..model import predict

            try:
                cache[algorithm] = predict(collective, 8 * nranks, None, nranks=nranks,
                                           algorithm=algorithm or None).time_us
            except Exception:  # noqa: BLE001 - an algorithm the model does not price: none
                cache[algorithm] = None
        return cache[algorithm]

    return lat


def load_average() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def host_note() -> str:
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return ""
    if load > cores:
        return (f"the host is busy (load average {load:.1f} on {cores} cores): the measurements include other jobs' "
                f"time")
    return ""


def report(collective: str, nranks: int, points: list[Point], width: int = 100) -> str:
    """The sweep's table (bytes of the call, the path, measured and modelled microseconds a call, their
    ratio as a factor of the model's time, 'x model', the verdict) and each flagged term's advice, wrapped to ``width`` columns."""
    import textwrap

    wa = max([len("algorithm")] + [len(p.algorithm) for p in points])
    lines = [f"{collective} on {nranks} ranks: measured against the model (time per call, out-of-place)",
             f"{'bytes':>10s} {'algorithm':>{wa}s} {'measured us':>12s} {'model us':>10s} {'x model':>7s}  verdict"]
    for p in points:
        pr = f"{p.predicted_us:10.1f}" if p.predicted_us else f"{'-':>10s}"
        ra = f"{p.ratio:7.2f}" if p.ratio else f"{'-':>7s}"
        v = p.verdict if not p.term else f"{p.verdict}: {p.term}"
        lines.append(f"{p.size:>10d} {p.algorithm:>{wa}s} {p.measured_us:12.1f} {pr} {ra}  {v}")
    adv = {}
    for p in points:
        if p.advice:
            adv.setdefault(p.term, p.advice)
    for term, a in adv.items():
        lines += textwrap.wrap(f"{term}: {a}", width, initial_indent="  ", subsequent_indent="    ",
                               break_long_words=False, break_on_hyphens=False)
    n = len(points)
    ok = sum(p.verdict == "explained" for p in points)
    lines.append(f"{ok} of {n} sizes within x{TOLERANCE:g} of the model" + (
        f"; {n - ok} flagged" if n - ok else ""))
    return "\n".join(lines)


def geometric_gap(points: list[Point]) -> Optional[float]:
    rs = [p.ratio for p in points if p.ratio]
    return math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else None
