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

import functools
import logging
import math
import os
from typing import Any, Iterable, Optional, Sequence, Union

from ..algorithms import registry
from ..topology import Topology
from .cost import cpu_topology, predict
from .params import Params, Profile, default_params, host_profile, with_profile

__all__ = ["choose", "choose_for_group", "size_bucket", "group_topology", "clear_cache", "default_algorithm",
           "table_algorithm", "switch_points", "env_algorithm", "parse_algo_env", "env_channels", "ring_channels",
           "group_channels", "schedule_channels",
           "ALGORITHM_TABLE", "HIERARCHICAL", "SMALL_BYTES"]

log = logging.getLogger("interlink")

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


def group_topology(layout: tuple[int, int], nranks: int, cores: Optional[int] = None, nics: int = 1) -> Topology:
    """CPU hosts for a group of ``nranks`` ranks laid out as ``layout = (hosts, ranks per host)``
    (the runtime's Group.host_layout()); the last host may hold fewer ranks. A layout that does
    not describe blocks (hosts x 1 < nranks, the runtime's answer for irregular placements) is
    modelled as one rank per host. ``nics``: NICs per host (the runtime's Group.nics(): a lane, and a
    ring channel, per NIC)."""
    hosts, local = int(layout[0]), int(layout[1])
    nics = max(1, int(nics)) if hosts > 1 else 1
    key = (hosts, local, nranks, cores, network_between_hosts(), nics)
    t = _TOPOS.get(key)
    if t is None:
        if hosts <= 1:
            counts = [nranks]
        elif hosts * local >= nranks and local > 1:
            counts = [local] * (hosts - 1) + [nranks - local * (hosts - 1)]
        else:
            counts = [1] * nranks
        t = cpu_topology(counts, cores=cores, network=network_between_hosts(), nics=nics)
        if len(_TOPOS) > 256:
            _TOPOS.clear()
        _TOPOS[key] = t
    return t


def _candidates(collective: str, candidates: Optional[Iterable[str]]) -> tuple[str, ...]:
    from ..algorithms.hostpage import HOST_PAGE
    from ..algorithms.switch import NEEDS_SWITCH

    have = registry.algorithms_for(collective)
    if candidates is None:  # what interlink's executors run (not the in-switch Schedules: no switch reduces;
        # not the host page's: the runtime's FastPath takes those where a group shares one host page)
        return tuple(a for a in have if a not in NEEDS_SWITCH and a not in HOST_PAGE)
    out = tuple(c for c in candidates if c in have)
    if not out:
        raise ValueError(f"no registered candidate among {list(candidates)} for {collective}")
    return out


