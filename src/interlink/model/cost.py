"""The cost model: the time of a Schedule on a Topology, and predictions per collective.

    schedule_time(traffic_or_schedule, topology, itemsize=4, protocol="simple") -> Estimate
    predict("all_reduce", 1 << 30, "dgx-h100") -> Prediction (fastest algorithm x protocol, the table)

The time of a Schedule (its :class:`~interlink.algorithms.traffic.Traffic`: rounds of messages
(src, dst, elements, channel) and elements reduced per rank) on a Topology whose ranks 0..p-1 run it.

GPU topologies (NCCL-like): dependency-driven, on the same clocks as the simulator
(:mod:`interlink.model.clocks`: one per rank and channel; a round starts when that rank-channel's previous
round is done; sends are eager):

* **a message** holds its sender's channel for :meth:`~interlink.model.params.Params.step_overhead_us`
  (NCCL's per-hop latency of the protocol for its hop kind, less the path's latency) plus its bytes at
  the path's bottleneck bandwidth x the protocol's efficiency (LL 50%, LL128 95%, Simple 100%), shared
  with the sender's other messages of the round on the same port (NVLink or NIC); it arrives the path's
  latency later. Messages through an NVLS switch (in-switch steps) move at the GPU's NVLS efficiency,
  those through a SHARP InfiniBand switch (CollNet: over the rank's NIC) at its SHARP efficiency;
* **a reduction** takes gamma x bytes (1 / HBM bandwidth), overlapped with the round's communication by
  ``reduce.overlap.gpu``;
* **a call** adds NCCL's base latency of the algorithm family and protocol.

So a pipeline pays its latency once (its fill), a ring whose NIC hop is the bottleneck runs at the NIC's
rate, and a Schedule's channels run side by side (one ring per NIC, each leaving a host through its own
NIC; NVLS's reductions and multicasts). The model is contention-free beyond a rank's own ports: flows
that share a link elsewhere (a PCIe switch, a CPU link, a spine) are the simulator's job
(:mod:`interlink.sim`), which runs the same Schedule with the same step costs, so the two give the same
time wherever nothing else is shared. ``Estimate`` splits the time into transfer (bytes over bandwidth,
per round the busiest port), reduce, and latency (the rest).

CPU topologies (interlink's own runtime): per round, the host parameters measured by
``interlink bench --calibrate``: ``alpha`` per round, ``op_us`` per message the busiest rank sends or
receives, ``alpha_oversub`` when more ranks take part than the host has cores, plus the wire latency of
paths between hosts; bytes weighed by the core-sharing factor (ranks / cores, at least 1) and a cache
factor (up to ``host.dram_factor`` once the host's working set, 2 x S per rank, leaves
``host.llc_bytes``); a repeated ring pays the largest mean latency around a cycle per round; rounds add
up. A one-sided step costs the end that copies (``Phase.by``: a Get its reader, a Put its writer). The
shared-memory paths of an all-local group (``slots``, ``slots_once``, ``two_phase``, ``peer_buffers``) are Schedules
(:mod:`interlink.algorithms.hostpage`) priced the same way from their steps, on the host page's own
rates (``host.page.*``: the pseudo-transport :data:`PAGE`), where the runtime would take them
(:func:`_host_page`).

Every algorithm is priced from its Schedule's traffic at any rank count: every registered algorithm has a
vectorised generator (:func:`interlink.algorithms.traffic.register_traffic`, equal to
:func:`~interlink.algorithms.traffic.from_schedule` of the builder: tests/test_traffic_generators.py), so no
Schedule of objects is built and no closed form is used (the closed forms of ``docs/reference.md``, 'Algorithm costs'
are test oracles only: :mod:`interlink.model.closed_form`). Algorithms whose traffic grows faster (direct,
pairwise: p(p - 1) messages; CollNet: 2pL per segment) are left out, with a note, beyond
:data:`MESSAGES_LIMIT` messages. Path
lookups are vectorised: :meth:`interlink.topology.PathTable.classify` maps every message to a *path class*
and looks up one path per class (cached per topology, shared with the simulator).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from ..algorithms import registry
from ..algorithms import traffic as _traffic
from ..algorithms import hostpath
from ..algorithms.hostpage import HOST_PAGE
from ..algorithms.hostpath import HostLimits
from ..algorithms.schedule import COLLECTIVES, Schedule, busbw_factor
from ..algorithms.switch import MAX_HEADS
from ..algorithms.traffic import Traffic, from_schedule
from ..topology import HOP_KINDS, Topology, TopologyError, nvls_domains, parse_topology, path_table, rail_plan
from ..topology.paths import NET as _NET
from ..topology.paths import per_topology, spanning_blocks
from .params import PROTOCOLS, ModelError, Params, Profile, default_params, host_profile, with_profile

__all__ = [
    "Estimate",
    "Candidate",
    "Prediction",
    "schedule_time",
    "predict",
    "cpu_topology",
    "this_host_topology",
    "resolve_topology",
    "fit_ranks",
    "HostTerms",
    "host_terms",
    "count_for",
    "itemsize_of",
    "MESSAGES_LIMIT",
    "PER_RANK_SPLIT",
]

#: Algorithms whose traffic holds more messages than this (direct algorithms and pairwise exchange: p(p - 1),
#: 4M at 2,048 ranks; CollNet: about 2pL per pipeline segment) are left out of a prediction, with a note:
#: pricing them would take minutes (and, for CollNet at 8,192 ranks, more than 16 GB).
MESSAGES_LIMIT = 4_500_000

#: Collectives whose nccl-tests size S is count x itemsize x nranks (count is one rank's block).
PER_RANK_SPLIT = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})


_HOP_KINDS = HOP_KINDS  # hop kinds of PathTable.classify: nvlink, pcie, net


# ---- results -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """Time of one Schedule on one topology, microseconds, split into its alpha/beta/gamma parts.

    ``latency_us`` (base or call cost plus one latency per round), ``transfer_us`` (bytes over
    bandwidth), ``reduce_us`` (bytes reduced); ``rounds``: communication rounds; ``mode``: "gpu"
    (NCCL-like tables, protocols) or "cpu" (host parameters).
    """

    time_us: float
    latency_us: float
    transfer_us: float
    reduce_us: float
    rounds: int
    protocol: str
    channels: int = 1
    mode: str = "cpu"
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Candidate:
    """One row of a prediction's table: an (algorithm, protocol) and its predicted time."""

    algorithm: str
    protocol: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    method: str = "traffic"  # traffic (the Schedule's, from its generator) | host page (a host-page Schedule's traffic on the host page's rates)
    channels: int = 1
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "protocol": self.protocol, "time_us": self.time_us,
                "algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps, "method": self.method,
                "channels": self.channels, "note": self.note}


@dataclass(frozen=True)
class Prediction:
    """The fastest (algorithm, protocol) for a collective of ``nbytes`` (nccl-tests' S) on a topology.

    ``algbw_gbps = S / time``, ``busbw_gbps = algbw x busbw_factor`` (GB/s = 1e9 B/s).
    ``table``: every candidate evaluated, fastest first; ``runner_up``: the fastest other algorithm.
    """

    collective: str
    nbytes: int
    count: int
    nranks: int
    dtype: str
    topology: str
    mode: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    algorithm: str
    protocol: str
    runner_up: Candidate | None
    table: tuple[Candidate, ...]
    notes: tuple[str, ...] = ()
    params_origin: str = ""

    @property
    def best(self) -> Candidate:
        return self.table[0]

    def per_algorithm(self) -> list[Candidate]:
        """The best protocol of every algorithm, fastest first."""
        seen: dict[str, Candidate] = {}
        for c in self.table:
            seen.setdefault(c.algorithm, c)
        return list(seen.values())

    def to_dict(self) -> dict[str, Any]:
        ru = self.runner_up
        return {
            "collective": self.collective, "nbytes": self.nbytes, "count": self.count, "nranks": self.nranks,
            "dtype": self.dtype, "topology": self.topology, "mode": self.mode,
            "time_us": self.time_us, "algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps,
            "algorithm": self.algorithm, "protocol": self.protocol,
            "runner_up": None if ru is None else {"algorithm": ru.algorithm, "protocol": ru.protocol,
                                                  "time_us": ru.time_us, "busbw_gbps": ru.busbw_gbps},
            "table": [c.to_dict() for c in self.table], "notes": list(self.notes), "params": self.params_origin,
        }


