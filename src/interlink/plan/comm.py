"""The communication of a step, priced as the Schedules the runtime would run on the group's ranks.

Each collective is handed to :func:`interlink.model.predict` on the topology with the group's own ranks
placed (``Topology.with_ranks``): the cost model builds the Schedule of every candidate algorithm
(NCCL's: ring, its double binary tree, NVLS where the switch has it) on those ranks and prices its
traffic on the links they actually cross. Groups of one kind are translates of each other (the group of
rank 0 stands for all of them), so the price is cached by the group's shape on the hosts: ranks, ranks
per host, their local indices, whether hosts are consecutive. Sizes are rounded to 1% (log scale) for
the cache.

Concurrency: groups of one kind run at the same time. On the presets every GPU has its own NIC, so the
concurrent groups of a kind leave a host through different NICs and do not share links; a topology whose
GPUs share NICs would slow concurrent groups that this price does not see (docs/plan.md, "Limits").
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from ..model import predict
from ..model.params import Params, default_params
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
