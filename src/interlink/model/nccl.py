"""What a user running NCCL gets: NCCL's own choice of algorithm and protocol, and what that Schedule reaches.

    nccl_pick("all_reduce", 8, "2xdgx-a100")     -> NcclPick(algorithm="nccl_tree", protocol="ll", ...)
    nccl_default("all_reduce", 8, "2xdgx-a100")  -> NcclDefault: the pick priced by the model, and the time
                                                    nccl-tests would print for it

:func:`interlink.model.cost.predict` ranks every Schedule interlink has (the best on paper); NCCL runs only its own
algorithms (Ring, Tree, NVLS, NVLSTree; CollNet only where enabled) and chooses among them with its tuner
(``src/graph/tuning.cc`` of NCCL 2.30: ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``): time = latency + bytes /
bandwidth for every enabled (algorithm, protocol), the smallest wins (ties to the first in NCCL's order: Tree,
Ring, ..., NVLS, NVLSTree; LL, LL128, Simple). This module replays that choice:

* **latency**: NCCL's formulas with its constants (``nccl.base_latency_us``, ``nccl.hop_latency_us`` (Ring row),
  ``nccl.tree_hop_latency_us`` (Tree row), ``nccl.nvls_*``, ``nccl.net_overhead_us``: the Tree's network row for
  every algorithm when a node holds one GPU, a multi-node ring's per-step floor, the Simple ring's plateau factor);
* **bandwidth**: NCCL derives its per-channel bandwidths from its topology search, which interlink does not
  reproduce. The replica takes the Ring's and NVLS's from their Schedules as the model prices them (what the
  Schedule's bytes add to its time for one element a rank: the same bytes over the same links at the protocol's
  efficiency) and NCCL's Tree as NCCL derives it from the same
  per-channel bandwidth (the ring Schedule's bytes over its links at 1 GiB, or at the size asked if larger): busBw x 0.92, / 3.8 for LL, x 120/128 (7/9 on one node) for LL128, algbw = busBw / 2, with
  NCCL's tree correction factors by size. NCCL's LL and per-channel caps (llMaxBw, perChMax*Bw) are left out.

The pick is then priced like any Schedule (:func:`nccl_default`): the model's time of that algorithm and protocol,
and what nccl-tests would print for it (:func:`nccl_tests_us`: the host's launch of each GPU's kernel paces the
loop when longer, and the loop's one stream synchronisation is shared by its ops).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..algorithms import registry
from ..topology import Topology
from ..topology.paths import spanning_blocks
from .params import PROTOCOLS, ModelError, Params, gpu_arch

__all__ = ["NcclPick", "NcclDefault", "nccl_pick", "nccl_default", "nccl_tests_us", "cpu_vendor", "NCCL_ALGORITHMS"]

#: NCCL's algorithms per collective, as interlink's Schedules (NCCL's order: Tree, Ring, NVLS, NVLSTree). The
#: others (all_to_all, gather, scatter) are grouped send/receive in NCCL: no tuner choice.
NCCL_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("nccl_tree", "ring", "nvls", "nvls_tree"),
    "all_gather": ("ring", "nvls"),
    "reduce_scatter": ("ring", "nvls"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
}

#: NCCL 2.30 treeCorrectionFactor[protocol][log2(bytes / 64)] (tuning.cc), 64 B to 256 MB
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)


@dataclass(frozen=True)
class NcclPick:
    """NCCL's tuner's choice: ``algorithm`` (an interlink Schedule), ``protocol``, NCCL's own estimate
    ``nccl_us``; ``table``: every enabled (algorithm, protocol, NCCL's estimate us), NCCL's order."""

    collective: str
    nbytes: int
    nranks: int
    nnodes: int
    algorithm: str
    protocol: str
    nccl_us: float
    table: tuple[tuple[str, str, float], ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class NcclDefault:
    """What a user running NCCL gets: the pick, priced by the model (``time_us``, ``algbw_gbps``,
    ``busbw_gbps``: the Schedule the pick names, at its protocol) and ``nccl_tests_us``: what nccl-tests
    (one GPU per process, ``nccltests.iters`` ops) would print for it."""

    pick: NcclPick
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    nccl_tests_us: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def algorithm(self) -> str:
        return self.pick.algorithm

    @property
    def protocol(self) -> str:
        return self.pick.protocol

    def to_dict(self) -> dict[str, Any]:
        p = self.pick
        return {"algorithm": p.algorithm, "protocol": p.protocol, "time_us": self.time_us,
                "algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps, "nccl_tests_us": self.nccl_tests_us,
                "nccl_estimate_us": p.nccl_us, "nodes": p.nnodes,
                "nccl_table": [{"algorithm": a, "protocol": pr, "nccl_estimate_us": t} for a, pr, t in p.table],
                "notes": list(p.notes) + list(self.notes)}


def cpu_vendor(topo: Topology) -> str:
    """'amd', 'intel' or '' (unknown): the vendor of the topology's host CPUs, from their device names."""
    names = " ".join(d.name.lower() for d in topo.devices if d.kind == "cpu")
    if "amd" in names or "epyc" in names:
        return "amd"
    if "intel" in names or "xeon" in names:
        return "intel"
    return ""


def nccl_tests_us(device_us: float, topology: Topology, *, gpus_per_thread: int = 1, iters: int | None = None,
                  params: Params | None = None) -> float:
    """The time nccl-tests prints for a collective whose GPUs take ``device_us``: its timed loop launches
    ``iters`` ops back to back, one thread launching ``gpus_per_thread`` GPUs' kernels per op (``-g``), then
    synchronises once (src/common.cu). An op takes the longer of the GPUs' time and its launches
    (``gpu.launch_us`` by the host CPU's vendor), plus its share of the synchronisation (``gpu.stream_sync_us``)."""
    from .cost import _params

    prm = _params(params, False)
    n = float(iters if iters is not None else prm.value("nccltests.iters"))
    launch = int(gpus_per_thread) * prm.launch_us(cpu_vendor(topology))
    return max(float(device_us), launch) + prm.value("gpu.stream_sync_us") / max(n, 1.0)


def _nnodes(topo: Topology, info: Any) -> int:
    """NCCL's nodes: hosts, or NVLink domains where they span hosts (MNNVL fuses a rack's trays into one node)."""
    L = spanning_blocks(topo)
    if L:
        return max(1, topo.nranks // int(L))
    return int(info.nhosts)


def _intra_kind(info: Any) -> str:
    """NCCL's intraHw: 'nvlink' when the first node's GPUs are joined by NVLink, else 'pcie'."""
    import numpy as np

    p = info.n
    same = [r for r in range(1, p) if info.host[r] == info.host[0]]
    if not same:
        return "nvlink"
    _, _, kind, _ = info.paths.classify(np.array([0]), np.array([same[0]]))
    return ("nvlink", "pcie", "net")[int(kind[0])] if int(kind[0]) < 2 else "pcie"


def _latency_us(collective: str, algo: str, proto: str, p: int, nnodes: int, intra: str, vendor: str,
                prm: Params) -> float:
    """NCCL 2.30's latency of (algorithm, protocol) (tuning.cc, ncclTopoTuneModel)."""
    ppn = p / nnodes
    nsteps = 2 * (p - 1) if collective == "all_reduce" else p - 1 if collective in ("all_gather", "reduce_scatter") \
        else p
    tree_net = prm.value(f"nccl.tree_hop_latency_us.net.{proto}")
    if algo == "ring":
        base = prm.value(f"nccl.base_latency_us.ring.{proto}")
        intra_lat = prm.value(f"nccl.hop_latency_us.{intra}.{proto}")
        inter = tree_net if ppn == 1 else prm.value(f"nccl.hop_latency_us.net.{proto}")
        if collective in ("broadcast", "reduce"):
            return base + (intra_lat if nnodes == 1 else prm.value(f"nccl.hop_latency_us.net.{proto}"))
        over = 0.0
        if nnodes > 1:
            name = f"nccl.net_overhead_us.{vendor}"
            over = prm.value(name if name in prm else "nccl.net_overhead_us.intel") * (3.0 if proto == "simple" else 1.0)
        intra_lat = max(intra_lat, over)
        n_inter = 0 if nnodes == 1 else 2 * (nnodes - 1) if collective == "all_reduce" else nnodes - 1
        return base + (nsteps - n_inter) * intra_lat + n_inter * inter
    if algo == "nccl_tree":
        base = prm.value(f"nccl.base_latency_us.tree.{proto}")
        intra_lat = prm.value(f"nccl.tree_hop_latency_us.{intra}.{proto}")
        return base + 2 * ((p // nnodes - 1) * intra_lat + int(math.log2(nnodes)) * tree_net)
    if algo == "nvls":
        lat = prm.value("nvls.latency_us")
        return lat + (prm.value("nccl.nvls_net_latency_us") if nnodes > 1 else 0.0)
    if algo == "nvls_tree":
        return prm.value("nvls.latency_us") + 2 * int(math.log2(nnodes)) * prm.value("nccl.nvls_tree_net_latency_us")
    raise ModelError(f"{algo} is not one of NCCL's algorithms")


def nccl_pick(collective: str, nbytes: int, topology: Topology | str | None = None, *, nranks: int | None = None,
              dtype: Any = "float32", params: Params | None = None) -> NcclPick | None:
    """NCCL's tuner's (algorithm, protocol) for ``collective`` of ``nbytes`` on a GPU topology (None on CPU hosts,
    for collectives NCCL runs as grouped send/receive, and for reduce: interlink has no ring reduce Schedule)."""
    from .cost import (_finish, _info, _nvls_unavailable, _params, _rounds, _traffic_cached, builder_params,
                       count_for, fit_ranks, itemsize_of, resolve_topology)

    algos = NCCL_ALGORITHMS.get(collective)
    if algos is None:
        return None
    topo = resolve_topology(topology, nranks)
    topo = fit_ranks(topo, topo.nranks if nranks is None else int(nranks))
    info = _info(topo)
    if not info.gpu or topo.nranks < 2:
        return None
    prm = _params(params, False)
    p = topo.nranks
    itemsize = itemsize_of(dtype)
    count, S = count_for(collective, nbytes, itemsize, p)
    nnodes = _nnodes(topo, info)
    intra = _intra_kind(info)
    vendor = cpu_vendor(topo)
    local = int(info.ranks_on_host.max()) if info.nhosts > 1 else p
    have = registry.algorithms_for(collective)
    notes: list[str] = []
    # the Schedules' own bandwidth part (bytes over links at the protocol's efficiency, reductions)
    bw_part: dict[tuple[str, str], float] = {}
    channels: dict[str, int] = {}
    for algo in algos:
        if algo not in have:
            continue
        if algo in ("nvls", "nvls_tree"):
            if (algo == "nvls") != (nnodes == 1) or _nvls_unavailable(info, prm, single=algo == "nvls"):
                continue  # NVLS: one node (multi-node NVLS needs CollNet); NVLSTree: several; NVLS hardware
        if algo == "nccl_tree":
            continue  # from the ring's bandwidth, below
        bparams = builder_params(collective, algo, topo, local)
        channels[algo] = int(dict(bparams).get("channels", 1))
        r = _rounds(_traffic_cached(collective, algo, p, count, 0, bparams), info, prm, itemsize, None)
        r0 = _rounds(_traffic_cached(collective, algo, p, 1, 0, bparams), info, prm, itemsize, None)
        for proto in (("simple",) if algo.startswith("nvls") else PROTOCOLS):
            # the Schedule's time beyond its time for one element a rank: what its bytes add
            t = _finish(r, prm, proto, algo).time_us - _finish(r0, prm, proto, algo).time_us
            bw_part[(algo, proto)] = max(0.0, t)
    ll128 = intra == "nvlink" or p == nnodes  # NCCL enables LL128 only up to NVLink inside a node
    if not ll128:
        bw_part = {k: v for k, v in bw_part.items() if k[1] != "ll128"}
    if "nccl_tree" in algos and "nccl_tree" in have and "ring" in channels and S > 0:
        # NCCL's per-channel bandwidth x channels: the ring Schedule's transfer (bytes / bandwidth) at 1 GiB or S
        c_ref, s_ref = count_for(collective, max(S, 1 << 30), itemsize, p)
        bp = builder_params(collective, "ring", topo, local)
        t_ring = _finish(_rounds(_traffic_cached(collective, "ring", p, c_ref, 0, bp), info, prm, itemsize, None),
                         prm, "simple", "ring").transfer_us  # its bytes over its links, no latency
        if t_ring > 0:
            nsteps = 2 * (p - 1)
            bus = (s_ref / (t_ring * 1e-6) / 1e9) * nsteps / p
            log_size = int(S >> 6).bit_length() - 1 if S >= 64 else -1
            for proto in PROTOCOLS:
                if proto == "ll128" and not ll128:
                    continue
                b = bus * 0.92
                b = b / 3.8 if proto == "ll" else b * (7.0 / 9.0 if nnodes == 1 else 120.0 / 128.0) \
                    if proto == "ll128" else b
                if 0 <= log_size < 23:
                    b *= _TREE_CORRECTION[PROTOCOLS.index(proto)][log_size]
                bw_part[("nccl_tree", proto)] = S / (b * 0.5 * 1e9) * 1e6
    table: list[tuple[str, str, float]] = []
    for algo in algos:
        for proto in PROTOCOLS:
            if (algo, proto) not in bw_part:
                continue
            lat = _latency_us(collective, algo, proto, p, nnodes, intra, vendor, prm)
            if algo == "ring" and proto == "simple" and nnodes > 1 and collective == "all_reduce" \
                    and S // (max(channels.get("ring", 1), 1) * p) >= 64:
                lat *= 1.9 if gpu_arch(info.gpu_names[0]) == "" else 1.4  # NCCL's plateau of the ring
            table.append((algo, proto, lat + bw_part[(algo, proto)]))
    if not table:
        return None
    best = table[0]
    for row in table[1:]:
        if row[2] < best[2]:  # NCCL takes a strictly smaller time: ties go to the first in its order
            best = row
    notes.append(f"NCCL's tuner (NCCL 2.30 tuning.cc, replayed: interlink.model.nccl) over {nnodes} node(s): "
                 f"{best[0]}/{best[1]} at an estimated {best[2]:.1f} us")
    return NcclPick(collective, S, p, nnodes, best[0], best[1], best[2], tuple(table), tuple(notes))


def nccl_default(collective: str, nbytes: int, topology: Topology | str | None = None, *, nranks: int | None = None,
                 dtype: Any = "float32", params: Params | None = None) -> NcclDefault | None:
    """NCCL's pick (:func:`nccl_pick`) priced by the model: the Schedule it names at its protocol, and the time
    nccl-tests would print for it (one GPU per process). None where NCCL has no tuner choice."""
    from .cost import _params, fit_ranks, predict, resolve_topology

    pick = nccl_pick(collective, nbytes, topology, nranks=nranks, dtype=dtype, params=params)
    if pick is None:
        return None
    prm = _params(params, False)
    pred = predict(collective, nbytes, topology, nranks=nranks, algorithm=pick.algorithm, dtype=dtype, params=prm,
                   profile=False)
    row = next((c for c in pred.table if c.protocol == pick.protocol), pred.best)
    topo = resolve_topology(topology, nranks)
    topo = fit_ranks(topo, topo.nranks if nranks is None else int(nranks))
    return NcclDefault(pick, row.time_us, row.algbw_gbps, row.busbw_gbps, nccl_tests_us(row.time_us, topo, params=prm))