# ---- per-topology facts (paths: interlink.topology.paths) -------------------------------------------------------------


class _TopoInfo:
    """Per-rank host facts of one topology (hosts, cores, oversubscription, GPUs) for the host
    parameters; paths between ranks come from its :class:`~interlink.topology.PathTable` (``paths``)."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        n = topo.nranks
        self.n = n
        self.paths = path_table(topo)
        devs = [topo.device(r) for r in range(n)]
        host = self.paths.host
        self.host = host
        self.nhosts = self.paths.nhosts
        self.ranks_on_host = self.paths.ranks_on_host
        self.gpu = all(d.kind == "gpu" for d in devs)
        self.gpu_names = [d.name for d in devs] if self.gpu else []
        # cores per host (CPU hosts): the topology's meta, else the host's core devices
        cores = topo.meta.get("cores_per_host")
        if cores:
            per_host = np.full(self.nhosts, float(cores))
        else:
            per_host = np.zeros(self.nhosts)
            for hi, h in enumerate(self.paths.host_keys):
                c = 0 if isinstance(h, tuple) else sum(
                    1 for d in topo.host_devices(h) if d.kind == "cpu" and "core" in d.attrs)
                per_host[hi] = c if c > 0 else self.ranks_on_host[hi]  # no core devices: no sharing
        self.oversub = np.maximum(1.0, self.ranks_on_host / per_host)[host]  # per rank
        self.cores_per_host = per_host
        nics = {topo.nic_for(r) for r in np.flatnonzero(host == 0).tolist()} if n else set()
        nics.discard(None)
        self.nics_per_host = len(nics)
        # NICs per host (distinct compute NICs of its ranks, at least 1) and where each host's are numbered
        # from: a CPU host's message leaves (enters) through NIC (channel mod that count), as the
        # runtime's lanes run (lane = channel mod lanes, lane r on NIC r)
        per: list[set] = [set() for _ in range(self.nhosts)]
        for r in (range(n) if not self.gpu else ()):  # read by the CPU terms only
            x = topo.nic_for(r)
            if x is not None:
                per[int(host[r])].add(x)
        self.host_nics = np.array([max(1, len(x)) for x in per], dtype=np.int64)
        self.nic_base = np.concatenate([[0], np.cumsum(self.host_nics)[:-1]]).astype(np.int64)
        self.nic_slots = int(self.host_nics.sum())

    def classify(self, src: np.ndarray, dst: np.ndarray, tcp: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per message: bottleneck GB/s, path latency us, hop kind (nvlink/pcie/net), crosses hosts.
        The last answer is kept: consecutive phases of one Traffic share their (src, dst) arrays."""
        last = getattr(self, "_last", None)
        if last is not None and last[0] is src and last[1] is dst and last[2] == tcp:
            return last[3]
        out = self.paths.classify(src, dst, tcp)
        self._last = (src, dst, tcp, out)
        return out


_INFOS: dict[int, tuple[Any, _TopoInfo]] = {}


def _info(topo: Topology) -> _TopoInfo:
    return per_topology(_INFOS, topo, _TopoInfo)


# ---- the evaluation of one Traffic -------------------------------------------------------------------


@dataclass
class _Rounds:
    """Per phase: repeat, CPU latency parts (``lat_first``: the first round of the phase, ``lat_steady``:
    the following ones), beta seconds (at efficiency 1) and gamma seconds; on GPUs ``clock_us``: per
    protocol (PROTOCOLS order) the dependency-driven time of the steps (:func:`_rounds`), of which
    beta and gamma give the transfer and reduce parts."""

    repeat: np.ndarray
    lat_first: np.ndarray
    lat_steady: np.ndarray
    beta_s: np.ndarray
    gamma_s: np.ndarray
    rounds: int
    mode: str
    channels: int
    clock_us: np.ndarray | None = None
    # CPU: beta seconds before the hosts' NICs are shared (each rank's own ports only)
    port_s: np.ndarray | None = None
    # CPU: the parameter holding the fixed cost of one call (the host page's paths have their own)
    call: str = "host.call_us"


#: the host page (:mod:`interlink.algorithms.hostpage`): the CPU model's pseudo-transport for the Schedules
#: that read and write shared memory in place (slots, or peers' buffers by cross-memory attach), with its
#: own rates (``host.page.*``: a round is a publish and a wait on the page, a message a read of a slot)
PAGE = "page"


def _host_rates(params: Params, transport: str) -> tuple[float, float, float | None, float]:
    """(alpha us, alpha per oversubscribed round us, beta s/B or None, us per message) of a host transport
    (shm, tcp or the host page)."""
    alpha = params.value(f"host.{transport}.alpha_us")
    over = params.value(f"host.{transport}.alpha_oversub_us")
    beta = params.get(f"host.{transport}.beta_ns_per_byte")
    return alpha, over, (None if beta is None else beta * 1e-9), params.value(f"host.{transport}.op_us")


def byte_oversub(info: "_TopoInfo", params: Params, transport: str = "shm") -> np.ndarray:
    """Per rank, the factor on a byte's cost when ranks share cores: 1 + k (f - 1), f = ranks per core
    (the host page's Schedules may have their own k: ``host.page.oversub_byte_factor``)."""
    k = params.get(f"host.{PAGE}.oversub_byte_factor") if transport == PAGE else None
    if k is None:
        k = params.value("host.oversub_byte_factor")
    return 1.0 + k * (info.oversub - 1.0)


def _active_ranks(info: "_TopoInfo") -> int:
    """Ranks of the busiest host that run at the same moment: no more than its cores."""
    on_host = int(info.ranks_on_host.max(initial=1))
    cores = int(info.cores_per_host.min(initial=on_host)) if info.cores_per_host.size else on_host
    return max(1, min(on_host, cores))


def working_set(collective: str, nranks: int, count: int, itemsize: int, ranks_on_host: int) -> float:
    """Bytes a host's running ranks touch at once: 2 buffers of S (the largest buffer) per rank that runs
    (``ranks_on_host``: at most the host's cores: ranks that wait for a core do not stream memory)."""
    from ..algorithms.schedule import buffer_sizes

    if collective == "barrier":
        return 0.0
    b = buffer_sizes(collective, nranks, count)
    return 2.0 * max(b["input"], b["output"]) * itemsize * ranks_on_host


def cache_factor(params: Params, wset: float) -> float:
    """Per-byte cost multiplier of a host working set: 1 in cache, up to host.dram_factor beyond it."""
    m = params.value("host.dram_factor")
    if m == 1.0 or wset <= 0:
        return 1.0
    return 1.0 + (m - 1.0) * max(0.0, 1.0 - params.value("host.llc_bytes") / wset)


