"""The link catalog: every interconnect the hardware model knows, as named table entries with sources.

Conventions (read these before using a figure)
-----------------------------------------------
* **Bandwidth is per direction**, in **GB/s = 10^9 bytes/s**. A link that vendors sell as "900 GB/s"
  (NVLink 4, both directions summed over 18 links) is stored as 18 links x 25 GB/s line rate per direction.
  Full duplex is assumed everywhere: a link carries its bandwidth in each direction at the same time.
* Every entry has two bandwidths:

  - ``line_gbps``: the signalling rate after line encoding (PCIe 128b/130b, IB 64b/66b ...), per direction;
  - ``effective_gbps``: what a well-tuned bulk transfer achieves, per direction. Where NCCL measures or
    models a figure (NCCL ``src/graph/topo.h`` constants, nccl-tests results) that figure is used and the
    ``source`` says so; otherwise the figure is an estimate and the ``source`` says "estimate".

  Models should use ``effective_gbps`` (also available as :attr:`LinkSpec.gbps`).
* ``latency_us`` is the one-way latency attributed to crossing this one link (including the switch or
  NIC at its far end). The figures are chosen so that a typical hop through one switch (two links) sums
  to NCCL's per-hop hardware latency for the LL protocol (``src/graph/tuning.cc``: NVLink 0.6 us,
  PCIe 1.0 us, network 2.7 us for GPU -> PCIe -> NIC -> switch -> NIC -> PCIe -> GPU).
* Names are lower-case, e.g. ``pcie-gen4`` (x16), ``pcie-gen4-x8`` (any width: computed on lookup),
  ``nvlink4`` (one link), ``ib-ndr`` (one 4x port), ``roce-400g``, ``eth-25g``, ``shm``, ``loopback-tcp``.

Switches (NVSwitch generations with their NVLink SHARP capability, InfiniBand and Ethernet switches,
PCIe switches) are devices, not links; they are described by :class:`SwitchSpec` in :data:`SWITCHES`.

Overriding: :func:`load_catalog` reads a YAML or JSON file of entries (whole new entries, or only some
fields of existing ones) and returns a new catalog; pass it as ``catalog=`` to :func:`link`, to the
presets and to ``parse_topology``. Nothing here is global mutable state.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

__all__ = [
    "TopologyError",
    "LinkSpec",
    "SwitchSpec",
    "LINK_KINDS",
    "NETWORK_KINDS",
    "CATALOG",
    "SWITCHES",
    "link",
    "switch",
    "pcie",
    "load_catalog",
    "catalog_from_dict",
]


class TopologyError(ValueError):
    """A topology, link name, preset or topology file is wrong (names what and lists what would be valid)."""


#: Every link kind. ``nvswitch`` is not a link kind: GPU-NVSwitch links are ``nvlink``.
LINK_KINDS = ("pcie", "nvlink", "c2c", "smp", "infiniband", "roce", "ethernet", "ipoib", "shm", "tcp")
#: Kinds whose traffic goes through a network stack / fabric: a path using one is of type NET.
NETWORK_KINDS = frozenset({"infiniband", "roce", "ethernet", "ipoib", "tcp"})


@dataclass(frozen=True)
class LinkSpec:
    """One kind of link. Bandwidths per direction in GB/s (10^9 B/s); latency in microseconds.

    ``typical_count`` is how many such links a device usually has (NVLink links per GPU: 4, 6, 12, 18, 18);
    :attr:`per_device_gbps` is then the per-device total per direction. ``lanes`` is the PCIe width.
    """

    name: str
    kind: str
    generation: str
    line_gbps: float
    effective_gbps: float
    latency_us: float
    lanes: int = 0
    typical_count: int = 1
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in LINK_KINDS:
            raise TopologyError(f"link {self.name!r}: kind {self.kind!r} is not one of {', '.join(LINK_KINDS)}")
        for field in ("line_gbps", "effective_gbps", "latency_us"):
            v = getattr(self, field)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise TopologyError(f"link {self.name!r}: {field} must be a finite number >= 0, got {v!r}")
        if self.effective_gbps <= 0:
            raise TopologyError(f"link {self.name!r}: effective_gbps must be > 0")

    @property
    def gbps(self) -> float:
        """Effective bandwidth per direction, GB/s: the figure models should use."""
        return self.effective_gbps

    @property
    def per_device_gbps(self) -> float:
        """Effective per-direction total of ``typical_count`` links (e.g. 18 x 20.6 = 370.8 for NVLink 4)."""
        return self.typical_count * self.effective_gbps

    @property
    def per_device_line_gbps(self) -> float:
        """Line-rate per-direction total of ``typical_count`` links (e.g. 18 x 25 = 450 for NVLink 4)."""
        return self.typical_count * self.line_gbps

    def replace(self, **changes: Any) -> "LinkSpec":
        """A copy with some fields changed (e.g. a measured ``effective_gbps``)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SwitchSpec:
    """A switch chip or system. ``port`` names the LinkSpec of its ports; ``ports`` is its radix.

    ``nvls``: NVLink SHARP (in-switch reduction, NCCL's NVLS algorithm); ``sharp``: InfiniBand SHARP
    (in-network reduction, NCCL's CollNet). ``max_gpus``: largest NVLink domain the generation supports.
    """

    name: str
    kind: str  # nvswitch | infiniband | ethernet | pcie
    generation: str
    port: str
    ports: int
    nvls: bool = False
    sharp: bool = False
    max_gpus: int = 0
    source: str = ""


