"""The hardware model as data: devices, links between them, the paths between devices and rank placement.

Nouns
-----
* **Device**: ``id`` (unique string, e.g. ``"gpu3"`` or ``"h12/gpu3"``), ``kind`` (one of
  :data:`DEVICE_KINDS`), ``host`` (index of the OS instance it belongs to; ``None`` for fabric devices
  shared by hosts: network switches, the NVSwitch of an NVL72 rack), ``name`` (model, e.g.
  ``"H100-SXM5-80GB"``) and free ``attrs`` (``numa``, ``socket``, ``rail``, ``role`` ...).
* **Link**: an undirected connection of devices ``a`` and ``b`` made of ``count`` parallel links of one
  :class:`~interlink.topology.links.LinkSpec`, derated by ``factor`` (1/oversubscription on fat-tree
  uplinks). Full duplex: each direction carries ``gbps = count x spec.effective_gbps x factor`` GB/s
  (10^9 B/s) at the same time. Links are numbered ``0..len(links)-1``; a flow simulator keys a direction
  of a link as ``(link id, 0)`` for a -> b and ``(link id, 1)`` for b -> a (see :meth:`Path.directed_hops`).
* **Path**: the route :meth:`Topology.path` picks between two devices: link ids, devices, bottleneck
  (effective GB/s per direction), summed latency, and NCCL's path type (:class:`PathType`).
* **Ranks**: ``Topology.ranks`` is the ordered tuple of device ids that hold ranks (GPUs by default; CPU
  cores or sockets on CPU hosts). Methods taking a device accept either a device id (``str``) or a rank
  (``int``).

Routing (what :meth:`Topology.path` returns)
--------------------------------------------
The widest path (largest bottleneck bandwidth) is taken, and among the widest the lowest summed latency
(an exact two-phase search: widest-path Dijkstra, then latency Dijkstra over links at least that wide).
GPUs and CPU cores (``cpu`` devices with a ``core`` attribute) are endpoints only, never traversed.

* Same device: the empty path, type LOC, infinite bandwidth, zero latency.
* Same host: the route stays on the host's devices; if both ends have links of their own to fabric
  devices (the NVSwitch of an NVL72 rack) the route through the fabric competes too. The network never
  carries a host's traffic back to itself.
* Different hosts: each end reaches the fabric over its own fabric links or through its NIC
  (:meth:`Topology.nic_for`: the closest compute NIC, balanced over GPUs that are equally close, or the
  device's ``nic`` attribute). Between the two, the route goes through fabric devices only. This is
  NCCL's rule that each GPU uses its own NIC (no PXN); it is also what makes cluster queries cheap.

Paths are computed structurally: hosts with identical structure share one cached set of intra-host
routes (translated by position), fabric routes are cached per source switch, and whole paths are
cached per (a, b). A 2048 x 8-GPU cluster answers a cross-host query in well under a millisecond once
warm.

Path types (NCCL's names, ``src/graph/topo.h``; smaller is closer)
-----------------------------------------------------------------
LOC same device; NVL over NVLink only (possibly through NVSwitch); C2C over NVLink-C2C (Grace <-> GPU);
PIX through at most one PCIe switch; PXB through several PCIe switches, not the CPU; PHB through a CPU
(host bridge) or host memory; SYS across CPU sockets (an SMP link: UPI/xGMI); NET across a network
(any link of a network kind, or a network switch). NCCL's NVB (NVLink through an intermediate GPU) and
PXN never occur, as GPUs are not traversed.
"""

from __future__ import annotations

import heapq
import math
import operator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from .links import CATALOG, NETWORK_KINDS, SWITCHES, LinkSpec, TopologyError, link as _link_spec

__all__ = [
    "DEVICE_KINDS",
    "PathType",
    "Device",
    "Link",
    "Path",
    "Topology",
    "TopologyBuilder",
]

#: Every device kind.
DEVICE_KINDS = ("gpu", "cpu", "nic", "pcie_switch", "nvswitch", "net_switch", "host_mem")

_INF = math.inf
_CACHE_MAX = 1 << 20


class PathType(str, Enum):
    """NCCL's path types (``PATH_*`` in ``src/graph/topo.h``); :attr:`level` is NCCL's number."""

    LOC = "LOC"
    NVL = "NVL"
    C2C = "C2C"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    SYS = "SYS"
    NET = "NET"

    @property
    def level(self) -> int:
        return _LEVELS[self.value]

    def __str__(self) -> str:
        return self.value


_LEVELS = {"LOC": 0, "NVL": 1, "C2C": 3, "PIX": 4, "PXB": 5, "PHB": 8, "SYS": 9, "NET": 10}


@dataclass(frozen=True)
class Device:
    """A device. ``host`` is None for fabric devices shared by hosts (network switches, rack NVSwitch)."""

    id: str
    kind: str
    host: int | None = None
    name: str = ""
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def numa(self) -> int | None:
        return self.attrs.get("numa")