def _gamma_per_rank(info: _TopoInfo, params: Params, transport: str = "shm") -> np.ndarray:
    if info.gpu:
        passes = params.value("gpu.reduce_passes")
        return np.array([passes / (params.hbm_gbps(nm) * 1e9) for nm in info.gpu_names])
    g = params.get(f"host.{PAGE}.reduce_ns_per_byte") if transport == PAGE else None
    if g is None:
        g = params.value("host.reduce_ns_per_byte")
    return np.full(info.n, g * 1e-9) * byte_oversub(info, params, transport)


def _cycles(src: np.ndarray, dst: np.ndarray, p: int) -> tuple[list[np.ndarray], np.ndarray] | None:
    """For a permutation phase (every rank sends <= 1 and receives <= 1 message): the message indices of
    each cycle, and a mask of the messages on no cycle (chains). None when it is not a permutation."""
    if np.bincount(src, minlength=p).max(initial=0) > 1 or np.bincount(dst, minlength=p).max(initial=0) > 1:
        return None
    msg_of = np.full(p, -1, np.int64)
    msg_of[src] = np.arange(src.size)
    seen = np.zeros(p, bool)
    on_cycle = np.zeros(src.size, bool)
    cycles: list[np.ndarray] = []
    nxt = np.full(p, -1, np.int64)
    nxt[src] = dst
    for start in src.tolist():
        if seen[start]:
            continue
        path = []
        r = start
        while r >= 0 and not seen[r]:
            seen[r] = True
            path.append(r)
            r = int(nxt[r])
        if r >= 0 and r in path:  # closed a new cycle
            cyc = path[path.index(r):]
            idx = msg_of[np.array(cyc)]
            on_cycle[idx] = True
            cycles.append(idx)
    return cycles, ~on_cycle


def _channel_cycles(ph: Any, p: int) -> tuple[list[np.ndarray], np.ndarray] | None:
    """:func:`_cycles` of each channel's messages (C parallel rings: C cycles through the same ranks)."""
    if ph.channel is None:
        return _cycles(ph.src, ph.dst, p)
    loops: list[np.ndarray] = []
    off = np.zeros(ph.src.size, bool)
    for c in np.unique(ph.channel).tolist():
        g = np.flatnonzero(ph.channel == c)
        cyc = _cycles(ph.src[g], ph.dst[g], p)
        if cyc is None:
            return None
        loops += [g[lp] for lp in cyc[0]]
        off[g[cyc[1]]] = True
    return loops, off