def _e(name: str, kind: str, gen: str, line: float, eff: float, lat: float, source: str,
       lanes: int = 0, count: int = 1) -> LinkSpec:
    return LinkSpec(name, kind, gen, float(line), float(eff), float(lat), lanes, count, source)


_NCCL_TOPO = "NCCL src/graph/topo.h"
_NCCL_PCI = ("NCCL src/graph/topo.cc kvDictPciGen: width x speed / 80 (3/4 of the raw rate after "
             "protocol overhead)")

# (PCIe generation, GT/s, line GB/s per lane per direction after encoding, NCCL effective GB/s per lane)
_PCIE_GENS: dict[int, tuple[float, float, float]] = {
    1: (2.5, 0.25, 15 / 80),
    2: (5.0, 0.5, 30 / 80),
    3: (8.0, 8.0 * 128 / 130 / 8, 60 / 80),
    4: (16.0, 16.0 * 128 / 130 / 8, 120 / 80),
    5: (32.0, 32.0 * 128 / 130 / 8, 240 / 80),
    6: (64.0, 64.0 * 242 / 256 / 8, 480 / 80),  # Gen6: PAM4 + FLIT mode (242/256), no 128b/130b
}
_PCIE_LAT_US = 0.5


def pcie(gen: int, lanes: int = 16) -> LinkSpec:
    """The PCIe link of generation ``gen`` (1-6) and width ``lanes`` (1, 2, 4, 8, 16, 32).

    Line rate = lanes x GT/s x encoding / 8; effective = NCCL's estimate (x16: Gen3 12, Gen4 24, Gen5 48,
    Gen6 96 GB/s per direction).
    """
    if gen not in _PCIE_GENS:
        raise TopologyError(f"PCIe generation {gen!r} unknown; known: {sorted(_PCIE_GENS)}")
    if lanes not in (1, 2, 4, 8, 12, 16, 32):
        raise TopologyError(f"PCIe width x{lanes} is not one of x1, x2, x4, x8, x12, x16, x32")
    gts, line, eff = _PCIE_GENS[gen]
    name = f"pcie-gen{gen}" if lanes == 16 else f"pcie-gen{gen}-x{lanes}"
    src = (f"PCIe {gen}.0 spec: {gts:g} GT/s per lane; " + _NCCL_PCI
           + ("; Gen6 64 GT/s -> 480 in NCCL >= 2.2x" if gen == 6 else "")
           + ("; Towards Data Science 'AI in Multiple GPUs: How GPUs Communicate' (2026) lists x16 as"
              " ~32/64/128 GB/s 'bidirectional' for Gen4/5/6" if gen >= 4 else ""))
    return LinkSpec(name, "pcie", f"gen{gen}", round(line * lanes, 3), round(eff * lanes, 3), _PCIE_LAT_US,
                    lanes, 1, src)


