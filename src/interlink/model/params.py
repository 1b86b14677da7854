"""The cost model's constants: named table entries, each with its unit and the source of its figure.

Nothing in :mod:`interlink.model` hard-codes a figure: :mod:`~interlink.model.cost` reads every constant
from a :class:`Params` (``params.get("nccl.base_latency_us.ring.simple")``). :data:`DEFAULTS` holds the
built-in table; a file or a calibrated host profile gives a new :class:`Params` (nothing global changes).

Names
-----
GPU topologies (NCCL's tuning model, ``src/graph/tuning.cc`` of NCCL 2.30, as summarised in
``docs/reference.md``, 'NCCL's tuning model')::

    nccl.base_latency_us.{ring,tree}.{ll,ll128,simple}     once per collective call
    nccl.hop_latency_us.{nvlink,pcie,net}.{ll,ll128,simple} once per round, by the kind of the round's path
    protocol.efficiency.{ll,ll128,simple}                   fraction of the link bandwidth a protocol reaches
    nvls.efficiency.{hopper,blackwell}                      NVLink SHARP (in-switch reduction) efficiency
    nvls.latency_us                                         NVLS all_reduce latency
    sharp.efficiency.{ampere,hopper,blackwell,default}      InfiniBand SHARP (CollNet) efficiency
    gpu.hbm_gbps.{a100,a800,h100,h800,h200,b200,default}    GPU memory bandwidth (the gamma of a reduction)
    gpu.reduce_passes                                       memory passes per reduced byte
    reduce.overlap.{gpu,cpu}                                how much of the reduction hides under the transfer

GPU topologies, NCCL's tuner (the rows beyond the ring's that :mod:`interlink.model.nccl`, the replica of NCCL's
choice of algorithm and protocol, reads; the model prices Schedules with the rows above)::

    nccl.tree_hop_latency_us.{nvlink,pcie,net}.{ll,ll128,simple}  hwLat of NCCL's Tree row
    nccl.nvls_net_latency_us, nccl.nvls_tree_net_latency_us         hwLat NET of NVLS and NVLSTree (Simple)
    nccl.net_overhead_us.{intel,amd}                                 a multi-node ring's floor per step (x3 Simple)

GPU execution (how a Schedule's launch and steps run on GPUs, and what nccl-tests' timing adds; ``docs/reference.md``,
"Small messages on GPUs")::

    gpu.launch_us.{intel,amd,default}     host time to enqueue one collective on one GPU, by the host CPU's vendor
    gpu.net_step_us.{ll,ll128,simple}     per step whose message crosses the network: the proxy's turnaround
    gpu.stream_sync_us                    nccl-tests' stream synchronisation after its timed loop (once per loop)
    nccltests.iters                       ops in nccl-tests' timed loop (-n, default 20)

CPU hosts (interlink's own runtime; ``host.*`` entries are what ``interlink bench --calibrate`` measures)::

    host.call_us                     fixed cost of one collective call (Python path)
    host.{shm,tcp}.alpha_us          per round: the exchange latency of one round over that transport
    host.{shm,tcp}.op_us             per round, per message the busiest rank sends or receives
    host.{shm,tcp}.fanout_us         per round, per message of the busiest rank beyond one send + one receive
    host.{shm,tcp}.alpha_oversub_us  per round, x (ranks active on a host - cores) / cores: shared cores
    host.{shm,tcp}.beta_ns_per_byte  per byte a rank sends in a round (None: 1 / the path's bandwidth)
    host.reduce_ns_per_byte          per byte a rank reduces (host.tcp.reduce_ns_per_byte: out of TCP messages)
    host.oversub_byte_factor         k: with f ranks per core a byte costs 1 + k (f - 1) (k = 1: time shared)
    host.llc_bytes, host.dram_factor per-byte costs grow by up to dram_factor once the working set leaves the cache
    (cores per host come from the topology: ``meta['cores_per_host']`` or its core devices; ranks beyond them share)
    host.page.{call_us,alpha_us,op_us,fanout_us,alpha_oversub_us,beta_ns_per_byte}
                                     the host page (the Schedules of algorithms/hostpage.py: slots, slots_once,
                                     two_phase, peer_buffers), priced from their steps like a transport: a call, per
                                     round, per message (a read of a slot or of a peer's buffer), per byte
    host.fast.max_bytes, host.fast.all_reduce_max_bytes, host.fast2.{min_ranks,max_bytes}, host.fastd.min_bytes, host.slots.max_bytes_2,
    host.slots.max_bytes_2_all_gather, host.slots.max_bytes_all_gather, host.slots.max_bytes_all_to_all,
    host.stream.min_bytes
                                     where the runtime takes them (runtime/policy.py's defaults)

Files
-----
A YAML (needs PyYAML) or JSON file of ``{name: value}`` or ``{name: {value: v, source: "..."}}``,
optionally under a top-level ``params:`` key, overrides entries (:func:`load_params`). A *profile*
(written by :mod:`interlink.model.calibrate`, JSON, at ``INTERLINK_PROFILE`` or
``~/.cache/interlink/profile.json``) carries measured ``host.*`` entries; :func:`with_profile`
applies it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Iterable, Mapping

__all__ = [
    "ModelError",
    "Param",
    "Params",
    "DEFAULTS",
    "PROTOCOLS",
    "default_params",
    "load_params",
    "params_from_dict",
    "Profile",
    "PROFILE_VERSION",
    "profile_path",
    "load_profile",
    "save_profile",
    "host_profile",
    "with_profile",
]

PROTOCOLS = ("ll", "ll128", "simple")


class ModelError(ValueError):
    """A model input is wrong: unknown parameter, bad parameter file, unsupported collective or size."""


@dataclass(frozen=True)
class Param:
    """One constant: ``name``, ``value`` (float, or None where the model derives it), ``unit``, ``source``."""

    name: str
    value: float | None
    unit: str
    source: str


_TUNING = "NCCL 2.30 src/graph/tuning.cc (docs/reference.md, 'NCCL's tuning model')"
_RESULTS = "benchmarks/RESULTS.md (2-core VM, 2026-11-22)"


def _p(name: str, value: float | None, unit: str, source: str) -> Param:
    return Param(name, value, unit, source)


def _defaults() -> list[Param]:
    out: list[Param] = []
    base = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)}
    for algo, vals in base.items():
        for proto, v in zip(PROTOCOLS, vals):
            out.append(_p(f"nccl.base_latency_us.{algo}.{proto}", v, "us", f"{_TUNING}: baseLat {algo}"))
    hop = {"nvlink": (0.6, 1.9, 3.4), "pcie": (1.0, 2.5, 5.7), "net": (2.7, 4.0, 14.0)}
    for kind, vals in hop.items():
        for proto, v in zip(PROTOCOLS, vals):
            out.append(_p(f"nccl.hop_latency_us.{kind}.{proto}", v, "us",
                          f"{_TUNING}: hwLat[{kind}] Ring; used for every algorithm"))
    tree = {"nvlink": (0.6, 1.25, 4.0), "pcie": (1.0, 1.9, 4.0), "net": (5.0, 8.5, 14.0)}
    for kind, vals in tree.items():
        for proto, v in zip(PROTOCOLS, vals):
            out.append(_p(f"nccl.tree_hop_latency_us.{kind}.{proto}", v, "us",
                          f"{_TUNING}: hwLat[{kind}] Tree (NCCL's tuner: model/nccl.py; with one GPU per node "
                          f"NCCL uses the Tree's NET row for every algorithm)"))
    out += [
        _p("nccl.nvls_net_latency_us", 18.0, "us", f"{_TUNING}: hwLat[NET] NVLS Simple (NCCL's tuner: model/nccl.py)"),
        _p("nccl.nvls_tree_net_latency_us", 20.9, "us",
           f"{_TUNING}: hwLat[NET] NVLSTree Simple (NCCL's tuner: model/nccl.py)"),
        _p("nccl.net_overhead_us.intel", 1.0, "us",
           f"{_TUNING}: getNetOverhead, x86 Intel: an inter-node ring's per-step floor (x3 for Simple)"),
        _p("nccl.net_overhead_us.amd", 2.0, "us", f"{_TUNING}: getNetOverhead, x86 AMD (x3 for Simple)"),
    ]
    out += _gpu_execution()
    out += [
        _p("protocol.efficiency.ll", 0.5, "fraction",
           "NCCL LL: 8-byte stores of 4 data + 4 flag bytes, at most 50% of link bandwidth (docs/reference.md s4)"),
        _p("protocol.efficiency.ll128", 0.95, "fraction",
           "NCCL LL128: 120 of every 128 bytes are data, ~95% of link bandwidth (docs/reference.md s4)"),
        _p("protocol.efficiency.simple", 1.0, "fraction", "NCCL Simple: full bandwidth (docs/reference.md s4)"),
        _p("nvls.efficiency.hopper", 0.85, "fraction", "NCCL src/tuning nvlsEfficiency: Hopper 0.85"),
        _p("nvls.efficiency.blackwell", 0.74, "fraction", "NCCL src/tuning nvlsEfficiency: Blackwell 0.74"),
        _p("sharp.efficiency.ampere", 1.0, "fraction",
           f"{_TUNING}: CollNet Direct busBw has no compute-capability factor before Hopper (the GPU:NIC "
           f"factor is 1 with a NIC per GPU)"),
        _p("sharp.efficiency.hopper", 0.85, "fraction",
           f"{_TUNING}: CollNet Direct busBw x .85 when minCompCap >= 90"),
        _p("sharp.efficiency.blackwell", 0.85, "fraction",
           f"{_TUNING}: CollNet Direct busBw x .85 when minCompCap >= 90"),
        _p("sharp.efficiency.default", 1.0, "fraction", "estimate for a GPU of unknown architecture"),
        _p("nvls.latency_us", 25.0, "us", f"{_TUNING}: NVLS latency on NVLink (a check: the NVLS Schedule's "
           f"call latency + steps give it; tests/test_model_cost.py)"),
        _p("gpu.hbm_gbps.a100", 2039.0, "GB/s", "A100-SXM4-80GB datasheet: HBM2e 2,039 GB/s"),
        _p("gpu.hbm_gbps.a100-40gb", 1555.0, "GB/s", "A100-SXM4-40GB datasheet: HBM2 1,555 GB/s"),
        _p("gpu.hbm_gbps.a800", 2039.0, "GB/s", "A800 80GB: as A100-SXM4-80GB"),
        _p("gpu.hbm_gbps.h100", 3350.0, "GB/s", "H100-SXM5 datasheet: HBM3 3.35 TB/s"),
        _p("gpu.hbm_gbps.h800", 3350.0, "GB/s", "H800-SXM5: as H100-SXM5"),
        _p("gpu.hbm_gbps.h200", 4800.0, "GB/s", "H200 datasheet: HBM3e 4.8 TB/s"),
        _p("gpu.hbm_gbps.b200", 8000.0, "GB/s", "B200 datasheet: HBM3e 8 TB/s"),
        _p("gpu.hbm_gbps.default", 2000.0, "GB/s", "estimate for an unknown GPU"),
        _p("gpu.reduce_passes", 1.0, "passes",
           "estimate: NCCL fuses the reduction into the copy kernel; one extra pass over HBM per reduced byte"),
        _p("reduce.overlap.gpu", 1.0, "fraction",
           "NCCL's kernels reduce as the data streams in (the reduction is fused into the copy), so the HBM "
           "pass overlaps the link transfer: a round takes max(transfer, reduce) (0: transfer + reduce)"),
        _p("reduce.overlap.cpu", 0.0, "fraction",
           "interlink's executor reduces received slots with numpy on the same cores that copy: additive"),
        _p("host.call_us", 6.5, "us", f"{_RESULTS}: the Python path of one call (world size 1)"),
        _p("host.shm.alpha_us", 8.0, "us", f"{_RESULTS}: one shared-memory exchange"),
        _p("host.tcp.alpha_us", 30.0, "us", "estimate: one loopback TCP exchange through the kernel (2 syscalls)"),
        _p("host.shm.op_us", 4.0, "us",
           "estimate: Python cost of posting and completing one message, per message of the busiest rank "
           "in a round"),
        _p("host.tcp.op_us", 6.0, "us", "estimate: as host.shm.op_us, plus a socket call"),
        _p("host.shm.fanout_us", 0.0, "us",
           "per round, per message of the busiest rank beyond one send and one receive (a rank waiting on "
           "several peers at once, e.g. direct all_reduce): 0 until calibration fits it"),
        _p("host.tcp.fanout_us", 0.0, "us", "as host.shm.fanout_us, over TCP"),
        _p("host.shm.alpha_oversub_us", 50.0, "us",
           f"{_RESULTS}: 4 ranks on 2 cores pay ~10x the latency of 2 (futex sleeps and wake-ups); added per "
           "round x (ranks active on a host - cores) / cores"),
        _p("host.tcp.alpha_oversub_us", 50.0, "us", "estimate: as host.shm.alpha_oversub_us"),
        _p("host.shm.beta_ns_per_byte", None, "ns/B", "None: 1 / the path's bandwidth (the shm link: memcpy)"),
        _p("host.tcp.beta_ns_per_byte", None, "ns/B", "None: 1 / the path's bandwidth (loopback-tcp link)"),
        _p("host.reduce_ns_per_byte", 0.2, "ns/B",
           "estimate: numpy a += b streams 3 bytes per reduced byte at ~15 GB/s of memory bandwidth"),
        _p("host.tcp.reduce_ns_per_byte", None, "ns/B",
           "per byte a rank reduces out of TCP messages (received into a buffer first); None: "
           "host.reduce_ns_per_byte"),
        _p("host.oversub_byte_factor", 1.0, "x",
           "ranks sharing cores: a byte costs 1 + k x (ranks per core - 1) times its cost on a core of its "
           "own (k = this; 1: the cores' time is simply shared; calibration fits it)"),
        _p("host.llc_bytes", 32.0 * 2**20, "B",
           "estimate (a 2-core AMD EPYC VM: 32 MiB L3); per-byte costs grow once a host's working set leaves it"),
        _p("host.dram_factor", 1.0, "x",
           "per-byte cost out of cache / in cache; 1: no cache effect (calibration fits it); the factor applied "
           "is 1 + (x - 1) * max(0, 1 - llc / working set), working set = 2 x S x ranks on the host"),
        # host.page.*: fitted together by interlink bench --calibrate on a 2-core x86 VM, 2026-11-26 (24 host-page samples, 2 and 4 ranks)
        _p("host.page.call_us", 0.0, "us",
           "the fixed cost of one call on the host page's paths, beyond its rounds and messages (the latency "
           "path skips most of what host.call_us measures): fitted 0"),
        _p("host.page.alpha_us", 0.86, "us", "per round on the host page: a publish and a wait (fitted)"),
        _p("host.page.op_us", 3.2, "us", "per message of the busiest rank in a round: one read of a slot or "
           "of a peer's buffer, or one write into it (fitted; 2 ranks, 8-byte all_reduce: 0.86 + 3.2 = 4.1 us "
           "against 3.8 measured)"),
        _p("host.page.fanout_us", 0.0, "us", "as host.shm.fanout_us, on the host page (fitted 0)"),
        _p("host.page.alpha_oversub_us", 0.0, "us",
           "per round x (ranks active - cores) / cores (fitted 0: 8 B at 4 ranks on 2 cores, 20.8 us, is its "
           "three reads a rank)"),
        _p("host.page.beta_ns_per_byte", 0.073, "ns/B", "per byte a rank copies on the page (fitted)"),
        _p("host.page.reduce_ns_per_byte", None, "ns/B",
           "per byte a rank reduces reading the page (slots or peers' buffers); None: host.reduce_ns_per_byte"),
        _p("host.page.oversub_byte_factor", None, "x",
           "as host.oversub_byte_factor, for the host page's Schedules (None: that one); calibration fits it"),
        _p("host.fast.max_bytes", 262144.0, "B", "interlink.runtime.policy.fast_small_bytes() default"),
        _p("host.fast.all_reduce_max_bytes", 32768.0, "B",
           "algorithms.hostpath LIMITS all_reduce_oneshot_max: the one-shot all_reduce up to this where every rank "
           "has a core, two_phase above"),
        _p("host.fast.all_reduce_max_bytes_2", 8192.0, "B",
           "algorithms.hostpath LIMITS all_reduce_oneshot_max_2: on 2 ranks the one-shot all_reduce up to this, "
           "two_phase above"),
        _p("host.fast2.min_ranks", 2.0, "ranks",
           "interlink.runtime.fastpath: two-phase all_reduce from 2 ranks (on 2 ranks up to host.fastd.min_bytes)"),
        _p("host.fast2.max_bytes", 4.0 * 2**20, "B",
           "interlink.runtime.policy.fast_max_bytes() default: the slot size (all_reduce in shared memory up to it)"),
        _p("host.slots.max_bytes_2", 2.0 * 2**20, "B",
           "interlink.runtime.policy.slots_max_bytes_two_ranks() default: on 2 ranks broadcast, all_gather and "
           "reduce_scatter above this read the peer's buffer (peer_buffers)"),
        _p("host.slots.max_bytes_2_all_gather", 256.0 * 2**10, "B",
           "interlink.runtime.policy.slots_max_bytes_two_ranks_all_gather() default: on 2 ranks an all_gather "
           "whose per-rank input is above this reads the peer's input (peer_buffers)"),
        _p("host.slots.max_bytes_all_gather", 4.0 * 2**20, "B",
           "interlink.runtime.policy.slots_max_bytes_all_gather() default: on 3+ ranks an all_gather whose "
           "per-rank input is above this reads the peers' inputs (peer_buffers); the slot size where the runtime "
           "streams its copies out of the slots (transport/stream.py), else 1 MiB"),
        _p("host.stream.min_bytes", 16.0 * 2**20, "B",
           "interlink.runtime.policy.stream_min_bytes() (half the last-level cache; 0: never): on 3+ ranks an "
           "all_gather keeps the slots up to host.slots.max_bytes_all_gather only where local ranks^2 MiB reach "
           "it (its copies out of the slots stream), else up to 1 MiB"),
        _p("host.slots.max_bytes_all_to_all", 1.0 * 2**20, "B",
           "interlink.runtime.policy.slots_max_bytes_all_to_all() default: on 3+ ranks an all_to_all whose "
           "input is above this puts its blocks into the peers' outputs (peer_buffers)"),
        _p("host.fastd.min_bytes", 2.0 * 2**20, "B",
           "interlink.runtime.fastpath (INTERLINK_SHM_AR_DIRECT_MIN_BYTES): all_reduce from the ranks' own "
           "buffers above this size (and above the two-phase path's)"),
    ]
    return out


#: where the small-message figures come from (docs/reference.md, "Small messages on GPUs"; interlink.model.published)
_SMALL = "docs/reference.md, small messages on GPUs"


def _gpu_execution() -> list[Param]:
    """How a Schedule runs on GPUs beyond NCCL's tuner constants: the host's launch of each call, the network
    proxy's turnaround per step, and what nccl-tests' timing loop adds. Fitted to the published rows named in each
    source; the other rows of interlink.model.published.SMALL are held out (tests/test_model_small_gpu.py)."""
    return [
        _p("gpu.launch_us.amd", 5.4, "us",
           f"{_SMALL}: host time to enqueue one collective on one GPU (NCCL's enqueue + the kernel launch), paid by "
           "the launching thread per GPU it drives: nccl-tests -g 8 on Azure ND A100 v4 (AMD EPYC 7V12, NCCL 2.18.5) "
           "takes 42-45 us from 1 KiB to 64 KiB, flat: 8 launches (Azure/AI-benchmarking-guide, ND_A100_v4_results)"),
        _p("gpu.launch_us.intel", 3.4, "us",
           f"{_SMALL}: as gpu.launch_us.amd on an Intel host: at most 27.0 us / 8 GPUs from nccl-tests -g 8 on Azure "
           "ND H100 v5 (Xeon 8480C, NCCL 2.18.5, 8 KiB; the NVLS kernel takes about as long, so an upper bound)"),
        _p("gpu.launch_us.default", 4.4, "us", "the mean of gpu.launch_us.amd and .intel, for a host of unknown CPU"),
        _p("gpu.net_step_us.ll", 3.75, "us",
           f"{_SMALL}: per step whose message crosses the network, the proxy's turnaround (the CPU proxy thread sees "
           "the GPU's send, posts the RDMA write; the receiver polls) beyond NCCL's tuner latency "
           "(nccl.hop_latency_us.net): fitted to 2 nodes x 1 A100 over HDR InfiniBand, 8 B in 19.9 us, a ring of "
           "2 network steps: (19.9 - 0.4 - 12.0) / 2 "
           "(NVIDIA/nccl-tests#150); held out: 2 x 8 A100 over RoCE (oracle-quickstart/oci-hpc-oke)"),
        _p("gpu.net_step_us.ll128", 0.0, "us",
           "0: no published small-message row runs LL128 across nodes, and LL128 carries large multi-node figures "
           "that NCCL's tuner latency already meets (NVIDIA/nccl-tests#283, 248 x H200, interlink.model.published C15)"),
        _p("gpu.net_step_us.simple", 0.0, "us",
           f"{_TUNING}: NCCL's Simple network latency (14 us, 5x LL's) already holds the proxy and the flush; "
           "0 keeps large-message figures as they were"),
        _p("gpu.stream_sync_us", 8.0, "us",
           "estimate: the host's wake-up from cudaStreamSynchronize, which nccl-tests calls once after its timed "
           "loop (src/common.cu: time = (iters ops + one synchronisation) / iters): 0.4 us an op at 20 iterations"),
        _p("nccltests.iters", 20.0, "ops", "nccl-tests' default timed iterations (-n 20)"),
    ]


DEFAULTS: tuple[Param, ...] = tuple(_defaults())


class Params:
    """An immutable table of :class:`Param` by name. ``get(name)`` returns the value."""

    def __init__(self, entries: Iterable[Param], origin: str = "defaults") -> None:
        self._e: Mapping[str, Param] = MappingProxyType({p.name: p for p in entries})
        self.origin = origin

    def __contains__(self, name: object) -> bool:
        return name in self._e

    def __iter__(self):
        return iter(self._e.values())

    def __len__(self) -> int:
        return len(self._e)

    def __repr__(self) -> str:
        return f"Params({len(self._e)} entries, {self.origin})"

    def entry(self, name: str) -> Param:
        try:
            return self._e[name]
        except KeyError:
            near = sorted(n for n in self._e if n.split(".")[0] == name.split(".")[0])
            raise ModelError(f"no model parameter {name!r}" + (f" (known: {', '.join(near)})" if near else "")) \
                from None

    def get(self, name: str) -> float | None:
        return self.entry(name).value

    def value(self, name: str) -> float:
        """Like :meth:`get`, for entries that must hold a number."""
        v = self.entry(name).value
        if v is None:
            raise ModelError(f"model parameter {name!r} has no value")
        return float(v)

    def source(self, name: str) -> str:
        return self.entry(name).source

    def replace(self, values: Mapping[str, Any], source: str, *, allow_new: bool = False) -> "Params":
        """A new table with some values replaced (``{name: value}`` or ``{name: {value, source, unit}}``)."""
        e = dict(self._e)
        for name, v in values.items():
            if name not in e and not allow_new:
                raise ModelError(f"{source}: no model parameter {name!r}; known: "
                                 f"{', '.join(sorted(n for n in e if n.split('.')[0] == name.split('.')[0]))}")
            old = e.get(name, Param(name, None, "", ""))
            if isinstance(v, Mapping):
                unknown = set(v) - {"value", "source", "unit"}
                if unknown:
                    raise ModelError(f"{source}: parameter {name!r}: unknown fields {sorted(unknown)}")
                val = v.get("value", old.value)
                src = str(v.get("source", source))
                unit = str(v.get("unit", old.unit))
            else:
                val, src, unit = v, source, old.unit
            if val is not None:
                try:
                    val = float(val)
                except (TypeError, ValueError):
                    raise ModelError(f"{source}: parameter {name!r} must be a number, got {val!r}") from None
            e[name] = replace(old, value=val, source=src, unit=unit)
        return Params(e.values(), f"{self.origin} + {source}")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {n: {"value": p.value, "unit": p.unit, "source": p.source} for n, p in sorted(self._e.items())}

    # ---- typed accessors --------------------------------------------------------------------------

    def base_latency_us(self, family: str, protocol: str) -> float:
        return self.value(f"nccl.base_latency_us.{family}.{protocol}")

    def call_latency_us(self, algorithm: str, protocol: str) -> float:
        """NCCL's fixed cost of one call (baseLat) for an algorithm: the ring's row for rings, the
        tree's for every other algorithm (NVLS included: its Schedule's steps add the rest of NCCL's
        25 us, ``nvls.latency_us``)."""
        return self.base_latency_us("ring" if algorithm.startswith("ring") else "tree", protocol)

    def hop_latency_us(self, kind: str, protocol: str) -> float:
        return self.value(f"nccl.hop_latency_us.{kind}.{protocol}")

    def step_overhead_us(self, kind: Any, path_lat: Any, protocol: str) -> Any:
        """Per message (GPUs), the time its sender's channel is busy before the bytes flow: NCCL's
        per-hop latency of the protocol (``nccl.hop_latency_us``, by hop kind: 0 nvlink, 1 pcie, 2 net)
        less the path's own latency, which the message pays in flight. A message then costs its sender
        ``overhead + bytes / (bandwidth x efficiency)`` and arrives ``path latency`` later: the hop latency
        in all, as NCCL's tables say, of which only the overhead holds the channel. A message that crosses the
        network also holds it for the proxy's turnaround (``gpu.net_step_us``). The cost model and the
        simulator price steps with it."""
        import numpy as np

        hop = np.array([self.hop_latency_us(k, protocol) for k in ("nvlink", "pcie", "net")])
        proxy = np.array([0.0, 0.0, self.net_step_us(protocol)])  # the network proxy's turnaround, net hops only
        k = np.asarray(kind)
        return np.maximum(0.0, hop[k] - np.asarray(path_lat, dtype=np.float64)) + proxy[k]

    def net_step_us(self, protocol: str) -> float:
        """Per step whose message crosses the network: the proxy's turnaround beyond NCCL's tuner latency
        (``gpu.net_step_us``; 0 for a table without it)."""
        name = f"gpu.net_step_us.{protocol}"
        return self.value(name) if name in self and self.get(name) is not None else 0.0

    def launch_us(self, vendor: str) -> float:
        """Host time to enqueue one collective on one GPU, on a host CPU of ``vendor`` (intel, amd, or '')."""
        name = f"gpu.launch_us.{vendor}"
        return self.value(name if name in self else "gpu.launch_us.default")

    def efficiency(self, protocol: str) -> float:
        return self.value(f"protocol.efficiency.{protocol}")

    def hbm_gbps(self, gpu_name: str) -> float:
        key = gpu_family(gpu_name)
        mem = re.search(r"(\d+)\s*GB", gpu_name or "")
        variant = f"gpu.hbm_gbps.{key}-{mem.group(1)}gb" if mem else ""  # a memory size of its own HBM
        name = variant if variant in self else f"gpu.hbm_gbps.{key}"
        return self.value(name if name in self else "gpu.hbm_gbps.default")

    def nvls_efficiency(self, gpu_name: str) -> float:
        arch = gpu_arch(gpu_name)
        name = f"nvls.efficiency.{arch}"
        return self.value(name) if name in self else 0.0

    def sharp_efficiency(self, gpu_name: str) -> float:
        """Fraction of the NIC bandwidth that SHARP's in-network reduction (NCCL's CollNet) reaches."""
        name = f"sharp.efficiency.{gpu_arch(gpu_name)}"
        return self.value(name if name in self else "sharp.efficiency.default")

    def switch_efficiency(self, kind: str, gpu_name: str) -> float:
        """What an in-switch step of a switch of ``kind`` (``nvls`` or ``sharp``:
        :data:`interlink.topology.paths.SWITCH_KINDS`) reaches of its path's bandwidth (0: no such switch)."""
        return self.sharp_efficiency(gpu_name) if kind == "sharp" else self.nvls_efficiency(gpu_name)