def _rounds(tr: Traffic, info: _TopoInfo, params: Params, itemsize: int, transport: str | None) -> _Rounds:
    p = tr.nranks
    gpu = info.gpu
    classify = info.classify
    via_eff = 1.0
    nentries = p
    if gpu and tr.uses_switch:
        view = _switch_view(tr, info, params)
        tr, classify, via_eff, nentries = view.traffic, view.classify, view.efficiency, view.nentries
    # GPUs: the clocks give the time; the per-phase beta and gamma only split it, so near-identical
    # rounds (uneven ring blocks) are taken together, as the clocks take them
    phases = tr.phases if not gpu else tuple(
        _traffic.Phase(g[0].src, g[0].dst, m[0], m[1], m[3], g[0].channel, g[0].wait, g[0].after, g[0].gate)
        for g in _traffic.merge_rounds(tr.phases, 1) for m in [_traffic.merged(g)])
    nph = len(phases)
    rep = np.array([ph.repeat for ph in phases], dtype=np.float64)
    lat_first = np.zeros(nph)
    lat_steady = np.zeros(nph)
    beta = np.zeros(nph)
    port_s = np.zeros(nph)
    gam = np.zeros(nph)
    tcp_all = transport == "tcp"
    local = PAGE if transport == PAGE else "shm"  # what same-host messages go through
    gamma = _gamma_per_rank(info, params, local)[:p]
    if not gpu:
        a_shm, o_shm, b_shm, m_shm = _host_rates(params, local)
        a_tcp, o_tcp, b_tcp, m_tcp = _host_rates(params, "tcp")
        fo_shm, fo_tcp = params.value(f"host.{local}.fanout_us"), params.value("host.tcp.fanout_us")
        bo = byte_oversub(info, params, local)  # per rank: what sharing a core does to a byte's cost
        cf = cache_factor(params, working_set(tr.collective, p, tr.count, itemsize, _active_ranks(info)))
        gamma = gamma * cf
    rounds = 0
    g_tcp = None
    if not gpu and params.get("host.tcp.reduce_ns_per_byte") is not None:
        g_tcp = params.value("host.tcp.reduce_ns_per_byte") * 1e-9 * bo[:p] * cf
    clocks = None
    if gpu:
        # GPUs: the steps timed dependency-driven, every protocol at once (one row each)
        # (:class:`interlink.model.clocks.Clocks`: one clock per rank and channel; a round starts when the
        # rank-channel's previous one is done). A message holds its sender's channel for
        # Params.step_overhead_us plus its bytes at the path's bottleneck bandwidth x the protocol's
        # efficiency, shared with the rank's other messages of the round on the same port (NVLink or NIC:
        # they end together; a switch has a port per rank), and arrives the path latency later; a rank
        # reduces what it received at 1 / HBM bandwidth, overlapped by reduce.overlap.gpu
        from .clocks import Clocks

        eff = np.array([params.efficiency(pr) for pr in PROTOCOLS])
        nch = max((int(ph.channel.max()) + 1 for ph in phases if ph.channel is not None and ph.channel.size),
                  default=1)
        clocks = Clocks(nentries, nch, rows=len(PROTOCOLS))
        overlap_gpu = params.value("reduce.overlap.gpu")
        # a block of distinct rounds repeated (NVLS's three phases per round) runs as one block map; its
        # later repetitions are counted in the first one's rep
        runs = _traffic.blocks(list(phases))
    block: list = []  # the prepared rounds of the block being collected
    block_end = block_reps = -1
    skip_to = 0

    def tick(*args, **kw) -> None:
        if i < block_end:
            block.append(clocks.prepare(*args[:7], *args[8:], **kw))
            if i == block_end - 1:
                clocks.run_block(block, block_reps)
                block.clear()
        else:
            clocks.run(*args, **kw)

    for i, ph in enumerate(phases):
        if block_end <= i < skip_to:  # a later repetition of the block
            rep[i] = 0.0
            continue
        if clocks is not None and i in runs:
            bl, block_reps = runs[i]
            block_end = i + bl
            skip_to = i + bl * block_reps
        if i < block_end:
            rep[i] = float(block_reps)
        red_us = None
        if clocks is not None and ph.reduced is not None:
            red_us = ph.reduced[:p] * itemsize * gamma[: min(p, ph.reduced.size)] * 1e6
        if clocks is not None and ph.src.size == 0 and red_us is not None:
            none = np.zeros((len(PROTOCOLS), 0))
            tick(ph.src, ph.dst, ph.channel, none, none, red_us, overlap_gpu, ph.repeat)
        if ph.reduced is not None:
            gam[i] = float((ph.reduced[:p] * itemsize * gamma[: ph.reduced.size]).max(initial=0.0))
            if g_tcp is not None and ph.src.size and (tcp_all or info.nhosts > 1):
                # ranks whose incoming messages of this round come over TCP reduce at the TCP rate
                _, _, _, xr = info.classify(ph.src, ph.dst)
                tin = np.bincount(ph.dst, weights=(xr | tcp_all).astype(np.float64), minlength=p)[:p] > 0
                g = np.where(tin, g_tcp, gamma[:p])
                gam[i] = float((ph.reduced[:p] * itemsize * g).max(initial=0.0))
        if ph.src.size == 0:
            continue
        rounds += int(rep[i])
        src, dst = ph.src, ph.dst
        nbytes = ph.elems.astype(np.float64) * itemsize
        bw, plat, kind, cross = classify(src, dst, tcp=tcp_all and not gpu)
        if gpu:
            t = nbytes / (bw * 1e9)
            if via_eff != 1.0:  # what the switch reduces or copies moves at its NVLS efficiency
                t = np.where((src >= p) | (dst >= p), t / via_eff, t)
            port_net = kind == _NET
            t_us = t * 1e6
            port = port_net.astype(np.int64)
            load_s = np.bincount(src * 2 + port, weights=t_us, minlength=2 * nentries)
            load_r = np.bincount(dst * 2 + port, weights=t_us, minlength=2 * nentries)
            d = np.maximum(np.where(src >= p, t_us, load_s[src * 2 + port]),
                           np.where(dst >= p, t_us, load_r[dst * 2 + port]))
            over = np.vstack([params.step_overhead_us(kind, plat, pr) for pr in PROTOCOLS])
            tx = over + d[None, :] / eff[:, None]
            tick(src, dst, ph.channel, tx, tx + plat[None, :], red_us, overlap_gpu, ph.repeat,
                 recv_elems=ph.elems, wait=ph.wait, after=ph.after, gate=ph.gate)
        else:
            tcp = cross | tcp_all
            wire = 1.0 / (bw * 1e9)
            # a byte costs the host's copy work (slower when cores are shared or the working set leaves
            # the cache) or the network's wire time, whichever is longer: the two overlap, and a slow
            # network is not made slower by busy cores
            bs = wire if b_shm is None else np.full(src.size, b_shm)
            bt = np.where(cross, 0.0, wire) if b_tcp is None else np.full(src.size, b_tcp)
            f = np.maximum(bo[src], bo[dst]) * cf
            host_pb = np.where(tcp, bt, bs) * f
            net_pb = np.where(cross, wire, 0.0)
            t = nbytes * np.maximum(host_pb, net_pb)
            port_net = tcp
            # ranks active on one host beyond its cores: each such round pays for the sharing
            act = np.unique(np.concatenate([src, dst]))
            per_host = np.bincount(info.host[act], minlength=info.nhosts)
            excess = float(np.max(np.maximum(0.0, per_host - info.cores_per_host) / info.cores_per_host))
            mlat = (np.where(tcp, a_tcp, a_shm) + np.where(tcp, o_tcp, o_shm) * excess
                    + np.where(cross, plat, 0.0))
            # the busiest rank's messages (sent + received), each costing its transport's op_us, at the
            # ends that work (both for a two-sided message; a one-sided Get only its reader, a Put only its
            # writer: Phase.by)
            ws, wr = ph.workers()
            op = np.where(tcp, m_tcp, m_shm)
            ops = (np.bincount(src, weights=op * info.oversub[src] * ws, minlength=p)
                   + np.bincount(dst, weights=op * info.oversub[dst] * wr, minlength=p))
            ops_us = float(ops.max())
            # fan-out/fan-in: messages of the busiest rank beyond one send and one receive
            cnt = np.bincount(src, weights=ws.astype(np.float64), minlength=p) \
                + np.bincount(dst, weights=wr.astype(np.float64), minlength=p)
            fan = float(np.maximum(0, cnt - 2).max(initial=0))
            if fan:
                ops_us += fan * (fo_tcp if bool(tcp.all()) else fo_shm)
            lat_first[i] = lat_steady[i] = float(mlat.max()) + ops_us
        if ph.repeat > 1 and not gpu:
            cyc = _channel_cycles(ph, p)
            if cyc is not None:
                loops, off = cyc
                means = [float(mlat[c].mean()) for c in loops]
                lat_steady[i] = max(means + ([float(mlat[off].max())] if off.any() else [])) + ops_us
        port = port_net.astype(np.int64)
        ts, trv = (t, t) if gpu else (t * ws, t * wr)  # CPU: bytes cost the ends that copy them (Phase.by)
        send = np.bincount(src * 2 + port, weights=ts, minlength=2 * p)[: 2 * p]  # ranks' ports (not a switch's)
        recv = np.bincount(dst * 2 + port, weights=trv, minlength=2 * p)[: 2 * p]
        beta[i] = max(float(send.max(initial=0.0)), float(recv.max(initial=0.0)))
        port_s[i] = beta[i]
        if not gpu and cross.any():
            # the messages of a CPU host's ranks that leave (enter) it through one NIC share its wire: one
            # NIC per host, or with several (cpu-host's nics=K) the runtime's lane of the message's
            # channel, NIC (channel mod K) on both sides (rail-aligned rings spread over all of them; other
            # algorithms, one channel, keep to NIC 0)
            nt = (nbytes * net_pb)[cross]
            chan = ph.channel[cross] if ph.channel is not None and ph.channel.size == src.size else 0
            sh, rh = info.host[src[cross]], info.host[dst[cross]]
            hs = np.bincount(info.nic_base[sh] + chan % info.host_nics[sh], weights=nt, minlength=info.nic_slots)
            hr = np.bincount(info.nic_base[rh] + chan % info.host_nics[rh], weights=nt, minlength=info.nic_slots)
            beta[i] = max(beta[i], float(hs.max()), float(hr.max()))
    channels = max((int(ph.channel.max()) + 1 for ph in tr.phases if ph.channel is not None and ph.channel.size),
                   default=1)
    clock = np.array([clocks.makespan(i) for i in range(len(PROTOCOLS))]) if clocks is not None else None
    return _Rounds(rep, lat_first, lat_steady, beta, gam, rounds, "gpu" if gpu else "cpu", channels, clock, port_s,
                   f"host.{PAGE}.call_us" if local == PAGE else "host.call_us")


@dataclass
class HostTerms:
    """The cost model's contention-free CPU-host terms of each phase of a Traffic (what the simulator
    scales by each round's flow-level slowdown): ``index`` maps id(phase) to its row; ``lat_first`` /
    ``lat_steady`` (us), ``beta_s`` and ``gamma_s`` (s) per row; ``call_us`` per call; ``overlap`` of
    reduction with transfer; ``port_s``: beta before the hosts' NICs are shared between their ranks'
    messages (each rank's own ports only; what the flows' slowdown may stretch: beta_s already holds the
    NICs' sharing)."""

    index: dict
    lat_first: np.ndarray
    lat_steady: np.ndarray
    beta_s: np.ndarray
    gamma_s: np.ndarray
    call_us: float
    overlap: float
    port_s: np.ndarray | None = None


def host_terms(tr: Traffic, topo: Topology, params: Params | None = None, itemsize: int = 4,
               transport: str | None = None) -> HostTerms:
    """Per phase of ``tr`` on the CPU hosts of ``topo``: the model's latency, transfer and reduction
    terms (calibrated host parameters, ``params`` or this host's profile)."""
    prm = _params(params)
    r = _rounds(tr, _info(topo), prm, itemsize, transport)
    return HostTerms({id(ph): i for i, ph in enumerate(tr.phases)}, r.lat_first, r.lat_steady, r.beta_s,
                     r.gamma_s, float(prm.value(r.call)), float(prm.value("reduce.overlap.cpu")), r.port_s)


@dataclass
class _SwitchView:
    """A Traffic with in-switch steps, placed on the switches that serve them (the ranks' NVLS switches,
    or the SHARP switches their NICs reach): ``traffic`` has endpoints p + 2 x switch + stream
    (:meth:`Traffic.on_switches`), ``classify`` takes those endpoints, ``nentries`` counts ranks and switch
    streams, ``efficiency``: the switches' NVLS or SHARP efficiency."""

    traffic: Traffic
    classify: Any
    nentries: int
    efficiency: float


