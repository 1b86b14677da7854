"""Calibration, the model's half: fit the cost model's host parameters to measured samples.

    interlink bench --calibrate [--ranks N] [--transport shm|tcp]   measure, fit, write the profile

The measuring (starting local ranks, timing interlink's own collectives) is
:mod:`interlink.bench.calibrate`, above the runtime; this module only fits and reports.

What is measured. For each transport (shm, tcp: ``INTERLINK_TRANSPORT``) and rank count (2 and N,
default 4; ranks beyond the cores share them, which the model knows), local ranks run interlink's own
collectives with explicit algorithms (:data:`CASES`: all_reduce ring and rabenseifner and broadcast
binomial at 4 KiB .. 64 MiB; the latency algorithms recursive_doubling and direct where they are
candidates), and, over shm, all_reduce without an algorithm at 8 B .. 4 MiB: the runtime's shared-memory
paths (labelled by the path the call took, read back from the group's flight recorder). Every point
is the median of ``reps`` repetitions, each the mean of a timed loop, maximum over ranks.

What is fitted. The CPU model is linear in its host parameters (:func:`interlink.model.cost.cpu_terms`):
per round alpha plus op_us per message of the busiest rank plus alpha_oversub when more ranks are busy
than cores, beta per byte the busiest rank moves, gamma per byte it reduces (bytes x the core-sharing
factor x a cache factor), plus a fixed cost per call. Per transport, non-negative least absolute
relative error (reweighted least squares, robust to points spoilt by load on a shared machine) fits
the linear parameters; a grid search fits the cache parameters
(``host.llc_bytes``, ``host.dram_factor``). The runtime's host-page paths (slots, slots_once, two_phase, peer_buffers)
are priced from their Schedules' steps like every algorithm, on the host page's own rates
(``host.page.*``: a transport of the model, fitted with the others in the same regression). The result is a :class:`~interlink.model.params.Profile` of ``host.*``
parameters, saved as JSON at ``INTERLINK_PROFILE`` or ``~/.cache/interlink/profile.json``;
predictions for CPU hosts and the runtime's tuner (groups on one host) use it from then on.

Layering: the model never imports the runtime; the bench layer measures and hands samples down.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..algorithms.hostpath import HostLimits
from ..algorithms.traffic import traffic
from .params import Profile, save_profile

# 4 KiB .. 64 MiB by 4x, plus 8 and 32 MiB where the working set leaves the last-level cache
SIZES: tuple[int, ...] = tuple(sorted({4096 * 4**k for k in range(8)} | {8 << 20, 32 << 20}))
#: (collective, algorithm, largest size) measured per transport and rank count: bandwidth algorithms at
#: every size, latency algorithms where they are candidates (up to 1 MiB)
CASES: tuple[tuple[str, str, int], ...] = (
    ("all_reduce", "ring", SIZES[-1]),
    ("all_reduce", "rabenseifner", SIZES[-1]),
    ("broadcast", "binomial", SIZES[-1]),
    ("all_reduce", "recursive_doubling", 1 << 20),
    ("all_reduce", "direct", 1 << 16),
)
FAST_SIZES: tuple[int, ...] = (8, 256, 1024, 4096, 8192, 16384, 65536, 262144, 1 << 20, 4 << 20)
#: all_reduce sizes timed on the runtime's own path above the shared page (from the ranks' own buffers)
DIRECT_SIZES: tuple[int, ...] = (8 << 20, 16 << 20, 64 << 20)
DEFAULT_RANKS: tuple[int, ...] = (2, 4)
TRANSPORTS: tuple[str, ...] = ("shm", "tcp")
DEFAULT_REPS = 5
DEFAULT_PASSES = 3
BUDGET_BYTES = 64 << 20  # bytes timed per repetition (iterations = clamp(budget / size, 2, 50))


@dataclass(frozen=True)
class Sample:
    """One measured point: median seconds over repetitions (each the max over ranks)."""

    transport: str
    nranks: int
    collective: str
    algorithm: str  # "slots" for the fast path
    nbytes: int
    count: int
    seconds: float
    spread: float = 0.0  # (max - min) / median over repetitions

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ---- the samples ------------------------------------------------------------------------------------


def to_samples(points: Iterable[Mapping[str, Any]]) -> list[Sample]:
    """Samples (median over repetitions) from measured points (labelled with the path they took)."""
    out = []
    for pt in points:
        ts = np.asarray(pt["times"], dtype=np.float64)
        med = float(np.median(ts))
        out.append(Sample(pt["transport"], int(pt["nranks"]), pt["collective"], pt["algorithm"], int(pt["nbytes"]),
                          int(pt["count"]), med, float((ts.max() - ts.min()) / med) if med > 0 else 0.0))
    return out


# ---- features and the fit ---------------------------------------------------------------------------


def transport_of(sample: Sample) -> str:
    """The model's transport for a sample: its own (shm, tcp), or the host page (``page``) for the
    runtime's host-page Schedules (slots, slots_once, two_phase, peer_buffers)."""
    from ..algorithms.hostpage import HOST_PAGE
    from .cost import PAGE

    return PAGE if sample.algorithm in HOST_PAGE else sample.transport