def choose(collective: str, nbytes: int, nranks: int, topology_or_profile: Union[Topology, Profile, None] = None,
           candidates: Optional[Sequence[str]] = None, *, layout: tuple[int, int] = (1, 0),
           transport: Optional[str] = None, params: Optional[Params] = None, nics: int = 1) -> str:
    """The algorithm the model predicts fastest for ``nbytes`` (nccl-tests' S) on ``nranks`` ranks.

    ``topology_or_profile``: a Topology (its first nranks ranks), a host Profile (CPU hosts laid out
    as ``layout``, ``nics`` NICs each) or None (this host's profile if there is one, else the built-in
    host parameters).
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
        tkey = ("cpu", lay, None if prof is None else (prof.path, id(prof)), int(nics))
    key = (collective, k, nranks, tkey, cands, transport, None if params is None else id(params))
    algo = _CACHE.get(key)
    if algo is not None:
        return algo
    if topo is None:
        cores = int(prof.meta.get("cores") or 0) if prof is not None else None
        topo = group_topology(lay, nranks, cores or None, nics)
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
                     transport: Optional[str] = None, candidates: Optional[Sequence[str]] = None,
                     nics: int = 1) -> str:
    """The runtime's entry point: a group of ``nranks`` laid out as ``layout`` (hosts, ranks per host).

    One host: this host's calibrated profile when present (read once per process); several hosts:
    the built-in parameters (every host must make the same choice). A repeated call is one lookup."""
    key = (collective, int(nbytes).bit_length(), nranks, layout, transport,
           None if candidates is None else tuple(candidates), int(nics))
    algo = _GROUP.get(key)
    if algo is None:
        prof = host_profile() if layout[0] <= 1 else None
        algo = choose(collective, nbytes, nranks, prof, candidates, layout=layout, transport=transport, nics=nics)
        if len(_GROUP) >= _CACHE_MAX:
            _GROUP.clear()
        _GROUP[key] = algo
    return algo


# ---- what a runtime call runs: INTERLINK_ALGO, the model's choice, or the built-in table ------------------

#: The built-in table (INTERLINK_TUNER=table, or when the model fails): per collective, the preferred
#: algorithms for small (<= SMALL_BYTES) and large calls.
SMALL_BYTES = 64 * 1024
ALGORITHM_TABLE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "all_reduce": (("recursive_doubling", "direct", "ring"), ("ring",)),
    "broadcast": (("binomial", "direct", "ring"), ("ring", "binomial")),
    "reduce": (("binomial", "direct"), ("direct", "binomial")),
    "all_gather": (("recursive_doubling", "bruck", "ring"), ("ring",)),
    "reduce_scatter": (("recursive_halving", "direct", "ring"), ("ring",)),
    "gather": (("direct", "binomial"), ("direct", "binomial")),
    "scatter": (("direct", "binomial"), ("direct", "binomial")),
    "all_to_all": (("pairwise", "bruck"), ("pairwise",)),
    "barrier": (("dissemination",), ("dissemination",)),
}


# collectives with a hierarchical algorithm the default picks when the group spans hosts
HIERARCHICAL = {"all_reduce": "hierarchical", "all_gather": "hierarchical", "broadcast": "hierarchical"}


def default_algorithm(collective: str, nbytes: int, nranks: int, layout: Optional[tuple[int, int]] = None,
                      nics: int = 1) -> str:
    """The algorithm a call runs when neither the call nor INTERLINK_ALGO names one: the cost model's
    choice for a group of ``nranks`` laid out as ``layout`` (hosts, ranks per host; default one host)
    whose hosts have ``nics`` NICs each, or :func:`table_algorithm` when the model fails or
    INTERLINK_TUNER=table."""
    layout = layout or (1, nranks)
    if os.environ.get("INTERLINK_TUNER", "").lower() != "table":
        try:
            transport = "tcp" if os.environ.get("INTERLINK_TRANSPORT", "").lower() == "tcp" else None
            return choose_for_group(collective, nbytes, nranks, layout, transport, nics=nics)
        except Exception as exc:  # noqa: BLE001 - the table is the fallback
            log.debug("interlink: tuner failed for %s (%d bytes, %d ranks): %s; using the table",
                      collective, nbytes, nranks, exc)
    return table_algorithm(collective, nbytes, nranks, layout)


def table_algorithm(collective: str, nbytes: int, nranks: int, layout: tuple[int, int] = (1, 1)) -> str:
    """The built-in table: small/large preference lists, hierarchical when the group spans hosts."""
    algo = preferred_algorithm(collective, nbytes <= SMALL_BYTES, nranks, len(registry.entries()))
    nhosts, local_size = layout
    if nhosts > 1 and local_size > 1 and nbytes > SMALL_BYTES and \
            collective in HIERARCHICAL and HIERARCHICAL[collective] in registry.algorithms_for(collective):
        algo = HIERARCHICAL[collective]  # the group spans hosts: cross each link once
    return algo


@functools.lru_cache(maxsize=256)
def preferred_algorithm(collective: str, is_small: bool, nranks: int, _nentries: int) -> str:
    small, large = ALGORITHM_TABLE[collective]
    prefs = small if is_small else large
    have = set(registry.algorithms_for(collective))
    for name in prefs + small + large:
        if name in have:
            return name
    return sorted(have)[0]


@functools.lru_cache(maxsize=64)
def switch_points(collective: str, nranks: int, layout: tuple[int, int], top: int = 1 << 28,
                  nics: int = 1) -> tuple[int, ...]:
    """The byte sizes where default_algorithm's choice for this collective changes (first size of the
    new choice), scanning powers of two up to top and bisecting each change to the byte."""
    pick = lambda b: default_algorithm(collective, b, nranks, layout, nics)  # noqa: E731
    points = []
    lo, a = 1, pick(1)
    b = 2
    while b <= top:
        cur = pick(b)
        if cur != a:
            x, y = lo, b  # pick(x) == a, pick(y) != a
            while y - x > 1:
                mid = (x + y) // 2
                if pick(mid) == a:
                    x = mid
                else:
                    y = mid
            points.append(y)
            a = pick(y)
            lo = y
            if a != cur:  # several switches inside one power of two: keep scanning from y
                continue
        lo, b = b, b * 2
    return tuple(points)


def env_channels() -> int:
    """INTERLINK_CHANNELS: how many parallel rings (channels) the ring Schedules run (default 1)."""
    v = os.environ.get("INTERLINK_CHANNELS", "").strip()
    if not v:
        return 1
    try:
        c = int(v)
    except ValueError:
        c = 0
    if c < 1:
        raise ValueError(f"INTERLINK_CHANNELS={v!r}: expected a whole number >= 1")
    return c


def schedule_channels(algorithm: str, nics: int, nhosts: int, local_size: int) -> dict[str, Any]:
    """The channel arguments of a ring-family builder (those taking ``exits``) in the runtime: the
    channels of :func:`group_channels`, laid out by :func:`ring_channels`; nccl_tree runs one channel of
    each of its two trees per NIC (twice as many), as ``model.cost.builder_params`` prices it."""
    out = ring_channels(group_channels(nics, nhosts), nhosts, local_size)
    if algorithm == "nccl_tree" and out.get("exits") and not os.environ.get("INTERLINK_CHANNELS", "").strip():
        out["channels"] *= 2
    return out


def group_channels(nics: int, nhosts: int) -> int:
    """How many channels (parallel rings) the runtime's ring Schedules run for a group: INTERLINK_CHANNELS
    when set, else one per NIC when the group spans hosts with several (``nics``: the fewest NICs any of
    its ranks has; each channel then has a connection, a lane, of its own through its own NIC, as
    :func:`ring_channels` and the model's rail plan lay them out), else one."""
    if os.environ.get("INTERLINK_CHANNELS", "").strip():
        return env_channels()
    return max(1, int(nics)) if nhosts > 1 else 1


def ring_channels(channels: int, nhosts: int, local_size: int) -> dict[str, Any]:
    """The ring builders' channel arguments for a group: ``channels`` rings, each over its slice of the
    data; across hosts (ranks in host blocks of ``local_size``) rail-aligned, channel c crossing hosts
    through local rank c or c + 1 (:func:`interlink.algorithms.ring.ring_orders`)."""
    if channels <= 1:
        return {}
    out: dict[str, Any] = {"channels": channels}
    if nhosts > 1 and 1 < local_size and channels <= local_size:
        out.update(local_size=local_size, exits=tuple(range(channels)))
    return out


def env_algorithm(collective: str) -> Optional[str]:
    """INTERLINK_ALGO=ring, or per collective: INTERLINK_ALGO=all_reduce:ring,broadcast:binomial."""
    return parse_algo_env(os.environ.get("INTERLINK_ALGO", "")).get(collective)


@functools.lru_cache(maxsize=64)
def parse_algo_env(spec: str) -> dict[str, str]:
    """INTERLINK_ALGO as {collective: algorithm}. A bare name (``ring``) applies to every collective that
    has it; ``collective:algorithm`` pairs (``=`` works too) to that collective. An unknown collective or
    algorithm, or a bare name no collective has, raises ValueError naming what is available (a typo
    must not silently change nothing)."""
    spec = spec.strip()
    if not spec:
        return {}
    colls = [c for c in ALGORITHM_TABLE if c != "barrier"] + ["barrier"]
    if ":" not in spec and "=" not in spec:
        spec = registry.canonical(spec)  # a former name (fastd) is its algorithm's (peer_buffers)
    if ":" not in spec and "=" not in spec:
        if "," in spec:
            raise ValueError(f"INTERLINK_ALGO={spec!r}: a list needs collective:algorithm pairs, "
                             f"e.g. all_reduce:ring,broadcast:binomial")
        got = {c: spec for c in colls if spec in registry.algorithms_for(c)}
        if not got:
            names = sorted({a for c in colls for a in registry.algorithms_for(c)})
            raise ValueError(f"INTERLINK_ALGO={spec!r}: no collective has an algorithm of that name; "
                             f"known: {', '.join(names)} (or collective:algorithm pairs)")
        return got
    out: dict[str, str] = {}
    for part in spec.split(","):
        k, sep, v = part.replace("=", ":").partition(":")
        k, v = k.strip(), registry.canonical(v.strip())
        if not sep or not k or not v:
            raise ValueError(f"INTERLINK_ALGO={spec!r}: {part!r} is not collective:algorithm")
        if k not in colls:
            raise ValueError(f"INTERLINK_ALGO={spec!r}: unknown collective {k!r}; one of {', '.join(colls)}")
        have = registry.algorithms_for(k)
        if v not in have:
            raise ValueError(f"INTERLINK_ALGO={spec!r}: {k} has no algorithm {v!r}; available: {', '.join(have)}")
        out[k] = v
    return out