def _switch_view(tr: Traffic, info: _TopoInfo, params: Params) -> _SwitchView:
    p = tr.nranks
    if not tr.uses_switch:
        return _SwitchView(tr, info.classify, p, 1.0)
    from ..topology import switch_plan

    try:
        plan = switch_plan(info.topo, p, tr.switch_groups, kind=tr.switch_kind)
    except TopologyError as exc:
        raise ModelError(str(exc)) from None
    table = path_table(plan.topology)

    def classify(src: np.ndarray, dst: np.ndarray, tcp: bool = False):
        return table.classify(plan.path_ranks(src), plan.path_ranks(dst), tcp)

    eff = min(params.switch_efficiency(plan.kind, nm) for nm in info.gpu_names) if info.gpu_names else 0.0
    return _SwitchView(tr.on_switches(plan.switch_of), classify, plan.entries, eff or 1.0)


def _finish(r: _Rounds, params: Params, protocol: str, algorithm: str, notes: tuple[str, ...] = ()) -> Estimate:
    """GPUs: the call latency plus the steps' dependency-driven time; its latency part is what it adds to
    the bytes and the reductions. CPUs: add up the rounds: latency (first round of a phase; the following
    rounds of a repeated ring pay the largest mean around a cycle, the pipelined steady state) + transfer
    + reduce."""
    gpu = r.clock_us is not None
    beta = r.beta_s / params.efficiency(protocol) if gpu else r.beta_s
    overlap = params.value("reduce.overlap.gpu" if gpu else "reduce.overlap.cpu")
    hidden = overlap * np.minimum(beta, r.gamma_s)  # the part of the reduction under the transfer
    transfer = float((r.repeat * beta).sum()) * 1e6
    reduce = float((r.repeat * (r.gamma_s - hidden)).sum()) * 1e6
    if gpu:
        total = params.call_latency_us(algorithm, protocol) + float(r.clock_us[PROTOCOLS.index(protocol)])
        latency = max(0.0, total - transfer - reduce)
        return Estimate(total, latency, transfer, reduce, r.rounds, protocol, r.channels, r.mode, notes)
    per_lat = r.lat_first + (r.repeat - 1) * r.lat_steady
    latency = params.value(r.call) + float(per_lat.sum())
    return Estimate(latency + transfer + reduce, latency, transfer, reduce, r.rounds, protocol, r.channels,
                    r.mode, notes)


def _check_protocol(protocol: str, gpu: bool) -> str:
    pr = protocol.lower()
    if gpu and pr not in PROTOCOLS:
        raise ModelError(f"unknown protocol {protocol!r}; expected one of {PROTOCOLS}")
    if not gpu and pr != "simple":
        raise ModelError(f"protocol {protocol!r} applies to GPU topologies only (CPU hosts: 'simple')")
    return pr


def schedule_time(traffic_or_schedule: Union[Traffic, Schedule], topology: Topology | str, *, itemsize: int = 4,
                  protocol: str = "simple", params: Params | None = None,
                  transport: str | None = None) -> Estimate:
    """Alpha-beta-gamma time of a Schedule (or its Traffic) on ``topology``; rank r runs on topology rank r.

    ``protocol``: "ll", "ll128" or "simple" on GPU topologies, "simple" on CPU hosts. Channels are the
    Schedule's own (its steps name them; see the module docstring). ``transport="tcp"`` makes same-host messages of a
    CPU topology go over loopback TCP (``INTERLINK_TRANSPORT=tcp``). ``params``: the constants
    (default: :func:`~interlink.model.params.default_params` with this host's profile).
    """
    tr = from_schedule(traffic_or_schedule) if isinstance(traffic_or_schedule, Schedule) else traffic_or_schedule
    topo = resolve_topology(topology)
    if tr.nranks > topo.nranks:
        raise ModelError(f"the schedule has {tr.nranks} ranks, topology {topo.name!r} only {topo.nranks}")
    if tr.nranks < topo.nranks:
        topo = topo.with_ranks(list(topo.ranks[: tr.nranks]))
    info = _info(topo)
    protocol = _check_protocol(protocol, info.gpu)
    params = _params(params)
    r = _rounds(tr, info, params, int(itemsize), transport)
    return _finish(r, params, protocol, tr.algorithm)


#: the CPU model's linear parameters (per transport where the name has {t})
CPU_TERMS = ("host.call_us", "host.{t}.alpha_us", "host.{t}.op_us", "host.{t}.fanout_us", "host.{t}.alpha_oversub_us",
             "host.{t}.beta_ns_per_byte", "host.{t}.reduce_ns_per_byte")


def _term_name(template: str, transport: str) -> str:
    """A CPU_TERMS template for one transport: a byte reduced out of the shared-memory rings costs
    host.reduce_ns_per_byte, and the host page's calls have their own fixed cost."""
    name = template.format(t=transport)
    if name == "host.shm.reduce_ns_per_byte":
        return "host.reduce_ns_per_byte"
    if transport == PAGE and name == "host.call_us":
        return f"host.{PAGE}.call_us"
    return name


def cpu_terms(traffic: Traffic, topology: Topology, *, itemsize: int = 4, transport: str = "shm",
              oversub_byte_factor: float = 1.0) -> dict[str, float]:
    """The CPU model is linear in its host parameters: time_us = sum(value x term). Returns the terms
    (per unit of each parameter of :data:`CPU_TERMS`, with the cache factor at 1) and ``working_set``,
    for a single-host topology: what calibration fits against. ``transport``: shm, tcp, or ``page`` (the
    host page's Schedules: :mod:`interlink.algorithms.hostpage`)."""
    info = _info(topology)
    if info.gpu:
        raise ModelError("cpu_terms needs a CPU topology")
    names = [_term_name(n, transport) for n in CPU_TERMS]
    other = "tcp" if transport == "shm" else "shm"
    zero = {_term_name(n, t): 0.0 for n in CPU_TERMS for t in (transport, other)}
    zero["host.dram_factor"] = 1.0
    zero["host.oversub_byte_factor"] = float(oversub_byte_factor)
    zero[f"host.{PAGE}.oversub_byte_factor"] = None
    base = default_params()
    out: dict[str, float] = {}
    for n in names:
        unit = dict(zero)
        unit[n] = 1.0
        pr = base.replace(unit, "unit")
        r = _rounds(traffic, info, pr, itemsize, transport if transport in ("tcp", PAGE) else None)
        out[n] = _finish(r, pr, "simple", traffic.algorithm).time_us
    out["working_set"] = working_set(traffic.collective, traffic.nranks, traffic.count, itemsize,
                                     _active_ranks(info))
    return out


# ---- topologies for CPU hosts --------------------------------------------------------------------------


def cpu_topology(ranks_per_host: Sequence[int] | int, *, cores: int | None = None, network: Any = "eth-25g",
                 name: str = "", nics: int = 1) -> Topology:
    """CPU hosts with the given number of ranks each (``nics`` NICs per host):
    :func:`interlink.topology.presets.cpu_hosts`."""
    from ..topology.presets import cpu_hosts

    try:
        return cpu_hosts(ranks_per_host, cores=cores, network=network, name=name, nics=nics)
    except TopologyError as e:
        raise ModelError(str(e)) from None


_DISCOVERED: dict[str, Any] = {}