def terms(sample: Sample, cores: Optional[int] = None, oversub_byte_factor: float = 1.0) -> dict[str, float]:
    """The model's linear terms for one sample (see :func:`interlink.model.cost.cpu_terms`): its
    Schedule's traffic on its transport's rates."""
    from .cost import cpu_terms, cpu_topology

    topo = cpu_topology(sample.nranks, cores=cores or os.cpu_count() or 1)
    tr = traffic(sample.collective, sample.algorithm, sample.nranks, sample.count, 0)
    return cpu_terms(tr, topo, itemsize=4, transport=transport_of(sample), oversub_byte_factor=oversub_byte_factor)


def nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares (Lawson-Hanson active set; small problems)."""
    m, n = A.shape
    x = np.zeros(n)
    passive = np.zeros(n, bool)
    w = A.T @ (b - A @ x)
    for _ in range(3 * n + 10):
        if passive.all() or w[~passive].max(initial=0.0) <= 1e-12 * max(1.0, np.abs(w).max()):
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(A[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
        w = A.T @ (b - A @ x)
    return x


def _robust_nnls(A: np.ndarray, iters: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative x minimising sum |A x - 1| (relative errors, rows already divided by the measured
    time) by iteratively reweighted least squares: a point spoilt by a burst of load on a shared
    machine pulls the fit far less than under plain least squares. Returns (x, A x - 1)."""
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1.0
    As = A / scale
    w = np.ones(A.shape[0])
    x = np.zeros(A.shape[1])
    for _ in range(iters):
        sw = np.sqrt(w)
        x = nnls(As * sw[:, None], sw)
        err = As @ x - 1.0
        w = 1.0 / np.maximum(np.abs(err), 0.02)
    return x / scale, As @ x - 1.0


LLC_GRID = tuple(float(m << 20) for m in (2, 4, 8, 16, 32, 64, 128, 256))
OVERSUB_GRID = (1.0, 1.25, 1.5, 1.75, 2.0)
DRAM_GRID = tuple(1.0 + 0.25 * k for k in range(9))  # 1.0 .. 3.0


def fit(samples: Sequence[Sample], cores: Optional[int] = None,
        limits: Optional[HostLimits] = None) -> tuple[dict[str, float], dict[str, Any]]:
    """Fit host.* parameters to the samples; returns (params, fit quality per transport).

    Linear parameters by non-negative least absolute relative error (reweighted least squares); the
    cache parameters (host.llc_bytes, host.dram_factor) by a grid search around it."""
    from .cost import CPU_TERMS, _term_name

    cores = cores or (os.cpu_count() or 1)
    reg = list(samples)  # the host-page paths too: their Schedules on the host page's rates (transport_of)
    transports = sorted({transport_of(s) for s in reg})
    cols: list[str] = []
    for t in transports:
        for n in CPU_TERMS:
            name = _term_name(n, t)
            # on the host page a message is one read of a peer's slot or buffer: the rank waiting on several
            # pays for each read (op_us), with no separate fan-in cost to tell apart from it
            if name not in cols and name != "host.page.fanout_us":
                cols.append(name)
    per_byte = [c for c in cols if "ns_per_byte" in c]  # the cache factor applies to these
    params: dict[str, float] = {}
    quality: dict[str, Any] = {}
    if reg:
        y = np.array([s.seconds * 1e6 for s in reg])
        pb = np.array([c in per_byte for c in cols])
        shm_mask = np.array([transport_of(s) == "shm" for s in reg])  # the rings (as before the page joined)
        oversubscribed = any(s.nranks > cores for s in reg)
        page = np.array([transport_of(s) == "page" for s in reg])

        def solve(T: list, llc: float, m: float) -> tuple[np.ndarray, np.ndarray]:
            base = np.array([[tm.get(c, 0.0) for c in cols] for tm in T])
            wset = np.array([tm["working_set"] for tm in T])
            cf = 1.0 + (m - 1.0) * np.maximum(0.0, 1.0 - llc / np.maximum(wset, 1.0))
            return _robust_nnls(base * np.where(pb[None, :], cf[:, None], 1.0) / y[:, None])

        best = None
        Ts: dict[float, list] = {}  # per core-sharing factor, every sample's terms
        for k in (OVERSUB_GRID if oversubscribed else (1.0,)):
            T = Ts[k] = [terms(s, cores, k) for s in reg]
            for llc in LLC_GRID:
                for m in DRAM_GRID:
                    if m == 1.0 and llc != LLC_GRID[0]:
                        continue  # without a factor the cache size does not matter
                    x, err = solve(T, llc, m)
                    # the cache and the sharing of cores are properties of the memory system and the
                    # CPUs: judge them where those are the cost (shared memory; TCP's per-byte cost is
                    # the kernel's copies, and its linear terms stay in the fit)
                    score = float(np.mean(np.abs(err[shm_mask] if shm_mask.any() else err)))
                    if best is None or score < best[0]:
                        best = (score, llc, m, k, x, err)
        assert best is not None
        _, llc, m, k, x, err = best
        kp = None
        if page.any() and any(s.nranks > cores for s, pg in zip(reg, page) if pg):
            # the host page's Schedules share cores differently from the rings (no per-message handshakes,
            # the reader copies): their own core-sharing factor, judged on their samples (their columns
            # are their own: host.page.*)
            judge = float(np.mean(np.abs(err[page])))
            for kq in (0.0, 0.25, 0.5, 0.75) + OVERSUB_GRID:
                xq, eq = solve([terms(s, cores, kq) if pg else tk for s, pg, tk in zip(reg, page, Ts[k])], llc, m)
                sq = float(np.mean(np.abs(eq[page])))
                if sq < judge:
                    judge, kp, x, err = sq, kq, xq, eq
        params.update({c: float(v) for c, v in zip(cols, x)})
        params["host.llc_bytes"] = llc
        params["host.dram_factor"] = m
        params["host.oversub_byte_factor"] = k
        if kp is not None:
            params["host.page.oversub_byte_factor"] = kp
        for t in transports:
            sel = np.array([transport_of(s) == t for s in reg])
            e = np.abs(err[sel])
            quality[t] = {"samples": int(sel.sum()), "median_rel_err": float(np.median(e)),
                          "max_rel_err": float(e.max())}
    if limits is not None:  # the runtime's shared-page sizes, measured with the samples (the bench layer)
        params.update(limits.to_params())
    return params, quality


