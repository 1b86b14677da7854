"""The hardware model: link catalog, topology graph, presets, files and discovery of this machine.

Bandwidths are GB/s (10^9 B/s) **per direction**; latencies are microseconds.

    >>> from interlink.topology import parse_topology
    >>> t = parse_topology("16xdgx-h100:oversub=2")
    >>> p = t.path(0, 8)                    # rank 0 -> rank 8 (another host)
    >>> p.path_type, p.bottleneck_gbps      # (PathType.NET, 47.0)

Layering: this package imports only :mod:`interlink.errors` from the rest of interlink and knows
nothing of algorithms.
"""

from .discover import Discovery, discover, measure_memcpy_gbps, parse_nvidia_smi_topo
from .graph import DEVICE_KINDS, Device, Link, Path, PathType, Topology, TopologyBuilder
from .io import SCHEMA_VERSION, dumps, load_topology, loads, save_topology, topology_from_dict, topology_to_dict
from .paths import (HOP_KINDS, PathTable, RailPlan, SwitchPlan, hop_kind, nvls_domains, path_table, rail_plan,
                    switch_plan)
from .links import (CATALOG, LINK_KINDS, NETWORK_KINDS, SWITCHES, LinkSpec, SwitchSpec, TopologyError,
                    catalog_from_dict, link, load_catalog, pcie, switch)
from .presets import PRESETS, Preset, cluster, parse_topology, preset, preset_names

__all__ = [
    # links
    "LinkSpec", "SwitchSpec", "CATALOG", "SWITCHES", "LINK_KINDS", "NETWORK_KINDS", "TopologyError",
    "link", "switch", "pcie", "load_catalog", "catalog_from_dict",
    # graph
    "DEVICE_KINDS", "Device", "Link", "Path", "PathType", "Topology", "TopologyBuilder",
    # paths between ranks (cost model, simulator)
    "PathTable", "path_table", "HOP_KINDS", "hop_kind", "RailPlan", "rail_plan", "SwitchPlan", "switch_plan",
    "nvls_domains",
    # presets
    "Preset", "PRESETS", "preset", "cluster", "parse_topology", "preset_names",
    # io
    "SCHEMA_VERSION", "topology_to_dict", "topology_from_dict", "save_topology", "load_topology", "dumps", "loads",
    # discovery
    "Discovery", "discover", "measure_memcpy_gbps", "parse_nvidia_smi_topo",
]
