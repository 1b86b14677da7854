"""Flow-level simulation of a Schedule on a Topology: links shared max-min fairly, dependency-driven timing.

    simulate(traffic_or_schedule, topology, itemsize=4) -> SimResult
    simulate_collective("all_reduce", 1 << 30, "128xdgx-h100", algorithm="ring") -> SimResult

The model
---------
* **A message is a flow** over the directed hops of ``topology.path(src, dst)``: each direction of a
  link is one resource with the link's full per-direction capacity (``Link.gbps``, effective GB/s).
* **Max-min fair sharing.** At any moment the rates of the flows in flight are the max-min fair
  allocation (progressive filling: raise every unfrozen flow's rate together until some resource is
  full, freeze the flows crossing it, repeat). When a flow completes, the rates of the others are
  solved again (event-driven), so a flow that shared a link speeds up once its neighbour is done.
* **Latency.** A flow ends its path's latency (the sum of its links' ``latency_us``) after its last
  byte leaves: ``end = transfer end + path latency``. Latency does not hold bandwidth.
* **Reduction.** A rank that reduces ``e`` elements in a round spends ``e x itemsize x gamma`` on it
  (gamma: 1 / HBM bandwidth on GPUs, the host's reduce rate on CPUs, from
  :mod:`interlink.model.params`), of which the fraction ``reduce.overlap`` hides under the transfer:
  ``rank end = comm end + reduce - overlap x min(comm end, reduce)``.
* **Dependencies, not barriers** (:mod:`interlink.model.clocks`): each (rank, channel) has a clock; its
  round k starts when its round k - 1 is done; a message leaves when its sender starts the round (eager),
  holds the sender for the protocol's step overhead plus its transfer, and arrives its path latency later.
  ``barrier=True`` times rounds as global barriers instead (every rank starts round k + 1 when round k is
  done everywhere), as this simulator did before. Contention is solved per round index: the flows of
  round k share links as if concurrent. Runs of identical rounds are extrapolated (exactly once periodic).
* **Protocol** (GPUs, ``protocol=``): bytes on the wire are payload / the protocol's efficiency, and each
  message pays :meth:`~interlink.model.params.Params.step_overhead_us`; ``simulate_collective`` runs the
  protocol the model chose and adds NCCL's call latency, so it gives predict's time where nothing
  contends. ``protocol=None``: flows only.
* **Near-identical rounds.** When the count does not divide evenly, consecutive ring rounds carry
  blocks whose sizes differ by one element (the sizes rotate). With ``merge_tolerance=1`` (the
  default) consecutive rounds with the same (src, dst) messages whose sizes differ by at most that
  many elements are simulated once, with every message at its largest size in the group: the time
  is an upper bound, off by at most ``merge_tolerance`` elements per message per round; bytes per
  link stay exact. ``merge_tolerance=0`` simulates every distinct round.

Routes come from :meth:`interlink.topology.PathTable.ids`: looked up once per path class, kept per
distinct (src, dst) pair of ranks and per topology (a 16,384-rank hierarchical all_reduce has ~33k
pairs); flows are numpy arrays, the flow x resource incidence is a
pair of index arrays, and a round's solution is cached by its messages (the reduce-scatter and
all-gather halves of a ring share one).

Output (:class:`SimResult`): total time, algbw/busbw (nccl-tests definitions), per directed link the
bytes carried and the average utilisation, per rank the busy and idle time, and per simulated phase its
start, round time, repeat count and per-rank busy time within one round (the compact timeline that
:mod:`interlink.sim.trace` turns into a Chrome/Perfetto trace).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from ..algorithms.schedule import Schedule, busbw_factor
from ..algorithms.traffic import Traffic, from_schedule, merge_rounds, merged
from ..topology import PathTable, Topology, TopologyError, parse_topology, path_table
from ..model.clocks import Clocks

__all__ = [
    "choose",
    "SimError",
    "SimResult",
    "PhaseResult",
    "simulate",
    "simulate_collective",
    "max_min_rates",
    "PER_RANK_SPLIT",
]

#: Collectives whose nccl-tests size S is count x itemsize x nranks (count is one rank's block).
PER_RANK_SPLIT = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})

_REL = 1e-9  # relative tolerance: resources saturated together, flows finishing together
_EMPTY_F = np.zeros(0, np.float32)
_EMPTY_I = np.zeros(0, np.int64)


class SimError(ValueError):
    """A simulation that cannot run (too many ranks for the topology, a negative size ...)."""


# ---- max-min fair rates ------------------------------------------------------------------------------


def max_min_rates(flow_of_e: np.ndarray, res_of_e: np.ndarray, capacity: np.ndarray, nflows: int) -> np.ndarray:
    """Exact max-min fair rates by progressive filling.

    ``flow_of_e[i]`` uses resource ``res_of_e[i]`` (one entry per (flow, resource) incidence; a flow
    lists each resource once), ``capacity[r]`` is resource r's capacity. Returns the rate of every flow
    (``inf`` for a flow that uses no resource). Each iteration saturates the resources with the smallest
    fair share and freezes the flows crossing them: as many iterations as distinct bottleneck levels.
    """
    rate = np.full(nflows, np.inf)
    if flow_of_e.size == 0:
        return rate
    R = capacity.size
    cap = capacity.astype(np.float64).copy()
    n = np.bincount(res_of_e, minlength=R).astype(np.float64)
    fe, re = flow_of_e, res_of_e
    level = 0.0
    frozen = np.zeros(nflows, bool)
    while fe.size:
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(n > 0, cap / n, np.inf)
        inc = float(share.min())
        level += inc
        sat = share <= inc * (1.0 + _REL)
        cap -= inc * n
        cap[sat] = 0.0
        hit = fe[sat[re]]
        frozen[hit] = True
        rate[hit] = level
        rm = frozen[fe]
        n -= np.bincount(re[rm], minlength=R)
        keep = ~rm
        fe, re = fe[keep], re[keep]
    return rate


# ---- results -----------------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    """One simulated group of rounds: ``repeat`` rounds of ``round_us`` each from ``start_us``.

    ``first_round``: index of its first communication round; ``merged``: Traffic phases simulated as
    one (see ``merge_tolerance``); ``events``: max-min solves in one round; ``rank_busy_us``: per rank,
    the time from the round's start to the end of its last flow and reduction (float32);
    ``flow_src``/``flow_dst``/``flow_end_us``: the messages of one round and when each ended;
    ``link_res``/``link_busy_us``: directed links used (``link id * 2 + direction``) and when the
    last flow on each finished transmitting (relative to the round's start).
    """

    index: int
    first_round: int
    repeat: int
    start_us: float
    round_us: float
    comm_us: float
    reduce_us: float
    ideal_us: float
    nflows: int
    events: int
    merged: int
    rank_busy_us: np.ndarray
    flow_src: np.ndarray
    flow_dst: np.ndarray
    flow_end_us: np.ndarray
    link_res: np.ndarray
    link_busy_us: np.ndarray

@dataclass
class SimResult:
    """What :func:`simulate` returns. Times in microseconds, bandwidths in GB/s (1e9 B/s).

    ``nbytes``: nccl-tests' S (the largest buffer); ``algbw_gbps = S / time``; ``busbw_gbps = algbw x
    busbw_factor``. ``ideal_us``: the same rounds with every flow alone on its path (no sharing): the
    contention-free estimate. ``link_res``/``link_bytes``: every directed link that carried data
    (``link id * 2 + direction``) and its bytes over the whole run; ``link_util``: bytes / (capacity x
    time). ``rank_busy_us``: per rank, time spent with a flow in flight or reducing.
    """

    collective: str
    algorithm: str
    nranks: int
    count: int
    itemsize: int
    nbytes: int
    topology_name: str
    time_us: float
    ideal_us: float
    rounds: int
    phases: list[PhaseResult]
    link_res: np.ndarray
    link_bytes: np.ndarray
    link_gbps: np.ndarray
    rank_busy_us: np.ndarray
    model: str = "dependency"
    wall_s: float = 0.0
    notes: tuple[str, ...] = ()
    topology: Topology | None = field(default=None, repr=False)

    @property
    def algbw_gbps(self) -> float:
        return self.nbytes / (self.time_us * 1e3) if self.time_us > 0 else 0.0

    @property
    def busbw_gbps(self) -> float:
        return self.algbw_gbps * busbw_factor(self.collective, self.nranks)

    @property
    def slowdown(self) -> float:
        """time / contention-free time (1.0: nothing was shared)."""
        return self.time_us / self.ideal_us if self.ideal_us > 0 else 1.0

    @property
    def link_util(self) -> np.ndarray:
        if self.time_us <= 0:
            return np.zeros(self.link_res.size)
        return self.link_bytes / (self.link_gbps * 1e3 * self.time_us)

    @property
    def rank_idle_us(self) -> np.ndarray:
        return np.maximum(0.0, self.time_us - self.rank_busy_us)

    def top_links(self, k: int = 10) -> list[dict[str, Any]]:
        """The k busiest directed links (highest utilisation, then most bytes): id, ends (from -> to),
        link spec, bytes, capacity and utilisation."""
        util = self.link_util
        order = np.lexsort((-self.link_bytes, -np.round(util, 9)))[:k]
        out = []
        for i in order.tolist():
            res = int(self.link_res[i])
            lid, d = divmod(res, 2)
            row: dict[str, Any] = {"link": lid, "direction": d, "bytes": float(self.link_bytes[i]),
                                   "gbps": float(self.link_gbps[i]), "util": float(util[i])}
            if self.topology is not None:
                ln = self.topology.links[lid]
                a, b = (ln.a, ln.b) if d == 0 else (ln.b, ln.a)
                row.update({"from": a, "to": b, "kind": ln.spec.name})
            out.append(row)
        return out

    def link_name(self, res: int) -> str:
        lid, d = divmod(int(res), 2)
        if self.topology is None:
            return f"link{lid}.{d}"
        ln = self.topology.links[lid]
        a, b = (ln.a, ln.b) if d == 0 else (ln.b, ln.a)
        return f"{a}->{b}"

    def to_dict(self, top_links: int = 10) -> dict[str, Any]:
        busy = self.rank_busy_us
        util = self.link_util
        return {
            "collective": self.collective, "algorithm": self.algorithm, "nranks": self.nranks,
            "count": self.count, "itemsize": self.itemsize, "nbytes": self.nbytes,
            "topology": self.topology_name, "time_us": self.time_us, "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps, "ideal_us": self.ideal_us, "slowdown": self.slowdown,
            "rounds": self.rounds, "model": self.model, "wall_s": self.wall_s,
            "phases": [{"first_round": p.first_round, "repeat": p.repeat, "start_us": p.start_us,
                        "round_us": p.round_us, "comm_us": p.comm_us, "reduce_us": p.reduce_us,
                        "ideal_us": p.ideal_us, "flows": p.nflows, "events": p.events, "merged": p.merged}
                       for p in self.phases[:200]],
            "phases_total": len(self.phases),
            "ranks": {"busy_us_mean": float(busy.mean()) if busy.size else 0.0,
                      "busy_us_min": float(busy.min()) if busy.size else 0.0,
                      "busy_us_max": float(busy.max()) if busy.size else 0.0,
                      "idle_fraction_mean": float(1.0 - busy.mean() / self.time_us) if busy.size and self.time_us > 0
                      else 0.0},
            "links": {"used": int(self.link_res.size),
                      "util_max": float(util.max()) if util.size else 0.0,
                      "util_mean": float(util.mean()) if util.size else 0.0,
                      "bytes_total": float(self.link_bytes.sum()),
                      "top": self.top_links(top_links)},
            "notes": list(self.notes),
        }


# ---- paths per pair of ranks: interlink.topology.paths (cached per topology) -------------------------

_PathTable = PathTable  # the route table of a topology (directed hops per rank pair, latency, bottleneck)


def _table(topo: Topology) -> PathTable:
    return path_table(topo)


def _ids(table: PathTable, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    try:
        return table.ids(src, dst)
    except TopologyError as exc:  # no route between two ranks
        raise SimError(str(exc)) from None


# ---- one round ---------------------------------------------------------------------------------------


@dataclass
class _Solved:
    end: np.ndarray          # per flow: transfer end (us from the round's start), latency not included
    events: int
    res: np.ndarray          # directed links used
    res_busy: np.ndarray     # per link: when its last flow finished transmitting
    flow_of_e: np.ndarray
    rinv: np.ndarray


def _solve_round(table: _PathTable, pid: np.ndarray, nbytes: np.ndarray) -> _Solved:
    """Event-driven max-min sharing of one round's flows; returns when each flow finished transmitting."""
    F = pid.size
    flow_of_e, res_of_e = table.incidence(pid)
    res, rinv = np.unique(res_of_e, return_inverse=True)
    cap = table.cap[res]
    rem = nbytes.astype(np.float64).copy()
    end = np.zeros(F)
    active = rem > 0
    t = 0.0
    events = 0
    while active.any():
        m = active[flow_of_e]
        rate = max_min_rates(flow_of_e[m], rinv[m], cap, F)
        idx = np.flatnonzero(active)
        r = rate[idx]
        ttf = np.where(np.isinf(r), 0.0, rem[idx] / r)
        dt = float(ttf.min())
        done = ttf <= dt * (1.0 + _REL) + 1e-15
        t += dt
        rem[idx] = np.where(np.isinf(r), 0.0, rem[idx] - r * dt)
        fin = idx[done]
        end[fin] = t
        rem[fin] = 0.0
        active[fin] = False
        events += 1
    res_busy = np.zeros(res.size)
    if flow_of_e.size:
        np.maximum.at(res_busy, rinv, end[flow_of_e])
    return _Solved(end, events, res, res_busy, flow_of_e, rinv)


# ---- reductions --------------------------------------------------------------------------------------


def _reduce_rates(topo: Topology, p: int, params: Any) -> tuple[np.ndarray, float, str]:
    """(gamma seconds per byte per rank, overlap fraction, source) from the cost model's parameters."""
    try:
        from ..model.params import default_params
    except ImportError:  # pragma: no cover - the model is part of the package
        return np.zeros(p), 0.0, "no cost model: gamma 0"
    devs = [topo.device(r) for r in range(p)]
    gpu = bool(devs) and all(d.kind == "gpu" for d in devs)
    prm = params
    if prm is None:
        prm = default_params()
        if not gpu:  # CPU hosts: this host's calibrated reduce rate, as the cost model uses it
            try:
                from ..model.params import host_profile, with_profile

                prm = with_profile(prm, host_profile())
            except Exception:  # noqa: BLE001 - a missing or unreadable profile: the defaults
                prm = default_params()
    if gpu:
        passes = prm.value("gpu.reduce_passes")
        g = np.array([passes / (prm.hbm_gbps(d.name) * 1e9) for d in devs])
        return g, float(prm.value("reduce.overlap.gpu")), "gpu.hbm_gbps x gpu.reduce_passes"
    return (np.full(p, prm.value("host.reduce_ns_per_byte") * 1e-9), float(prm.value("reduce.overlap.cpu")),
            "host.reduce_ns_per_byte")


def _gpu_params(protocol: str, params: Any) -> Any:
    from ..model.params import PROTOCOLS, default_params

    if str(protocol).lower() not in PROTOCOLS:
        raise SimError(f"unknown protocol {protocol!r}; expected one of {PROTOCOLS}")
    return params or default_params()


def _all_gpu(topo: Topology, p: int) -> bool:
    return p > 0 and all(topo.device(r).kind == "gpu" for r in range(p))


def _host_terms(tr: Traffic, topo: Topology, params: Any, itemsize: int, transport: str | None) -> Any:
    from ..model.cost import host_terms  # the model's public host terms (calibrated CPU parameters)

    return host_terms(tr, topo, params, itemsize, transport)


# ---- the simulation ----------------------------------------------------------------------------------


def _resolve(topology: Topology | str) -> Topology:
    if isinstance(topology, Topology):
        return topology
    try:
        from ..model.cost import resolve_topology  # cached parse, "this" host

        return resolve_topology(topology)
    except ImportError:  # pragma: no cover
        return parse_topology(topology)


def nbytes_of(collective: str, nranks: int, count: int, itemsize: int) -> int:
    """nccl-tests' S for a collective of ``count`` elements (per rank for the per-rank collectives)."""
    if collective == "barrier":
        return 0
    return count * itemsize * (nranks if collective in PER_RANK_SPLIT else 1)


def simulate(traffic_or_schedule: Union[Traffic, Schedule], topology: Topology | str, *, itemsize: int = 4,
             gamma: float | None = None, reduce_overlap: float | None = None, params: Any = None,
             merge_tolerance: int = 1, base_us: float = 0.0, max_detail: int = 512,
             transport: str | None = None, barrier: bool = False, max_period: int = 64,
             protocol: str | None = None) -> SimResult:
    """Simulate a Schedule (or its Traffic) on ``topology``: rank r runs on topology rank r.

    ``itemsize``: bytes per element. ``gamma`` (seconds per byte reduced) and ``reduce_overlap``
    (0..1) override the cost model's figures; ``params``: a :class:`~interlink.model.params.Params`.
    ``merge_tolerance``: consecutive rounds with the same messages and sizes within this many elements
    are simulated once (see the module docstring; 0: exact). ``base_us``: a fixed cost added per call.
    ``max_detail``: the first this many simulated phases keep their per-rank and per-flow detail (the
    timeline of traces and plots); later ones keep their times only (totals stay exact).
    ``transport``: "tcp" sends same-host messages of a CPU topology over loopback TCP (as
    ``INTERLINK_TRANSPORT=tcp``).

    CPU hosts (interlink's own runtime, not GPUs): a round of the runtime costs more than its bytes
    over a link (the Python path, per-message costs, cores shared by more ranks than the host has).
    There the simulator takes each round's contention-free cost from the cost model's host terms
    (calibrated by ``interlink bench --calibrate``) and multiplies its transfer part by the slowdown
    the flow-level simulation finds for that round (1 where no link is shared).
    """
    t_wall = time.perf_counter()
    tr = from_schedule(traffic_or_schedule) if isinstance(traffic_or_schedule, Schedule) else traffic_or_schedule
    topo = _resolve(topology)
    p = tr.nranks
    if p > topo.nranks:
        raise SimError(f"the schedule has {p} ranks; topology {topo.name!r} has only {topo.nranks}")
    if itemsize < 1:
        raise SimError(f"itemsize must be >= 1, got {itemsize}")
    if merge_tolerance < 0:
        raise SimError(f"merge_tolerance must be >= 0, got {merge_tolerance}")
    if p < topo.nranks:
        topo = topo.with_ranks(list(topo.ranks[:p]))
    notes: list[str] = []
    p_all = p  # ranks + the switches of in-switch steps (entries p.. of the clocks and the path table)
    via_eff = 1.0
    sim_topo = topo
    if tr.uses_switch:
        from ..topology import switch_plan

        try:
            plan = switch_plan(topo, p, tr.switch_groups, kind=tr.switch_kind)
        except TopologyError as exc:
            raise SimError(str(exc)) from None
        tr = tr.on_switches(plan.switch_of)
        sim_topo = plan.topology
        p_all = plan.entries  # clock entries: the ranks, each switch's reduction and multicast streams
        from ..model.params import default_params

        via_eff = min((params or default_params()).switch_efficiency(plan.kind, topo.device(r).name)
                      for r in range(p)) or 1.0
        notes.append(f"in-switch reduction ({plan.kind.upper()}): the switch{'es' if len(plan.switches) > 1 else ''} "
                     f"{', '.join(plan.switches)} add{'' if len(plan.switches) > 1 else 's'} up the ranks' data and "
                     f"send{'' if len(plan.switches) > 1 else 's'} the sum back to every rank; data through a switch "
                     f"moves at {via_eff:.0%} of its links' bandwidth (the cost model's {plan.kind.upper()} "
                     f"efficiency)")
    table = _table(sim_topo)
    host = None if _all_gpu(topo, p) else _host_terms(tr, topo, params, int(itemsize), transport)
    if host is not None:
        base_us = float(base_us) + host.call_us
        notes.append("CPU ranks: each round's fixed latency, its cost per byte copied and per byte added up come "
                     "from the cost model's host parameters (this host's, measured by interlink bench --calibrate, "
                     "else the defaults); the flows over the memory links add the slowdown where ranks share them")
    g_rank, overlap, gsrc = _reduce_rates(topo, p, params)
    if gamma is not None:
        g_rank, gsrc = np.full(p, float(gamma)), "given"
    if reduce_overlap is not None:
        overlap = float(reduce_overlap)
    red_us_per_elem = g_rank * itemsize * 1e6  # microseconds per element reduced, per rank
    eff = 1.0
    prm = None
    if host is None and protocol is not None:
        # GPUs running a protocol: its wire format (LL: half the bytes are flags) and its per-step cost
        prm = _gpu_params(protocol, params)
        eff = prm.efficiency(protocol.lower())
        data = ("every byte sent is data" if eff >= 1 else
                f"{eff:.0%} of the bytes sent are data, the other {1 - eff:.0%} the protocol's flags (a "
                f"100 GB/s link carries {100 * eff:.0f} GB/s of data)")
        notes.append(f"NCCL protocol {protocol.upper()}: {data}; each message also keeps its sender busy for "
                     f"NCCL's fixed cost of a step (a few microseconds beyond the link's own latency: "
                     f"Params.step_overhead_us)")

    phases: list[PhaseResult] = []
    link_bytes = np.zeros(table.cap.size)
    busy_total = np.zeros(p)
    nch = max((int(ph.channel.max()) + 1 for ph in tr.phases if ph.channel is not None and ph.channel.size),
              default=1)
    clocks = Clocks(p_all, nch, rows=2, start=float(base_us), barrier=barrier, max_period=max_period)
    rounds = 0
    evaluated = extrapolated = approximated = 0
    cache: OrderedDict[bytes, _Solved] = OrderedDict()  # recent round solutions, by a digest of the messages
    for group in merge_rounds(tr.phases, int(merge_tolerance)):
        first = group[0]
        elems, reduced, total_elems, repeat = merged(group)
        src, dst = first.src, first.dst
        F = src.size
        nb = elems.astype(np.float64) * (itemsize / eff)  # bytes on the wire
        if p_all > p and F:  # what the switch reduces or copies runs at its NVLS efficiency
            nb = np.where((src >= p) | (dst >= p), nb / via_eff, nb)
        if F:
            psrc, pdst = src, dst
            if p_all > p:  # a switch stream's path is its switch's
                psrc, pdst = plan.path_ranks(src), plan.path_ranks(dst)
            pid = _ids(table, psrc, pdst)
            h = hashlib.blake2b(digest_size=20)
            for a in (src, dst, elems):
                h.update(np.ascontiguousarray(a, dtype=np.int64).data)
            key = h.digest()
            sol = cache.get(key)
            if sol is None:
                sol = _solve_round(table, pid, nb)
                cache[key] = sol
                if len(cache) > 32:
                    cache.popitem(last=False)
            else:
                cache.move_to_end(key)
            lat = table.lat[pid]
            tx = sol.end
            with np.errstate(divide="ignore", invalid="ignore"):
                tx_alone = np.where(nb > 0, nb / table.bw[pid], 0.0)
            # exact bytes on every link over all the group's rounds
            link_bytes[sol.res] += np.bincount(sol.rinv, weights=(total_elems * itemsize)[sol.flow_of_e],
                                               minlength=sol.res.size)
            events = sol.events
            rounds += repeat
        else:
            lat = tx = tx_alone = np.zeros(0)
            events = 0
            sol = None
        if host is not None:
            # contention-free host round from the cost model, its transfer stretched by the flows' slowdown
            ids = [host.index[id(ph)] for ph in group]
            w = np.array([ph.repeat for ph in group], dtype=np.float64)
            lat_sum = float(sum(host.lat_first[i] + (ph.repeat - 1) * host.lat_steady[i] for i, ph in zip(ids, group)))
            beta_us = float((host.beta_s[ids] * w).sum()) / repeat * 1e6
            port_us = beta_us if host.port_s is None else float((host.port_s[ids] * w).sum()) / repeat * 1e6
            gam_us = float((host.gamma_s[ids] * w).sum()) / repeat * 1e6
            comm_us = float((tx + lat).max(initial=0.0))
            ideal_c = float((tx_alone + lat).max(initial=0.0))
            # the contention the model's terms do not hold already: its beta sends a rank's messages of a
            # round one after the other on each of its ports (shared memory, network) and shares a host's
            # NIC among its ranks' messages; the flows' slowdown is measured against the first (a rank's
            # own messages in turn) and never stretches the second twice
            ideal_p = ideal_c
            if F and src.size:
                cr = table.classify(psrc, pdst)[3].astype(np.int64)
                n2 = 2 * int(max(src.max(), dst.max()) + 1)
                seq_s = np.bincount(src * 2 + cr, weights=tx_alone, minlength=n2)
                seq_r = np.bincount(dst * 2 + cr, weights=tx_alone, minlength=n2)
                ideal_p = max(ideal_c, float(max(seq_s.max(), seq_r.max())) + float(lat.max(initial=0.0)))
            slow = max(1.0, comm_us / ideal_p) if F and ideal_p > 0 else 1.0
            comm_round = lat_sum / repeat + max(beta_us, port_us * slow)
            ideal_round = lat_sum / repeat + beta_us
            hid = host.overlap * min(beta_us, gam_us)
            # every message takes its share of the host round (the round's slowest message: all of it)
            scale = comm_round / comm_us if comm_us > 0 else 1.0
            iscale = ideal_round / ideal_c if ideal_c > 0 else 1.0
            tx_rows = np.vstack([tx * scale, tx_alone * iscale])
            arr_rows = np.vstack([(tx + lat) * scale, (tx_alone + lat) * iscale])
            red = None
            if reduced is not None and reduced.size and gam_us > 0:
                share = reduced[:p].astype(np.float64) / max(1.0, float(reduced[:p].max(initial=0)))
                red = share * (gam_us - hid)
            ov = 0.0
        else:
            scale = 1.0
            over = 0.0
            if prm is not None and F:
                over = prm.step_overhead_us(table.classify(psrc, pdst)[2], lat, protocol.lower())
            tx_rows = np.vstack([over + tx, over + tx_alone])
            arr_rows = tx_rows + lat
            red = None if reduced is None else reduced[:p] * red_us_per_elem[: min(p, reduced.size)]
            ov = overlap
        before = clocks.makespan(0), clocks.makespan(1)
        run = clocks.run(src, dst, first.channel, tx_rows, arr_rows, red, ov, repeat, recv_elems=elems,
                         wait=first.wait, after=first.after, gate=first.gate)
        evaluated += run.rounds_evaluated
        if run.period < 0:
            approximated += repeat - run.rounds_evaluated
        else:
            extrapolated += repeat - run.rounds_evaluated
        after = clocks.makespan(0), clocks.makespan(1)
        t0 = float(run.start[0].min(initial=before[0])) if run.entries.size else before[0]
        # per rank: its busy time in the first round (from its own start to its last flow or reduction)
        inc = np.zeros(p_all * nch)
        inc[run.entries] = run.first[0] - run.start[0]
        rank_first = inc.reshape(p_all, nch)[:p].max(axis=1)
        span = np.zeros(p_all * nch)
        span[run.entries] = run.end[0] - run.start[0]
        busy_total += span.reshape(p_all, nch)[:p].max(axis=1)
        comm_first = 0.0
        fin = np.zeros(0)
        if F:
            st = np.zeros(p_all * nch)
            st[run.entries] = run.start[0]
            chv = np.zeros(F, np.int64) if first.channel is None else first.channel
            s_start = st[src * nch + chv]
            fin = s_start - t0 + arr_rows[0]
            comm_first = float((tx + lat).max(initial=0.0)) * scale
        round_us = max(0.0, after[0] - t0) / repeat
        keep = len(phases) < max_detail and sol is not None
        phases.append(PhaseResult(
            index=len(phases), first_round=rounds - (repeat if F else 0), repeat=repeat, start_us=t0,
            round_us=round_us, comm_us=min(comm_first, round_us) if round_us else comm_first,
            reduce_us=max(0.0, round_us - comm_first), ideal_us=max(0.0, after[1] - before[1]) / repeat,
            nflows=F, events=events, merged=len(group),
            rank_busy_us=rank_first.astype(np.float32) if len(phases) < max_detail else _EMPTY_F,
            flow_src=src if keep else _EMPTY_I, flow_dst=dst if keep else _EMPTY_I,
            flow_end_us=fin.astype(np.float32) if keep else _EMPTY_F,
            link_res=sol.res if keep else _EMPTY_I,  # type: ignore[union-attr]
            link_busy_us=(sol.res_busy * scale).astype(np.float32) if keep else _EMPTY_F))  # type: ignore[union-attr]
    now = clocks.makespan(0)
    ideal = clocks.makespan(1)
    if barrier:
        notes.append("rounds as global barriers: no rank starts round k + 1 before every rank has finished round k "
                     "(slower than NCCL runs it; by default a rank goes on as soon as its own data is in)")
    elif extrapolated or approximated:
        notes.append(f"each rank starts its next round as soon as its own data is in; {evaluated} of the "
                     f"{evaluated + extrapolated + approximated} rounds were simulated message by message"
                     + (f", {extrapolated} repeat their timing exactly and were extended from it" if extrapolated
                        else "")
                     + (f", {approximated} were timed at the average pace of the last rounds simulated (their "
                        f"timing never repeats exactly: interlink.model.clocks)" if approximated else ""))
    nmerged = len(tr.phases) - len(phases)
    if nmerged:
        el = f"{merge_tolerance} element{'s' if merge_tolerance != 1 else ''} ({merge_tolerance * int(itemsize)} bytes)"
        notes.append(f"{nmerged + len(phases)} kinds of round whose messages differ by at most {el} were "
                     f"simulated as {len(phases)}, each at the largest of its sizes: the time is an upper bound, each "
                     f"message at most {el} longer than it is (--exact simulates each kind)")
    rate = 1.0 / float(np.mean(g_rank)) / 1e9 if g_rank.size and float(np.mean(g_rank)) > 0 else 0.0
    hidden = overlap if host is None else host.overlap
    src = {"gpu.hbm_gbps x gpu.reduce_passes": "the GPU's memory bandwidth / the passes a reduction makes over "
                                               "it: gpu.hbm_gbps / gpu.reduce_passes",
           "host.reduce_ns_per_byte": "host.reduce_ns_per_byte"}.get(gsrc, gsrc)
    if host is not None:
        src = "host.reduce_ns_per_byte of the host parameters"
    notes.append((f"adding up the received data: {rate:.1f} GB/s a rank" if rate else
                  "adding up the received data: free") + f" ({src}); up to {hidden:.0%} of that time hides under "
                 f"the transfers")
    used = np.flatnonzero(link_bytes)
    return SimResult(
        collective=tr.collective, algorithm=tr.algorithm, nranks=p, count=tr.count, itemsize=int(itemsize),
        nbytes=nbytes_of(tr.collective, p, tr.count, int(itemsize)), topology_name=topo.name, time_us=now,
        ideal_us=ideal, rounds=rounds, phases=phases, link_res=used, link_bytes=link_bytes[used],
        link_gbps=table.cap[used] / 1e3, rank_busy_us=busy_total, wall_s=time.perf_counter() - t_wall,
        notes=tuple(notes), topology=topo, model="global-barrier" if barrier else "dependency")


def _choose(collective: str, nbytes: int, topo: Topology, itemsize: int, root: int,
            algorithm: str | None = None, transport: str | None = None) -> tuple[str, str, str]:
    """(algorithm, protocol, note): the algorithm :func:`interlink.model.cost.predict` chooses unless
    given (on one CPU host, the runtime's host-page paths among them), and the protocol it prices that
    algorithm with."""
    from ..algorithms import registry
    from ..model.cost import predict

    algorithm = registry.canonical(algorithm) if algorithm else algorithm  # a former name (fastd) too
    have = registry.algorithms_for(collective)
    if not have:
        raise SimError(f"no algorithm for {collective!r}")
    fallback = algorithm or ("ring" if "ring" in have else have[0])
    try:
        pr = predict(collective, nbytes, topo, dtype=f"int{8 * itemsize}" if itemsize in (1, 2, 4, 8) else "float32",
                     root=root, algorithm=algorithm, transport=transport)  # given: only its protocols
    except Exception as exc:  # noqa: BLE001 - the model cannot price it: the ring, as before
        return fallback, "simple", (f"algorithm {fallback}: the cost model could not price the algorithms "
                                    f"({exc}), so {fallback} runs with protocol Simple")
    runnable = [c for c in pr.table if algorithm is None or c.algorithm == algorithm]
    if not runnable:
        return fallback, "simple", ("" if algorithm else f"algorithm {fallback}: the cost model priced no "
                                                         f"algorithm the simulator can run, so {fallback} runs")
    best = runnable[0]
    if algorithm is not None:
        return algorithm, best.protocol, ""
    note = (f"algorithm {best.algorithm}: the one the cost model prices fastest here, as interlink predict "
            f"picks it (--algorithm runs another)")
    return best.algorithm, best.protocol, note


def choose(collective: str, nbytes: int, topology: Topology | str, *, itemsize: int = 4,
           root: int = 0) -> tuple[str, str | None]:
    """(algorithm, protocol) that :func:`simulate_collective` without ``algorithm`` simulates on every rank of
    ``topology``: the cost model's choice (:func:`interlink.model.cost.predict` prices every algorithm), with
    its protocol on GPUs (None on CPU hosts). ``simulate_collective(..., algorithm=a, protocol=p)`` then
    gives the same result as without ``algorithm``, less the note naming the choice."""
    topo = _resolve(topology)
    algorithm, proto, _ = _choose(collective, nbytes, topo, itemsize, root)
    return algorithm, (proto if _all_gpu(topo, topo.nranks) else None)


def simulate_collective(collective: str, nbytes: int, topology: Topology | str, *, algorithm: str | None = None,
                        nranks: int | None = None, itemsize: int = 4, root: int = 0,
                        local_size: int | None = None, segments: int | None = None, channels: int | None = None,
                        heads: int | None = None, **kwargs: Any) -> SimResult:
    """Simulate ``collective`` of ``nbytes`` (nccl-tests' S) with ``algorithm`` on the first ``nranks``
    ranks of ``topology``. Hierarchical algorithms get ``local_size`` = the topology's ranks per host
    unless given. ``heads``: the NVLS algorithms' heads per NVLink domain (default every rank of it, at
    most NCCL's 32). Other keyword arguments go to :func:`simulate`."""
    from ..algorithms import registry
    from ..algorithms import traffic as _traffic

    t0 = time.perf_counter()
    topo = _resolve(topology)
    p = topo.nranks if nranks is None else int(nranks)
    if p > topo.nranks >= 1 and not _all_gpu(topo, topo.nranks):
        # CPU hosts take more ranks than cores (they share them), as the cost model does
        from ..model.cost import fit_ranks

        topo = fit_ranks(topo, p)
    if p < 1 or p > topo.nranks:
        raise SimError(f"nranks must be in 1..{topo.nranks} for topology {topo.name!r}, got {p}")
    if nbytes < 0:
        raise SimError(f"size must be >= 0 bytes, got {nbytes}")
    if p < topo.nranks:
        topo = topo.with_ranks(list(topo.ranks[:p]))
    chose = None
    if algorithm is None or ("protocol" not in kwargs and _all_gpu(topo, p)):
        algorithm, proto, chose = _choose(collective, nbytes, topo, itemsize, root, algorithm, kwargs.get("transport"))
        if "protocol" not in kwargs and _all_gpu(topo, p):
            kwargs["protocol"] = proto
    entry = registry.get_entry(collective, algorithm)
    from ..model.cost import builder_params

    params: dict[str, Any] = dict(builder_params(collective, algorithm, topo,
                                                 local_size if local_size is not None else
                                                 max(1, topo.ranks_per_host)))
    if "segments" in entry.params and segments is not None:
        params["segments"] = segments
    if "heads" in entry.params and heads is not None:
        params["heads"] = int(heads)
    if channels is not None and "channels" in entry.params and int(channels) != params.get("channels", 1):
        # an explicit channel count: that many rings; rail-aligned where the topology has that many NICs
        for k in ("channels", "local_size", "exits"):
            params.pop(k, None)
        if int(channels) > 1:
            params["channels"] = int(channels)
    if collective == "barrier":
        count = 0
    elif collective in PER_RANK_SPLIT:
        count = int(nbytes) // itemsize // p
    else:
        count = int(nbytes) // itemsize
    tr = _traffic.traffic(collective, algorithm, p, count, root, prefer_fast=True, **params)
    from ..algorithms.hostpage import HOST_PAGE

    if algorithm in HOST_PAGE:
        # the host page's Schedules run on its rates (one CPU host: the model's host-page pseudo-transport)
        if _all_gpu(topo, p) or len({topo.host_of(r) for r in range(p)}) > 1:
            raise SimError(f"{algorithm} runs on the host page: CPU ranks of one host")
        if kwargs.get("transport") == "tcp":
            raise SimError(f"{algorithm} runs on the host page, not over TCP")
        kwargs["transport"] = "page"
    if kwargs.get("protocol") and "base_us" not in kwargs and _all_gpu(topo, p):
        # NCCL's fixed cost of a call (baseLat per algorithm family and protocol), as the model adds it
        from ..model.params import default_params

        prm = kwargs.get("params") or default_params()
        kwargs["base_us"] = prm.call_latency_us(algorithm, str(kwargs["protocol"]).lower())
    res = simulate(tr, topo, itemsize=itemsize, **kwargs)
    res.wall_s = time.perf_counter() - t0
    if chose:
        res.notes = res.notes + (chose,)
    if params.get("channels", 1) > 1:
        exits = [int(e) for e in params["exits"]]
        c, n = int(params["channels"]), max(1, len(exits))
        per = "one on each" if c == n else f"{c // n} on each"
        kind = "channels of NCCL's two trees" if algorithm == "nccl_tree" else "rings"
        where = ("the channels of NIC k cross between hosts (or NVLink domains spanning hosts) from GPU k of each"
                 if exits == list(range(n)) else
                 "the channels of NICs 0, 1, ... cross between hosts (or NVLink domains spanning hosts) from GPUs "
                 + ", ".join(map(str, exits)) + " of each")
        res.notes = res.notes + (f"{c} channels: the data is split evenly among {c} {kind} running side by side, "
                                 f"{per} of the {n} network cards (NICs) of a host; {where}, so every NIC "
                                 f"carries its share",)
    if res.nbytes != nbytes and collective != "barrier":
        res.notes = res.notes + (f"size rounded down to {res.nbytes} bytes: {count} whole elements of {itemsize} "
                                 f"bytes{' a rank' if collective in PER_RANK_SPLIT else ''}, as nccl-tests counts "
                                 f"them",)
    return res
