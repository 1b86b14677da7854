"""The communication of a step, priced as the Schedules the runtime would run on the group's ranks.

Each collective is handed to :func:`interlink.model.predict` on the topology with the group's own ranks
placed (``Topology.with_ranks``): the cost model builds the Schedule of every candidate algorithm
(NCCL's: ring, its double binary tree, NVLS where the switch has it) on those ranks and prices its
traffic on the links they actually cross. Groups of one kind are translates of each other (the group of
rank 0 stands for all of them), so the price is cached by the group's shape on the hosts: ranks, ranks
per host, their local indices, whether hosts are consecutive. Sizes are rounded to 1% (log scale) for
the cache.

Concurrency: groups of one kind run at the same time. :meth:`Pricer.contention` plays the Schedules of
all of them at once in the simulator (their traffic merged, on the union of their ranks) against the same
rounds with every flow alone on its path: the ratio is what sharing links costs (1 where flows never
meet: the rings of rail-aligned data-parallel groups, even on an oversubscribed fat tree; more for an
all-to-all across leaves of an oversubscribed one; tests/test_plan.py). ``plan_step``
applies it to the collectives whose groups cross hosts when asked (``contention=True``, ``interlink plan
--contention``): it simulates every rank, so the search does not.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..algorithms.traffic import Phase, Traffic, traffic
from ..model import predict
from ..model.cost import builder_params, count_for, itemsize_of
from ..model.params import Params, default_params
from ..sim import simulate
from ..topology import Topology

__all__ = ["Pricer", "Priced", "CANDIDATES"]

#: What NCCL picks among, per collective (the Schedules priced; the fastest wins)
CANDIDATES: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "nccl_tree", "nvls", "nvls_tree"),
    "reduce_scatter": ("ring",),
    "all_gather": ("ring",),
    "all_to_all": ("pairwise",),
    "broadcast": ("direct",),
}
#: the tree is priced up to this many ranks (its traffic generator is the slow part past it; NCCL's own
#: tuner picks the ring for the large messages of training at such counts)
TREE_MAX_RANKS = 512


@dataclass(frozen=True)
class Priced:
    collective: str
    nranks: int
    nbytes: int
    time_s: float
    algorithm: str
    protocol: str
    busbw_gbps: float


class Pricer:
    """Prices collectives on groups of one topology; caches by group shape and rounded size."""

    def __init__(self, topo: Topology, params: Params | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.topo = topo
        self.params = params or default_params()
        self._cache: dict[tuple, Priced] = {}
        self._topos: dict[tuple, Topology] = {}
        self._shape: dict[tuple, tuple] = {}
        self.progress = progress
        self.calls = 0
        if topo.nranks:
            topo.nic_for(0)  # builds the router once here: the groups' placements (with_ranks) share it

    def shape(self, ranks: Sequence[int]) -> tuple:
        key = tuple(ranks[:2]) + (len(ranks), ranks[-1])
        got = self._shape.get(key)
        if got is not None:
            return got
        hosts = [self.topo.host_of(int(r)) for r in ranks]
        per = Counter(hosts)
        first = hosts[0]
        local = tuple(self.topo.device_of(int(r)).split("/")[-1] for r, h in zip(ranks, hosts) if h == first)
        uniq = sorted(per)
        step = min((b - a for a, b in zip(uniq, uniq[1:])), default=0)
        out = (len(ranks), max(per.values()), len(per), local, min(step, 2))
        self._shape[key] = out
        return out

    def _group_topo(self, ranks: Sequence[int]) -> Topology:
        key = tuple(ranks)
        t = self._topos.get(key)
        if t is None:
            t = self.topo.with_ranks(list(ranks))
            self._topos[key] = t
        return t

    def price(self, collective: str, nbytes: float, ranks: Sequence[int], dtype: str = "bfloat16") -> Priced:
        """The time of ``collective`` of ``nbytes`` (nccl-tests' S: the largest buffer) on ``ranks``."""
        n = len(ranks)
        if n <= 1 or nbytes <= 0:
            return Priced(collective, n, int(max(nbytes, 0)), 0.0, "-", "-", 0.0)
        nb = int(2 ** (round(math.log2(nbytes) * 64) / 64))
        key = (collective, nb, dtype, self.shape(ranks))
        got = self._cache.get(key)
        if got is not None:
            return got
        cands = CANDIDATES[collective]
        if n > TREE_MAX_RANKS:
            cands = tuple(c for c in cands if c != "nccl_tree")
        self.calls += 1
        if self.progress is not None and n >= 256:
            self.progress(f"pricing {collective} of {nb / 2**20:.1f} MiB on {n} ranks")
        p = predict(collective, nb, self._group_topo(ranks), dtype=dtype, candidates=cands, params=self.params,
                    profile=False)
        out = Priced(collective, n, nb, p.time_us * 1e-6, p.algorithm, p.protocol, p.busbw_gbps)
        self._cache[key] = out
        return out


    def contention(self, collective: str, nbytes: float, groups: Sequence[Sequence[int]],
                   dtype: str = "bfloat16") -> float:
        """How much slower ``collective`` runs on ``groups[0]`` while every group of ``groups`` runs the same
        one: the simulator's time of all of them at once over its time of the same rounds with every flow
        alone on its path (``SimResult.ideal_us``, what the cost model prices). >= 1; 1 for groups inside
        one host and for in-switch Schedules."""
        groups = [list(g) for g in groups]
        n = len(groups[0]) if groups else 0
        if n < 2 or nbytes <= 0 or \
                len({self.topo.host_of(int(r)) for r in groups[0]}) < 2:
            return 1.0
        pr = self.price(collective, nbytes, groups[0], dtype)
        key = ("contention", collective, pr.nbytes, dtype, self.shape(groups[0]), len(groups))
        got = self._cache.get(key)
        if got is not None:
            return got.time_s
        g0 = self._group_topo(groups[0])
        isz = itemsize_of(dtype)
        count, _ = count_for(collective, pr.nbytes, isz, n)
        tr = traffic(collective, pr.algorithm, n, count, 0, prefer_fast=True,
                     **dict(builder_params(collective, pr.algorithm, g0)))
        factor = 1.0
        if not tr.uses_switch:
            if self.progress is not None:
                self.progress(f"simulating {len(groups)} concurrent {collective}s of {n} ranks")
            every = self.topo.with_ranks([r for g in groups for r in g])
            many = simulate(merged(tr, len(groups)), every, itemsize=isz, protocol=pr.protocol, params=self.params)
            factor = max(1.0, many.time_us / many.ideal_us) if many.ideal_us > 0 else 1.0
        self._cache[key] = Priced(collective, n, pr.nbytes, factor, pr.algorithm, pr.protocol, 0.0)
        return factor


def merged(tr: Traffic, k: int) -> Traffic:
    """The traffic of ``k`` copies of ``tr`` side by side: copy i on ranks i x n ... i x n + n - 1."""
    n = tr.nranks
    phases = []
    for ph in tr.phases:
        def rep(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.concatenate([a] * k)

        off = np.repeat(np.arange(k, dtype=np.int64) * n, ph.src.size)
        phases.append(Phase(rep(ph.src) + off, rep(ph.dst) + off, rep(ph.elems), rep(ph.reduced), ph.repeat,
                            rep(ph.channel), ph.wait, rep(ph.after), rep(ph.gate), rep(ph.by)))
    return Traffic(tr.collective, tr.algorithm, n * k, tr.count, tuple(phases))
