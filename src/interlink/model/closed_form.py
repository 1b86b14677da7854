"""The closed-form costs of ``docs/reference.md``, 'Algorithm costs': a test oracle, never used for pricing.

:func:`interlink.model.cost.predict` prices every algorithm from its Schedule's traffic (a vectorised generator
at any rank count). These formulas (alpha x rounds + beta x bytes + gamma x bytes reduced, with rank 0's paths
to a peer on its host and on another host) are kept so that tests can check the traffic-based price against
them where both apply (tests/test_model_cost.py).

    closed_form("all_reduce", "ring", 1 << 30, "8xdgx-h100", protocol="simple") -> Estimate | None
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..topology import Topology
from .cost import (_HOP_KINDS, Estimate, Params, _gamma_per_rank, _host_rates, _info, _params, _TopoInfo,
                   builder_params, count_for, fit_ranks, itemsize_of, resolve_topology)

__all__ = ["closed_form", "closed_form_estimate"]


def closed_form(collective: str, algorithm: str, nbytes: int, topology: Topology | str, *, protocol: str = "simple",
                dtype: Any = "float32", params: Params | None = None, transport: str | None = None) -> Estimate | None:
    """The closed-form time of (collective, algorithm) for nccl-tests' size ``nbytes`` on ``topology``, with
    the channels and local size :func:`~interlink.model.cost.predict` would give the Schedule; None where
    'Algorithm costs' has no row for the algorithm."""
    topo = resolve_topology(topology)
    topo = fit_ranks(topo, topo.nranks)
    info = _info(topo)
    p = topo.nranks
    itemsize = itemsize_of(dtype)
    count, _ = count_for(collective, nbytes, itemsize, p)
    local_size = int(info.ranks_on_host.max()) if info.nhosts > 1 else p
    ch = int(dict(builder_params(collective, algorithm, topo, local_size)).get("channels", 1))
    return closed_form_estimate(collective, algorithm, p, count, itemsize, info, _params(params, False), protocol, ch,
                                local_size, transport)


def closed_form_estimate(collective: str, algorithm: str, p: int, count: int, itemsize: int, info: _TopoInfo,
                 params: Params, protocol: str, channels: int, local_size: int,
                 transport: str | None) -> Estimate | None:
    lg = max(1, math.ceil(math.log2(p))) if p > 1 else 0
    H = info.nhosts
    L = max(1, local_size)
    gpu = info.gpu
    if p == 1:
        return Estimate(0.0, 0.0, 0.0, 0.0, 0, protocol, 1, "gpu" if gpu else "cpu", ("closed form",))
    r0 = 0
    intra_peer = 1 if info.ranks_on_host[info.host[0]] > 1 else None
    inter_peer = int(np.flatnonzero(info.host != info.host[0])[0]) if H > 1 else None

    def link(peer: int | None, ch: int) -> tuple[float, float]:
        """(alpha us, beta s/B) of the path from rank 0 to peer."""
        if peer is None:
            return 0.0, 0.0
        bw, lat, kind, cross = info.classify(np.array([r0]), np.array([peer]),
                                             tcp=transport == "tcp" and not gpu)
        if gpu:
            a = params.hop_latency_us(_HOP_KINDS[int(kind[0])], protocol)
            b = 1.0 / (bw[0] * 1e9 * params.efficiency(protocol))
        else:
            t = "tcp" if (cross[0] or transport == "tcp") else "shm"
            a, _, hb, op = _host_rates(params, t)
            a += 2 * op
            a += float(lat[0]) if cross[0] else 0.0
            wire = 1.0 / (bw[0] * 1e9)
            b = wire if hb is None else (max(hb, wire) if cross[0] else hb)
            b *= float(info.oversub[0])
        return a, (b / ch if cross[0] else b)

    ring_like = algorithm.startswith("ring")
    a_i, b_i = link(intra_peer, 1)
    a_x, b_x = link(inter_peer, channels if ring_like else 1)
    a, b = (a_x, b_x) if H > 1 else (a_i, b_i)
    g = float(_gamma_per_rank(info, params)[0])
    n = count * itemsize  # the vector (all_reduce, broadcast, reduce) or one rank's block
    N = n * p  # the whole buffer of per-rank collectives
    q = (p - 1) / p
    Hh = max(1, math.ceil(p / L))
    forms: dict[tuple[str, str], tuple[float, float, float]] = {
        ("all_reduce", "ring"): (2 * (p - 1) * a, 2 * q * n * b, q * n * g),
        ("all_reduce", "recursive_doubling"): (lg * a, lg * n * b, lg * n * g),
        ("all_reduce", "rabenseifner"): (2 * lg * a, 2 * q * n * b, q * n * g),
        ("all_reduce", "tree"): (2 * lg * a, 2 * n * b, n * g),
        ("all_reduce", "direct"): (a, (p - 1) * n * b, (p - 1) * n * g),
        ("all_reduce", "hierarchical"): (2 * (L - 1) * a_i + 2 * (Hh - 1) * a_x,
                                         2 * (L - 1) / L * n * b_i + 2 * (Hh - 1) / Hh * n / L * b_x,
                                         ((L - 1) / L * n + (Hh - 1) / Hh * n / L) * g),
        ("broadcast", "binomial"): (lg * a, lg * n * b, 0.0),
        ("broadcast", "direct"): (a, (p - 1) * n * b, 0.0),
        ("broadcast", "ring"): ((8 + p - 2) * a, (8 + p - 2) * n / 8 * b, 0.0),
        ("broadcast", "hierarchical"): (math.ceil(math.log2(Hh)) * a_x + math.ceil(math.log2(L)) * a_i,
                                        math.ceil(math.log2(Hh)) * n * b_x + math.ceil(math.log2(L)) * n * b_i,
                                        0.0),
        ("reduce", "binomial"): (lg * a, lg * n * b, lg * n * g),
        ("reduce", "direct"): (a, (p - 1) * n * b, (p - 1) * n * g),
        ("all_gather", "ring"): ((p - 1) * a, q * N * b, 0.0),
        ("all_gather", "recursive_doubling"): (lg * a, q * N * b, 0.0),
        ("all_gather", "bruck"): (lg * a, q * N * b, 0.0),
        ("all_gather", "direct"): (a, q * N * b, 0.0),
        ("all_gather", "hierarchical"): ((Hh - 1) * a_x + (L - 1) * a_i,
                                         (Hh - 1) * n * b_x + (L - 1) * Hh * n * b_i, 0.0),
        ("reduce_scatter", "ring"): ((p - 1) * a, q * N * b, q * N * g),
        ("reduce_scatter", "recursive_halving"): (lg * a, q * N * b, q * N * g),
        ("reduce_scatter", "direct"): (a, q * N * b, q * N * g),
        ("gather", "binomial"): (lg * a, q * N * b, 0.0),
        ("gather", "direct"): (a, q * N * b, 0.0),
        ("scatter", "binomial"): (lg * a, q * N * b, 0.0),
        ("scatter", "direct"): (a, q * N * b, 0.0),
        ("all_to_all", "pairwise"): ((p - 1) * a, q * N * b, 0.0),
        ("all_to_all", "bruck"): (lg * a, N / 2 * lg * b, 0.0),
        ("barrier", "dissemination"): (lg * a, 0.0, 0.0),
    }
    f = forms.get((collective, algorithm))
    if f is None:
        return None
    lat_rounds, tb, tg = f
    base = params.call_latency_us(algorithm, protocol) if gpu else params.value("host.call_us")
    lat = base + lat_rounds
    return Estimate(lat + (tb + tg) * 1e6, lat, tb * 1e6, tg * 1e6, 0, protocol,
                    channels if ring_like else 1, "gpu" if gpu else "cpu",
                    ("closed form (docs/reference.md, 'Algorithm costs')",))