def this_host_topology(nranks: int | None = None) -> Topology:
    """This machine: the discovered topology when it has GPUs, else a CPU host of ``nranks`` ranks
    (default: one per core) with this machine's core count."""
    if "topo" not in _DISCOVERED:
        try:
            from ..topology import discover

            d = discover()
            _DISCOVERED["topo"] = d.topology if any(dv.kind == "gpu" for dv in d.topology.devices) else None
        except Exception:  # noqa: BLE001 - discovery is best effort
            _DISCOVERED["topo"] = None
    t = _DISCOVERED["topo"]
    if t is not None and (nranks is None or nranks <= t.nranks):
        return t
    prof = host_profile()
    cores = int(prof.meta.get("cores", 0)) if prof is not None else 0
    return cpu_topology(nranks or cores or os.cpu_count() or 1, cores=cores or None, name="this-host")


def resolve_topology(topology: Topology | str | None, nranks: int | None = None) -> Topology:
    if topology is None:
        return this_host_topology(nranks)
    if isinstance(topology, str):
        return _parse_cached(topology)
    return topology


@functools.lru_cache(maxsize=32)
def _parse_cached(spec: str) -> Topology:
    if spec in ("this", "local", "host"):
        return this_host_topology()
    return parse_topology(spec)


def fit_ranks(topo: Topology, nranks: int, notes: list[str] | None = None) -> Topology:
    """The first ``nranks`` ranks of ``topo``; CPU hosts take more ranks than cores (they share them, a
    note says so). GPU topologies refuse more ranks than GPUs."""
    notes = [] if notes is None else notes
    if nranks < 1:
        raise ModelError(f"nranks must be >= 1, got {nranks}")
    if nranks == topo.nranks:
        return topo
    if nranks < topo.nranks:
        return topo.with_ranks(list(topo.ranks[:nranks]))
    info = _info(topo)
    if info.gpu:
        raise ModelError(f"topology {topo.name!r} has {topo.nranks} GPUs; cannot place {nranks} ranks "
                         f"(use a cluster spec such as {math.ceil(nranks / max(1, topo.ranks_per_host))}x...)")
    H = info.nhosts
    per = math.ceil(nranks / H)
    counts = [per] * (H - 1) + [nranks - per * (H - 1)]
    cores = int(info.cores_per_host.min()) if info.cores_per_host.size else None
    notes.append(f"{nranks} ranks on {H} host(s) of {cores} cores: ranks beyond the cores share them")
    return cpu_topology(counts, cores=cores, name=f"{topo.name}+{nranks}ranks")


# ---- predictions ------------------------------------------------------------------------------------


def itemsize_of(dtype: Any) -> int:
    name = str(dtype).lower()
    if name in ("bfloat16", "bf16"):
        return 2
    aliases = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "char": "int8",
               "fp16": "float16", "fp32": "float32", "fp64": "float64"}
    try:
        return int(np.dtype(aliases.get(name, dtype)).itemsize)
    except TypeError:
        raise ModelError(f"unknown dtype {dtype!r}") from None