def gpu_family(name: str) -> str:
    """'h100', 'a100', ... from a device name such as 'H100-SXM5-80GB'; '' when unknown."""
    n = (name or "").lower()
    for key in ("gb200", "b200", "b100", "h200", "h800", "h100", "gh200", "a800", "a100"):
        if key in n:
            return {"gb200": "b200", "b100": "b200", "gh200": "h100"}.get(key, key)
    return ""


def gpu_arch(name: str) -> str:
    fam = gpu_family(name)
    if fam in ("h100", "h800", "h200"):
        return "hopper"
    if fam in ("b200",):
        return "blackwell"
    if fam in ("a100", "a800"):
        return "ampere"
    return ""


def default_params() -> Params:
    return Params(DEFAULTS)


def params_from_dict(data: Mapping[str, Any], base: Params | None = None, source: str = "file") -> Params:
    base = default_params() if base is None else base
    if isinstance(data, Mapping) and isinstance(data.get("params"), Mapping):
        data = data["params"]
    if not isinstance(data, Mapping):
        raise ModelError(f"{source}: expected a mapping of parameter names to values")
    return base.replace(data, source)


def _read_file(path: str | os.PathLike[str]) -> Any:
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ModelError(f"cannot read {p!r}: {exc}") from exc
    if p.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise ModelError(f"{p}: reading YAML needs PyYAML (pip install 'interlink[topology]'); "
                             "or give the parameters as JSON") from None
        return yaml.safe_load(text)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(f"{p}: not valid JSON: {exc}") from exc


