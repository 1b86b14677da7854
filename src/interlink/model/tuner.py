"""The tuner: which algorithm the runtime runs for a call, from the cost model.

    choose("all_reduce", nbytes, nranks, topology_or_profile, candidates) -> "ring"

The model (:func:`interlink.model.cost.predict`) evaluates every candidate algorithm at the size and
picks the fastest. Choices are cached per (collective, size bucket, nranks, layout, candidates), so
only the first call of a bucket pays for the model (a few milliseconds at small rank counts); later
calls are one dictionary lookup.

Size buckets are powers of two ([2^(k-1), 2^k) bytes); the model is evaluated at the bucket's
geometric middle, never at the caller's size, so every rank of a group makes the same choice
whatever the order of its calls (a collective whose ranks ran different algorithms would not match).
For the same reason a group spanning hosts is modelled with the built-in host parameters: only a
group on one host (whose ranks read the same profile file) uses this host's calibrated profile.
"""

from __future__ import annotations

import os

import math
from typing import Any, Iterable, Optional, Sequence, Union

from ..algorithms import registry
from ..topology import Topology
from .cost import cpu_topology, predict
from .params import Params, Profile, default_params, host_profile, with_profile

__all__ = ["choose", "choose_for_group", "size_bucket", "group_topology", "clear_cache"]

_CACHE: dict[tuple, str] = {}
_TOPOS: dict[tuple, Topology] = {}
_CACHE_MAX = 4096


def size_bucket(nbytes: int) -> tuple[int, int]:
    """(bucket k, representative size): bucket k holds [2^(k-1), 2^k); the representative is
    2^(k-1) x sqrt(2) (bucket 0: 0 bytes)."""
    n = max(0, int(nbytes))
    k = n.bit_length()
    if k == 0:
        return 0, 0
    return k, max(1, int(round(2 ** (k - 1) * math.sqrt(2)))) if k > 1 else 1


def clear_cache() -> None:
    _CACHE.clear()
    _TOPOS.clear()
    _GROUP.clear()


def network_between_hosts() -> str:
    """The link between hosts the tuner assumes: INTERLINK_NET (a catalog name such as eth-100g, ib-ndr,
    roce-400g, or a rate such as 1gbit / 1gbit@2ms; ``interlink run --emulate-hosts --link-rate`` sets
    it), else eth-25g."""
    return os.environ.get("INTERLINK_NET", "").strip() or "eth-25g"


def group_topology(layout: tuple[int, int], nranks: int, cores: Optional[int] = None) -> Topology:
    """CPU hosts for a group of ``nranks`` ranks laid out as ``layout = (hosts, ranks per host)``
    (the runtime's Group.host_layout()); the last host may hold fewer ranks. A layout that does
    not describe blocks (hosts x 1 < nranks, the runtime's answer for irregular placements) is
    modelled as one rank per host."""
    hosts, local = int(layout[0]), int(layout[1])
    key = (hosts, local, nranks, cores, network_between_hosts())
    t = _TOPOS.get(key)
    if t is None:
        if hosts <= 1:
            counts = [nranks]
        elif hosts * local >= nranks and local > 1:
            counts = [local] * (hosts - 1) + [nranks - local * (hosts - 1)]
        else:
            counts = [1] * nranks
        t = cpu_topology(counts, cores=cores, network=network_between_hosts())
        if len(_TOPOS) > 256:
            _TOPOS.clear()
        _TOPOS[key] = t
    return t


def _candidates(collective: str, candidates: Optional[Iterable[str]]) -> tuple[str, ...]:
    from ..algorithms.switch import NEEDS_SWITCH

    have = registry.algorithms_for(collective)
    if candidates is None:  # what interlink's executors run (not the in-switch Schedules: no switch reduces)
        return tuple(a for a in have if a not in NEEDS_SWITCH)
    out = tuple(c for c in candidates if c in have)
    if not out:
        raise ValueError(f"no registered candidate among {list(candidates)} for {collective}")
    return out


def choose(collective: str, nbytes: int, nranks: int, topology_or_profile: Union[Topology, Profile, None] = None,
           candidates: Optional[Sequence[str]] = None, *, layout: tuple[int, int] = (1, 0),
           transport: Optional[str] = None, params: Optional[Params] = None) -> str:
    """The algorithm the model predicts fastest for ``nbytes`` (nccl-tests' S) on ``nranks`` ranks.

    ``topology_or_profile``: a Topology (its first nranks ranks), a host Profile (CPU hosts laid out
    as ``layout``) or None (this host's profile if there is one, else the built-in host parameters).
    ``candidates``: algorithm names to choose from (default: every registered one).
    """
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    cands = _candidates(collective, candidates)
    if len(cands) == 1 or nranks == 1:
        return cands[0]
    k, rep = size_bucket(nbytes)
    if isinstance(topology_or_profile, Topology):
        topo = topology_or_profile
        tkey: Any = ("topo", id(topo), topo.nranks)
        prof = None
    else:
        prof = topology_or_profile
        lay = (layout[0], layout[1] or nranks)
        topo = None
        tkey = ("cpu", lay, None if prof is None else (prof.path, id(prof)))
    key = (collective, k, nranks, tkey, cands, transport, None if params is None else id(params))
    algo = _CACHE.get(key)
    if algo is not None:
        return algo
    if topo is None:
        cores = int(prof.meta.get("cores") or 0) if prof is not None else None
        topo = group_topology(lay, nranks, cores or None)
        use = params if params is not None else with_profile(default_params(), prof)
    else:
        use = params
    pred = predict(collective, rep, topo, nranks=nranks, candidates=cands, params=use,
                   profile=False if use is not None else None, transport=transport, fast_path=False)
    algo = pred.algorithm
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = algo
    return algo


_GROUP: dict[tuple, str] = {}


def choose_for_group(collective: str, nbytes: int, nranks: int, layout: tuple[int, int],
                     transport: Optional[str] = None, candidates: Optional[Sequence[str]] = None) -> str:
    """The runtime's entry point: a group of ``nranks`` laid out as ``layout`` (hosts, ranks per host).

    One host: this host's calibrated profile when present (read once per process); several hosts:
    the built-in parameters (every host must make the same choice). A repeated call is one lookup."""
    key = (collective, int(nbytes).bit_length(), nranks, layout, transport,
           None if candidates is None else tuple(candidates))
    algo = _GROUP.get(key)
    if algo is None:
        prof = host_profile() if layout[0] <= 1 else None
        algo = choose(collective, nbytes, nranks, prof, candidates, layout=layout, transport=transport)
        if len(_GROUP) >= _CACHE_MAX:
            _GROUP.clear()
        _GROUP[key] = algo
    return algo