def count_for(collective: str, nbytes: int, itemsize: int, nranks: int) -> tuple[int, int]:
    """(per-rank count, S) for a size in bytes, as nccl-tests counts them."""
    if collective == "barrier":
        return 0, 0
    if collective in PER_RANK_SPLIT:
        c = max(int(nbytes) // itemsize // nranks, 0)
        return c, c * itemsize * nranks
    c = max(int(nbytes) // itemsize, 0)
    return c, c * itemsize


def _params(params: Params | None, profile: Profile | bool | None = None) -> Params:
    if params is not None:
        return params
    if profile is False:
        return default_params()
    prof = host_profile() if profile is None or profile is True else profile
    return with_profile(default_params(), prof)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=128)
def _traffic_cached(collective: str, algorithm: str, p: int, count: int, root: int, bparams: tuple) -> Traffic:
    return _traffic.traffic(collective, algorithm, p, count, root, prefer_fast=True, **dict(bparams))


def nvls_head_count(topo: Topology, L: int) -> int:
    """NCCL's NVLS heads in a block of the first L ranks: one per NIC of the block (the GPU nearest each:
    NCCL's NVLS graph search, e.g. 4 heads on 8 GPUs with 4 NICs, NVIDIA/nccl#1357's log), every GPU where
    the block has no NIC, at most NCCL_MAX_NVLS_ARITY (32, :data:`~interlink.algorithms.switch.MAX_HEADS`)."""
    nics = {topo.nic_for(r) for r in range(min(L, topo.nranks))} - {None}
    return max(1, min(L, len(nics) or L, MAX_HEADS))


def builder_params(collective: str, algorithm: str, topo: Topology, local_size: int | None = None) -> tuple:
    """The builder keyword arguments (sorted (name, value) pairs) that fit ``algorithm`` to ``topo``:
    ``local_size`` for the algorithms that take one (ranks per host, or per NVLink domain where domains span
    hosts; the NVLS domain for nvls_tree), for the rings the topology's channels
    (:func:`interlink.topology.rail_plan`: one ring per NIC, each leaving a block through its own NIC),
    and for the NVLS algorithms NCCL's heads where fewer than the block's ranks (:func:`nvls_head_count`).
    The model, the simulator and ``interlink algorithms`` build the same Schedule from them."""
    entry = registry.get_entry(collective, algorithm)
    out: dict[str, Any] = {}
    if "exits" in entry.params:
        out.update(rail_plan(topo).params())
        if algorithm == "nccl_tree" and out:
            out["channels"] *= 2  # one channel of each of the two trees per NIC
    elif algorithm == "nvls_tree":
        # NVLS inside each NVLink domain, the tree across them: the block is the domain (a host of a DGX, a
        # GB200 NVL72 rack of 18 hosts), not the host
        out["local_size"] = L = int(nvls_domains(topo) or local_size or topo.nranks)
        h = nvls_head_count(topo, L)
        if h < L:
            out["heads"] = h
    elif algorithm == "nvls":
        h = nvls_head_count(topo, topo.nranks)
        if h < topo.nranks:
            out["heads"] = h
    elif "local_size" in entry.params:
        if local_size is None:
            info = _info(topo)
            local_size = int(info.ranks_on_host.max()) if info.nhosts > 1 else topo.nranks
        if algorithm not in SHARP_ALGORITHMS:
            # the hierarchical algorithms cross the slow boundary once: an NVLink domain's, where one spans
            # hosts (GB200 NVL72 racks), not a host's; CollNet keeps its hosts (SHARP groups one NIC each)
            local_size = spanning_blocks(topo) or local_size
        out["local_size"] = int(local_size)
    return tuple(sorted(out.items()))


def predict(collective: str, nbytes: int, topology: Topology | str | None = None, *, nranks: int | None = None,
            algorithm: str | None = None, dtype: Any = "float32", root: int = 0, params: Params | None = None,
            profile: Profile | bool | None = None, transport: str | None = None,
            candidates: Iterable[str] | None = None, fast_path: bool = True) -> Prediction:
    """Predict a collective of ``nbytes`` (nccl-tests' S: the bytes of the largest buffer) on a topology.

    Every registered algorithm (or ``candidates``, or only ``algorithm``) is evaluated, on GPU topologies
    under each protocol (LL, LL128, Simple), plus ``nvls`` where the hardware has it and ``slots`` (the
    small-message path of an all-local CPU group; ``fast_path=False`` leaves it out); the fastest wins.
    The CollNet Schedules (``collnet_direct``, ``collnet_chain``: SHARP) are priced only when named by
    ``algorithm`` or ``candidates`` (and the fabric has SHARP), never in the default choice.
    ``topology``: a Topology, a spec for :func:`~interlink.topology.parse_topology`, or None for this
    machine. ``nranks``: the first nranks ranks of the topology (CPU hosts may take more ranks than
    cores). ``profile``: this host's calibrated profile is used by default for CPU hosts (False: none).
    """
    if collective not in COLLECTIVES:
        raise ModelError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    if nbytes < 0:
        raise ModelError(f"size must be >= 0 bytes, got {nbytes}")
    notes: list[str] = []
    topo = resolve_topology(topology, nranks)
    topo = fit_ranks(topo, topo.nranks if nranks is None else int(nranks), notes)
    info = _info(topo)
    p = topo.nranks
    itemsize = itemsize_of(dtype)
    count, S = count_for(collective, nbytes, itemsize, p)
    if S != nbytes and collective != "barrier":
        notes.append(f"size rounded to {S} bytes ({count} elements per rank of {itemsize} bytes)")
    if not 0 <= root < p:
        raise ModelError(f"root {root} out of range for {p} ranks")
    params = _params(params, profile)
    gpu = info.gpu
    protocols = PROTOCOLS if gpu else ("simple",)
    local_size = int(info.ranks_on_host.max()) if info.nhosts > 1 else p
    have = registry.algorithms_for(collective)
    if algorithm is not None:
        names = [registry.canonical(algorithm)]  # a former name (fastd) prices its algorithm (peer_buffers)
    elif candidates is not None:
        names = list(candidates)
    else:
        # CollNet (SHARP) is priced when asked for (algorithm= or candidates=), not in the default choice:
        # the published multi-node figures were measured without it, and with it the model's choice at
        # 8 x DGX-H100 would be collnet_direct at 409 GB/s against 350 measured
        names = [a for a in have if a not in SHARP_ALGORITHMS]
        if gpu and info.nhosts > 1 and any(a in have for a in SHARP_ALGORITHMS) \
                and not _sharp_unavailable(info, local_size):
            notes.append("the fabric has SHARP: collnet_direct (in-network reduction, NCCL's CollNet) is priced "
                         "when asked for (--algorithm collnet_direct), not in the default choice")
    for nm in names:
        if nm not in have:
            raise ModelError(f"no algorithm {nm!r} for {collective}; available: {have}")
    factor = busbw_factor(collective, p)

    def cand(algo: str, proto: str, t_us: float, method: str, ch: int = 1, note: str = "") -> Candidate:
        algbw = S / (t_us * 1e-6) / 1e9 if t_us > 0 else 0.0
        return Candidate(algo, proto, t_us, algbw, algbw * factor, method, ch, note)

    table: list[Candidate] = []
    for algo in names:
        protos = protocols
        if algo in ("nvls", "nvls_tree"):  # in-switch steps: every GPU on an NVLS switch; Simple only
            why = _nvls_unavailable(info, params, single=algo == "nvls")
            if why:
                if algorithm == algo:
                    raise ModelError(f"{algo} is not available here: {why}")
                continue
            protos = ("simple",)
        if algo in SHARP_ALGORITHMS:  # in-network reduction on the InfiniBand switches; Simple only
            why = _sharp_unavailable(info, local_size)
            if why:
                if algorithm == algo:
                    raise ModelError(f"{algo} is not available here: {why}")
                continue
            protos = ("simple",)
        if algo in HOST_PAGE:  # the runtime's host-page paths, where it would take them
            r = _host_page(collective, S, info, params, (fast_path or algorithm == algo) and transport != "tcp",
                           explicit=algorithm == algo, algorithm=algo, itemsize=itemsize, root=root)
            if r is not None:
                table.append(cand(algo, "simple", _finish(r, params, "simple", algo).time_us, "host page"))
            continue
        bparams = builder_params(collective, algo, topo, local_size)
        ch = int(dict(bparams).get("channels", 1))
        big = _traffic.stored_messages(collective, algo, p, count, **dict(bparams))
        if big is not None and big > MESSAGES_LIMIT:
            notes.append(f"{algo}: left out at {p} ranks: its traffic holds {big:,} messages, more than the "
                         f"model prices ({MESSAGES_LIMIT:,})")
            continue
        try:
            tr = _traffic_cached(collective, algo, p, count, root, bparams)
        except ValueError as exc:
            notes.append(f"{algo}: {exc}")
            continue
        r = _rounds(tr, info, params, itemsize, transport)
        for proto in protos:
            e = _finish(r, params, proto, algo)
            table.append(cand(algo, proto, e.time_us, "traffic", ch))
    if not table:
        raise ModelError(f"no algorithm could be evaluated for {collective} on {topo.name!r} at {p} ranks"
                         + (f" ({'; '.join(notes)})" if notes else ""))
    multi = info.nhosts > 1 and local_size > 1

    def pref(c: Candidate) -> tuple:
        # a group that spans hosts prefers the hierarchical algorithm among equals: it crosses each
        # host boundary once per lane and keeps doing so as hosts are added
        h = 0 if multi and c.algorithm == "hierarchical" else 1
        return (h, _pref(c.algorithm), PROTOCOLS.index(c.protocol))

    table.sort(key=lambda c: (float(f"{c.time_us:.9g}"), pref(c)))
    if multi:
        # within TIE_REL of the fastest, a group spanning hosts takes the hierarchical algorithm
        near = [c for c in table if c.algorithm == "hierarchical"
                and c.time_us <= table[0].time_us * (1.0 + TIE_REL) + 1e-9]
        if near:
            table.remove(near[0])
            table.insert(0, near[0])
    best = table[0]
    runner = next((c for c in table if c.algorithm != best.algorithm), None)
    rings = [c.channels for c in table if c.algorithm == "ring"]
    if rings and max(rings) > 1:  # the channels column of the table's ring rows, the same count
        notes.append(f"ring algorithms run {max(rings)} channels (one ring per NIC, as NCCL does); a single ring "
                     f"spanning hosts would cross each host boundary through one NIC")
    trees = [c.channels for c in table if c.algorithm == "nccl_tree"]
    if trees and max(trees) > 1:
        notes.append(f"nccl_tree runs {max(trees)} channels (a channel of each of its two trees per NIC)")
    if not gpu and info.oversub.max() > 1 and not any("share them" in n for n in notes):
        notes.append(f"{int(info.ranks_on_host.max())} ranks on a host of {int(info.cores_per_host.min())} cores: "
                     f"ranks beyond the cores share them")
    if not gpu and info.nhosts == 1:
        measured = _measured_note(collective, S, p, best.algorithm, params)
        if measured:
            notes.append(measured)
    if not gpu:
        prof = [pp for pp in params if pp.name.startswith("host.") and pp.source.startswith("calibrated")]
        notes.append("host parameters: " + (prof[0].source if prof else "defaults (no calibrated profile)"))
    return Prediction(collective, S, count, p, str(dtype), topo.name, "gpu" if gpu else "cpu", best.time_us,
                      best.algbw_gbps, best.busbw_gbps, best.algorithm, best.protocol, runner, tuple(table),
                      tuple(notes), params.origin)


#: ties (equal predicted times, e.g. hierarchical on one host is a ring) go to the simpler algorithm
#: predictions closer than this (relative) count as a tie, broken by preference
TIE_REL = 0.02

PREFERENCE = ("nvls", "slots", "two_phase", "peer_buffers", "ring", "recursive_doubling", "rabenseifner", "binomial", "direct", "bruck",
              "recursive_halving", "pairwise", "dissemination", "tree", "nccl_tree", "nvls_tree", "collnet_direct",
              "collnet_chain", "hierarchical")


def _pref(algorithm: str) -> tuple[int, str]:
    return (PREFERENCE.index(algorithm) if algorithm in PREFERENCE else len(PREFERENCE), algorithm)


def _nvls_unavailable(info: _TopoInfo, params: Params, single: bool = True) -> str:
    """Why the NVLS Schedules cannot run on this topology ("" when they can): every GPU must hang off an
    NVLS-capable switch, and for ``nvls`` (``single``) all off one (NVLSTree: NVLink domains of equal blocks
    of consecutive ranks, one switch each: a host of a DGX, a whole GB200 NVL72 rack across its 18 hosts)."""
    if not info.gpu or info.n < 2:
        return "needs at least 2 GPUs"
    if min((params.nvls_efficiency(nm) for nm in info.gpu_names), default=0.0) <= 0:
        return "the GPUs have no NVLink SHARP (Hopper and later)"
    sw = {info.topo.nvls_switch(r) for r in range(info.n)}
    if None in sw:
        return "a GPU is not attached to an NVLS-capable NVSwitch (gen 3+)"
    if single and len(sw) != 1:
        return "the ranks span several NVLink domains (nvls_tree runs NVLS in each and a tree across)"
    if not single and nvls_domains(info.topo) is None:
        return "the NVLink domains are not equal blocks of consecutive ranks (nvls_tree runs NVLS in each block)"
    return ""


#: the CollNet Schedules (SHARP on the InfiniBand switches: :data:`interlink.algorithms.switch.SHARP`)
SHARP_ALGORITHMS = ("collnet_direct", "collnet_chain")


def _sharp_unavailable(info: _TopoInfo, local_size: int) -> str:
    """Why the CollNet Schedules cannot run on this topology ("" when they can): GPUs on at least two
    hosts of equal size in blocks of consecutive ranks, every rank's NIC cabled to a SHARP-capable
    InfiniBand switch, and the group of each local rank (one rank per host) under one SHARP switch."""
    from ..topology import switch_plan

    if not info.gpu or info.n < 2:
        return "needs at least 2 GPUs"
    if info.nhosts < 2:
        return "CollNet reduces across hosts in the InfiniBand switches: one host has nothing for SHARP to do"
    L = int(local_size)
    if info.n % L or int(info.ranks_on_host.min()) != L or not bool(
            (info.host.reshape(-1, L) == info.host[::L][:, None]).all()):
        return "the hosts must hold equal blocks of consecutive ranks"
    groups = [tuple(range(j, info.n, L)) for j in range(L)]
    try:
        switch_plan(info.topo, info.n, groups, kind="sharp")
    except TopologyError as exc:
        return str(exc)
    return ""


def _slots_limit(collective: str, p: int, params: Params) -> float:
    """The payload above which a broadcast, all_gather, reduce_scatter or all_to_all of p local ranks leaves
    the slots for peer_buffers (algorithms.hostpath.HostLimits.slots_limit on the profile's limits)."""
    return float(HostLimits.from_params(params).slots_limit(collective, p))


def measured_band_for(collective: str, p: int, params: Params) -> tuple[int, int]:
    """The payloads (lo, hi] (a rank's input) of an all_gather, all_to_all or broadcast of p local ranks for
    which the runtime measures the slots (``slots``; a broadcast larger than a slot: ``slots_pipelined``, through it in
    chunks) against ``peer_buffers`` (algorithms.hostpath.HostLimits.measured_band on the profile's limits: the
    runtime's own band, runtime.fastpath.FastPath.band); (0, 0) for other collectives."""
    return HostLimits.from_params(params).measured_band(collective, p)


def _measured_note(collective: str, S: int, p: int, algorithm: str, params: Params) -> Optional[str]:
    """The note for a host-page all_gather, all_to_all or broadcast whose payload lies in the measured band:
    the price is the limit's path, the runtime may take the other."""
    lo, hi = measured_band_for(collective, p, params)
    payload = S // p if collective == "all_gather" else S
    if hostpath.canonical(algorithm) not in (hostpath.SLOTS, hostpath.PEER_BUFFERS) or not lo < payload <= hi:
        return None
    slots = "slots_pipelined" if collective == "broadcast" and payload > params.value("host.fast2.max_bytes") else "slots"
    return (f"the runtime measures {slots} against peer_buffers for this call shape on its first calls and keeps the "
            f"faster ({payload} bytes of input a rank, within ({lo}, {hi}]; INTERLINK_AUTOTUNE, on by default "
            f"where cross-memory attach works): {algorithm} is the limit's path, priced here")


def _host_page(collective: str, S: int, info: _TopoInfo, params: Params, allowed: bool, explicit: bool,
               algorithm: str = "slots", itemsize: int = 4, root: int = 0) -> "_Rounds | None":
    """A host-page path of an all-local CPU group (the world group of a one-host job), priced from its
    Schedule's steps like any algorithm (its traffic, on the host page's rates ``host.page.*``), or None
    where the runtime would not take it: the choice is algorithms.hostpath.host_path's on the profile's
    limits (HostLimits.from_params: ``host.fast.max_bytes``, ``host.fast2.*``, ``host.fastd.min_bytes``,
    ``host.slots.*``, ``host.stream.min_bytes``), the runtime's own. Asked for by name (``explicit``: bench
    prices the path a row ran), either side of the measured band and either one-shot all_reduce."""
    why = None
    p = info.n
    if info.gpu or info.nhosts != 1:
        why = "the shared-memory paths serve CPU ranks of one host"
    elif algorithm not in registry.algorithms_for(collective):
        why = f"{algorithm} has no {collective}"
    elif not allowed:
        why = "disabled (or TCP forced: the fast paths live in shared memory)"
    else:
        # payload: what one rank writes (checked against the slot size, as FastPath.takes does)
        payload = S // p if collective == "all_gather" else 0 if collective == "barrier" else S
        limits = HostLimits.from_params(params)
        name = hostpath.canonical(algorithm)
        oversub = float(info.oversub.max()) > 2.0  # the runtime reduces the one-shot all_reduce once (nlocal > 2 x ncpu)

        def taken(nbytes: int, once: bool = oversub) -> bool:
            return hostpath.host_path(collective, max(nbytes, 1) if collective != "barrier" else nbytes, p, limits,
                                      reduce_once=once, itemsize=itemsize) == name

        def by_name(nbytes: int) -> bool:  # either one-shot all_reduce; either side of the band; slots_pipelined's chunks
            if taken(nbytes) or taken(nbytes, not oversub):
                return True
            lo, hi = limits.measured_band(collective, p)
            sides = (True, False) if lo < nbytes <= hi else (False,) if collective == "broadcast" else ()
            got = [hostpath.host_path(collective, nbytes, p, limits, itemsize=itemsize, direct=d) for d in sides]
            return name in got if lo < nbytes <= hi else hostpath.SLOTS_PIPELINED in got and name == got[0]

        if name == hostpath.TWO_PHASE and p < limits.two_phase_min_ranks:
            why = f"the two-phase path needs {limits.two_phase_min_ranks}+ ranks"
        elif explicit and by_name(payload) or not explicit and taken(payload):
            count = count_for(collective, S, itemsize, p)[0]
            return _rounds(_traffic_cached(collective, algorithm, p, count, root, ()), info, params, itemsize, PAGE)
        elif name == hostpath.SLOTS_PIPELINED and by_name(payload):
            # the runtime takes it only where its first calls measure it faster than peer_buffers (FastPath.band): the
            # limit's path (peer_buffers) is priced, with a note (measured_band_for)
            why = "taken only where the runtime measures it faster than peer_buffers (INTERLINK_AUTOTUNE)"
        elif collective == "all_reduce" and taken(payload, not oversub):
            why = "the runtime takes " + ("slots_once" if name == hostpath.SLOTS else "slots") + " here"
        else:
            lo, top = hostpath.path_range(by_name, limits)
            why = f"the payload ({payload} bytes) is outside ({max(lo, 0):.0f}, {top:.0f}] bytes"
    if explicit:
        raise ModelError(f"{algorithm} is not available here: {why}")
    return None
