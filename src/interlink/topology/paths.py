"""Paths between the ranks of a topology, looked up once per *path class* and cached per topology.

    >>> from interlink.topology import parse_topology, path_table
    >>> t = path_table(parse_topology("16xdgx-h100"))
    >>> bw, lat, kind, cross = t.classify(np.array([0, 0]), np.array([1, 8]))
    >>> HOP_KINDS[kind[1]], bw[1], cross[1]          # ('net', 47.0, True)
    >>> pid = t.ids(np.array([0]), np.array([8]))    # route ids: t.route(pid[0]), t.incidence(pid)

What the cost model and the flow-level simulator need from :meth:`Topology.path` for many messages at
once, as numpy arrays, without each searching one route per message:

* :meth:`PathTable.classify` (the cost model): per message the bottleneck bandwidth (GB/s per
  direction, ``1e12`` for a path without links), the path latency (us), the *hop kind* (``NVLINK``,
  ``PCIE`` or ``NET``: the kind of NCCL latency the path pays) and whether it crosses hosts. Messages
  are grouped by a coarse class (same host or not, the class of each end's host and the position of its
  device there, same NVLink domain, same leaf switch); one route per class is searched.
* :meth:`PathTable.ids` (the simulator): per message an id of its full route, whose directed links
  (``link id * 2 + direction``: the resources a flow crosses), latency and bottleneck are in the CSR
  arrays ``indptr``/``hops`` and ``lat``/``bw``; :meth:`PathTable.incidence` gives the (flow, link)
  pairs of a set of flows and ``cap`` every directed link's capacity. Routes are grouped by an exact
  class (hosts of identical structure attached to the same fabric devices route identically up to
  renaming); one route per class is searched and translated to every message of the class.
* per rank: ``host`` (a dense host index; ranks on fabric devices get one each), ``nhosts``,
  ``ranks_on_host``.

:func:`path_table` returns the table of a topology, cached (weakly) per Topology object, so that the cost
model and the simulator share one. Both groupings are built from the router's internal tables (this
module is the one place outside :mod:`.graph` that reads them); topologies that do not fit the usual
shape fall back to one route search per pair, with the same results.
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .graph import PathType, Topology
from .links import TopologyError

__all__ = ["PathTable", "path_table", "HOP_KINDS", "NVLINK", "PCIE", "NET", "hop_kind", "nvls_domains"]

#: Hop kinds of :meth:`PathTable.classify` (indices into :data:`HOP_KINDS`).
NVLINK, PCIE, NET = 0, 1, 2
HOP_KINDS = ("nvlink", "pcie", "net")


def hop_kind(path_type: PathType) -> int:
    """The hop kind of a path type: NET for the network, NVLINK for NVLink/C2C/local, else PCIE."""
    if path_type is PathType.NET:
        return NET
    return NVLINK if path_type in (PathType.NVL, PathType.C2C, PathType.LOC) else PCIE


class PathTable:
    """Paths between the ranks of one topology (see the module docstring); build it with :func:`path_table`.

    Attributes of the routes (grown on demand by :meth:`ids`): ``indptr``/``hops`` (CSR: the directed
    links of route i are ``hops[indptr[i]:indptr[i + 1]]``), ``lat`` (us), ``bw`` (bytes per us, ``inf``
    without links), ``cap`` (per directed link, bytes per us), ``lookups`` (route searches so far).
    """

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.n = topo.nranks
        # routes (the simulator's view)
        self.index: dict[int, int] = {}
        self.indptr = np.zeros(1, np.int64)
        self.hops = np.zeros(0, np.int64)
        self.lat = np.zeros(0)
        self.bw = np.zeros(0)
        cap = np.array([ln.gbps for ln in topo.links], dtype=np.float64)
        self.cap = np.repeat(cap, 2) * 1e3  # bytes per microsecond, per direction (link id * 2 + dir)
        self.lookups = 0
        self._classes: Any = None
        self._classes_built = False
        # coarse summaries (the cost model's view)
        self._summaries: dict[tuple[int, bool], tuple[float, float, int, bool]] = {}

    # ---- ranks and hosts ---------------------------------------------------------------------------

    @functools.cached_property
    def host(self) -> np.ndarray:
        """Per rank, a dense host index (in order of first appearance; a rank on a fabric device alone)."""
        ids: dict[Any, int] = {}
        host = np.empty(self.n, np.int64)
        for r in range(self.n):
            h = self.topo.device(r).host
            host[r] = ids.setdefault(h if h is not None else ("fabric", r), len(ids))
        self._host_keys = list(ids)
        return host

    @property
    def nhosts(self) -> int:
        self.host  # noqa: B018 - builds _host_keys
        return len(self._host_keys)

    @property
    def host_keys(self) -> list[Any]:
        """The topology's host index (or ``("fabric", rank)``) of every dense host index."""
        self.host  # noqa: B018
        return list(self._host_keys)

    @functools.cached_property
    def ranks_on_host(self) -> np.ndarray:
        return np.bincount(self.host, minlength=self.nhosts)

    # ---- coarse classes: bandwidth, latency, hop kind ----------------------------------------------

    @functools.cached_property
    def _coarse(self) -> "_Coarse":
        return _Coarse(self)

    def classify(self, src: np.ndarray, dst: np.ndarray, tcp: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per message (rank arrays ``src``, ``dst``): bottleneck GB/s, path latency us, hop kind
        (:data:`NVLINK`, :data:`PCIE`, :data:`NET`), crosses hosts. ``tcp``: messages inside a host go
        over loopback TCP links where the host has them (``Topology.path(via={"tcp"})``)."""
        if src.size == 0:
            z = np.zeros(0)
            return z, z, np.zeros(0, np.int64), np.zeros(0, bool)
        keys = self._coarse.keys(src, dst)
        uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
        bw = np.empty(uniq.size)
        lat = np.empty(uniq.size)
        kind = np.empty(uniq.size, np.int64)
        cross = np.empty(uniq.size, bool)
        cache = self._summaries
        for i, (k, j) in enumerate(zip(uniq.tolist(), first.tolist())):
            v = cache.get((k, tcp))
            if v is None:
                v = self._summary(int(src[j]), int(dst[j]), tcp)
                if len(cache) > 1 << 16:
                    cache.clear()
                cache[(k, tcp)] = v
            bw[i], lat[i], kind[i], cross[i] = v
        return bw[inv], lat[inv], kind[inv], cross[inv]

    def _summary(self, a: int, b: int, tcp: bool) -> tuple[float, float, int, bool]:
        t = self.topo
        cross = bool(self.host[a] != self.host[b])
        p = None
        if tcp and not cross:
            try:
                p = t.path(a, b, via={"tcp"})
            except TopologyError:
                p = None
        if p is None:
            p = t.path(a, b)
        bw = p.bottleneck_gbps if math.isfinite(p.bottleneck_gbps) else 1e12
        return bw, p.latency_us, hop_kind(p.path_type), cross

    # ---- exact classes: routes ---------------------------------------------------------------------

    @property
    def classes(self) -> "_RouteClasses | None":
        """The exact route classes, or None where the topology does not fit their shape (then one route
        search per pair)."""
        if not self._classes_built:
            self._classes_built = True
            try:
                self._classes = _RouteClasses(self.topo, self._path)
            except (LookupError, AttributeError, KeyError, TypeError, ValueError):
                self._classes = None  # not the router's usual shape: one lookup per pair
        return self._classes

    @classes.setter
    def classes(self, value: "_RouteClasses | None") -> None:
        self._classes_built = True
        self._classes = value

    def ids(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Per message (rank arrays ``src``, ``dst``) the id of its route (adding routes not seen yet)."""
        keys = src.astype(np.int64) * self.n + dst
        uniq, inv = np.unique(keys, return_inverse=True)
        get = self.index.get
        ids = np.fromiter((get(k, -1) for k in uniq.tolist()), dtype=np.int64, count=uniq.size)
        new = np.flatnonzero(ids < 0)
        if new.size:
            added = None
            if self.classes is not None:
                try:
                    added = self._add_classes(uniq[new])
                except LookupError:
                    self.classes = None
            if added is None:
                added = self._add_pairs(uniq[new])
            ids[new] = added
        return ids[inv]

    def route(self, pid: int) -> np.ndarray:
        """The directed links (``link id * 2 + direction``) of route ``pid``, in order."""
        return self.hops[self.indptr[pid]:self.indptr[pid + 1]]

    def incidence(self, pid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flow index, directed link) per hop of the flows with these route ids."""
        starts = self.indptr[pid]
        lens = self.indptr[pid + 1] - starts
        total = int(lens.sum())
        flow = np.repeat(np.arange(pid.size, dtype=np.int64), lens)
        first = np.repeat(starts - (np.cumsum(lens) - lens), lens)
        return flow, self.hops[first + np.arange(total, dtype=np.int64)]

    def _append(self, keys: np.ndarray, lens: np.ndarray, hops: np.ndarray, lat: np.ndarray,
                bw: np.ndarray) -> np.ndarray:
        base = len(self.index)
        pid = base + np.arange(keys.size, dtype=np.int64)
        self.index.update(zip(keys.tolist(), pid.tolist()))
        self.indptr = np.concatenate([self.indptr, self.indptr[-1] + np.cumsum(lens)])
        self.hops = np.concatenate([self.hops, hops])
        self.lat = np.concatenate([self.lat, lat])
        self.bw = np.concatenate([self.bw, np.where(np.isfinite(bw), bw * 1e3, np.inf)])
        return pid

    def _add_pairs(self, keys: np.ndarray) -> np.ndarray:
        hops: list[int] = []
        lens = np.empty(keys.size, np.int64)
        lat = np.empty(keys.size)
        bw = np.empty(keys.size)
        for j, k in enumerate(keys.tolist()):
            a, b = divmod(k, self.n)
            p = self._path(a, b)
            hops.extend(lid * 2 + d for lid, d in zip(p.hops, p.directions))
            lens[j] = len(p.hops)
            lat[j] = p.latency_us
            bw[j] = p.bottleneck_gbps
        self.lookups += keys.size
        return self._append(keys, lens, np.asarray(hops, dtype=np.int64), lat, bw)

    def _path(self, a: int, b: int) -> Any:
        try:
            return self.topo.path(a, b)
        except TopologyError as exc:
            raise TopologyError(f"no route for a message from rank {a} to rank {b}: {exc}") from None

    def _add_classes(self, keys: np.ndarray) -> np.ndarray:
        c = self.classes
        assert c is not None
        src, dst = np.divmod(keys, self.n)
        ck = c.keys(src, dst)
        order = np.argsort(ck, kind="stable")
        cks = ck[order]
        bounds = np.flatnonzero(np.diff(cks)) + 1
        starts = np.concatenate([[0], bounds])
        ends = np.concatenate([bounds, [cks.size]])
        out_keys, out_lens, out_hops, out_lat, out_bw, sels = [], [], [], [], [], []
        for s0, e0 in zip(starts.tolist(), ends.tolist()):
            sel = order[s0:e0]
            sels.append(sel)
            key = int(cks[s0])
            tmpl = c.templates.get(key)
            if tmpl is None:
                tmpl = c.templates[key] = c._template(int(src[sel[0]]), int(dst[sel[0]]))
            h = c.translate(tmpl, src[sel], dst[sel])
            out_keys.append(keys[sel])
            out_lens.append(np.full(sel.size, h.shape[1], dtype=np.int64))
            out_hops.append(h.reshape(-1))
            out_lat.append(np.full(sel.size, tmpl[4]))
            out_bw.append(np.full(sel.size, tmpl[5]))
        self.lookups += len(starts)
        pid = self._append(np.concatenate(out_keys), np.concatenate(out_lens), np.concatenate(out_hops),
                           np.concatenate(out_lat), np.concatenate(out_bw))
        res = np.empty(keys.size, dtype=np.int64)
        res[np.concatenate(sels)] = pid
        return res


# ---- coarse classes ----------------------------------------------------------------------------------


class _Coarse:
    """Per rank the structural class of its path ends (host class, device position, NVLink domain, leaf
    switch of its NIC); pairs with equal keys have routes of equal bandwidth, latency and kind."""

    def __init__(self, table: PathTable) -> None:
        topo = table.topo
        n = table.n
        self.n = n
        self.host = table.host
        devs = [topo.device(r) for r in range(n)]
        hosts = [d.host for d in devs]
        # structural classes: (host class, device position) per rank, when the router exposes them
        self.exact = True
        try:
            router = topo._routing()
            pos = np.array([router.local[topo._idx[d.id]] for d in devs], dtype=np.int64)
            hc = np.array([router.host_class[h] for h in hosts], dtype=np.int64)
            self.pos, self.hclass = pos, hc
            self.exact = False
        except Exception:  # noqa: BLE001 - a topology without the router's internals: exact pairs
            self.pos = self.hclass = np.zeros(n, np.int64)
        if not self.exact and table.nhosts > 1:
            self.dom = np.array([topo.nvlink_domain(r) for r in range(n)], dtype=np.int64)
            leaf_of: dict[str, int] = {}
            leaf = np.full(n, -1, np.int64)
            for r in range(n):
                nic = topo.nic_for(r)
                if nic is None:
                    continue
                lf = leaf_of.get(nic)
                if lf is None:
                    lf = -1
                    for nb in topo.neighbors(nic):
                        if topo.device(nb).host is None:
                            lf = topo._idx[nb]
                            break
                    leaf_of[nic] = lf
                leaf[r] = lf
            self.leaf = leaf
        else:
            self.dom = self.leaf = np.zeros(n, np.int64)
        self.P = int(self.pos.max(initial=0)) + 1
        self.HC = int(self.hclass.max(initial=0)) + 1

    def keys(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        if self.exact:
            return src * self.n + dst
        same = self.host[src] == self.host[dst]
        P, HC = self.P, self.HC
        hs, hd, ps, pd = self.hclass[src], self.hclass[dst], self.pos[src], self.pos[dst]
        k_same = (hs * P + ps) * P + pd
        sd = (self.dom[src] == self.dom[dst]).astype(np.int64)
        sl = (self.leaf[src] == self.leaf[dst]).astype(np.int64)
        k_cross = ((((hs * P + ps) * HC + hd) * P + pd) * 2 + sd) * 2 + sl
        return np.where(same, k_same * 2, k_cross * 2 + 1)


# ---- exact route classes -----------------------------------------------------------------------------


class _RouteClasses:
    """Path classes of rank pairs, so that one route is searched per class, not per message.

    Hosts of identical structure (the router's host classes) whose links to the fabric end at the same
    fabric devices (an *attachment*: for a rail-optimized cluster, the hosts under one set of leaves)
    route identically up to renaming. The class of a message is (host class, device position and
    attachment of each end; same host or not). Its representative's route is looked up once and
    translated to every message of the class: links inside a host by their position in the host's
    link list, links from a host device to the fabric by their position among that device's outward
    links, fabric links unchanged. Built from the router's internal tables; when a topology does not
    fit this shape (a rank on a fabric device, hosts linked directly to each other) the table falls back
    to one lookup per pair.
    """

    def __init__(self, topo: Topology, path: Any) -> None:
        r = topo._routing()
        idx = topo._idx
        self.r = r
        self.topo_path = path  # (rank a, rank b) -> Path
        self.la = np.asarray(r.la, dtype=np.int64)
        self.r_host_arr = np.array([-1 if h is None else h for h in r.host], dtype=np.int64)
        rdev = np.array([idx[d] for d in topo.ranks], dtype=np.int64)
        hosts = [r.host[i] for i in rdev.tolist()]
        if any(h is None for h in hosts):
            raise LookupError("a rank on a fabric device")
        for x, outs in r.outward.items():
            for _, far in outs:
                if r.host[far] is not None:
                    raise LookupError("hosts linked to each other directly")
        self.rdev = rdev
        self.rhost = np.array(hosts, dtype=np.int64)
        self.rpos = np.array([r.local[i] for i in rdev.tolist()], dtype=np.int64)
        # a route inside a host leaves it only when both ends have links of their own to the fabric
        self.rout = np.array([i in r.outward for i in rdev.tolist()], dtype=bool)
        used = sorted(set(hosts))
        hcls = {h: r.host_class[h] for h in used}
        # per host: its outward links in (device position, k) order, and the fabric ends (attachment)
        attach_ids: dict[tuple, int] = {}
        self.out_links: dict[int, np.ndarray] = {}
        hattach: dict[int, int] = {}
        for h in used:
            lids, ends = [], []
            for x in r.host_devs[h]:
                for lid, far in r.outward.get(x, ()):
                    lids.append(lid)
                    ends.append(far)
            self.out_links[h] = np.asarray(lids, dtype=np.int64)
            hattach[h] = attach_ids.setdefault((hcls[h], tuple(ends)), len(attach_ids))
        self.hclass = np.array([hcls[h] for h in hosts], dtype=np.int64)
        self.hatt = np.array([hattach[h] for h in hosts], dtype=np.int64)
        self.P = int(self.rpos.max(initial=0)) + 1
        self.C = int(self.hclass.max(initial=0)) + 1
        self.A = max(1, len(attach_ids))
        self.host_links = {h: np.asarray(r.host_links.get(h, []), dtype=np.int64) for h in used}
        # per host class / attachment: a (hosts, links) table, and each host's row in it
        nh = max(used) + 1
        self.hrow = np.zeros(nh, dtype=np.int64)
        self.arow = np.zeros(nh, dtype=np.int64)
        by_c: dict[int, list[int]] = {}
        by_a: dict[int, list[int]] = {}
        for h in used:
            by_c.setdefault(hcls[h], []).append(h)
            by_a.setdefault(hattach[h], []).append(h)
        self.hl2d: dict[int, np.ndarray] = {}
        self.ol2d: dict[int, np.ndarray] = {}
        for c, hs in by_c.items():
            self.hrow[hs] = np.arange(len(hs))
            self.hl2d[c] = np.stack([self.host_links[h] for h in hs]) if hs else np.zeros((0, 0), np.int64)
        for a_, hs in by_a.items():
            self.arow[hs] = np.arange(len(hs))
            self.ol2d[a_] = np.stack([self.out_links[h] for h in hs])
        self.hcls_of = hcls
        self.hatt_of = hattach
        self.link_local = r.link_local
        self.link_host = [r.host[a] if r.host[a] == r.host[b] else None for a, b in zip(r.la, r.lb)]
        self.templates: dict[int, tuple] = {}
        self.searched = 0
        if (self.C * self.P * self.A) ** 2 * 2 >= 1 << 62:
            raise LookupError("too many classes to key")

    def keys(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        P, C, A = self.P, self.C, self.A
        ka = (self.hclass[src] * P + self.rpos[src]) * A + self.hatt[src]
        kb = (self.hclass[dst] * P + self.rpos[dst]) * A + self.hatt[dst]
        same = self.rhost[src] == self.rhost[dst]
        # inside a host the attachment matters only where the route may leave the host
        local = same & ~(self.rout[src] & self.rout[dst])
        ka = np.where(local, ka - self.hatt[src], ka)
        kb = np.where(local, kb - self.hatt[dst], kb)
        return (ka * (C * P * A) + kb) * 2 + same

    def _template(self, a: int, b: int) -> tuple:
        """Route of the representative pair as a recipe: per hop (kind, value, direction)."""
        p = self.topo_path(a, b)
        ha, hb = int(self.rhost[a]), int(self.rhost[b])
        kinds, vals, dirs, outs = [], [], [], []
        nodes = [self.r.topo._idx[d] for d in p.devices]
        for i, (lid, d) in enumerate(zip(p.hops, p.directions)):
            lh = self.link_host[lid]
            if lh is not None:
                if lh not in (ha, hb):
                    raise LookupError("route through a third host")
                kinds.append(0 if lh == ha else 1)
                vals.append(self.link_local[lid])
                outs.append(0)
            elif self.r.host[nodes[i]] is not None or self.r.host[nodes[i + 1]] is not None:
                hdev = nodes[i] if self.r.host[nodes[i]] is not None else nodes[i + 1]
                side = self.r.host[hdev]
                if side not in (ha, hb):
                    raise LookupError("route through a third host")
                kinds.append(2 if side == ha else 3)
                vals.append(int(np.flatnonzero(self.out_links[side] == lid)[0]))
                outs.append(1 if hdev == nodes[i] else 2)
            else:
                kinds.append(4)
                vals.append(lid)
                outs.append(0)
            dirs.append(d)
        self.searched += 1
        return (np.array(kinds), np.array(vals, dtype=np.int64), np.array(dirs, dtype=np.int64),
                np.array(outs), p.latency_us, p.bottleneck_gbps)

    def translate(self, tmpl: tuple, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """(messages, hops) array of directed links (link id * 2 + direction) for every message of a class."""
        kinds, vals, dirs, outs = tmpl[:4]
        ha, hb = self.rhost[src], self.rhost[dst]
        out = np.empty((src.size, kinds.size), dtype=np.int64)
        for j in range(kinds.size):
            k, v = int(kinds[j]), int(vals[j])
            if k == 4:
                out[:, j] = v * 2 + dirs[j]
                continue
            hs = ha if k in (0, 2) else hb
            h0 = int(hs[0])  # every message of a class has its hosts in one host class and attachment
            if k in (0, 1):
                lids = self.hl2d[self.hcls_of[h0]][self.hrow[hs], v]
            else:
                lids = self.ol2d[self.hatt_of[h0]][self.arow[hs], v]
            if k in (0, 1):
                out[:, j] = lids * 2 + dirs[j]
            else:
                # orientation of an outward link: from its host device (outs 1) or into it (outs 2)
                a_is_host = self.r_host_arr[self.la[lids]] >= 0
                going_out = outs[j] == 1
                out[:, j] = lids * 2 + np.where(a_is_host == going_out, 0, 1)
        return out


# ---- one table per topology ------------------------------------------------------------------------------

_TABLES: dict[int, tuple[Any, PathTable]] = {}


def per_topology(cache: dict, topo: Topology, make: Callable[[Topology], Any]) -> Any:
    """``make(topo)``, kept in ``cache`` per Topology object (weakly: a collected topology's entry is
    dropped first when the cache passes 64 entries)."""
    key = id(topo)
    hit = cache.get(key)
    if hit is not None and hit[0]() is topo:
        return hit[1]
    value = make(topo)
    if len(cache) > 64:
        for k in [k for k, (ref, _) in cache.items() if ref() is None] or list(cache)[:32]:
            cache.pop(k, None)
    cache[key] = (weakref.ref(topo), value)
    return value


def path_table(topo: Topology) -> PathTable:
    """The :class:`PathTable` of ``topo``, kept (weakly) per Topology object and shared by its users."""
    return per_topology(_TABLES, topo, PathTable)


# ---- channels: one ring per NIC ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RailPlan:
    """How C parallel rings (channels) cross the blocks of a topology (its hosts, or its NVLink domains
    where those span hosts: :func:`ring_blocks`): every block holds ``local_size`` consecutive ranks, and
    channel c crosses between blocks through local rank ``exits[c]`` or ``exits[c] + 1`` on both sides
    (the ring builders' rail-aligned order, :func:`interlink.algorithms.ring.ring_orders`): C rings over
    C different NICs, as NCCL runs one channel per NIC (at most :data:`MAX_CHANNELS`). ``channels`` is 1
    (no exits) where the ranks are in one block, blocks hold different numbers of ranks or ranks are not
    in blocks, or the ranks have no NIC."""

    channels: int
    local_size: int
    exits: tuple[int, ...] | None

    def params(self) -> dict[str, Any]:
        """The ring builders' keyword arguments (empty for one channel)."""
        if self.channels <= 1 or self.exits is None:
            return {}
        return {"channels": self.channels, "local_size": self.local_size, "exits": self.exits}


_RAILS: dict[int, tuple[Any, RailPlan]] = {}


#: NCCL's most channels per communicator (MAXCHANNELS, 32 up to NCCL 2.26): a ring spanning NVL72 racks,
#: whose blocks hold 72 NICs, runs at most this many
MAX_CHANNELS = 32


_BLOCKS: dict[int, tuple[Any, tuple["np.ndarray", bool]]] = {}


def _ring_blocks(topo: Topology) -> tuple["np.ndarray", bool]:
    t = path_table(topo)
    dom = np.array([topo.nvlink_domain(r) for r in range(topo.nranks)], dtype=np.int64)
    if topo.nranks and np.unique(dom).size < np.unique(t.host).size and block_size(dom) is not None:
        return dom, True
    return t.host, False  # (domains that are not equal blocks of ranks: the hosts, as before)


def ring_blocks(topo: Topology) -> "np.ndarray":
    """The block (NCCL's "node") of each rank, as the rings and NCCL's Tree cross them: its NVLink domain
    where domains span hosts and hold equal blocks of consecutive ranks (GB200 NVL72: a rack of 18 hosts,
    NCCL's multi-node NVLink: the ring crosses between trays over NVLink and leaves the rack through a NIC),
    else its host (cached per Topology)."""
    return per_topology(_BLOCKS, topo, _ring_blocks)[0]


def block_size(labels: Any) -> int | None:
    """L when ``labels`` (one per rank) form equal blocks of L consecutive ranks, each label its own block;
    else None."""
    lab = np.asarray(labels)
    if lab.size == 0:
        return None
    _, counts = np.unique(lab, return_counts=True)
    L = int(counts.max())
    if int(counts.min()) != L or not bool((lab.reshape(-1, L) == lab[::L][:, None]).all()):
        return None
    return L


def spanning_blocks(topo: Topology) -> int | None:
    """The size of the ranks' blocks when those are NVLink domains spanning hosts (equal blocks of
    consecutive ranks: a GB200 NVL72 rack, or a partition of one), else None (the blocks are hosts)."""
    block, spans = per_topology(_BLOCKS, topo, _ring_blocks)
    return block_size(block) if spans else None


def _rail_plan(topo: Topology) -> RailPlan:
    n = topo.nranks
    one = RailPlan(1, n, None)
    block = ring_blocks(topo)
    L = block_size(block)
    if L is None or L == n:
        return one  # one block, blocks of different sizes, or ranks not in blocks
    # the NIC of each local rank of the first block (blocks of one preset are alike); one exit per NIC,
    # the first local rank that uses it, so that its successor (the next channel's entry) differs too
    nics = [topo.nic_for(r) for r in range(L)]
    if any(x is None for x in nics):
        return one
    exits: list[int] = []
    seen: set = set()
    for i, x in enumerate(nics):
        if x not in seen:
            seen.add(x)
            exits.append(i)
    if len(exits) > MAX_CHANNELS:  # spread NCCL's channel budget evenly over the block's NICs
        exits = [exits[k * len(exits) // MAX_CHANNELS] for k in range(MAX_CHANNELS)]
    if len(exits) <= 1:
        return RailPlan(1, L, None)
    return RailPlan(len(exits), L, tuple(exits))


def rail_plan(topo: Topology) -> RailPlan:
    """The :class:`RailPlan` of ``topo`` (cached per Topology): how many channels a ring spanning its
    hosts runs, and through which local ranks (NICs) each channel leaves a host."""
    return per_topology(_RAILS, topo, _rail_plan)


#: Kinds of switch that reduce in the network: NVLink SHARP on an NVSwitch (NCCL's NVLS), SHARP on the
#: InfiniBand switches the NICs are cabled to (NCCL's CollNet).
SWITCH_KINDS = ("nvls", "sharp")


@dataclass(frozen=True)
class SwitchPlan:
    """Where the in-switch steps of a Schedule go on a topology: ``topology`` is the given one with the
    switches that serve them appended as ranks p, p + 1, ... (so paths to them are ordinary rank paths),
    ``switch_of[r]`` the index (0-based, rank p + index) of rank r's switch, ``kind`` what they are
    (:data:`SWITCH_KINDS`: ``nvls``, an NVSwitch reached over NVLink; ``sharp``, an InfiniBand switch
    reached through the rank's NIC)."""

    topology: Topology
    switch_of: "np.ndarray"
    switches: tuple[str, ...]
    kind: str = "nvls"

    @property
    def nranks(self) -> int:
        return len(self.switch_of)

    @property
    def entries(self) -> int:
        """Clock entries: the ranks, then each switch's reduction and multicast streams."""
        return self.nranks + 2 * len(self.switches)

    def path_ranks(self, ids: "np.ndarray") -> "np.ndarray":
        """Endpoints of a switched Traffic (``Traffic.on_switches``: p + 2 x switch + stream) as ranks of
        :attr:`topology` (p + switch): a stream's path is its switch's."""
        p = self.nranks
        return np.where(ids >= p, p + (ids - p) // 2, ids)


def switch_plan(topo: Topology, nranks: int | None = None, groups: Any = (), kind: str = "nvls") -> SwitchPlan:
    """The switch that serves the in-switch steps of each of the first ``nranks`` ranks.

    ``kind="nvls"``: each rank's NVLS switch (:meth:`Topology.nvls_switch`); raises TopologyError naming
    the first rank without one (no NVLink SHARP: a GPU before Hopper, a PCIe server, a CPU), or the first
    of ``groups`` (the groups of in-switch steps) whose ranks hang off different switches (a switch reduces
    only what its own ports bring in).

    ``kind="sharp"``: the SHARP-capable InfiniBand switch of each group (:meth:`Topology.sharp_switch`:
    the switch the members' NICs are cabled to; when they are cabled to different ones, a SHARP switch
    every one of those is linked to, e.g. the spine above the leaves: the root of SHARP's aggregation
    tree), and for each rank the switch of its groups (its own leaf when it is in none); raises
    TopologyError naming the first rank whose NIC reaches no SHARP switch (no NIC, one host, an Ethernet
    or RoCE fabric), a group whose switches have no common SHARP switch above them, or a rank whose
    groups are served by different switches (its switched traffic goes to one switch).
    """
    if kind not in SWITCH_KINDS:
        raise TopologyError(f"unknown switch kind {kind!r}; expected one of {', '.join(SWITCH_KINDS)}")
    p = topo.nranks if nranks is None else int(nranks)
    if kind == "sharp":
        return _sharp_plan(topo, p, groups)
    devs: list[str] = []
    of = np.zeros(p, dtype=np.int64)
    for r in range(p):
        sw = topo.nvls_switch(r)
        if sw is None:
            raise TopologyError(f"rank {r} ({topo.ranks[r]}) is not attached to an NVLS-capable switch "
                                f"(NVSwitch gen 3+): in-switch steps cannot run on {topo.name!r}")
        if sw not in devs:
            devs.append(sw)
        of[r] = devs.index(sw)
    for g in groups:
        sws = {devs[int(of[r])] for r in g}
        if len(sws) > 1:
            raise TopologyError(f"an in-switch step's group {_show(g)} spans "
                                f"{len(sws)} switches ({', '.join(sorted(sws)[:4])}): one switch reduces only "
                                f"the ranks on its own ports")
    return SwitchPlan(topo.with_ranks(list(topo.ranks[:p]) + devs), of, tuple(devs), "nvls")


def nvls_domains(topo: Topology, nranks: int | None = None) -> int | None:
    """The size L of the NVLink domains of the first ``nranks`` ranks when they are equal blocks of L
    consecutive ranks, each block on one NVLS-capable switch of its own (a DGX H100: one per host; a GB200
    NVL72 rack: its 72 GPUs over 18 hosts, NCCL's multi-node NVLink); None when a rank has no NVLS switch
    or the domains are not such blocks. The NVLSTree Schedule runs NVLS inside each block and its tree
    across the blocks."""
    p = topo.nranks if nranks is None else int(nranks)
    if p < 1:
        return None
    sws = [topo.nvls_switch(r) for r in range(p)]
    if None in sws:
        return None
    ids = {sw: k for k, sw in enumerate(dict.fromkeys(sws))}
    return block_size([ids[sw] for sw in sws])


def _show(g: Any) -> str:
    g = tuple(g)
    return f"{g[:8]}{'...' if len(g) > 8 else ''}"


def _sharp_plan(topo: Topology, p: int, groups: Any) -> SwitchPlan:
    from .graph import is_sharp_switch

    leaf: list[str] = []
    for r in range(p):
        sw = topo.sharp_switch(r)
        if sw is None:
            nic = topo.nic_for(r)
            why = ("it has no NIC" if nic is None else
                   f"its NIC {nic} is not cabled to a SHARP-capable InfiniBand switch")
            raise TopologyError(f"rank {r} ({topo.ranks[r]}) reaches no SHARP switch ({why}): in-network "
                                f"reduction (SHARP, NCCL's CollNet) cannot run on {topo.name!r}")
        leaf.append(sw)
    up: dict[str, set[str]] = {}  # SHARP switches one InfiniBand link above a leaf

    def above(sw: str) -> set[str]:
        if sw not in up:
            up[sw] = {ln.other(sw) for ln in topo.links_of(sw)
                      if ln.spec.kind == "infiniband" and is_sharp_switch(topo.device(ln.other(sw)))}
        return up[sw]

    of_rank: dict[int, str] = {}
    for g in groups:
        ls = sorted({leaf[r] for r in g})
        if len(ls) == 1:
            sw = ls[0]
        else:
            common = set.intersection(*(above(x) for x in ls))
            if not common:
                raise TopologyError(f"an in-switch step's group {_show(g)} reaches {len(ls)} SHARP switches "
                                    f"({', '.join(ls[:4])}) with no SHARP switch above all of them: no "
                                    f"aggregation tree spans the group")
            sw = sorted(common)[0]
        for r in g:
            old = of_rank.setdefault(int(r), sw)
            if old != sw:
                raise TopologyError(f"rank {r} takes part in in-switch steps on two SHARP switches ({old}, "
                                    f"{sw}): a rank's switched traffic goes to one switch")
    devs: list[str] = []
    of = np.zeros(p, dtype=np.int64)
    for r in range(p):
        sw = of_rank.get(r, leaf[r])
        if sw not in devs:
            devs.append(sw)
        of[r] = devs.index(sw)
    return SwitchPlan(topo.with_ranks(list(topo.ranks[:p]) + devs), of, tuple(devs), "sharp")