_ENTRIES: list[LinkSpec] = [pcie(g) for g in (3, 4, 5, 6)] + [
    # ---- NVLink: one link, per direction. Per-GPU totals = typical_count x this (per direction). ----
    _e("nvlink1", "nvlink", "1", 20.0, 18.0, 0.3,
       "P100: 4 links x 20 GB/s per direction = 160 GB/s total both ways; effective " + _NCCL_TOPO
       + " SM60_NVLINK_BW 18.0", count=4),
    _e("nvlink2", "nvlink", "2", 25.0, 20.0, 0.3,
       "V100: 6 links x 25 GB/s per direction = 300 GB/s total (NADDOD 'GPU Communication Technology "
       "Accelerating AI Development', Jan 2024); effective " + _NCCL_TOPO
       + " SM70_NVLINK_BW 20.0", count=6),
    _e("nvlink3", "nvlink", "3", 25.0, 20.0, 0.3,
       "A100: 12 links x 25 GB/s per direction = 600 GB/s total (Towards Data Science 'AI in Multiple "
       "GPUs: How GPUs Communicate', 2026); effective " + _NCCL_TOPO
       + " SM80_NVLINK_BW 20.0", count=12),
    _e("nvlink4", "nvlink", "4", 25.0, 20.6, 0.3,
       "H100: 18 links x 25 GB/s per direction = 900 GB/s total (Towards Data Science 'AI in Multiple "
       "GPUs: How GPUs Communicate', 2026); effective " + _NCCL_TOPO
       + " SM90_NVLINK_BW 20.6", count=18),
    _e("nvlink5", "nvlink", "5", 50.0, 40.1, 0.3,
       "Blackwell: 18 links x 50 GB/s per direction = 1.8 TB/s total (Towards Data Science 'AI in "
       "Multiple GPUs: How GPUs Communicate', 2026); effective " + _NCCL_TOPO
       + " SM100_NVLINK_BW 40.1", count=18),
    _e("nvlink-c2c", "c2c", "grace", 450.0, 400.0, 0.3,
       "NVLink-C2C (Grace-Hopper/Grace-Blackwell CPU<->GPU): 900 GB/s total = 450 per direction "
       "(NVIDIA Grace Hopper whitepaper; Towards Data Science 'AI in Multiple GPUs: How GPUs Communicate', "
       "2026); effective: estimate (~90% of line)"),
    # ---- CPU socket interconnects (the SMP link of NCCL's SYS paths): whole socket-to-socket path ----
    _e("qpi", "smp", "broadwell", 38.4, 6.0, 0.5,
       "Intel QPI, 2 links x 9.6 GT/s x 2 B; effective " + _NCCL_TOPO + " BDW_QPI_BW 6.0"),
    _e("upi", "smp", "skylake", 62.4, 10.0, 0.5,
       "Intel UPI (Skylake/Cascade Lake), 3 links x 10.4 GT/s x 2 B; effective " + _NCCL_TOPO
       + " SKL_QPI_BW 10.0"),
    _e("upi-spr", "smp", "sapphire-rapids", 128.0, 22.0, 0.5,
       "Intel UPI 2.0 (Sapphire Rapids), 4 links x 16 GT/s x 2 B; effective " + _NCCL_TOPO
       + " SRP_QPI_BW 22.0"),
    _e("upi-emr", "smp", "emerald-rapids", 160.0, 40.0, 0.5,
       "Intel UPI 2.0 (Emerald Rapids), 4 links x 20 GT/s x 2 B; effective " + _NCCL_TOPO
       + " ERP_QPI_BW 40.0"),
    _e("xgmi", "smp", "zen2", 128.0, 16.0, 0.5,
       "AMD Infinity Fabric / xGMI between EPYC sockets (Rome/Milan); line: estimate; effective "
       + _NCCL_TOPO + " AMD_BW / AMD_ZEN12_BW 16.0"),
    _e("xgmi-zen4", "smp", "zen4", 128.0, 24.0, 0.5,
       "AMD xGMI (Genoa); line: estimate; effective " + _NCCL_TOPO + " AMD_ZEN34_BW 24.0"),
    _e("xgmi-zen5", "smp", "zen5", 128.0, 32.0, 0.5,
       "AMD xGMI (Turin); line: estimate; effective " + _NCCL_TOPO + " AMD_ZEN5_BW 32.0"),
    # ---- InfiniBand, one 4x port ----
    _e("ib-sdr", "infiniband", "SDR", 1.0, 0.9, 1.5, "IB SDR 4x: 10 Gb/s signalling, 8b/10b -> 8 Gb/s; "
       "effective: estimate (90%)"),
    _e("ib-ddr", "infiniband", "DDR", 2.0, 1.8, 1.2, "IB DDR 4x: 20 Gb/s, 8b/10b -> 16 Gb/s; effective: "
       "estimate (90%)"),
    _e("ib-qdr", "infiniband", "QDR", 4.0, 3.4, 0.8, "IB QDR 4x: 40 Gb/s, 8b/10b -> 32 Gb/s; effective: "
       "estimate (typical ib_write_bw on PCIe Gen2 hosts)"),
    _e("ib-fdr", "infiniband", "FDR", 6.82, 6.0, 0.5, "IB FDR 4x: 56 Gb/s, 64b/66b -> 54.5 Gb/s; effective: "
       "estimate"),
    _e("ib-edr", "infiniband", "EDR", 12.5, 11.5, 0.35, "IB EDR 4x: 100 Gb/s; effective: estimate (~92%)"),
    _e("ib-hdr", "infiniband", "HDR", 25.0, 24.0, 0.35,
       "IB HDR 4x: 200 Gb/s (ConnectX-6); effective ~24 GB/s busbw per NIC measured by NCCL (nccl#412); "
       "~16 GB/s when the NIC hangs off the CPU instead of the GPU's PCIe switch"),
    _e("ib-ndr200", "infiniband", "NDR200", 25.0, 23.5, 0.35,
       "IB NDR200 (2 lanes of NDR): 200 Gb/s; effective: estimate. (Towards Data Science 'AI in Multiple "
       "GPUs: How GPUs Communicate', 2026, lists 'NDR200 ~100 GB/s': that is XDR's figure)"),
    _e("ib-ndr", "infiniband", "NDR", 50.0, 47.0, 0.35,
       "IB NDR 4x: 400 Gb/s (ConnectX-7); effective 46-48 GB/s busbw per NIC measured (nccl-tests#290)"),
    _e("ib-xdr", "infiniband", "XDR", 100.0, 94.0, 0.35,
       "IB XDR 4x: 800 Gb/s (ConnectX-8; Towards Data Science 'AI in Multiple GPUs: How GPUs Communicate', "
       "2026: ~100 GB/s per port); effective: estimate (94%, as NDR)"),
    # ---- RDMA over Converged Ethernet ----
    _e("roce-10g", "roce", "10GbE", 1.25, 1.15, 1.0, "RoCE v2 on 10 GbE; effective: estimate (92%)"),
    _e("roce-25g", "roce", "25GbE", 3.125, 2.9, 0.8, "RoCE v2 on 25 GbE; effective: estimate (92%)"),
    _e("roce-100g", "roce", "100GbE", 12.5, 11.5, 0.5, "RoCE v2 on 100 GbE; effective: estimate (92%); "
       "NCCL's default NET_BW is 12 GB/s for 100 Gbit"),
    _e("roce-200g", "roce", "200GbE", 25.0, 23.0, 0.5, "RoCE v2 on 200 GbE; effective: estimate (92%)"),
    _e("roce-400g", "roce", "400GbE", 50.0, 46.0, 0.5, "RoCE v2 on 400 GbE (Spectrum-X class); effective: "
       "estimate (92%)"),
    # ---- Ethernet with the kernel TCP stack (gloo, NCCL sockets) ----
    _e("eth-10g", "ethernet", "10GbE", 1.25, 1.17, 5.0, "10 GbE, TCP goodput ~94% of line; latency: "
       "kernel TCP stack, estimate (NADDOD 'GPU Communication Technology Accelerating AI Development', "
       "Jan 2024: TCP/IP latency far above RDMA)"),
    _e("eth-25g", "ethernet", "25GbE", 3.125, 2.9, 5.0, "25 GbE, TCP; effective: estimate"),
    _e("eth-100g", "ethernet", "100GbE", 12.5, 10.0, 5.0, "100 GbE, TCP (several streams); effective: estimate"),
    _e("eth-200g", "ethernet", "200GbE", 25.0, 18.0, 5.0, "200 GbE, TCP (several streams); effective: estimate"),
    _e("eth-400g", "ethernet", "400GbE", 50.0, 30.0, 5.0, "400 GbE, TCP (several streams); effective: estimate"),
    # ---- IP over InfiniBand (kernel IP stack on an IB port) ----
    _e("ipoib-hdr", "ipoib", "HDR", 25.0, 6.0, 5.0, "IPoIB on HDR: kernel IP stack, far below native RDMA; "
       "effective: estimate"),
    _e("ipoib-ndr", "ipoib", "NDR", 50.0, 10.0, 5.0, "IPoIB on NDR: kernel IP stack; effective: estimate"),
    # ---- Inside one host, between CPU ranks ----
    _e("shm", "shm", "memcpy", 8.0, 8.0, 0.5,
       "host shared memory, one core's memcpy: numpy copy of 64 MiB ~8 GB/s on a 2-core x86 VM "
       "(docs/reference.md, 'CPU peers on a 2-core machine'); discovery can measure it (discover(measure=True))"),
    _e("loopback-tcp", "tcp", "loopback", 8.0, 2.0, 5.0,
       "TCP over the loopback device (gloo's only intra-host transport): memcpy-bound line, effective and "
       "latency: estimates"),
]