@dataclass(frozen=True)
class Link:
    """``count`` parallel links of one spec between devices ``a`` and ``b``; capacity per direction."""

    id: int
    a: str
    b: str
    spec: LinkSpec
    count: int = 1
    factor: float = 1.0

    @property
    def gbps(self) -> float:
        """Effective capacity per direction, GB/s: count x spec.effective_gbps x factor."""
        return round(self.count * self.spec.effective_gbps * self.factor, 9)

    @property
    def line_gbps(self) -> float:
        """Line-rate capacity per direction, GB/s: count x spec.line_gbps x factor."""
        return round(self.count * self.spec.line_gbps * self.factor, 9)

    @property
    def latency_us(self) -> float:
        return self.spec.latency_us

    @property
    def kind(self) -> str:
        return self.spec.kind

    def other(self, device: str) -> str:
        """The end of this link that is not ``device``."""
        if device == self.a:
            return self.b
        if device == self.b:
            return self.a
        raise TopologyError(f"device {device!r} is not an end of link {self.id} ({self.a} - {self.b})")


@dataclass(frozen=True)
class Path:
    """A route from ``src`` to ``dst``.

    ``hops`` are link ids in order, ``devices`` the devices visited (src first, dst last),
    ``directions[i]`` is 0 when hop i goes from its link's ``a`` to ``b``, else 1.
    ``bottleneck_gbps``/``line_gbps``: smallest per-direction capacity along the way (effective / line);
    ``latency_us``: sum of the links' latencies. For src == dst: no hops, infinite bandwidth, LOC.
    """

    src: str
    dst: str
    hops: tuple[int, ...]
    devices: tuple[str, ...]
    directions: tuple[int, ...]
    bottleneck_gbps: float
    line_gbps: float
    latency_us: float
    path_type: PathType

    def directed_hops(self) -> tuple[tuple[int, int], ...]:
        """(link id, direction) per hop: the resources a flow along this path occupies."""
        return tuple(zip(self.hops, self.directions))

    def time_us(self, nbytes: float) -> float:
        """Latency + nbytes / bottleneck (an uncontended transfer), microseconds."""
        if nbytes <= 0 or self.bottleneck_gbps == _INF:
            return self.latency_us
        return self.latency_us + nbytes / (self.bottleneck_gbps * 1e3)


# A route segment in global indices: (bw, line, lat, device indices, link indices)
_Seg = tuple[float, float, float, tuple[int, ...], tuple[int, ...]]