def load_params(path: str | os.PathLike[str], base: Params | None = None) -> Params:
    """Parameters from a YAML/JSON file of overrides (see the module docstring)."""
    return params_from_dict(_read_file(path) or {}, base, source=os.fspath(path))


# ---- host profiles ---------------------------------------------------------------------------------

PROFILE_VERSION = 1


@dataclass(frozen=True)
class Profile:
    """What ``interlink bench --calibrate`` measured on one host.

    ``params``: fitted ``host.*`` entries (``{name: value}``); ``fits``: per transport, the fit's
    quality (samples, median and worst relative error); ``meta``: host name, date, cores, command.
    """

    params: Mapping[str, float]
    fits: Mapping[str, Any]
    meta: Mapping[str, Any]
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"interlink_profile": PROFILE_VERSION, "meta": dict(self.meta), "params": dict(self.params),
                "fits": dict(self.fits)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "") -> "Profile":
        if not isinstance(data, Mapping) or data.get("interlink_profile") != PROFILE_VERSION:
            raise ModelError(f"{path or 'profile'}: not an interlink profile of version {PROFILE_VERSION}")
        return cls(dict(data.get("params") or {}), dict(data.get("fits") or {}), dict(data.get("meta") or {}), path)

    @property
    def source(self) -> str:
        m = self.meta
        return f"calibrated on {m.get('host', '?')} {m.get('date', '')}".strip()