#: The default catalog, name -> LinkSpec (read-only). PCIe widths other than x16 are computed by :func:`link`.
CATALOG: Mapping[str, LinkSpec] = MappingProxyType({s.name: s for s in _ENTRIES})

_SWITCH_ENTRIES = [
    SwitchSpec("nvswitch1", "nvswitch", "1", "nvlink2", 18, max_gpus=16,
               source="NVSwitch gen 1 (DGX-2, V100): 18 NVLink2 ports; up to 16 GPUs fully connected, non-blocking"),
    SwitchSpec("nvswitch2", "nvswitch", "2", "nvlink3", 36, max_gpus=16,
               source="NVSwitch gen 2 (DGX/HGX A100, 6 chips): 36 NVLink3 ports; up to 16 GPUs, non-blocking"),
    SwitchSpec("nvswitch3", "nvswitch", "3", "nvlink4", 64, nvls=True, max_gpus=256,
               source="NVSwitch gen 3 (DGX/HGX H100, 4 chips): 64 NVLink4 ports; up to 256 GPUs with the NVLink "
                      "Switch System; NVLink SHARP in-switch reduction (NCCL NVLS)"),
    SwitchSpec("nvswitch4", "nvswitch", "4", "nvlink5", 72, nvls=True, max_gpus=576,
               source="NVLink Switch for Blackwell (GB200 NVL72: 18 chips in 9 trays): 72 NVLink5 ports; "
                      "up to 576 GPUs; NVLink SHARP (NCCL NVLS)"),
    SwitchSpec("ib-edr-switch", "infiniband", "EDR", "ib-edr", 36, sharp=True,
               source="Mellanox Switch-IB 2 (SB7800): 36 EDR ports, SHARP v1"),
    SwitchSpec("ib-hdr-switch", "infiniband", "HDR", "ib-hdr", 40, sharp=True,
               source="NVIDIA Quantum QM8700: 40 HDR ports, SHARP v2"),
    SwitchSpec("ib-ndr-switch", "infiniband", "NDR", "ib-ndr", 64, sharp=True,
               source="NVIDIA Quantum-2 QM9700: 64 NDR ports, SHARP v3"),
    SwitchSpec("ib-xdr-switch", "infiniband", "XDR", "ib-xdr", 144, sharp=True,
               source="NVIDIA Quantum-X800 Q3400: 144 XDR ports, SHARP v4"),
    SwitchSpec("eth-switch", "ethernet", "any", "eth-100g", 64,
               source="a 64-port data-centre Ethernet switch (e.g. Spectrum SN4600/SN5600 class)"),
    SwitchSpec("pcie-gen4-switch", "pcie", "gen4", "pcie-gen4", 6,
               source="Broadcom PEX88096 class: 98 lanes Gen4 (~6 x16 ports)"),
    SwitchSpec("pcie-gen5-switch", "pcie", "gen5", "pcie-gen5", 9,
               source="Broadcom PEX89144 class: 144 lanes Gen5 (~9 x16 ports)"),
]
#: Switch chips and systems, name -> SwitchSpec (read-only).
SWITCHES: Mapping[str, SwitchSpec] = MappingProxyType({s.name: s for s in _SWITCH_ENTRIES})