class Topology:
    """Devices, links and rank placement, plus routing (:meth:`path`). Treat it as immutable.

    Build one with :class:`TopologyBuilder`, a preset (:func:`interlink.topology.parse_topology`),
    :func:`interlink.topology.load_topology` or :func:`interlink.topology.discover`.
    """

    def __init__(self, devices: Iterable[Device], links: Iterable[Link], ranks: Sequence[str] | None = None,
                 name: str = "", meta: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.meta: dict[str, Any] = dict(meta or {})
        self.devices: tuple[Device, ...] = tuple(devices)
        idx: dict[str, int] = {}
        for i, d in enumerate(self.devices):
            if d.kind not in DEVICE_KINDS:
                raise TopologyError(f"device {d.id!r}: kind {d.kind!r} is not one of {', '.join(DEVICE_KINDS)}")
            if d.id in idx:
                raise TopologyError(f"device id {d.id!r} appears twice")
            idx[d.id] = i
        self._idx = idx
        links_in = list(links)
        out: list[Link] = []
        for i, ln in enumerate(links_in):
            if ln.a not in idx or ln.b not in idx:
                missing = ln.a if ln.a not in idx else ln.b
                raise TopologyError(f"link {i} ({ln.a} - {ln.b}): no device {missing!r}")
            if ln.a == ln.b:
                raise TopologyError(f"link {i} connects {ln.a!r} to itself")
            if ln.count < 1 or not (ln.factor > 0):
                raise TopologyError(f"link {i} ({ln.a} - {ln.b}): count must be >= 1 and factor > 0")
            out.append(ln if ln.id == i else Link(i, ln.a, ln.b, ln.spec, ln.count, ln.factor))
        self.links: tuple[Link, ...] = tuple(out)
        if ranks is None:
            ranks = self._default_ranks()
        self.ranks: tuple[str, ...] = tuple(ranks)
        self._rank_of: dict[str, int] = {}
        for r, dev in enumerate(self.ranks):
            if dev not in idx:
                raise TopologyError(f"rank {r}: no device {dev!r}")
            if dev in self._rank_of:
                raise TopologyError(f"device {dev!r} holds ranks {self._rank_of[dev]} and {r}")
            self._rank_of[dev] = r
        self._router: _Router | None = None
        self._host_ranks: dict[int | None, list[int]] | None = None
        self._domains: list[int] | None = None

    # ---- data --------------------------------------------------------------------------------------

    def _default_ranks(self) -> list[str]:
        gpus = [d.id for d in self.devices if d.kind == "gpu"]
        if gpus:
            return gpus
        cores = [d.id for d in self.devices if d.kind == "cpu" and "core" in d.attrs]
        return cores or [d.id for d in self.devices if d.kind == "cpu"]

    def device(self, ref: str | int) -> Device:
        """The device with this id, or holding this rank (int)."""
        return self.devices[self._index(ref)]

    def _index(self, ref: str | int) -> int:
        if not isinstance(ref, str):
            try:
                ref = operator.index(ref)  # ints, numpy integers: a rank
            except TypeError:
                raise TopologyError(f"expected a device id (str) or a rank (int), got {ref!r}") from None
            if not 0 <= ref < len(self.ranks):
                raise TopologyError(f"rank {ref} out of range: nranks = {len(self.ranks)}")
            return self._idx[self.ranks[ref]]
        try:
            return self._idx[ref]
        except KeyError:
            near = [d.id for d in self.devices[:12]]
            raise TopologyError(f"no device {ref!r} in topology {self.name!r} "
                                f"(devices: {', '.join(near)}{' ...' if len(self.devices) > 12 else ''})") from None

    def __contains__(self, device_id: object) -> bool:
        return device_id in self._idx

    def link(self, link_id: int) -> Link:
        return self.links[link_id]

    def links_of(self, ref: str | int) -> list[Link]:
        """The links touching a device."""
        i = self._index(ref)
        return [self.links[lid] for lid, _ in self._routing().adj[i]]

    def neighbors(self, ref: str | int) -> list[str]:
        i = self._index(ref)
        r = self._routing()
        return [self.devices[v].id for _, v in r.adj[i]]

    def links_between(self, a: str | int, b: str | int) -> list[Link]:
        """The links joining two devices directly (several specs may join the same pair)."""
        ia, ib = self._index(a), self._index(b)
        return [self.links[lid] for lid, v in self._routing().adj[ia] if v == ib]

    @property
    def hosts(self) -> list[int]:
        """Indices of all hosts, sorted."""
        return sorted({d.host for d in self.devices if d.host is not None})

    def host_devices(self, host: int) -> list[Device]:
        by = self.__dict__.get("_by_host")
        if by is None:  # one pass for all hosts (callers ask for every host of a 16,384-host cluster)
            by = {}
            for d in self.devices:
                by.setdefault(d.host, []).append(d)
            self.__dict__["_by_host"] = by
        return list(by.get(host, ()))

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for d in self.devices:
            kinds[d.kind] = kinds.get(d.kind, 0) + 1
        return {"name": self.name, "hosts": len(self.hosts), "devices": kinds, "links": len(self.links),
                "nranks": self.nranks, "ranks_per_host": self.ranks_per_host, **self.meta}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return (self.name == other.name and self.devices == other.devices and self.links == other.links
                and self.ranks == other.ranks and self.meta == other.meta)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"Topology({self.name!r}: {len(self.devices)} devices, {len(self.links)} links, "
                f"{len(self.hosts)} hosts, {self.nranks} ranks)")

    def with_ranks(self, ranks: Sequence[str | int]) -> "Topology":
        """The same hardware with another placement (device ids, or ranks of this placement)."""
        devs = [self.devices[self._index(r)].id for r in ranks]
        t = Topology.__new__(Topology)
        t.name, t.meta, t.devices, t._idx, t.links = self.name, dict(self.meta), self.devices, self._idx, self.links
        t.ranks = tuple(devs)
        t._rank_of = {}
        for r, dev in enumerate(t.ranks):
            if dev in t._rank_of:
                raise TopologyError(f"device {dev!r} holds ranks {t._rank_of[dev]} and {r}")
            t._rank_of[dev] = r
        t._router, t._host_ranks, t._domains = self._router, None, None
        return t

    # ---- ranks -------------------------------------------------------------------------------------

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    def device_of(self, rank: int) -> str:
        """The device id holding ``rank``."""
        return self.devices[self._index(int(rank))].id

    def host_of(self, ref: str | int) -> int:
        """Host index of a rank (int) or device (str). Raises for fabric devices (no host)."""
        h = self.devices[self._index(ref)].host
        if h is None:
            raise TopologyError(f"{ref!r} is a fabric device and belongs to no host")
        return h

    def _hr(self) -> dict[int | None, list[int]]:
        if self._host_ranks is None:
            hr: dict[int | None, list[int]] = {}
            for r, dev in enumerate(self.ranks):
                hr.setdefault(self.devices[self._idx[dev]].host, []).append(r)
            self._host_ranks = hr
        return self._host_ranks

    def ranks_on_host(self, host: int) -> list[int]:
        """The ranks placed on ``host``, ascending."""
        return list(self._hr().get(host, []))

    @property
    def nhosts(self) -> int:
        """Number of distinct hosts holding ranks."""
        return len(self._hr())

    @property
    def ranks_per_host(self) -> int:
        """Ranks per host (the largest count when hosts differ; see :meth:`ranks_on_host`)."""
        return max((len(v) for v in self._hr().values()), default=0)

    def local_rank(self, rank: int) -> int:
        """Position of ``rank`` among the ranks of its host."""
        return self._hr()[self.devices[self._index(int(rank))].host].index(int(rank))

    def nic_for(self, ref: str | int) -> str | None:
        """The compute NIC a rank/device uses to leave its host (None if its host has none).

        A device's own ``nic`` attribute wins; else the NIC with the widest, then lowest-latency path
        from it, NICs equally close being shared out in turn among the host's devices of the same kind
        (GPU-to-NIC affinity, like NCCL). NICs with ``role: storage`` and loopback devices are never chosen.
        """
        r = self._routing()
        n = r.nic_for(self._index(ref))
        return None if n is None else self.devices[n].id

    def nvls_switch(self, ref: str | int) -> str | None:
        """The NVLink-SHARP-capable NVSwitch a GPU hangs off (NCCL NVLS), or None."""
        i = self._index(ref)
        r = self._routing()
        for lid, v in r.adj[i]:
            d = self.devices[v]
            if d.kind == "nvswitch" and d.attrs.get("nvls") and self.links[lid].spec.kind == "nvlink":
                return d.id
        return None

    def sharp_switch(self, ref: str | int) -> str | None:
        """The SHARP-capable InfiniBand switch a rank's compute NIC is cabled to (NCCL CollNet: the first
        switch of its aggregation tree), or None: no NIC (:meth:`nic_for`), a NIC on no switch, an Ethernet
        or RoCE fabric, or an IB switch without SHARP. A switch device is SHARP-capable when its ``sharp``
        attribute says so or, without one, when its ``spec`` (a :data:`~interlink.topology.links.SWITCHES`
        name) is."""
        nic = self.nic_for(ref)
        if nic is None:
            return None
        r = self._routing()
        for lid, v in r.adj[self._idx[nic]]:
            d = self.devices[v]
            if self.links[lid].spec.kind == "infiniband" and is_sharp_switch(d):
                return d.id
        return None

    def nvlink_domain(self, ref: str | int) -> int:
        """Index of the NVLink domain (devices joined by NVLink, through NVSwitches) of a rank/device:
        domains are numbered 0, 1, 2, ... in the order of their first rank (then devices without ranks).

        Devices without NVLink are alone in their domain. An NVL72 rack is one domain across 18 hosts.
        """
        if self._domains is None:
            parent = list(range(len(self.devices)))

            def find(x: int) -> int:
                while parent[x] != x:
                    parent[x] = parent[parent[x]]
                    x = parent[x]
                return x

            for ln in self.links:
                if ln.spec.kind == "nvlink":
                    a, b = find(self._idx[ln.a]), find(self._idx[ln.b])
                    if a != b:
                        parent[max(a, b)] = min(a, b)
            roots = [find(i) for i in range(len(self.devices))]
            dense: dict[int, int] = {}  # numbered by their first rank, then devices without ranks
            for i in [self._idx[d] for d in self.ranks] + list(range(len(self.devices))):
                dense.setdefault(roots[i], len(dense))
            self._domains = [dense[r] for r in roots]
        return self._domains[self._index(ref)]

    # ---- paths -------------------------------------------------------------------------------------

    def _routing(self) -> "_Router":
        if self._router is None:
            self._router = _Router(self)
        return self._router

    def path(self, a: str | int, b: str | int, *, via: Collection[str] | None = None) -> Path:
        """The route from ``a`` to ``b`` (device ids, or ints meaning ranks); see the module docstring.

        ``via`` restricts the link kinds usable (e.g. ``{"tcp"}`` for loopback TCP between CPU ranks);
        restricted queries search the whole graph (meant for single hosts). Raises TopologyError when
        no route exists.
        """
        ia, ib = self._index(a), self._index(b)
        return self._routing().path(ia, ib, frozenset(via) if via is not None else None)

    def bandwidth(self, a: str | int, b: str | int) -> float:
        """Bottleneck effective bandwidth per direction from a to b, GB/s."""
        return self.path(a, b).bottleneck_gbps

    def path_type(self, a: str | int, b: str | int) -> PathType:
        return self.path(a, b).path_type

    def path_matrix(self, ranks: Sequence[int] | None = None) -> list[list[PathType]]:
        """Path types between ranks (all ranks by default), like ``nvidia-smi topo -m``."""
        rs = list(range(self.nranks)) if ranks is None else list(ranks)
        return [[self.path(i, j).path_type for j in rs] for i in rs]

    def save(self, path: str) -> None:
        """Write this topology to a YAML (or JSON) file; see :mod:`interlink.topology.io`."""
        from .io import save_topology

        save_topology(self, path)