def profile_path() -> str:
    """INTERLINK_PROFILE, else ~/.cache/interlink/profile.json."""
    env = os.environ.get("INTERLINK_PROFILE")
    if env:
        return os.path.expanduser(env)
    return os.path.join(os.path.expanduser("~"), ".cache", "interlink", "profile.json")


def load_profile(path: str | os.PathLike[str] | None = None) -> Profile:
    p = profile_path() if path is None else os.fspath(path)
    return Profile.from_dict(_read_file(p), p)


def save_profile(profile: Profile, path: str | os.PathLike[str] | None = None) -> str:
    p = profile_path() if path is None else os.fspath(path)
    d = os.path.dirname(p)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = f"{p}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(profile.to_dict(), f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, p)
    return p


_HOST_PROFILE: dict[str, Any] = {}


def host_profile(reload: bool = False) -> Profile | None:
    """This host's profile (read once per process and path), or None when there is none or it is unreadable."""
    p = profile_path()
    if reload or _HOST_PROFILE.get("path") != p:
        prof: Profile | None
        try:
            prof = load_profile(p) if os.path.exists(p) else None
        except ModelError:
            prof = None
        _HOST_PROFILE.clear()
        _HOST_PROFILE.update(path=p, profile=prof)
    return _HOST_PROFILE["profile"]


def with_profile(params: Params, profile: Profile | None) -> Params:
    """``params`` with the profile's measured ``host.*`` entries (unchanged when profile is None)."""
    if profile is None:
        return params
    vals = {k: v for k, v in profile.params.items() if k in params}
    return params.replace(vals, profile.source) if vals else params