_PCIE_NAME = re.compile(r"^pcie-gen(\d)(?:-x(\d+))?$")


def link(name: str, catalog: Mapping[str, LinkSpec] | None = None) -> LinkSpec:
    """The LinkSpec called ``name`` in ``catalog`` (default :data:`CATALOG`).

    ``pcie-genG-xW`` is computed for any generation G and width W not in the table.
    Raises :class:`TopologyError` listing the known names.
    """
    cat = CATALOG if catalog is None else catalog
    if isinstance(name, LinkSpec):
        return name
    spec = cat.get(name)
    if spec is not None:
        return spec
    m = _PCIE_NAME.match(str(name))
    if m:
        return pcie(int(m.group(1)), int(m.group(2) or 16))
    m = _RATE_NAME.match(str(name))
    if m:
        return ethernet_rate(m.group(1), m.group(2))
    raise TopologyError(f"unknown link {name!r}; known links: {', '.join(sorted(cat))} "
                        "(and pcie-genG-xW for any PCIe generation G and width W; a tc rate such as 1gbit "
                        "or 100mbit, optionally @DELAY such as 1gbit@2ms, for a shaped Ethernet link)")


_RATE_NAME = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?\s*[kmgt]?i?(?:bit|bps))\s*(?:@\s*([0-9.]+\s*[a-z]+))?\s*$",
                        re.IGNORECASE)
