"""Discovery of this machine: CPUs, NUMA nodes, memory, GPUs and NVLinks, PCIe, NICs -> a Topology.

Sources, each optional (what cannot be seen becomes a note, never an exception):

* CPUs: ``os.sched_getaffinity``/``os.cpu_count``, ``/proc/cpuinfo`` (vendor, model);
  NUMA nodes: ``/sys/devices/system/node/node*/cpulist``; memory: ``/proc/meminfo``.
* GPUs and NVLinks: NVML (``nvidia-ml-py``, imported lazily), else ``nvidia-smi topo -m`` parsed
  (:func:`parse_nvidia_smi_topo`), else none.
* PCIe generation and width: ``/sys/bus/pci/devices/*/current_link_speed`` and ``current_link_width``;
  PCIe switches: the bridges above a device in ``/sys/devices/pci*`` (as NCCL reads them).
* NICs: ``/sys/class/net/*/speed`` (Ethernet, Mb/s) and ``/sys/class/infiniband/*/ports/*/rate``.

Without a GPU the result is a CPU host like the ``cpu-host`` preset: every usable core a rank
(``core<i>``), joined through its NUMA node's memory (``mem<n>``, link ``shm``) and through the loopback
device (``lo``, link ``loopback-tcp``); NUMA nodes joined by the socket link of the CPU vendor.
``discover(measure=True)`` puts this host's measured memcpy bandwidth into the ``shm`` link.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .graph import Topology, TopologyBuilder
from .links import CATALOG, LinkSpec, link

__all__ = ["Discovery", "discover", "measure_memcpy_gbps", "parse_nvidia_smi_topo"]

log = logging.getLogger("interlink.topology")


@dataclass
class Discovery:
    """What :func:`discover` found: the topology, notes on what it could not see, and the raw facts."""

    topology: Topology
    notes: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


def measure_memcpy_gbps(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """Median bandwidth (GB/s, bytes copied / time) of numpy copies of an ``nbytes`` buffer."""
    import numpy as np

    n = max(1, nbytes // 8)
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    times.sort()
    return (n * 8) / times[len(times) // 2] / 1e9


# ---- small readers -----------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _cpulist(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


_GTS_GEN = {"2.5": 1, "5": 2, "5.0": 2, "8": 3, "8.0": 3, "16": 4, "16.0": 4, "32": 5, "32.0": 5, "64": 6, "64.0": 6}


def _pcie_gen(speed: str | None) -> int | None:
    if not speed:
        return None
    m = re.match(r"\s*([\d.]+)\s*GT/s", speed)
    return _GTS_GEN.get(m.group(1)) if m else None


_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def _norm_bdf(bus_id: str) -> str:
    """NVML's '00000000:1B:00.0' -> sysfs '0000:1b:00.0'."""
    b = bus_id.strip().lower()
    if b.count(":") == 2 and len(b.split(":")[0]) == 8:
        b = b[4:]
    return b


def _pci_info(root: str, bdf: str) -> dict[str, Any]:
    """Link generation/width, NUMA node and bridge chain of one PCI device from sysfs."""
    base = os.path.join(root, "sys/bus/pci/devices", bdf)
    info: dict[str, Any] = {"bdf": bdf}
    gen = _pcie_gen(_read(os.path.join(base, "current_link_speed")))
    width = _read(os.path.join(base, "current_link_width"))
    info["gen"] = gen
    info["width"] = int(width) if width and width.isdigit() and int(width) > 0 else None
    numa = _read(os.path.join(base, "numa_node"))
    info["numa"] = int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None
    try:
        real = os.path.realpath(base)
        chain = [c for c in real.split(os.sep) if _BDF.match(c)]
    except OSError:
        chain = []
    info["chain"] = chain[:-1] if chain and chain[-1] == bdf else chain
    return info


def _pcie_spec(b: TopologyBuilder, gen: int | None, width: int | None) -> LinkSpec:
    g = gen if gen in (1, 2, 3, 4, 5, 6) else 4
    w = width if width in (1, 2, 4, 8, 12, 16, 32) else 16
    return b.spec(f"pcie-gen{g}" if w == 16 else f"pcie-gen{g}-x{w}")