def is_sharp_switch(d: "Device") -> bool:
    """Whether a device is an InfiniBand switch that reduces in the network (SHARP): a fabric ``net_switch``
    whose ``sharp`` attribute is true or, without one, whose ``spec`` names a SHARP-capable switch."""
    if d.kind != "net_switch" or d.host is not None:
        return False
    if "sharp" in d.attrs:
        return bool(d.attrs["sharp"])
    spec = SWITCHES.get(str(d.attrs.get("spec", "")))
    return bool(spec is not None and spec.sharp)


class TopologyBuilder:
    """Collects devices and links, then :meth:`build` makes the :class:`Topology`.

    >>> b = TopologyBuilder("two-gpus")
    >>> b.device("gpu0", "gpu"); b.device("gpu1", "gpu")
    >>> b.link("gpu0", "gpu1", "nvlink4", count=18)
    """

    def __init__(self, name: str = "", catalog: Mapping[str, LinkSpec] | None = None) -> None:
        self.name = name
        self.catalog = CATALOG if catalog is None else catalog
        self._devices: list[Device] = []
        self._links: list[Link] = []
        self._ids: set[str] = set()
        self._specs: dict[str, LinkSpec] = {}

    def device(self, id: str, kind: str, host: int | None = None, name: str = "", **attrs: Any) -> str:
        if id in self._ids:
            raise TopologyError(f"device id {id!r} appears twice")
        if kind not in DEVICE_KINDS:
            raise TopologyError(f"device {id!r}: kind {kind!r} is not one of {', '.join(DEVICE_KINDS)}")
        self._ids.add(id)
        self._devices.append(Device(id, kind, host, name, attrs))
        return id

    def spec(self, spec: str | LinkSpec) -> LinkSpec:
        if isinstance(spec, LinkSpec):
            return spec
        s = self._specs.get(spec)
        if s is None:
            s = self._specs[spec] = _link_spec(spec, self.catalog)
        return s

    def link(self, a: str, b: str, spec: str | LinkSpec, count: int = 1, factor: float = 1.0) -> int:
        lid = len(self._links)
        self._links.append(Link(lid, a, b, self.spec(spec), int(count), float(factor)))
        return lid

    @property
    def devices(self) -> list[Device]:
        return self._devices

    def build(self, ranks: Sequence[str] | None = None, meta: Mapping[str, Any] | None = None) -> Topology:
        return Topology(self._devices, self._links, ranks, self.name, meta)


