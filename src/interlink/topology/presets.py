"""Preset machines and clusters of them.

Single machines (``parse_topology("dgx-h100")``)::

    dgx-a100     8x A100-SXM4, NVSwitch gen 2 (6 chips), 12 NVLink3 per GPU, 8 HDR NICs + 2 storage NICs,
                 4 PCIe Gen4 switches (2 GPUs + 2 NICs each), 2 AMD EPYC 7742 sockets (xGMI)
    dgx-a100-40gb  dgx-a100 with A100-SXM4-40GB GPUs (the first DGX A100, 320 GB; HBM2 1,555 GB/s)
    a800         dgx-a100 with 8 NVLinks per GPU (400 GB/s)
    dgx-h100     8x H100-SXM5, NVSwitch gen 3 (4 chips, NVLink SHARP), 18 NVLink4 per GPU, 8 NDR NICs,
                 4 PCIe Gen5 switches (2 GPUs + 2 NICs each), 2 Xeon 8480C sockets (UPI)
    h800         dgx-h100 with 8 NVLinks per GPU (400 GB/s)
    hgx-h200     dgx-h100 with H200 GPUs
    hgx-b200     8x B200 (DGX/HGX B200), NVLink Switch gen 4 (2 chips, NVLink SHARP), 18 NVLink5 per GPU, 8 NDR
                 NICs, 4 PCIe Gen5 switches (2 GPUs + 2 NICs each), 2 Xeon 8570 sockets (UPI)
    gb200-nvl72  one rack: 18 compute trays (hosts), each 2 Grace CPUs + 4 B200 GPUs (NVLink-C2C to its
                 Grace), all 72 GPUs on the rack's NVLink Switch (18 NVLink5 per GPU, NVLS), 1 NDR NIC per GPU
    pcie-8gpu    8 PCIe GPUs, no NVLink: 4 PCIe Gen4 switches (2 GPUs + 2 HDR NICs each), 2 switches per
                 CPU socket, the 2 sockets joined by UPI
    cpu-host     one host, 2 CPU cores as ranks over shared memory (memcpy ~8 GB/s) and loopback TCP

Clusters (``parse_topology("16xdgx-h100")``): N copies of a preset, one compute NIC per GPU, joined by a
rail-optimized two-level fat tree of the preset's network (HDR for A100 systems and pcie-8gpu, NDR for
H100/H200/GB200, 25 GbE TCP for cpu-host). NIC r of every host connects to a leaf of rail r; each leaf
takes half its switch's ports as hosts (HDR 20, NDR 32, XDR 72, Ethernet 32); all leaves connect to one
aggregated spine (the spine layer, and the core layer of a three-tier tree, as one non-blocking device)
with as many uplinks as the leaf has hosts, derated by the ``oversubscription`` ratio. Leaves and spine
carry their switch's ``spec`` and ``sharp`` flag: the InfiniBand switches of the catalog reduce in the
network (SHARP, NCCL's CollNet: :meth:`Topology.sharp_switch`), Ethernet/RoCE switches do not.

Spec grammar::

    PRESET | NxPRESET[:key=value[,key=value...]] | path/to/topology.yaml (or .json)
    keys: oversub (or oversubscription): leaf->spine ratio, default 1; net (or network): link spec
    of the scale-out network, e.g. ib-xdr, roce-400g, eth-100g; gpus: ranks on the first G GPUs of each
    machine only (3xgb200-nvl72:gpus=8: 2 trays of each of 3 racks, 24 ranks)

Numbers inside hosts are simplified where vendors differ (one NUMA node per socket; one logical NVSwitch
per NVLink domain, as NCCL models it). GB200 assumptions (unpublished layout): the two Grace CPUs of a
tray are joined by NVLink-C2C, and each Grace has a PCIe Gen5 switch holding its two GPUs' NICs.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .graph import Topology, TopologyBuilder
from .links import NETWORK_KINDS, SWITCHES, LinkSpec, TopologyError, link, switch

__all__ = ["Preset", "PRESETS", "preset", "cluster", "parse_topology", "preset_names"]

_Build = Callable[[TopologyBuilder, int, "str | None"], int]


@dataclass(frozen=True)
class Preset:
    """A machine: ``build(builder, first_host, copy)`` adds its devices and returns how many hosts it used.

    ``copy`` is None for a standalone machine (ids without a host prefix when it is one host) and the
    copy's index inside a cluster. ``network``: the default scale-out link spec of ``NxPRESET``.
    """

    name: str
    description: str
    build: _Build
    network: str


def _prefix(host: int, copy: str | None) -> str:
    return "" if copy is None else f"h{host}/"


def _hgx(b: TopologyBuilder, host: int, copy: str | None, *, gpu: str, nvlink: str, nlinks: int,
         nvswitch: str, chips: int, gen: int, nic_link: str, nic_model: str, cpu_model: str, cores: int,
         smp: str, storage_nics: int = 0) -> int:
    """An 8-GPU baseboard machine: NVSwitch, 4 PCIe switches of 2 GPUs + 2 NICs, 2 CPU sockets."""
    p = _prefix(host, copy)
    pci = f"pcie-gen{gen}"
    cpus = [b.device(f"{p}cpu{s}", "cpu", host, cpu_model, socket=s, numa=s, cores=cores) for s in (0, 1)]
    b.link(cpus[0], cpus[1], smp)
    nvs = b.device(f"{p}nvswitch", "nvswitch", host, f"NVSwitch gen {switch(nvswitch).generation}",
                   spec=nvswitch, chips=chips, nvls=switch(nvswitch).nvls)
    gpus, nics, sws = [], [], []
    for k in range(4):
        s = k // 2
        sws.append(b.device(f"{p}pcisw{k}", "pcie_switch", host, f"PCIe Gen{gen} switch", socket=s, numa=s))
    for j in range(8):
        s = j // 4
        gpus.append(b.device(f"{p}gpu{j}", "gpu", host, gpu, socket=s, numa=s, index=j))
    for j in range(8):
        s = j // 4
        nics.append(b.device(f"{p}nic{j}", "nic", host, nic_model, socket=s, numa=s, rail=j, role="compute",
                             port=nic_link))
    for j in range(storage_nics):
        s = j % 2
        st = b.device(f"{p}nic{8 + j}", "nic", host, nic_model, socket=s, numa=s, role="storage", port=nic_link)
        b.link(st, cpus[s], pci)
    for k, sw in enumerate(sws):
        b.link(sw, cpus[k // 2], pci)
    for j in range(8):
        b.link(gpus[j], nvs, nvlink, count=nlinks)
        b.link(gpus[j], sws[j // 2], pci)
        b.link(nics[j], sws[j // 2], pci)
    return 1


def _dgx_a100(b: TopologyBuilder, host: int, copy: str | None, nlinks: int = 12, gpu: str = "A100-SXM4-80GB") -> int:
    return _hgx(b, host, copy, gpu=gpu, nvlink="nvlink3", nlinks=nlinks, nvswitch="nvswitch2", chips=6, gen=4,
                nic_link="ib-hdr", nic_model="ConnectX-6 HDR", cpu_model="AMD EPYC 7742", cores=64, smp="xgmi",
                storage_nics=2)


def _dgx_h100(b: TopologyBuilder, host: int, copy: str | None, nlinks: int = 18, gpu: str = "H100-SXM5-80GB") -> int:
    return _hgx(b, host, copy, gpu=gpu, nvlink="nvlink4", nlinks=nlinks, nvswitch="nvswitch3", chips=4, gen=5,
                nic_link="ib-ndr", nic_model="ConnectX-7 NDR", cpu_model="Intel Xeon Platinum 8480C", cores=56,
                smp="upi-spr")


def _hgx_b200(b: TopologyBuilder, host: int, copy: str | None) -> int:
    return _hgx(b, host, copy, gpu="B200", nvlink="nvlink5", nlinks=18, nvswitch="nvswitch4", chips=2, gen=5,
                nic_link="ib-ndr", nic_model="ConnectX-7 NDR", cpu_model="Intel Xeon Platinum 8570", cores=56,
                smp="upi-spr")


def _gb200_nvl72(b: TopologyBuilder, host: int, copy: str | None) -> int:
    nvs = b.device("nvswitch" if copy is None else f"r{copy}/nvswitch", "nvswitch", None, "NVLink Switch (NVL72)",
                   spec="nvswitch4", chips=18, nvls=True)
    for t in range(18):
        h = host + t
        p = f"h{h}/"
        graces = []
        for s in (0, 1):
            grace = b.device(f"{p}cpu{s}", "cpu", h, "Grace", socket=s, numa=s, cores=72)
            graces.append(grace)
            sw = b.device(f"{p}pcisw{s}", "pcie_switch", h, "PCIe Gen5 switch", socket=s, numa=s)
            b.link(sw, grace, "pcie-gen5")
            for g in (2 * s, 2 * s + 1):
                gpu = b.device(f"{p}gpu{g}", "gpu", h, "B200", socket=s, numa=s, index=g)
                b.link(gpu, grace, "nvlink-c2c")
                b.link(gpu, nvs, "nvlink5", count=18)
                b.link(gpu, sw, "pcie-gen5")
                nic = b.device(f"{p}nic{g}", "nic", h, "ConnectX-7 NDR", socket=s, numa=s, rail=g,
                               role="compute", port="ib-ndr")
                b.link(nic, sw, "pcie-gen5")
        b.link(graces[0], graces[1], "nvlink-c2c")
    return 18


def _pcie_8gpu(b: TopologyBuilder, host: int, copy: str | None) -> int:
    p = _prefix(host, copy)
    cpus = [b.device(f"{p}cpu{s}", "cpu", host, "Intel Xeon (Cascade Lake)", socket=s, numa=s, cores=28)
            for s in (0, 1)]
    b.link(cpus[0], cpus[1], "upi")
    sws = [b.device(f"{p}pcisw{k}", "pcie_switch", host, "PCIe Gen4 switch", socket=k // 2, numa=k // 2)
           for k in range(4)]
    for k, sw in enumerate(sws):
        b.link(sw, cpus[k // 2], "pcie-gen4")
    gpus = [b.device(f"{p}gpu{j}", "gpu", host, "PCIe GPU (Gen4 x16)", socket=j // 4, numa=j // 4, index=j)
            for j in range(8)]
    nics = [b.device(f"{p}nic{j}", "nic", host, "ConnectX-6 HDR", socket=j // 4, numa=j // 4, rail=j,
                     role="compute", port="ib-hdr") for j in range(8)]
    for j in range(8):
        b.link(gpus[j], sws[j // 2], "pcie-gen4")
        b.link(nics[j], sws[j // 2], "pcie-gen4")
    return 1


def _cpu_devices(b: TopologyBuilder, p: str, host: int, cores: int) -> tuple[str, list[str]]:
    """One CPU host's memory, loopback NIC and cores (shared memory and loopback TCP to each core):
    (memory device, core devices)."""
    mem = b.device(f"{p}mem0", "host_mem", host, "DRAM", socket=0, numa=0)
    lo = b.device(f"{p}lo", "nic", host, "loopback", loopback=True)
    out = []
    for c in range(cores):
        core = b.device(f"{p}core{c}", "cpu", host, "CPU core", core=c, socket=0, numa=0)
        b.link(core, mem, "shm")
        b.link(core, lo, "loopback-tcp")
        out.append(core)
    return mem, out


def _cpu_host(b: TopologyBuilder, host: int, copy: str | None, cores: int = 2) -> int:
    p = _prefix(host, copy)
    mem, _ = _cpu_devices(b, p, host, cores)
    if copy is not None:
        eth = b.device(f"{p}eth0", "nic", host, "Ethernet NIC", rail=0, role="compute", port="eth-25g")
        b.link(eth, mem, "pcie-gen3-x8")
    return 1


PRESETS: Mapping[str, Preset] = {
    p.name: p for p in [
        Preset("dgx-a100", "8x A100 SXM4, NVSwitch gen2, 12 NVLink3/GPU, 8 HDR NICs + storage, PCIe Gen4, 2 AMD CPUs",
               _dgx_a100, "ib-hdr"),
        Preset("dgx-a100-40gb", "dgx-a100 with A100-SXM4-40GB GPUs (the first DGX A100, 320 GB)",
               lambda b, h, c: _dgx_a100(b, h, c, gpu="A100-SXM4-40GB"), "ib-hdr"),
        Preset("a800", "dgx-a100 with 8 NVLink3 per GPU (400 GB/s)",
               lambda b, h, c: _dgx_a100(b, h, c, nlinks=8, gpu="A800-SXM4-80GB"), "ib-hdr"),
        Preset("dgx-h100", "8x H100 SXM5, NVSwitch gen3 (NVLS), 18 NVLink4/GPU, 8 NDR NICs, PCIe Gen5, 2 Intel CPUs",
               _dgx_h100, "ib-ndr"),
        Preset("h800", "dgx-h100 with 8 NVLink4 per GPU (400 GB/s)",
               lambda b, h, c: _dgx_h100(b, h, c, nlinks=8, gpu="H800-SXM5-80GB"), "ib-ndr"),
        Preset("hgx-h200", "dgx-h100 with H200 GPUs",
               lambda b, h, c: _dgx_h100(b, h, c, gpu="H200-SXM5-141GB"), "ib-ndr"),
        Preset("hgx-b200", "8x B200, NVLink Switch gen4 (NVLS, 2 chips), 18 NVLink5/GPU, 8 NDR NICs, PCIe Gen5, "
               "2 Intel CPUs", _hgx_b200, "ib-ndr"),
        Preset("gb200-nvl72", "rack of 18 trays x (2 Grace + 4 B200), NVLink5 switch for all 72 GPUs, NVLink-C2C",
               _gb200_nvl72, "ib-ndr"),
        Preset("pcie-8gpu", "8 PCIe Gen4 GPUs, no NVLink, 4 PCIe switches with 2 HDR NICs each, 2 sockets (UPI)",
               _pcie_8gpu, "ib-hdr"),
        Preset("cpu-host", "one host, 2 CPU cores as ranks: shared memory (~8 GB/s memcpy) and loopback TCP",
               _cpu_host, "eth-25g"),
    ]
}


def preset_names() -> list[str]:
    return list(PRESETS)


def _get(name: str) -> Preset:
    p = PRESETS.get(name)
    if p is None:
        raise TopologyError(f"unknown topology preset {name!r}; presets: {', '.join(PRESETS)}; clusters: "
                            "NxPRESET[:oversub=R,net=LINK,gpus=G] (e.g. 16xdgx-h100:oversub=2); or a .yaml/.json file")
    return p


def preset(name: str, catalog: Mapping[str, LinkSpec] | None = None) -> Topology:
    """One preset machine (or rack, for gb200-nvl72), without a scale-out network."""
    p = _get(name)
    b = TopologyBuilder(name, catalog)
    nh = p.build(b, 0, None)
    return b.build(meta={"preset": name, "copies": 1, "hosts": nh})


def _leaf_switch(net: LinkSpec) -> Any:
    if net.kind in ("infiniband", "ipoib"):
        gen = net.generation.lower().replace("ndr200", "ndr")
        return SWITCHES.get(f"ib-{gen}-switch", SWITCHES["ib-hdr-switch"])
    return SWITCHES["eth-switch"]


def cluster(name: str, copies: int, *, oversubscription: float = 1.0, network: str | None = None,
            catalog: Mapping[str, LinkSpec] | None = None, gpus: int | None = None) -> Topology:
    """``copies`` machines of preset ``name`` on a rail-optimized fat tree (see the module docstring).

    ``oversubscription`` (> 0, default 1): leaf downlink / uplink capacity; uplinks are derated by it.
    ``network``: the scale-out link spec (default: the preset's).
    ``gpus``: ranks on the first ``gpus`` GPUs of each machine only (a partition of each: 4 of a DGX's 8, or
    8 of an NVL72 rack's 72, i.e. its first 2 trays); the other GPUs stay in the hardware, idle.
    """
    p = _get(name)
    if not isinstance(copies, int) or copies < 1:
        raise TopologyError(f"cluster of {name}: the number of machines must be an integer >= 1, got {copies!r}")
    if gpus is not None:
        whole = cluster(name, copies, oversubscription=oversubscription, network=network, catalog=catalog)
        per = whole.nranks // copies
        if not isinstance(gpus, int) or not 1 <= gpus <= per:
            raise TopologyError(f"cluster of {name}: gpus per machine must be an integer in 1..{per}, got {gpus!r}")
        part = whole.with_ranks([r for k in range(copies) for r in range(k * per, k * per + gpus)])
        part.meta["gpus_per_machine"] = gpus
        return part
    if not (isinstance(oversubscription, (int, float)) and math.isfinite(oversubscription) and oversubscription > 0):
        raise TopologyError(f"oversubscription must be a number > 0, got {oversubscription!r}")
    net = link(network or p.network, catalog)
    if net.kind not in NETWORK_KINDS:
        raise TopologyError(f"network {net.name!r} is a {net.kind} link, not a network; use one of "
                            f"{', '.join(n for n, s in (catalog or _catalog()).items() if s.kind in NETWORK_KINDS)}")
    b = TopologyBuilder(f"{copies}x{name}", catalog)
    host = 0
    for k in range(copies):
        host += p.build(b, host, str(k))
    nhosts = host
    rails: dict[int, list[tuple[int, str]]] = {}
    for d in b.devices:
        if d.kind == "nic" and d.attrs.get("role") == "compute":
            rails.setdefault(int(d.attrs.get("rail", 0)), []).append((d.host, d.id))  # type: ignore[arg-type]
    sw = _leaf_switch(net)
    per_leaf = max(1, sw.ports // 2)
    nleaves = sum(math.ceil(len(v) / per_leaf) for v in rails.values())
    spine = None
    if nleaves > 1:
        total_up = sum(len(v) for v in rails.values())
        spine = b.device("net/spine", "net_switch", None, f"{sw.name} spine (aggregated)", tier="spine",
                         aggregated=True, uplinks=total_up, oversubscription=float(oversubscription),
                         spec=sw.name, sharp=sw.sharp)
    for r in sorted(rails):
        nics = sorted(rails[r])
        for k in range(0, len(nics), per_leaf):
            group = nics[k:k + per_leaf]
            leaf = b.device(f"net/leaf{r}.{k // per_leaf}", "net_switch", None, sw.name, tier="leaf", rail=r,
                            spec=sw.name, ports=sw.ports, sharp=sw.sharp)
            for _, nic in group:
                b.link(nic, leaf, net)
            if spine is not None:
                b.link(leaf, spine, net, count=len(group), factor=1.0 / oversubscription)
    meta = {"preset": name, "copies": copies, "hosts": nhosts, "network": net.name,
            "oversubscription": float(oversubscription), "hosts_per_leaf": per_leaf, "leaves": nleaves}
    return b.build(meta=meta)


def _catalog() -> Mapping[str, LinkSpec]:
    from .links import CATALOG

    return CATALOG


def cpu_hosts(ranks_per_host: "list[int] | tuple[int, ...] | int", *, cores: int | None = None,
              network: "str | LinkSpec" = "eth-25g", name: str = "",
              catalog: Mapping[str, LinkSpec] | None = None, nics: int = 1) -> Topology:
    """CPU hosts with the given number of ranks each (one 'core' device per rank, even beyond the host's
    cores: ``cores`` per host, default this machine's, is kept in ``meta['cores_per_host']`` and ranks
    beyond it share cores), shared memory and loopback TCP inside a host, ``network`` between hosts
    (a catalog name or a rate such as ``1gbit`` / ``1gbit@2ms``) through one Ethernet switch.
    ``nics``: NICs per host, each its own ``network`` link (NIC r on rail r, as ``--emulate-hosts --nics``
    wires them); the host's ranks are shared out over them in turn (local rank i uses NIC i mod nics), so a
    ring's channels leave a host through different NICs (:func:`interlink.topology.rail_plan`), as the
    runtime's lanes do."""
    counts = [int(ranks_per_host)] if isinstance(ranks_per_host, int) else [int(c) for c in ranks_per_host]
    if not counts or any(c < 1 for c in counts):
        raise TopologyError(f"ranks per host must be >= 1, got {counts}")
    if not isinstance(nics, int) or nics < 1:
        raise TopologyError(f"nics per host must be a whole number >= 1, got {nics!r}")
    cores = int(cores) if cores else (os.cpu_count() or 1)
    net = link(network, catalog)
    b = TopologyBuilder(name or (f"cpu:{counts[0]}" if len(counts) == 1 else f"cpu:{len(counts)}x{counts[0]}"),
                        catalog)
    multi = len(counts) > 1
    sw = b.device("net/switch", "net_switch", None, "Ethernet switch") if multi else None
    ranks = []
    for h, c in enumerate(counts):
        mem, cores_h = _cpu_devices(b, f"h{h}/" if multi else "", h, c)
        ranks.extend(cores_h)
        if multi:
            eths = []
            for r in range(nics):
                eth = b.device(f"h{h}/eth{r}", "nic", h, "Ethernet NIC", role="compute",
                               **({"rail": r} if nics > 1 else {}))
                b.link(eth, mem, "pcie-gen3-x8")
                b.link(eth, sw, net)  # type: ignore[arg-type]
                eths.append(eth)
            if nics > 1:  # local rank i leaves through NIC i mod nics
                where = {d.id: d for d in b.devices}
                for i, core in enumerate(cores_h):
                    where[core].attrs["nic"] = eths[i % nics]
    meta = {"cores_per_host": cores, "hosts": len(counts), "network": net.name}
    if nics > 1:
        meta["nics_per_host"] = nics
    return b.build(ranks, meta=meta)


_CPU_OPTS = ("ranks", "cores", "net", "network", "delay", "nics")


def _cpu_cluster(spec: str, hosts: int, opts: str, catalog: Mapping[str, LinkSpec] | None) -> Topology:
    """``HxCPU-HOST[:ranks=P,cores=C,net=RATE|LINK,delay=D,nics=K]``: H CPU hosts of P ranks (default C)
    each, C cores per host (default this machine's), joined by one switch over ``net`` (default eth-25g; a
    tc rate such as 1gbit makes a shaped link), ``delay`` added to its latency, K NICs per host (default 1,
    each a ``net`` link): the hosts of ``interlink run --emulate-hosts H --nproc-per-host P --link-rate RATE
    --link-delay D --nics K``."""
    kv: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in opts.split(","))):
        key, eq, val = item.partition("=")
        key = key.strip().lower()
        if not eq or key not in _CPU_OPTS:
            raise TopologyError(f"topology spec {spec!r}: option {item!r} is not KEY=VALUE with KEY in "
                                f"{', '.join(_CPU_OPTS)}")
        kv["net" if key == "network" else key] = val.strip()
    try:
        cores = int(kv["cores"]) if "cores" in kv else (os.cpu_count() or 1)
        ranks = int(kv["ranks"]) if "ranks" in kv else cores
        nics = int(kv.get("nics", "1"))
    except ValueError:
        raise TopologyError(f"topology spec {spec!r}: ranks, cores and nics must be integers") from None
    if ranks < 1 or cores < 1 or nics < 1:
        raise TopologyError(f"topology spec {spec!r}: ranks, cores and nics must be >= 1")
    net: Any = kv.get("net", "eth-25g")
    if "delay" in kv:
        from .links import ethernet_rate, _RATE_NAME

        if not _RATE_NAME.match(net):
            raise TopologyError(f"topology spec {spec!r}: delay needs net=RATE (e.g. net=1gbit,delay=2ms)")
        net = ethernet_rate(net, kv["delay"])
    return cpu_hosts([ranks] * hosts, cores=cores, network=net, name=spec.strip(), catalog=catalog, nics=nics)