def _net_spec_for_rate(gbits: float, ib: bool) -> str:
    if ib:
        table = [(10, "ib-sdr"), (20, "ib-ddr"), (40, "ib-qdr"), (56, "ib-fdr"), (100, "ib-edr"), (200, "ib-hdr"),
                 (400, "ib-ndr"), (800, "ib-xdr")]
    else:
        table = [(10, "eth-10g"), (25, "eth-25g"), (100, "eth-100g"), (200, "eth-200g"), (400, "eth-400g")]
    for rate, name in table:
        if gbits <= rate * 1.05:
            return name
    return table[-1][1]


# ---- nvidia-smi topo -m ------------------------------------------------------------------------------


def parse_nvidia_smi_topo(text: str) -> dict[str, Any]:
    """Parse ``nvidia-smi topo -m``: devices, the matrix of relations, CPU/NUMA affinity, NIC names.

    Returns ``{"devices": ["GPU0", ..., "NIC0"], "matrix": {("GPU0", "GPU1"): "NV18", ...},
    "numa": {"GPU0": 0}, "cpu_affinity": {"GPU0": "0-55"}, "nic_names": {"NIC0": "mlx5_0"}}``.
    """
    lines = [ln.rstrip("\n") for ln in text.splitlines()]
    header_i = next((i for i, ln in enumerate(lines) if re.match(r"^\s+(GPU\d+|NIC\d+|mlx\S+)\s", ln + " ")), None)
    out: dict[str, Any] = {"devices": [], "matrix": {}, "numa": {}, "cpu_affinity": {}, "nic_names": {}}
    if header_i is None:
        return out
    cols = [c.strip() for c in re.split(r"\t+|\s{2,}", lines[header_i].strip()) if c.strip()]
    devcols = [c for c in cols if re.match(r"^(GPU\d+|NIC\d+|mlx\S+)$", c)]
    extra = cols[len(devcols):]
    for ln in lines[header_i + 1:]:
        if not ln.strip() or ln.startswith("Legend"):
            break
        parts = [p.strip() for p in ln.split("\t")]
        if len(parts) < len(devcols) + 1:
            parts = ln.split()
        name = parts[0]
        if not re.match(r"^(GPU\d+|NIC\d+|mlx\S+)$", name):
            continue
        out["devices"].append(name)
        for c, v in zip(devcols, parts[1:1 + len(devcols)]):
            out["matrix"][(name, c)] = v.strip()
        rest = [p for p in parts[1 + len(devcols):] if p != ""]
        for key, v in zip(extra, rest):
            if key.lower().startswith("cpu affinity"):
                out["cpu_affinity"][name] = v
            elif key.lower().startswith("numa affinity") and v.strip().isdigit():
                out["numa"][name] = int(v)
    for ln in lines:
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)", ln)
        if m:
            out["nic_names"][m.group(1)] = m.group(2)
    return out


def _nvlink_for_name(name: str) -> str | None:
    n = name.upper()
    for keys, spec in ((("B200", "B100", "GB200", "B300", "BLACKWELL"), "nvlink5"),
                       (("H100", "H200", "H800", "H20", "GH200"), "nvlink4"),
                       (("A100", "A800", "A30"), "nvlink3"), (("V100",), "nvlink2"), (("P100",), "nvlink1")):
        if any(k in n for k in keys):
            return spec
    return None


# ---- discovery -----------------------------------------------------------------------------------------