def fit_profile(samples: Sequence[Sample], *, ranks: Sequence[int] = DEFAULT_RANKS,
                transports: Sequence[str] = TRANSPORTS, reps: int = DEFAULT_REPS, passes: int = DEFAULT_PASSES,
                seconds: float = 0.0, save: bool = True, path: Optional[str] = None,
                limits: Optional[HostLimits] = None) -> Profile:
    """Fit this host's parameters to measured ``samples`` and (by default) save the profile, with the raw
    samples in it so that a later fit needs no new measurement. The measuring is
    :func:`interlink.bench.calibrate.calibrate` (it starts ranks: the bench layer, above the runtime)."""
    cores = os.cpu_count() or 1
    params, quality = fit(samples, cores, limits)
    meta = {"host": socket.gethostname(), "date": datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"), "cores": cores, "ranks": list(ranks), "transports": list(transports),
        "reps": reps, "passes": passes, "seconds": round(seconds, 1),
        "model": "time = call + alpha x rounds + beta x bytes + gamma x reduced bytes (per transport)"}
    try:
        from ..topology import measure_memcpy_gbps

        meta["memcpy_gbps"] = round(measure_memcpy_gbps(), 2)
    except Exception:  # noqa: BLE001 - informative only
        pass
    meta["samples"] = [smp.to_dict() for smp in samples]
    prof = Profile(params, quality, meta)
    if save:
        p = save_profile(prof, path)
        prof = Profile(params, quality, meta, p)
        from .params import host_profile

        host_profile(reload=True)
    return prof


def report_lines(profile: Profile, samples: Sequence[Sample]) -> list[str]:
    """The fitted parameters, then measured vs predicted per sample (nccl-tests-like columns)."""
    from .cost import cpu_topology, predict
    from .params import default_params, with_profile

    params = with_profile(default_params(), profile)
    lines = [f"# interlink calibration: {profile.source}, {profile.meta.get('cores')} cores"
             + (f", memcpy {profile.meta['memcpy_gbps']} GB/s" if "memcpy_gbps" in profile.meta else "")]
    for k in sorted(profile.params):
        lines.append(f"#  {k:<28} {profile.params[k]:12.4f}  {params.entry(k).unit}")
    for t, q in sorted(profile.fits.items()):
        lines.append(f"#  fit {t:<5}: {q['samples']} samples, median |error| {100 * q['median_rel_err']:.1f}%, "
                     f"worst {100 * q['max_rel_err']:.1f}%")
    if profile.path:
        lines.append(f"#  profile written to {profile.path}")
    lines.append("#")
    lines.append(f"# {'transport':>9} {'ranks':>5} {'collective':>10} {'algorithm':>18} {'bytes':>10} "
                 f"{'measured':>10} {'predicted':>10} {'ratio':>6}")
    cores = int(profile.meta.get("cores") or os.cpu_count() or 1)
    for s in samples:
        topo = cpu_topology(s.nranks, cores=cores)
        try:
            pr = predict(s.collective, s.nbytes, topo, algorithm=s.algorithm, params=params,
                         transport="tcp" if s.transport == "tcp" else None)
            pt = pr.time_us
        except Exception:  # noqa: BLE001
            pt = float("nan")
        mt = s.seconds * 1e6
        lines.append(f"  {s.transport:>9} {s.nranks:>5} {s.collective:>10} {s.algorithm:>18} {s.nbytes:>10} "
                     f"{mt:10.1f} {pt:10.1f} {pt / mt:6.2f}")
    return lines