_CLUSTER = re.compile(r"^\s*(\d+)\s*[xX*]\s*([A-Za-z][\w.-]*)\s*$")
_OPTS = {"oversub": "oversubscription", "oversubscription": "oversubscription", "net": "network",
         "network": "network", "gpus": "gpus"}


def parse_topology(spec: "str | os.PathLike[str] | Topology",
                   catalog: Mapping[str, LinkSpec] | None = None) -> Topology:
    """A Topology from a preset name, a cluster spec (``16xdgx-h100:oversub=2``) or a YAML/JSON file."""
    if isinstance(spec, Topology):
        return spec
    s = os.fspath(spec).strip()
    if s.endswith((".yaml", ".yml", ".json")) or os.path.sep in s or os.path.isfile(s):
        from .io import load_topology

        return load_topology(s, catalog=catalog)
    head, _, opts = s.partition(":")
    m = _CLUSTER.match(head)
    if m and m.group(2).lower() == "cpu-host":
        return _cpu_cluster(s, int(m.group(1)), opts, catalog)
    kwargs: dict[str, Any] = {}
    if opts:
        for item in opts.split(","):
            key, eq, val = item.partition("=")
            key = key.strip().lower()
            if not eq or key not in _OPTS:
                raise TopologyError(f"topology spec {s!r}: option {item!r} is not KEY=VALUE with KEY in "
                                    "oversub, net, gpus")
            if _OPTS[key] == "oversubscription":
                try:
                    kwargs["oversubscription"] = float(val)
                except ValueError:
                    raise TopologyError(f"topology spec {s!r}: oversub must be a number, got {val!r}") from None
            elif _OPTS[key] == "gpus":
                try:
                    kwargs["gpus"] = int(val)
                except ValueError:
                    raise TopologyError(f"topology spec {s!r}: gpus must be an integer, got {val!r}") from None
            else:
                kwargs["network"] = val.strip()
    m = _CLUSTER.match(head)
    if m:
        return cluster(m.group(2), int(m.group(1)), catalog=catalog, **kwargs)
    if kwargs:
        _get(head.strip())
        raise TopologyError(f"topology spec {s!r}: options apply to clusters only (e.g. 4x{head.strip()}:{opts})")
    return preset(head.strip(), catalog)