def _cpu_facts(root: str, notes: list[str]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    try:
        usable = sorted(os.sched_getaffinity(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        usable = list(range(os.cpu_count() or 1))
    facts["cpu_count"] = os.cpu_count() or len(usable)
    facts["usable_cpus"] = usable
    info = _read(os.path.join(root, "proc/cpuinfo")) or ""
    m = re.search(r"^vendor_id\s*:\s*(.+)$", info, re.M)
    facts["cpu_vendor"] = m.group(1).strip() if m else ""
    m = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    facts["cpu_model"] = m.group(1).strip() if m else ""
    nodes: dict[int, list[int]] = {}
    for d in sorted(glob.glob(os.path.join(root, "sys/devices/system/node/node[0-9]*"))):
        cl = _read(os.path.join(d, "cpulist"))
        if cl is None:
            continue
        try:
            nodes[int(os.path.basename(d)[4:])] = _cpulist(cl)
        except ValueError:
            continue
    if not nodes:
        notes.append("no NUMA information (/sys/devices/system/node): assuming one node")
        nodes = {0: list(usable)}
    facts["numa_nodes"] = nodes
    mem = _read(os.path.join(root, "proc/meminfo")) or ""
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", mem, re.M)
    if m:
        facts["mem_total_gb"] = round(int(m.group(1)) * 1024 / 1e9, 2)
    else:
        notes.append("no /proc/meminfo: memory size unknown")
    return facts


def _smp_spec(vendor: str) -> str:
    return "xgmi" if "AMD" in vendor.upper() else "upi"


def _nics(root: str, notes: list[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    ib_dirs = sorted(glob.glob(os.path.join(root, "sys/class/infiniband/*")))
    for d in ib_dirs:
        name = os.path.basename(d)
        for port in sorted(glob.glob(os.path.join(d, "ports/*"))):
            rate = _read(os.path.join(port, "rate")) or ""
            layer = _read(os.path.join(port, "link_layer")) or "InfiniBand"
            m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate)
            gbits = float(m.group(1)) if m else 0.0
            spec = _net_spec_for_rate(gbits, ib=True) if gbits else "ib-hdr"
            if layer.lower().startswith("ethernet"):
                spec = {"ib-sdr": "roce-10g", "ib-ddr": "roce-25g", "ib-qdr": "roce-25g", "ib-fdr": "roce-100g",
                        "ib-edr": "roce-100g", "ib-hdr": "roce-200g", "ib-ndr": "roce-400g",
                        "ib-xdr": "roce-400g"}[spec]
            dev = os.path.realpath(os.path.join(d, "device"))
            bdf = os.path.basename(dev) if _BDF.match(os.path.basename(dev)) else None
            found.append({"name": f"{name}/{os.path.basename(port)}", "spec": spec, "gbits": gbits, "bdf": bdf,
                          "rdma": True, "rate": rate})
    ib_bdfs = {n["bdf"] for n in found if n["bdf"]}
    for d in sorted(glob.glob(os.path.join(root, "sys/class/net/*"))):
        name = os.path.basename(d)
        if name == "lo" or not os.path.exists(os.path.join(d, "device")):
            continue  # loopback and virtual interfaces (bridges, veth, ifb) have no device
        dev = os.path.realpath(os.path.join(d, "device"))
        bdf = os.path.basename(dev) if _BDF.match(os.path.basename(dev)) else None
        if bdf and bdf in ib_bdfs:
            continue
        sp = _read(os.path.join(d, "speed"))
        try:
            mbits = int(sp) if sp is not None else -1
        except ValueError:
            mbits = -1
        if mbits <= 0:
            notes.append(f"NIC {name}: speed unknown (virtual NIC?): modelled as 10 GbE")
            spec = "eth-10g"
        else:
            spec = _net_spec_for_rate(mbits / 1000.0, ib=False)
        found.append({"name": name, "spec": spec, "gbits": max(mbits, 0) / 1000.0, "bdf": bdf, "rdma": False})
    if not ib_dirs:
        notes.append("no InfiniBand/RDMA devices (/sys/class/infiniband)")
    return found


def _gpus_nvml(notes: list[str]) -> list[dict[str, Any]] | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        notes.append("NVML unavailable (pip install nvidia-ml-py)")
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded ...
        notes.append(f"NVML could not start: {exc}")
        return None
    gpus: list[dict[str, Any]] = []
    try:
        n = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        for i, h in enumerate(handles):
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            bus = pynvml.nvmlDeviceGetPciInfo(h).busId
            bus = _norm_bdf(bus.decode() if isinstance(bus, bytes) else str(bus))
            g: dict[str, Any] = {"index": i, "name": name, "bdf": bus, "nvlinks": []}
            for fn, key in ((pynvml.nvmlDeviceGetCurrPcieLinkGeneration, "gen"),
                            (pynvml.nvmlDeviceGetCurrPcieLinkWidth, "width")):
                try:
                    g[key] = int(fn(h))
                except Exception:
                    g[key] = None
            for lk in range(int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(h, lk) != pynvml.NVML_FEATURE_ENABLED:
                        continue
                except Exception:
                    continue
                try:
                    ver = int(pynvml.nvmlDeviceGetNvLinkVersion(h, lk))
                except Exception:
                    ver = 0
                try:
                    rinfo = pynvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, lk)
                    rbus = rinfo.busId.decode() if isinstance(rinfo.busId, bytes) else str(rinfo.busId)
                    rbus = _norm_bdf(rbus)
                except Exception:
                    rbus = ""
                g["nvlinks"].append({"link": lk, "version": ver, "remote": rbus})
            gpus.append(g)
    except Exception as exc:
        notes.append(f"NVML query failed: {exc}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return gpus


def _nvidia_smi(notes: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        notes.append("nvidia-smi not found")
        return None
    try:
        topo = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20)
        q = subprocess.run([exe, "--query-gpu=index,name,pci.bus_id", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        notes.append(f"nvidia-smi failed: {exc}")
        return None
    if topo.returncode != 0:
        notes.append(f"nvidia-smi topo -m failed: {(topo.stderr or topo.stdout).strip()[:200]}")
        return None
    gpus = []
    for ln in q.stdout.splitlines():
        parts = [p.strip() for p in ln.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            gpus.append({"index": int(parts[0]), "name": parts[1], "bdf": _norm_bdf(parts[2])})
    return parse_nvidia_smi_topo(topo.stdout), gpus


def discover(*, measure: bool = False, use_nvml: bool = True, use_nvidia_smi: bool = True, root: str = "/",
             catalog: Mapping[str, LinkSpec] | None = None, max_cpu_ranks: int = 256) -> Discovery:
    """Discover this machine (see the module docstring). Never raises for missing information.

    ``measure``: time a 64 MiB numpy copy (median of 5) and use it as the ``shm`` bandwidth.
    ``root``: prefix of /proc and /sys (for tests). ``max_cpu_ranks``: cap on CPU-core ranks.
    """
    notes: list[str] = []
    facts = _cpu_facts(root, notes)
    cat = dict(CATALOG if catalog is None else catalog)
    if measure:
        try:
            bw = measure_memcpy_gbps()
            shm = link("shm", cat)
            cat["shm"] = shm.replace(effective_gbps=round(bw, 3), line_gbps=round(max(bw, shm.line_gbps), 3),
                                     source=f"measured on this host: numpy copy of 64 MiB, median of 5 "
                                            f"({bw:.2f} GB/s)")
            facts["memcpy_gbps"] = bw
        except Exception as exc:  # numpy missing or out of memory
            notes.append(f"memcpy measurement failed: {exc}")

    gpus: list[dict[str, Any]] = []
    smi: dict[str, Any] | None = None
    nv = _gpus_nvml(notes) if use_nvml else None
    if nv:
        gpus = nv
        facts["gpu_source"] = "nvml"
    elif use_nvidia_smi:
        r = _nvidia_smi(notes)
        if r is not None:
            smi, gpus = r
            if not gpus:
                gpus = [{"index": int(d[3:]), "name": "NVIDIA GPU", "bdf": None}
                        for d in smi["devices"] if d.startswith("GPU")]
            facts["gpu_source"] = "nvidia-smi"
    if not gpus:
        notes.append("no GPU found: CPU host topology (ranks = CPU cores over shared memory and loopback TCP)")
    nics = _nics(root, notes)
    facts["gpus"] = [{k: v for k, v in g.items() if k != "nvlinks"} for g in gpus]
    facts["nics"] = nics

    hostname = os.uname().nodename if hasattr(os, "uname") else "localhost"
    b = TopologyBuilder(f"local:{hostname}", cat)
    nodes: dict[int, list[int]] = facts["numa_nodes"]
    smp = _smp_spec(facts["cpu_vendor"])
    if gpus:
        _build_gpu_host(b, root, facts, gpus, smi, nics, smp, notes)
        topo = b.build(meta={"discovered": True})
    else:
        usable = set(facts["usable_cpus"])
        mems = {}
        for n in sorted(nodes):
            mems[n] = b.device(f"mem{n}", "host_mem", 0, "DRAM", socket=n, numa=n)
        order = sorted(nodes)
        for x, y in zip(order, order[1:]):
            b.link(mems[x], mems[y], smp)
        lo = b.device("lo", "nic", 0, "loopback", loopback=True)
        ranks = []
        for n in order:
            for c in nodes[n]:
                if c not in usable or len(ranks) >= max_cpu_ranks:
                    continue
                core = b.device(f"core{c}", "cpu", 0, facts["cpu_model"] or "CPU core", core=c, socket=n, numa=n)
                b.link(core, mems[n], "shm")
                b.link(core, lo, "loopback-tcp")
                ranks.append(core)
        if len(ranks) < len(usable):
            notes.append(f"only the first {max_cpu_ranks} of {len(usable)} usable cores are ranks")
        for k, nic in enumerate(nics):
            d = b.device(f"nic{k}", "nic", 0, nic["name"], role="compute", rail=k, port=nic["spec"],
                         ifname=nic["name"])
            info = _pci_info(root, nic["bdf"]) if nic.get("bdf") else {}
            node = info.get("numa") if info.get("numa") in mems else order[0]
            b.link(d, mems[node], _pcie_spec(b, info.get("gen"), info.get("width")))
        topo = b.build(ranks, meta={"discovered": True})
    return Discovery(topo, notes, facts)


def _build_gpu_host(b: TopologyBuilder, root: str, facts: dict[str, Any], gpus: list[dict[str, Any]],
                    smi: dict[str, Any] | None, nics: list[dict[str, Any]], smp: str, notes: list[str]) -> None:
    nodes = sorted(facts["numa_nodes"])
    cpus = {n: b.device(f"cpu{n}", "cpu", 0, facts["cpu_model"] or "CPU", socket=n, numa=n,
                        cores=len(facts["numa_nodes"][n])) for n in nodes}
    for x, y in zip(nodes, nodes[1:]):
        b.link(cpus[x], cpus[y], smp)
    if len(nodes) > 1:
        notes.append("NUMA nodes are modelled as CPU sockets")
    # device label -> (id, pci info)
    members: dict[str, dict[str, Any]] = {}
    for g in gpus:
        gid = f"gpu{g['index']}"
        info = _pci_info(root, g["bdf"]) if g.get("bdf") else {"chain": [], "gen": None, "width": None, "numa": None}
        if g.get("gen"):
            info["gen"] = g["gen"]
        if g.get("width"):
            info["width"] = g["width"]
        if smi is not None and info.get("numa") is None:
            info["numa"] = smi["numa"].get(f"GPU{g['index']}")
        b.device(gid, "gpu", 0, g.get("name", "NVIDIA GPU"), index=g["index"],
                 numa=info.get("numa") if info.get("numa") in cpus else nodes[0],
                 socket=info.get("numa") if info.get("numa") in cpus else nodes[0])
        members[f"GPU{g['index']}"] = {"id": gid, **info}
    for k, nic in enumerate(nics):
        nid = f"nic{k}"
        info = _pci_info(root, nic["bdf"]) if nic.get("bdf") else {"chain": [], "gen": None, "width": None,
                                                                    "numa": None}
        if smi is not None and info.get("numa") is None:
            label = next((lab for lab, nm in smi["nic_names"].items() if nic["name"].startswith(nm)), None)
            if label:
                info["numa"] = smi["numa"].get(label)
        b.device(nid, "nic", 0, nic["name"], role="compute", rail=k, port=nic["spec"], ifname=nic["name"],
                 numa=info.get("numa") if info.get("numa") in cpus else nodes[0])
        members[f"NIC{k}"] = {"id": nid, **info}
    # PCIe placement: devices sharing a bridge below the root port share a PCIe switch (sysfs), else
    # the nvidia-smi relations PIX/PXB group them; everything else hangs off its NUMA node's CPU.
    switches: dict[str, str] = {}
    placed = set()
    for lab, m in members.items():
        chain = m.get("chain") or []
        cpu = cpus.get(m.get("numa"), cpus[nodes[0]])  # type: ignore[arg-type]
        spec = _pcie_spec(b, m.get("gen"), m.get("width"))
        if len(chain) >= 2:
            up = chain[1]
            sw = switches.get(up)
            if sw is None:
                sw = switches[up] = b.device(f"pcisw{len(switches)}", "pcie_switch", 0, "PCIe switch", bdf=up,
                                             numa=m.get("numa") if m.get("numa") in cpus else nodes[0])
                b.link(sw, cpu, spec)
            b.link(m["id"], sw, spec)
            placed.add(lab)
    if smi is not None:
        rest = [lab for lab in members if lab not in placed]
        parent = {lab: lab for lab in rest}

        def find(x: str) -> str:
            while parent[x] != x:
                x = parent[x]
            return x

        for (x, y), rel in smi["matrix"].items():
            if x in parent and y in parent and x != y and rel in ("PIX", "PXB"):
                parent[find(x)] = find(y)
        groups: dict[str, list[str]] = {}
        for lab in rest:
            groups.setdefault(find(lab), []).append(lab)
        for grp in groups.values():
            if len(grp) < 2:
                continue
            m0 = members[grp[0]]
            cpu = cpus.get(m0.get("numa"), cpus[nodes[0]])  # type: ignore[arg-type]
            spec = _pcie_spec(b, m0.get("gen"), m0.get("width"))
            sw = b.device(f"pcisw{len(switches)}", "pcie_switch", 0, "PCIe switch (from nvidia-smi)")
            switches[sw] = sw
            b.link(sw, cpu, spec)
            for lab in grp:
                b.link(members[lab]["id"], sw, _pcie_spec(b, members[lab].get("gen"), members[lab].get("width")))
                placed.add(lab)
        if any(rel == "PXB" for rel in smi["matrix"].values()):
            notes.append("PXB relations from nvidia-smi are modelled as one PCIe switch")
    for lab, m in members.items():
        if lab not in placed:
            cpu = cpus.get(m.get("numa"), cpus[nodes[0]])  # type: ignore[arg-type]
            b.link(m["id"], cpu, _pcie_spec(b, m.get("gen"), m.get("width")))
    if not any(m.get("gen") for m in members.values()):
        notes.append("PCIe generation/width unknown: assumed Gen4 x16")
    # NVLinks
    by_bdf = {g.get("bdf"): f"gpu{g['index']}" for g in gpus if g.get("bdf")}
    nvswitch = None
    if any(g.get("nvlinks") for g in gpus):
        for g in gpus:
            spec = _nvlink_spec(g, notes)
            counts: dict[str, int] = {}
            for lk in g.get("nvlinks", []):
                peer = by_bdf.get(lk["remote"])
                if peer is None:
                    if nvswitch is None:
                        nvswitch = b.device("nvswitch", "nvswitch", 0, "NVSwitch",
                                            nvls=spec in ("nvlink4", "nvlink5"))  # NVSwitch gen 3+
                    peer = nvswitch
                counts[peer] = counts.get(peer, 0) + 1
            me = f"gpu{g['index']}"
            for peer, c in counts.items():
                if peer == nvswitch or g["index"] < int(peer[3:]):
                    if peer != nvswitch:
                        c = min(c, _count_back(gpus, peer, g.get("bdf")))
                    b.link(me, peer, spec, count=c)
    elif smi is not None:
        for (x, y), rel in smi["matrix"].items():
            m = re.match(r"^NV(\d+)$", rel)
            if m and x.startswith("GPU") and y.startswith("GPU") and int(x[3:]) < int(y[3:]):
                g = next((gg for gg in gpus if gg["index"] == int(x[3:])), {"name": ""})
                b.link(f"gpu{x[3:]}", f"gpu{y[3:]}", _nvlink_spec(g, notes), count=int(m.group(1)))
    else:
        notes.append("no NVLink information: GPUs joined over PCIe only")


def _count_back(gpus: list[dict[str, Any]], peer_id: str, my_bdf: str | None) -> int:
    for g in gpus:
        if f"gpu{g['index']}" == peer_id:
            return sum(1 for lk in g.get("nvlinks", []) if lk["remote"] == my_bdf) or 1 << 30
    return 1 << 30


def _nvlink_spec(g: Mapping[str, Any], notes: list[str]) -> str:
    vers = {lk.get("version") for lk in g.get("nvlinks", []) if lk.get("version")}
    if vers:
        v = max(vers)
        # NVML's NvLink version: 1 -> 1.0, 2 -> 2.0, 3 -> 2.2, 4 -> 3.0, 5 -> 3.1, 6 -> 4.0, 7 -> 5.0
        return {1: "nvlink1", 2: "nvlink2", 3: "nvlink2", 4: "nvlink3", 5: "nvlink3", 6: "nvlink4"}.get(v, "nvlink5")
    spec = _nvlink_for_name(str(g.get("name", "")))
    if spec is None:
        note = "NVLink generation unknown: assumed NVLink 4"
        if note not in notes:
            notes.append(note)
        spec = "nvlink4"
    return spec