#: tc's rate units (bit/s; "bps" is bytes/s), and its time units (seconds)
RATE_UNITS = {
    "": 1, "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12,
    "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40,
    "bps": 8, "kbps": 8 * 10**3, "mbps": 8 * 10**6, "gbps": 8 * 10**9, "tbps": 8 * 10**12,
    "kibps": 8 * 2**10, "mibps": 8 * 2**20, "gibps": 8 * 2**30, "tibps": 8 * 2**40,
}
TIME_UNITS = {
    "": 1e-6, "us": 1e-6, "usec": 1e-6, "usecs": 1e-6, "ms": 1e-3, "msec": 1e-3, "msecs": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0,
}
_NUM_UNIT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*")


def rate_bits(text: str) -> float:
    """A tc rate (``1gbit``, ``100mbit``, ``125mbps`` = bytes/s, a bare number = bit/s) in bit/s."""
    m = _NUM_UNIT.fullmatch(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in RATE_UNITS:
        raise TopologyError(f"rate {text!r}: expected a number and a tc unit, e.g. 1gbit, 100mbit, 10gbit, "
                            f"125mbps (bytes/s)")
    return float(m.group(1)) * RATE_UNITS[unit]


def delay_seconds(text: str) -> float:
    """A tc time (``1ms``, ``200us``, ``0.5ms``, a bare number = microseconds) in seconds."""
    m = _NUM_UNIT.fullmatch(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in TIME_UNITS:
        raise TopologyError(f"delay {text!r}: expected a number and a unit, e.g. 1ms, 200us")
    return float(m.group(1)) * TIME_UNITS[unit]


#: TCP goodput over a shaped link: payload / line rate (1500-byte frames: 1448 B of payload in 1538 B
#: on the wire); measured 0.94 on an emulated 1 Gbit/s link (benchmarks/RESULTS.md)
TCP_GOODPUT = 0.94


def ethernet_rate(rate: str, delay: str | None = None) -> LinkSpec:
    """An Ethernet link at a tc-style ``rate`` (``1gbit``, ``100mbit``, ``125mbps`` = bytes/s) carrying TCP,
    with ``delay`` (``2ms``, ``50us``) added to the kernel stack's latency: the links of
    ``interlink run --emulate-hosts --link-rate R --link-delay D``, or any shaped network."""
    bits = rate_bits(rate)
    if bits <= 0:
        raise TopologyError(f"link rate {rate!r} must be > 0")
    lat = CATALOG["eth-25g"].latency_us
    if delay:
        lat += delay_seconds(delay) * 1e6
    line = bits / 8e9
    name = f"{rate.strip().lower()}" + (f"@{delay.strip().lower()}" if delay else "")
    return LinkSpec(name, "ethernet", f"{line * 8:g} Gbit/s", line, line * TCP_GOODPUT, lat,
                    source=f"shaped Ethernet at {rate} (tc tbf); effective: TCP goodput {TCP_GOODPUT:g} of line"
                    + (f"; latency: kernel stack + {delay}" if delay else ""))


def switch(name: str) -> SwitchSpec:
    """The SwitchSpec called ``name``; raises :class:`TopologyError` listing the known names."""
    try:
        return SWITCHES[name]
    except KeyError:
        raise TopologyError(f"unknown switch {name!r}; known switches: {', '.join(SWITCHES)}") from None


_FIELDS = {f.name for f in dataclasses.fields(LinkSpec)}


def catalog_from_dict(entries: Mapping[str, Mapping[str, Any]],
                      base: Mapping[str, LinkSpec] | None = None) -> dict[str, LinkSpec]:
    """``base`` (default :data:`CATALOG`) updated with ``entries``: {name: {field: value}}.

    An entry for an existing name may give only some fields (``shm: {effective_gbps: 11.5}``);
    a new name needs kind, line_gbps (or effective_gbps) and latency_us; generation defaults to "".
    """
    out = dict(CATALOG if base is None else base)
    if not isinstance(entries, Mapping):
        raise TopologyError(f"link catalog must be a mapping name -> fields, got {type(entries).__name__}")
    for name, fields in entries.items():
        if not isinstance(fields, Mapping):
            raise TopologyError(f"link catalog entry {name!r} must be a mapping of fields")
        unknown = set(fields) - _FIELDS
        if unknown:
            raise TopologyError(f"link catalog entry {name!r}: unknown fields {sorted(unknown)}; "
                                f"fields are {sorted(_FIELDS)}")
        fields = dict(fields)
        fields.pop("name", None)
        old = out.get(name)
        if old is None:
            m = _PCIE_NAME.match(name)
            old = link(name) if m else None
        if old is not None:
            out[name] = dataclasses.replace(old, **fields)
            continue
        missing = {"kind", "latency_us"} - set(fields)
        if missing or not ({"line_gbps", "effective_gbps"} & set(fields)):
            raise TopologyError(f"new link catalog entry {name!r} needs kind, latency_us and line_gbps or "
                                f"effective_gbps (missing {sorted(missing) or ['a bandwidth']})")
        fields.setdefault("line_gbps", fields.get("effective_gbps"))
        fields.setdefault("effective_gbps", fields["line_gbps"])
        fields.setdefault("generation", "")
        out[name] = LinkSpec(name=name, **fields)
    return out


def load_catalog(path: str | os.PathLike[str], base: Mapping[str, LinkSpec] | None = None) -> dict[str, LinkSpec]:
    """Read a YAML (``.yaml``/``.yml``; needs PyYAML) or JSON file of catalog entries.

    The file holds ``{name: {field: value, ...}, ...}``, optionally under a top-level ``links:`` key.
    Returns ``base`` (default :data:`CATALOG`) updated with it (see :func:`catalog_from_dict`).
    """
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise TopologyError(f"cannot read link catalog {p!r}: {exc}") from exc
    if p.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise TopologyError(f"{p}: reading YAML needs PyYAML (pip install 'interlink[topology]'); "
                                "or give the catalog as JSON") from None
        data = yaml.safe_load(text)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TopologyError(f"{p}: not valid JSON: {exc}") from exc
    if isinstance(data, Mapping) and "links" in data and isinstance(data["links"], Mapping):
        data = data["links"]
    return catalog_from_dict(data or {}, base)