# ---- routing -----------------------------------------------------------------------------------------


class _Router:
    """Index structures and caches behind Topology.path (built on the first query)."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        devs = topo.devices
        n = len(devs)
        idx = topo._idx
        self.host: list[int | None] = [d.host for d in devs]
        self.kind: list[str] = [d.kind for d in devs]
        self.through: list[bool] = [not (d.kind == "gpu" or (d.kind == "cpu" and "core" in d.attrs))
                                    for d in devs]
        links = topo.links
        self.la = [idx[ln.a] for ln in links]
        self.lb = [idx[ln.b] for ln in links]
        self.cap = [ln.gbps for ln in links]
        self.line = [ln.line_gbps for ln in links]
        self.lat = [ln.spec.latency_us for ln in links]
        self.lkind = [ln.spec.kind for ln in links]
        adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        fabric_adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        # outward[i]: links from host device i to fabric devices or other hosts' devices
        outward: dict[int, list[tuple[int, int]]] = {}
        host_links: dict[int, list[int]] = {}
        host = self.host
        for lid, (a, b) in enumerate(zip(self.la, self.lb)):
            adj[a].append((lid, b))
            adj[b].append((lid, a))
            ha, hb = host[a], host[b]
            if ha is None and hb is None:
                fabric_adj[a].append((lid, b))
                fabric_adj[b].append((lid, a))
            elif ha == hb:
                host_links.setdefault(ha, []).append(lid)  # type: ignore[arg-type]
            else:
                if ha is not None:
                    outward.setdefault(a, []).append((lid, b))
                if hb is not None:
                    outward.setdefault(b, []).append((lid, a))
        self.adj, self.fabric_adj, self.outward = adj, fabric_adj, outward
        # hosts, positions, classes of identical hosts
        host_devs: dict[int, list[int]] = {}
        local = [-1] * n
        for i, h in enumerate(host):
            if h is not None:
                lst = host_devs.setdefault(h, [])
                local[i] = len(lst)
                lst.append(i)
        self.host_devs, self.local = host_devs, local
        self.host_links = host_links
        link_local = [-1] * len(links)
        for h, lids in host_links.items():
            for k, lid in enumerate(lids):
                link_local[lid] = k
        self.link_local = link_local
        classes: dict[tuple, int] = {}
        self.host_class: dict[int, int] = {}
        self.class_rep: list[int] = []
        for h, ds in host_devs.items():
            attrs_nic = []
            for i in ds:
                nic = devs[i].attrs.get("nic")
                attrs_nic.append(local[idx[nic]] if isinstance(nic, str) and nic in idx else None)
            sig = (tuple(self.kind[i] for i in ds),
                   tuple(self.through[i] for i in ds),
                   tuple((local[self.la[l]], local[self.lb[l]], links[l].spec, links[l].count, links[l].factor)
                         for l in host_links.get(h, ())),
                   tuple(attrs_nic),
                   tuple(bool(devs[i].attrs.get("loopback")) or devs[i].attrs.get("role") == "storage"
                         for i in ds))
            c = classes.get(sig)
            if c is None:
                c = classes[sig] = len(self.class_rep)
                self.class_rep.append(h)
            self.host_class[h] = c
        self._intra_trees: dict[tuple[int, int], dict[int, _Seg]] = {}
        self._fabric_trees: dict[tuple[int, float], tuple[dict[int, tuple[float, float, int]],
                                                           list[dict[int, tuple[int, int]]]]] = {}
        self._generic: dict[tuple[int, frozenset | None], tuple[dict, list]] = {}
        self._nic_map: dict[int, list[int | None]] = {}
        self._paths: dict[tuple[int, int, frozenset | None], Path] = {}

    # ---- core search: widest path, then lowest latency among the widest ----

    def _sssp(self, src: int, adj: list[list[tuple[int, int]]], node_ok: Callable[[int], bool] | None,
              link_ok: Callable[[int], bool] | None = None, limit: float = _INF
              ) -> tuple[dict[int, tuple[float, float, int]], list[dict[int, tuple[int, int]]]]:
        """Widest-then-lowest-latency routes from ``src`` to every reachable node.

        Phase 1 finds each node's widest bottleneck B*; phase 2 runs a latency Dijkstra over links at
        least T wide for each distinct T = min(B*, limit), which is exact for the lexicographic order.
        ``limit`` caps the bandwidth as if the route continued from a link of that capacity into src.
        """
        cap, lat, through = self.cap, self.lat, self.through
        best: dict[int, float] = {src: _INF}
        heap: list[tuple[float, int]] = [(-_INF, src)]
        done: set[int] = set()
        while heap:
            nb, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            if u != src and not through[u]:
                continue
            bu = -nb
            for lid, v in adj[u]:
                if v in done or (node_ok is not None and not node_ok(v)) or (link_ok is not None and not link_ok(lid)):
                    continue
                c = cap[lid]
                w = c if c < bu else bu
                if w > best.get(v, 0.0):
                    best[v] = w
                    heapq.heappush(heap, (-w, v))
        result: dict[int, tuple[float, float, int]] = {src: (_INF, 0.0, -1)}
        runs: list[dict[int, tuple[int, int]]] = []
        by_t: dict[float, list[int]] = {}
        for v, bv in best.items():
            if v != src:
                by_t.setdefault(bv if bv < limit else limit, []).append(v)
        for t in sorted(by_t, reverse=True):
            want = set(by_t[t])
            dist: dict[int, float] = {src: 0.0}
            pred: dict[int, tuple[int, int]] = {}
            h2: list[tuple[float, int]] = [(0.0, src)]
            fin: set[int] = set()
            while h2 and want:
                d, u = heapq.heappop(h2)
                if u in fin:
                    continue
                fin.add(u)
                want.discard(u)
                if u != src and not through[u]:
                    continue
                for lid, v in adj[u]:
                    if cap[lid] < t or v in fin or (node_ok is not None and not node_ok(v)) \
                            or (link_ok is not None and not link_ok(lid)):
                        continue
                    nd = d + lat[lid]
                    if nd < dist.get(v, _INF):
                        dist[v] = nd
                        pred[v] = (lid, u)
                        heapq.heappush(h2, (nd, v))
            runs.append(pred)
            for v in by_t[t]:
                result[v] = (t, dist[v], len(runs) - 1)
        return result, runs

    def _seg(self, src: int, dst: int, res: dict[int, tuple[float, float, int]],
             runs: list[dict[int, tuple[int, int]]]) -> _Seg | None:
        r = res.get(dst)
        if r is None:
            return None
        bw, lat, run = r
        if dst == src:
            return (_INF, _INF, 0.0, (src,), ())
        pred = runs[run]
        nodes = [dst]
        lids = []
        v = dst
        line = _INF
        while v != src:
            lid, u = pred[v]
            lids.append(lid)
            nodes.append(u)
            if self.line[lid] < line:
                line = self.line[lid]
            v = u
        nodes.reverse()
        lids.reverse()
        return (bw, line, lat, tuple(nodes), tuple(lids))

    # ---- intra-host, per class of identical hosts ----

    def _intra_tree(self, cls: int, src_local: int) -> dict[int, _Seg]:
        key = (cls, src_local)
        tree = self._intra_trees.get(key)
        if tree is None:
            h = self.class_rep[cls]
            hd = self.host_devs[h]
            src = hd[src_local]
            host = self.host
            res, runs = self._sssp(src, self.adj, lambda v: host[v] == h)
            local, link_local = self.local, self.link_local
            tree = {}
            for v in res:
                seg = self._seg(src, v, res, runs)
                assert seg is not None
                bw, line, lat, nodes, lids = seg
                tree[local[v]] = (bw, line, lat, tuple(local[x] for x in nodes), tuple(link_local[l] for l in lids))
            self._intra_trees[key] = tree
        return tree

    def intra(self, h: int, a: int, b: int) -> _Seg | None:
        cls = self.host_class[h]
        tree = self._intra_tree(cls, self.local[a])
        s = tree.get(self.local[b])
        if s is None:
            return None
        bw, line, lat, lnodes, llinks = s
        hd, hl = self.host_devs[h], self.host_links.get(h, [])
        return (bw, line, lat, tuple(hd[x] for x in lnodes), tuple(hl[x] for x in llinks))

    # ---- NIC affinity ----

    def _nic_candidates(self, h: int) -> list[int]:
        devs = self.topo.devices
        return [i for i in self.host_devs[h] if self.kind[i] == "nic"
                and devs[i].attrs.get("role") != "storage" and not devs[i].attrs.get("loopback")]

    def nic_for(self, i: int) -> int | None:
        h = self.host[i]
        if h is None:
            return None
        devs = self.topo.devices
        nic = devs[i].attrs.get("nic")
        if isinstance(nic, str):
            j = self.topo._idx.get(nic)
            if j is None:
                raise TopologyError(f"device {devs[i].id!r}: its nic attribute names no device ({nic!r})")
            return j
        cls = self.host_class[h]
        m = self._nic_map.get(cls)
        if m is None:
            m = self._compute_nic_map(cls)
            self._nic_map[cls] = m
        ln = m[self.local[i]]
        return None if ln is None else self.host_devs[h][ln]

    def _compute_nic_map(self, cls: int) -> list[int | None]:
        h = self.class_rep[cls]
        hd = self.host_devs[h]
        local = self.local
        nics = [local[i] for i in self._nic_candidates(h)]
        out: list[int | None] = [None] * len(hd)
        turns: dict[tuple[str, tuple[int, ...]], int] = {}
        for pos, i in enumerate(hd):
            if self.kind[i] == "nic" and pos in nics:
                out[pos] = pos
                continue
            if not nics:
                continue
            tree = self._intra_tree(cls, pos)
            scored = [((-tree[n][0], tree[n][2]), n) for n in nics if n in tree]
            if not scored:
                continue
            top = min(k for k, _ in scored)
            cands = tuple(n for k, n in scored if k == top)
            key = (self.kind[i], cands)
            t = turns.get(key, 0)
            turns[key] = t + 1
            out[pos] = cands[t % len(cands)]
        return out

    # ---- fabric (host-less devices) ----

    def _fabric(self, s: int, t: int) -> _Seg | None:
        """Route between fabric devices s and t through fabric devices only.

        A switch with a single fabric link (a leaf under one aggregated spine) is a dead end for every
        other route, so its routes are that link followed by the routes of the switch at its other end,
        searched with the link's capacity as a limit (exact): all leaves share the spine's search.
        """
        if s == t:
            return (_INF, _INF, 0.0, (s,), ())
        fa = self.fabric_adj[s]
        if len(fa) == 1:
            lid, h = fa[0]
            first = (self.cap[lid], self.line[lid], self.lat[lid], (s, h), (lid,))
            if h == t:
                return first
            key = (h, self.cap[lid])
            tr = self._fabric_trees.get(key)
            if tr is None:
                tr = self._fabric_trees[key] = self._sssp(h, self.fabric_adj, None, limit=self.cap[lid])
            rest = self._seg(h, t, tr[0], tr[1])
            return None if rest is None else _join(first, rest)
        key = (s, _INF)
        tr = self._fabric_trees.get(key)
        if tr is None:
            tr = self._fabric_trees[key] = self._sssp(s, self.fabric_adj, None)
        return self._seg(s, t, tr[0], tr[1])

    def external(self, x: int, y: int) -> _Seg | None:
        """Best route from host device x to host device y through fabric devices (or a direct link)."""
        best: _Seg | None = None
        cap, line, lat = self.cap, self.line, self.lat
        outs_x = self.outward.get(x, ())
        outs_y = self.outward.get(y, ())
        for lid, v in outs_x:
            if v == y:
                cand = (cap[lid], line[lid], lat[lid], (x, y), (lid,))
                best = _better(best, cand)
        for l1, s1 in outs_x:
            if self.host[s1] is not None:
                continue
            for l2, s2 in outs_y:
                if self.host[s2] is not None:
                    continue
                mid = self._fabric(s1, s2)
                if mid is None:
                    continue
                bw = min(cap[l1], mid[0], cap[l2])
                ln = min(line[l1], mid[1], line[l2])
                cand = (bw, ln, lat[l1] + mid[2] + lat[l2], (x,) + mid[3] + (y,), (l1,) + mid[4] + (l2,))
                best = _better(best, cand)
        return best

    # ---- whole paths ----

    def path(self, ia: int, ib: int, via: frozenset | None) -> Path:
        key = (ia, ib, via)
        p = self._paths.get(key)
        if p is not None:
            return p
        seg = self._route(ia, ib, via)
        if seg is None:
            t = self.topo
            raise TopologyError(f"no path from {t.devices[ia].id!r} to {t.devices[ib].id!r} in topology "
                                f"{t.name!r}" + (f" over link kinds {sorted(via)}" if via else ""))
        p = self._make_path(seg)
        if len(self._paths) >= _CACHE_MAX:
            self._paths.clear()
        self._paths[key] = p
        return p

    def _route(self, ia: int, ib: int, via: frozenset | None) -> _Seg | None:
        if ia == ib:
            return (_INF, _INF, 0.0, (ia,), ())
        ha, hb = self.host[ia], self.host[ib]
        if via is not None or ha is None or hb is None:
            return self._generic_route(ia, ib, via)
        best: _Seg | None = None
        if ha == hb:
            best = self.intra(ha, ia, ib)
            if ia in self.outward and ib in self.outward:
                best = _better(best, self.external(ia, ib))
            return best
        for x in self._exits(ia):
            s1 = self.intra(ha, ia, x) if x != ia else None
            if x != ia and s1 is None:
                continue
            for y in self._exits(ib):
                s3 = self.intra(hb, y, ib) if y != ib else None
                if y != ib and s3 is None:
                    continue
                mid = self.external(x, y)
                if mid is None:
                    continue
                best = _better(best, _join(_join(s1, mid), s3))
        return best

    def _exits(self, i: int) -> list[int]:
        out = [i] if i in self.outward else []
        n = self.nic_for(i)
        if n is not None and n != i and n in self.outward:
            out.append(n)
        return out

    def _generic_route(self, ia: int, ib: int, via: frozenset | None) -> _Seg | None:
        key = (ia, via)
        tr = self._generic.get(key)
        if tr is None:
            lk = self.lkind
            link_ok = None if via is None else (lambda lid: lk[lid] in via)
            tr = self._sssp(ia, self.adj, None, link_ok)
            if len(self._generic) > 4096:
                self._generic.clear()
            self._generic[key] = tr
        return self._seg(ia, ib, tr[0], tr[1])

    def _make_path(self, seg: _Seg) -> Path:
        bw, line, lat, nodes, lids = seg
        ids = self.topo.devices
        la = self.la
        dirs = tuple(0 if la[l] == u else 1 for l, u in zip(lids, nodes))
        return Path(src=ids[nodes[0]].id, dst=ids[nodes[-1]].id, hops=lids,
                    devices=tuple(ids[i].id for i in nodes), directions=dirs,
                    bottleneck_gbps=bw, line_gbps=line, latency_us=lat, path_type=self._classify(nodes, lids))

    def _classify(self, nodes: tuple[int, ...], lids: tuple[int, ...]) -> PathType:
        if len(nodes) == 1:
            return PathType.LOC
        lk = {self.lkind[l] for l in lids}
        kinds = [self.kind[i] for i in nodes]
        if lk & NETWORK_KINDS or "net_switch" in kinds:
            return PathType.NET
        if lk == {"nvlink"}:
            return PathType.NVL
        if lk <= {"nvlink", "c2c"}:
            return PathType.C2C
        devs = self.topo.devices
        sockets = {devs[i].attrs.get("socket", devs[i].id) for i in nodes if self.kind[i] == "cpu"}
        if "smp" in lk or len(sockets) >= 2:
            return PathType.SYS
        if sockets or "host_mem" in kinds or "shm" in lk:
            return PathType.PHB
        nsw = sum(1 for k in kinds[1:-1] if k == "pcie_switch")
        return PathType.PIX if nsw <= 1 else PathType.PXB


def _better(a: _Seg | None, b: _Seg | None) -> _Seg | None:
    if b is None:
        return a
    if a is None:
        return b
    if b[0] > a[0] or (b[0] == a[0] and b[2] < a[2]):
        return b
    return a


def _join(a: _Seg | None, b: _Seg | None) -> _Seg:
    if a is None:
        assert b is not None
        return b
    if b is None:
        return a
    assert a[3][-1] == b[3][0]
    return (min(a[0], b[0]), min(a[1], b[1]), a[2] + b[2], a[3] + b[3][1:], a[4] + b[4])

