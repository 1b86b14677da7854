"""nccl-tests output -> what the hardware allows, and which explanation fits the measured curve best.

:func:`parse` reads the output of any nccl-tests binary (``all_reduce_perf``, ``all_gather_perf`` ...) of
any version: the column layout is taken from the rows themselves (size, count, type, an optional
reduction and root, then out-of-place and in-place groups of time, algbw, busbw and errors), the ranks,
hosts and GPU model from the ``# Rank N ... on HOST device D [..] NAME`` lines, ``-g`` from ``nGpus``, and
what NCCL_DEBUG=INFO lines show (NCCL_* settings, the transports used).

:func:`explain` prices named *variants* of the cluster, each one cause written as a change of the topology
(links slower, removed, re-attached to the CPU at their share of a shared link) or of what NCCL may choose
(algorithms, protocols): at every measured size, what NCCL's tuner would pick on that cluster
(:func:`interlink.model.nccl_pick`), priced by the model, as nccl-tests would print it. Variants are ranked by

    score = n/2 ln(rms^2 + SIGMA^2) - log prior

over the n sizes the bandwidth shapes (:func:`informative`), rms of log(measured / (predicted + a)) with ``a`` a
fitted per-call latency the model does not know (:func:`fit`), SIGMA the model's own error on published
figures, and a prior by the kind of cause (:data:`PRIOR`: the cluster as given, a fault, a deliberate setting),
raised when the log shows the cause and -inf when it rules it out (:func:`log_prior`). Variants with the same
predicted curve are one answer. The first is the doctor's answer.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..model import nccl_pick, nccl_tests_us, predict
from ..model.nccl import NCCL_ALGORITHMS
from ..topology import parse_topology
from ..topology.graph import Link, Topology
from ..topology.links import CATALOG, NETWORK_KINDS, LinkSpec

NCCL_ALGOS = ("ring", "nccl_tree", "nvls", "nvls_tree")
PROTOCOLS = ("ll", "ll128", "simple")
_DTYPES = {"float": "float32", "half": "float16", "double": "float64", "int8": "int8", "uint8": "uint8",
           "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64", "bfloat16": "bfloat16",
           "int": "int32", "float32": "float32", "float16": "float16", "float64": "float64", "fp8_e4m3": "uint8",
           "fp8_e5m2": "uint8", "char": "int8"}
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1, "int32": 4,
             "uint32": 4, "int64": 8, "uint64": 8}
_OPS = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "all_to_all",
        "sendrecv", "gather", "scatter", "hypercube"}
_COLL = {"alltoall": "all_to_all"}


@dataclass
class Row:
    nbytes: int
    count: int
    dtype: str
    time_us: float  # out-of-place
    algbw: float
    busbw: float
    time_in_us: Optional[float] = None
    busbw_in: Optional[float] = None


@dataclass
class Log:
    collective: str
    rows: list[Row]
    nranks: int = 0
    hosts: list[str] = field(default_factory=list)
    gpu: str = ""
    avg_busbw: Optional[float] = None
    env: dict = field(default_factory=dict)
    ngpus: int = 1  # GPUs per thread (nccl-tests' -g): one thread launches that many GPUs' kernels per op
    seen: set = field(default_factory=set)  # what NCCL_DEBUG=INFO lines in the log show (transports used)
    #: where ``nranks`` comes from: "rank lines" (the '# Rank' lines), "busbw/algbw" (:func:`ranks_from_busbw`),
    #: "" (not known)
    ranks_from: str = ""


def parse(text: str, collective: Optional[str] = None) -> Log:
    rows: list[Row] = []
    ranks: dict[int, tuple[str, str]] = {}
    coll = collective
    avg = None
    env = {}
    ngpus = 1
    seen: set = set()
    for line in text.splitlines():
        s = line.strip()
        m = re.search(r"\bnGpus\s+(\d+)", s)
        if m:
            ngpus = max(1, int(m.group(1)))
        m = re.search(r"\b(NCCL_[A-Z0-9_]+) set by environment to (\S+)", s)
        if m:
            env[m.group(1)] = m.group(2).rstrip(".")
        for tag, pat in _SEEN:
            if pat.search(s):
                seen.add(tag)
        if not coll:
            m = re.search(r"\b(all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|sendrecv|gather|scatter)"
                          r"_perf\b", s)
            if m:
                coll = m.group(1)
        for m in re.finditer(r"\b(NCCL_[A-Z0-9_]+)=(\S+)", s):
            env[m.group(1)] = m.group(2)
        m = re.match(r"#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*)$", s)
        if m:
            ranks[int(m.group(1))] = (m.group(2), m.group(3).strip())
            continue
        m = re.match(r"#?\s*Avg bus bandwidth\s*:\s*([\d.]+)", s)
        if m:
            avg = float(m.group(1))
            continue
        if s.startswith("#") or not s:
            continue
        r = _row(s)
        if r is not None:
            rows.append(r)
    if not rows:
        raise ValueError("no nccl-tests result rows found (lines of: size count type [redop root] time algbw busbw ...)")
    hosts = sorted({h for h, _ in ranks.values()})
    gpus = sorted({g for _, g in ranks.values()})
    collective = _COLL.get(coll or "all_reduce", coll or "all_reduce")
    nranks, source = len(ranks), "rank lines" if ranks else ""
    if not nranks:
        nranks = ranks_from_busbw(collective, rows)
        source = "busbw/algbw" if nranks else ""
    return Log(collective, rows, nranks, hosts, gpus[0] if gpus else "", avg, env, ngpus, seen, source)


#: nccl-tests' busbw = algbw x c (n - 1) / n for n ranks (its doc/PERFORMANCE.md), c per collective; the
#: collectives not here have a factor of 1 (broadcast, reduce, sendrecv) and say nothing of n
BUS_SCALE = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}


def ranks_from_busbw(collective: str, rows: list[Row]) -> int:
    """The rank count busbw / algbw says (nccl-tests prints busbw = algbw x c (n - 1) / n, :data:`BUS_SCALE`),
    for a log without its '# Rank' lines; 0 when the collective's factor does not depend on n, no row tells n
    from n +- 1 (busbw and algbw are printed to two decimals: a row of a small algbw or a large n cannot), or
    the rows that can disagree."""
    c = BUS_SCALE.get(collective)
    if c is None:
        return 0
    said = []
    for r in rows:
        if not (r.algbw > 0 and r.busbw > 0) or r.algbw != r.algbw or r.busbw != r.busbw:
            continue
        ratio = r.busbw / r.algbw
        tol = 0.005 * (1.0 + ratio) / r.algbw  # the ratio's uncertainty from the printing's rounding
        n = round(1.0 / (1.0 - ratio / c)) if ratio < c else 0
        if n < 2:  # no rank count gives this ratio: a disagreement, if the ratio is not all rounding
            if tol < 0.1 * c:
                said.append(0)
            continue
        if tol >= 0.4 * c / (n * (n + 1)):  # n +- 1 within the rounding: this row cannot tell
            continue
        said.append(n if abs(c * (n - 1) / n - ratio) <= 2 * tol + 1e-3 else 0)
    if not said:
        return 0
    n = max(set(said), key=said.count)
    return n if n and said.count(n) >= 0.8 * len(said) else 0


#: transports an NCCL_DEBUG=INFO log shows it used (evidence for or against a variant)
_SEEN = (("socket", re.compile(r"via NET/Socket|Using network Socket")),
         ("ib", re.compile(r"via NET/IB|Using network IB|NET/IB : Using \[")),
         ("gdr", re.compile(r"/GDRDMA")),
         ("shm", re.compile(r"via SHM/")),
         ("p2p", re.compile(r"via P2P/")),
         ("nvls", re.compile(r"\b[1-9]\d* nvls channels")))


def _num(t: str) -> Optional[float]:
    if t in ("N/A", "n/a"):
        return float("nan")
    try:
        return float(t)
    except ValueError:
        return None


_TAG = re.compile(r"\[\d+(?:,\d+)?\](?:<stdout>:)?")


def _row(s: str) -> Optional[Row]:
    # a log line may carry tags (mpirun --tag-output's "[1,0]<stdout>:", "[0]" before each column group) or a
    # prefix (mpirun --timestamp-output's "Thu Jul 18 15:41:05 2024<stdout>:"): tags become spaces, and the row
    # starts at the first place where size, count and a type name follow each other
    toks = _TAG.sub(" ", s).split()
    for start in range(max(0, len(toks) - 6)):
        t = toks[start:]
        if len(t) < 7 or not t[0].isdigit() or not t[1].isdigit():
            continue
        dtype = t[2].lower()
        if dtype not in _DTYPES:
            continue
        rest = t[3:]
        while rest and _num(rest[0]) is None:  # the reduction (sum, none, ...)
            rest = rest[1:]
        nums = [_num(x) for x in rest]
        if any(v is None for v in nums):
            continue
        if len(nums) % 4 == 1:  # a root column
            nums = nums[1:]
        if len(nums) < 3:
            continue
        tin = nums[4] if len(nums) >= 7 else None
        bin_ = nums[6] if len(nums) >= 7 else None
        nbytes, count = int(t[0]), int(t[1])
        # some old nccl-tests printed a size column that is not count x element size (2020's 2.6 era with -g 2:
        # twice it); algbw is the message (count x element size) over the time, so when the size column
        # disagrees with algbw and count x element size agrees, the message is count x element size
        elem = _ITEMSIZE.get(_DTYPES[dtype])
        if elem and count > 0 and nums[0] and nums[0] > 0 and nums[1] and nums[1] > 0:
            by_count = count * elem

            def off(b: float) -> float:
                return abs(b / (nums[0] * 1e3) / nums[1] - 1.0)

            if off(nbytes) > 0.3 and off(by_count) < 0.1:
                nbytes = by_count
        return Row(nbytes, count, _DTYPES[dtype], nums[0], nums[1], nums[2], tin, bin_)
    return None


# ---- the cluster ----------------------------------------------------------------------------------------

_GPU_PRESETS = (("GB200", "gb200-nvl72"), ("B200", "hgx-b200"), ("H200", "hgx-h200"), ("H800", "h800"),
                ("H100", "dgx-h100"), ("H20", "dgx-h100"), ("A800", "a800"), ("A100", "dgx-a100"))


def guess_topology(log: Log) -> str:
    """A cluster spec from the log's GPU model, hosts and ranks (the ranks per host on the first GPUs of each)."""
    name = log.gpu.upper()
    preset = "pcie-8gpu"
    if "PCIE" not in name:
        for key, p in _GPU_PRESETS:
            if key in name:
                preset = p
                break
    hosts = max(1, len(log.hosts))
    per = max(1, (log.nranks or 8) // hosts)
    if not log.hosts and log.nranks > 8 and preset != "gb200-nvl72":  # hosts not shown: 8 GPUs a host
        hosts, per = -(-log.nranks // 8), 8
    return f"{hosts}x{preset}:gpus={per}" if per != 8 or hosts > 1 or preset == "gb200-nvl72" else preset


# ---- variants: the cluster changed in one way -------------------------------------------------------------
#
# A variant is one cause, written as what it does to the cluster: a change of the topology (links slower,
# removed or re-attached; see the transforms below) or of what NCCL may choose (algorithms, protocols). Each is
# priced by the same model as the cluster itself. Where a cause makes several GPUs or NICs share a link they
# did not share before (peer-to-peer through the CPU, network traffic staged in host memory), the transform
# gives each its share of that link under an even load (a link carrying k flows each way gives each 1/k of
# it): the cost model is contention-free beyond a rank's own ports, so the sharing is written into the
# topology rather than left for the model to miss.

Transform = Callable[[Topology], Optional[Topology]]

#: log prior of each kind of cause: the cluster as given; a part not doing what it should (a link, a NIC, a
#: PCIe setting, a library not found); an NCCL setting a user makes on purpose (NCCL_ALGO, NCCL_PROTO), less
#: likely to be the cause nobody knew of. A setting the log shows (NCCL_* lines) counts as the cluster given.
PRIOR = {"as specified": 0.0, "fault": -1.0, "setting": -2.0}

#: the model's own error on published large-message nccl-tests figures (benchmarks/RESULTS.md, "published
#: figures": 28 of 32 within 15%), as a log-time noise floor: explanations whose fits differ by less than this
#: are told apart by their prior, not by the fit
SIGMA = 0.15


@dataclass
class Variant:
    name: str
    what: str  # the cause it stands for, and what to check
    kind: str = "fault"  # "as specified", "fault" or "setting" (PRIOR)
    transform: Optional[Transform] = None  # the topology changed; None: the cluster as given
    algos: tuple = NCCL_ALGOS
    protocols: tuple = PROTOCOLS
    env: Optional[Callable[[dict], bool]] = None  # the log's NCCL_* settings show this cause
    shown: tuple = ()  # transports an NCCL_DEBUG=INFO log shows when this is the cause
    ruled_out: tuple = ()  # transports whose use rules it out


def _rebuild(t: Topology, links: list, tag: str) -> Topology:
    return Topology(t.devices, links, ranks=t.ranks, name=f"{t.name} [{tag}]", meta=t.meta)


def _with_factor(ln: Link, f: float) -> Link:
    return Link(ln.id, ln.a, ln.b, ln.spec, ln.count, ln.factor * f)


def scale_links(kinds: frozenset, f: float, tag: str) -> Transform:
    """Links of the given kinds at ``f`` times their rate (None when the cluster has none)."""

    def tr(t: Topology) -> Optional[Topology]:
        if not any(ln.spec.kind in kinds for ln in t.links):
            return None
        return _rebuild(t, [_with_factor(ln, f) if ln.spec.kind in kinds else ln for ln in t.links], tag)

    return tr


def _multi_host(t: Topology) -> bool:
    return len({t.host_of(r) for r in range(t.nranks)}) > 1


def network_scaled(f: Callable[[Topology], float], tag: str) -> Transform:
    """The scale-out network at ``f(topology)`` times its rate (None on one host, or when f is 1)."""

    def tr(t: Topology) -> Optional[Topology]:
        if not _multi_host(t):
            return None
        k = f(t)
        if k >= 1.0:
            return None
        return _rebuild(t, [_with_factor(ln, k) if ln.spec.kind in NETWORK_KINDS else ln for ln in t.links], tag)

    return tr


def nics_per_host(t: Topology) -> int:
    """The compute NICs the ranks of the first host use (NCCL's GPU-to-NIC affinity, :meth:`Topology.nic_for`)."""
    h = t.host_of(0)
    return len({t.nic_for(r) for r in range(t.nranks) if t.host_of(r) == h} - {None})


def no_nvlink(t: Topology) -> Optional[Topology]:
    """NVLink unused: GPU-to-GPU traffic takes the PCIe route the topology has (None without NVLink)."""
    keep = [ln for ln in t.links if ln.spec.kind != "nvlink"]
    if len(keep) == len(t.links):
        return None
    return _rebuild(t, keep, "no NVLink")


def _home_cpu(t: Topology, dev: str) -> Optional[str]:
    """The CPU of a device's host nearest to it: the one of its socket, else the first of its host."""
    d = t.device(dev)
    cpus = [c for c in t.host_devices(d.host) if c.kind == "cpu" and "core" not in c.attrs] if d.host is not None else []
    if not cpus:
        return None
    same = [c for c in cpus if c.attrs.get("socket") is not None and c.attrs.get("socket") == d.attrs.get("socket")]
    return (same or cpus)[0].id


def _shares(t: Topology, routes: list[list[int]]) -> list[float]:
    """Per route (link ids): its rate when every route runs at once, each link split evenly among the routes
    crossing it (a link crossed twice by one route counts twice)."""
    load: dict[int, int] = {}
    for hops in routes:
        for lid in hops:
            load[lid] = load.get(lid, 0) + 1
    return [min((t.links[lid].gbps / load[lid] for lid in hops), default=math.inf) for hops in routes]


def p2p_through_host(t: Topology) -> Optional[Topology]:
    """No direct GPU peer-to-peer (PCIe ACS or the IOMMU redirecting it, NCCL_P2P_DISABLE, a GPU without P2P):
    NVLink unused and every GPU's traffic to another GPU goes through its CPU (the root complex, host memory).
    Each GPU is re-attached to its CPU at its share of the PCIe route it had there (GPUs behind one switch
    uplink share it); NICs stay where they are. None when that changes nothing."""
    base = no_nvlink(t) or t
    gpus = [d for d in base.ranks if base.device(d).kind == "gpu"]
    routes, homes = [], []
    for g in gpus:
        cpu = _home_cpu(base, g)
        if cpu is None:
            return None
        homes.append(cpu)
        routes.append(list(base.path(g, cpu).hops))
    rates = _shares(base, routes)
    gset = set(gpus)
    links = [ln for ln in base.links if not (ln.spec.kind == "pcie" and (ln.a in gset or ln.b in gset))]
    changed = base is not t
    for g, cpu, hops, rate in zip(gpus, homes, routes, rates):
        first = base.links[hops[0]] if hops else None
        if first is None or not math.isfinite(rate):
            return None
        if len(hops) > 1 or rate < first.gbps - 1e-9:
            changed = True
        links.append(Link(len(links), g, cpu, first.spec, 1, rate / first.spec.effective_gbps))
    if not changed:
        return None
    return _rebuild(base, links, "P2P through host memory")


def gdr_off(t: Topology) -> Optional[Topology]:
    """GPU Direct RDMA off (no nvidia-peermem / dma-buf, NCCL_NET_GDR_LEVEL, ACS): what a GPU sends or receives
    over the network is staged in host memory, so it crosses the PCIe route between the GPU and the NIC's CPU
    and the one between the NIC and that CPU; links on both (a switch uplink) carry it twice. Each NIC's PCIe
    attachment is set to its share. None on one host, or when that changes nothing."""
    if not _multi_host(t):
        return None
    pairs, routes = [], []
    for r in range(t.nranks):
        g = t.ranks[r]
        nic = t.nic_for(g)
        cpu = _home_cpu(t, nic) if nic is not None else None
        if nic is None or cpu is None:
            continue
        pairs.append(nic)
        routes.append(list(t.path(g, cpu).hops) + list(t.path(nic, cpu).hops))
    if not pairs:
        return None
    rates = _shares(t, routes)
    per_nic: dict[str, float] = {}
    for nic, rate in zip(pairs, rates):
        per_nic[nic] = min(per_nic.get(nic, math.inf), rate)
    links = list(t.links)
    changed = False
    for nic, rate in per_nic.items():
        cpu = _home_cpu(t, nic)
        hops = t.path(nic, cpu).hops
        if not hops:
            continue
        ln = t.links[hops[0]]
        if rate < ln.gbps - 1e-9:
            links[ln.id] = _with_factor(ln, rate / ln.gbps)
            changed = True
    return _rebuild(t, links, "GDR off") if changed else None


def sockets(t: Topology) -> Optional[Topology]:
    """NCCL's socket transport on the same ports (the IB verbs library or plugin not found, NCCL_IB_DISABLE=1,
    NCCL_NET=Socket): InfiniBand ports carry IP (IPoIB, the catalog's figure), RoCE ports TCP at their speed."""
    if not _multi_host(t):
        return None
    links, changed = [], False
    for ln in t.links:
        spec = ln.spec
        new = None
        if spec.kind == "infiniband":
            new = CATALOG.get(f"ipoib-{spec.generation.lower()}")
            if new is None:  # the catalog's IPoIB efficiency (ipoib-hdr: 6 of 25 GB/s) at this port's line rate
                ref = CATALOG["ipoib-hdr"]
                new = LinkSpec(f"ipoib-{spec.generation.lower()}", "ipoib", spec.generation, spec.line_gbps,
                               spec.line_gbps * ref.effective_gbps / ref.line_gbps, ref.latency_us)
        elif spec.kind == "roce":
            new = CATALOG.get(spec.name.replace("roce-", "eth-"))
            if new is None:
                ref = CATALOG["eth-100g"]
                new = LinkSpec(spec.name.replace("roce-", "eth-"), "ethernet", spec.generation, spec.line_gbps,
                               spec.line_gbps * ref.effective_gbps / ref.line_gbps, ref.latency_us)
        if new is not None:
            changed = True
            links.append(Link(ln.id, ln.a, ln.b, new, ln.count, ln.factor))
        else:
            links.append(ln)
    return _rebuild(t, links, "sockets") if changed else None


def _proto_only(v: str) -> Callable[[dict], bool]:
    return lambda env: env.get("NCCL_PROTO", "").strip().lower() == v


def _algo_only(v: str) -> Callable[[dict], bool]:
    return lambda env: env.get("NCCL_ALGO", "").strip().lower() == v


_NVLINK = frozenset({"nvlink"})
_PCIE = frozenset({"pcie"})


def variants() -> list[Variant]:
    no_nvls = tuple(a for a in NCCL_ALGOS if not a.startswith("nvls"))
    return [
        Variant("as specified", "the cluster as given: the measured curve is what the hardware allows",
                kind="as specified"),
        Variant("NVLS off", "NVLink SHARP unused (NCCL_NVLS_ENABLE=0, nvidia-fabricmanager or IMEX not running, "
                            "an older NCCL): check `nvidia-smi -q | grep -i fabric` and NCCL_DEBUG=INFO's NVLS lines",
                algos=no_nvls, env=lambda e: e.get("NCCL_NVLS_ENABLE") == "0", ruled_out=("nvls",)),
        Variant("NVLink at half rate", "half the NVLink bandwidth: links down or a bridge not seated (nvidia-smi "
                                       "nvlink -s), fewer channels (NCCL_MAX_NCHANNELS), or a GPU throttled",
                transform=scale_links(_NVLINK, 0.5, "NVLink x0.5"), algos=no_nvls),
        Variant("P2P over PCIe", "GPU peer-to-peer over PCIe instead of NVLink (NVLink down or not detected, "
                                 "NCCL_P2P_LEVEL limiting it): check `nvidia-smi topo -m` and `nvidia-smi nvlink -s`",
                transform=no_nvlink, algos=no_nvls),
        Variant("P2P through host memory", "no direct peer-to-peer: GPU traffic through the CPU and host memory "
                                           "(PCIe ACS or the IOMMU redirecting P2P, NCCL_P2P_DISABLE=1, a GPU or VM "
                                           "without P2P): disable ACS (lspci -vvv | grep ACSCtl), set iommu=pt; "
                                           "NCCL_DEBUG=INFO shows 'via SHM'",
                transform=p2p_through_host, algos=no_nvls, shown=("shm",), ruled_out=("p2p",),
                env=lambda e: e.get("NCCL_P2P_DISABLE") == "1" or e.get("NCCL_P2P_LEVEL", "").upper() in ("LOC", "0")),
        Variant("PCIe at half rate", "PCIe links at half their rate (trained at a lower generation or width: "
                                     "`lspci -vv | grep LnkSta` says 'downgraded'; a riser or slot of fewer lanes)",
                transform=scale_links(_PCIE, 0.5, "PCIe x0.5")),
        Variant("GPU Direct RDMA off", "network traffic staged through host memory (nvidia-peermem or dma-buf "
                                       "not available, NCCL_NET_GDR_LEVEL, ACS): NCCL_DEBUG=INFO shows no "
                                       "'/GDRDMA'; load nvidia-peermem, check ACS",
                transform=gdr_off, ruled_out=("gdr",),
                env=lambda e: e.get("NCCL_NET_GDR_LEVEL", "").upper() in ("LOC", "0")),
        Variant("network at half rate", "half the network: half the NICs used, ports at a lower speed "
                                        "(ibstatus / ethtool rate), or congestion",
                transform=network_scaled(lambda t: 0.5, "network x0.5")),
        Variant("one NIC per host", "one NIC carries every GPU's traffic of a host (NCCL_IB_HCA naming one "
                                    "device, the other ports down, a rail misconfigured)",
                transform=network_scaled(lambda t: 1.0 / max(1, nics_per_host(t)), "one NIC"),
                env=lambda e: bool(e.get("NCCL_IB_HCA")) and "," not in e["NCCL_IB_HCA"]
                and not e["NCCL_IB_HCA"].startswith("^")),
        Variant("TCP sockets instead of RDMA", "NCCL's socket transport (the IB verbs library or plugin not found, "
                                               "NCCL_IB_DISABLE=1, NCCL_NET=Socket): check NCCL_DEBUG=INFO for "
                                               "'NET/Socket'",
                transform=sockets, shown=("socket",), ruled_out=("ib",),
                env=lambda e: e.get("NCCL_IB_DISABLE") == "1" or e.get("NCCL_NET", "").lower() == "socket"),
        Variant("ring only", "the ring algorithm only (NCCL_ALGO=Ring)", kind="setting", algos=("ring",),
                env=_algo_only("ring")),
        Variant("tree only", "the tree algorithm only (NCCL_ALGO=Tree)", kind="setting", algos=("nccl_tree",),
                env=_algo_only("tree")),
        Variant("LL protocol only", "the LL protocol at every size (NCCL_PROTO=LL)", kind="setting",
                protocols=("ll",), env=_proto_only("ll")),
        Variant("LL128 off", "no LL128 (NCCL_PROTO without LL128, or a platform NCCL disables it on)",
                kind="setting", protocols=("ll", "simple"),
                env=lambda e: "NCCL_PROTO" in e and "ll128" not in e["NCCL_PROTO"].lower().replace("^ll128", "")),
    ]


def log_prior(v: Variant, log: Log) -> float:
    """The variant's log prior for this log: by its kind, raised to the cluster's when the log shows the cause
    (an NCCL_* setting, a transport NCCL_DEBUG=INFO says it used); -inf when the log rules it out."""
    if any(tag in log.seen for tag in v.ruled_out):
        return -math.inf
    if (v.env is not None and v.env(log.env)) or any(tag in log.seen for tag in v.shown):
        return PRIOR["as specified"]
    return PRIOR[v.kind]


def _is_file(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml", ".json")) or os.path.sep in spec or os.path.isfile(spec)


def _topology(spec: "str | Topology", v: Variant) -> Optional[Topology]:
    """The cluster of ``spec`` changed as ``v`` says (None: the change does not apply to it)."""
    t = spec if isinstance(spec, Topology) else parse_topology(spec)
    return t if v.transform is None else v.transform(t)


# ---- pricing and fitting ------------------------------------------------------------------------------------

#: what NCCL runs for the collectives its tuner does not choose for (grouped send/receive), as interlink Schedules
_NO_TUNER = {"all_to_all": ("pairwise",), "gather": ("direct",), "scatter": ("direct",), "reduce": ("binomial",),
             "broadcast": ("ring",)}


def price(collective: str, sizes: list[int], topo: Topology, v: Variant, *, nranks: Optional[int] = None,
          dtype: str = "float32", gpus_per_thread: int = 1,
          cache: Optional[dict] = None) -> Optional[list[tuple[int, float, float, str]]]:
    """Per size: (bytes, the time nccl-tests would print in us, busbw GB/s, algorithm/protocol) of what NCCL runs
    on ``topo`` under ``v``: its tuner's pick among the algorithms and protocols ``v`` allows
    (:func:`interlink.model.nccl_pick`), priced by the model, plus nccl-tests' launch pacing
    (:func:`interlink.model.nccl_tests_us`). None when ``v`` leaves NCCL nothing to run for this collective.
    ``cache`` (a dict kept by the caller while ``topo`` lives) holds the picks and prices of one topology for
    the variants that only restrict NCCL's choice."""
    cache = {} if cache is None else cache

    def memo(key: tuple, make: Callable[[], Any]) -> Any:
        k = (id(topo),) + key
        if k not in cache:
            cache[k] = make()
        return cache[k]

    out = []
    for s in sizes:
        pick = memo(("pick", collective, s, nranks, dtype),
                    lambda: nccl_pick(collective, s, topo, nranks=nranks, dtype=dtype))
        if pick is not None:
            allowed = [(a, p, us) for a, p, us in pick.table if a in v.algos and p in v.protocols]
            if not allowed:
                return None
            algo, proto, _ = min(allowed, key=lambda x: x[2])
            table = memo(("algo", collective, s, nranks, dtype, algo),
                         lambda: predict(collective, s, topo, nranks=nranks, algorithm=algo, dtype=dtype,
                                         fast_path=False).table)
            rows = [c for c in table if c.protocol == proto] or list(table)
        else:
            cands = [a for a in v.algos if a in NCCL_ALGORITHMS.get(collective, ())] or list(
                _NO_TUNER.get(collective, ())) or None
            table = memo(("cands", collective, s, nranks, dtype, tuple(cands or ())),
                         lambda: predict(collective, s, topo, nranks=nranks, dtype=dtype, candidates=cands,
                                         fast_path=False).table)
            rows = [c for c in table if c.protocol in v.protocols] or list(table)
        c = min(rows, key=lambda c: c.time_us)
        t = nccl_tests_us(c.time_us, topo, gpus_per_thread=gpus_per_thread)
        out.append((s, t, c.busbw_gbps * c.time_us / t if t > 0 else c.busbw_gbps, f"{c.algorithm}/{c.protocol}"))
    return out


def fit(measured: list[float], predicted: list[float]) -> tuple[float, float]:
    """(rms, a): the root mean square of log(measured / (predicted + a)) over the sizes, with ``a`` >= 0 a
    per-call latency the model does not know (the launch path of an older NCCL, a slow CPU, several GPUs per
    thread), fitted once per variant over [0, the smallest measured time]."""
    m = [math.log(x) for x in measured]

    def rms(a: float) -> float:
        return math.sqrt(sum((mi - math.log(p + a)) ** 2 for mi, p in zip(m, predicted)) / len(m))

    hi = min(measured)
    grid = [hi * k / 64 for k in range(65)]
    best = min(grid, key=rms)
    step = hi / 64
    fine = [max(0.0, best + step * (k - 16) / 16) for k in range(33)]
    best = min(fine + [best], key=rms)
    return rms(best), best


def informative(rows: list[Row]) -> list[Row]:
    """The sizes whose time the bandwidth shapes: measured at least twice the smallest time of the log (the rest
    is the per-call latency), at least the three largest."""
    rows = sorted((r for r in rows if r.nbytes > 0 and r.time_us > 0), key=lambda r: r.nbytes)
    if not rows:
        return []
    floor = min(r.time_us for r in rows)
    use = [r for r in rows if r.time_us >= 2.0 * floor]
    return use if len(use) >= 3 else rows[-3:]


@dataclass
class Fit:
    variant: Variant
    error: float  # rms of log(measured / predicted) over the informative sizes
    predicted: list[tuple[int, float, float, str]]  # (bytes, time us as nccl-tests prints it, busbw GB/s, algo/proto)
    score: float = 0.0  # n/2 ln(error^2 + SIGMA^2) - log prior: lower is better
    latency_us: float = 0.0  # the fitted per-call latency the model does not know
    prior: float = 0.0
    same_as: list[str] = field(default_factory=list)  # variants whose predicted curve is this one's


def explain(log: Log, topology: "Optional[str | Topology]" = None,
            only: Optional[Callable[[Variant], bool]] = None) -> tuple[str, list[Fit]]:
    """Rank the variants by how well each explains the measured curve: ``score`` = n/2 ln(rms^2 + SIGMA^2) -
    log prior over the n informative sizes (:func:`informative`), rms of log(measured / (predicted + a)) with
    ``a`` a fitted per-call latency (:func:`fit`). Variants with the same predicted curve are one answer: the
    one with the higher prior leads, the others are in its ``same_as``."""
    spec = topology if isinstance(topology, str) else (topology.name if topology is not None else guess_topology(log))
    base = topology if isinstance(topology, Topology) else parse_topology(spec)
    rows = [r for r in log.rows if r.nbytes > 0 and r.time_us > 0]
    use = informative(rows)
    sizes = sorted({r.nbytes for r in rows})
    dtype = rows[0].dtype if rows else "float32"
    if log.nranks and log.nranks < base.nranks:
        base = base.with_ranks(list(base.ranks[:log.nranks]))  # the ranks the log ran (its first GPUs)
    nranks = None
    fits: list[Fit] = []
    cache: dict = {}
    topos: list = []  # kept alive while the cache holds their ids
    for v in variants():
        if only is not None and not only(v):
            continue
        prior = log_prior(v, log)
        if prior == -math.inf:
            continue
        try:
            topo = _topology(base, v)
            if topo is None:
                continue
            topos.append(topo)
            pred = price(log.collective, sizes, topo, v, nranks=nranks, dtype=dtype, gpus_per_thread=log.ngpus,
                         cache=cache)
        except Exception:  # noqa: BLE001 - a variant this cluster cannot express
            continue
        if not pred:
            continue
        by = {b: t for b, t, _, _ in pred}
        err, a = fit([r.time_us for r in use], [by[r.nbytes] for r in use])
        score = 0.5 * len(use) * math.log(err * err + SIGMA * SIGMA) - prior
        fits.append(Fit(v, err, pred, score, a, prior))
    fits.sort(key=lambda f: (f.score, -f.prior))
    out: list[Fit] = []
    for f in fits:
        twin = next((g for g in out if _same_curve(f, g)), None)
        if twin is not None:
            twin.same_as.append(f.variant.name)
        else:
            out.append(f)
    return spec, out


def _same_curve(f: Fit, g: Fit) -> bool:
    return len(f.predicted) == len(g.predicted) and all(
        abs(math.log(a[1] / b[1])) < 1e-3 for a, b in zip(f.predicted, g.predicted))


def names(fit_: Fit) -> list[str]:
    """The causes an answer names: its variant and those with the same predicted curve."""
    return [fit_.variant.name] + fit_.same_as


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


#: a best fit worse than this factor: no variant of the cluster explains the curve within the model's error
POOR_FIT = 1.5


def report(log: Log, spec: str, fits: list[Fit], top: int = 5, guessed: bool = False, width: int = 100) -> str:
    """The measured busbw beside what the cluster allows, then the explanations, most likely first, wrapped to
    ``width`` columns. ``guessed``: ``spec`` was guessed from the log (no --topology), which the header says,
    with what the log did not show."""
    import textwrap

    def wrap(text: str, indent: str = "", more: str = "    ") -> list[str]:
        return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=more, break_long_words=False,
                             break_on_hyphens=False)

    base = next((f for f in fits if "as specified" in names(f)), None)
    who = ""
    if log.nranks:
        who = f"{log.nranks} ranks" + (f" on {len(log.hosts)} host(s)" if log.hosts else "")
        if log.ranks_from == "busbw/algbw":
            c = BUS_SCALE[log.collective]
            who += f" (from busbw / algbw: {c * (log.nranks - 1) / log.nranks:.2f}, {log.collective}'s " \
                   f"{'2 ' if c == 2 else ''}(n - 1) / n)"
    if log.gpu:
        who += f", {log.gpu}"
    lines = wrap(f"{log.collective}: {len(log.rows)} sizes" + (f", {who.lstrip(', ')}" if who else "")
                 + f"; topology {spec}" + (" (guessed)" if guessed else ""), more="  ")
    if guessed:
        unknown = [what for what, have in (("the rank count", log.nranks), ("the hosts", log.hosts),
                                           ("the GPU model", log.gpu)) if not have]
        assumed = [what for what, have in (
            (f"{'8 GPUs a host' if log.nranks > 8 else 'one host'}", log.hosts),
            ("8 ranks" if not log.nranks else "", log.nranks),
            (f"PCIe GPUs without NVLink ({spec.split(':')[0].split('x', 1)[-1]})", log.gpu)) if not have and what]
        text = ""
        if unknown:
            text = (f"not in the log: {_and(unknown)} (nccl-tests prints them in its '# Rank N ... on HOST "
                    f"device D [...] GPU' lines); taken as: {_and(assumed)}. ")
        lines += wrap(text + f"{spec} is a guess: pass --topology SPEC with the cluster it ran on (e.g. "
                      f"dgx-h100, 2xdgx-h100, 1xpcie-8gpu:gpus=2, a topology file)", "  ", "  ")
    if base is not None:
        lines.append(f"{'bytes':>12s} {'measured':>9s} {'allowed':>9s}   busbw GB/s (out-of-place); allowed: what "
                     f"NCCL runs")
        lines += wrap(f"on {spec}, priced by the model", " " * 35, " " * 35)
        pb = {b: (bw, a) for b, _, bw, a in base.predicted}
        for r in log.rows:
            if r.nbytes in pb:
                bw, a = pb[r.nbytes]
                lines.append(f"{r.nbytes:>12d} {r.busbw:>9.2f} {bw:>9.2f}   {a}")
    n = len(informative(log.rows))
    lines += wrap(f"explanations, most likely first. fit: how far the times the model predicts under that cause "
                  f"are from the measured ones, a typical factor over the {n} sizes the bandwidth decides (x1.00: "
                  f"the same; the model's own error is about x{math.exp(SIGMA):.2f}); score: the fit weighed by "
                  f"how common the cause is, lower is likelier (docs/doctor.md):", more="  ")
    for i, f in enumerate(fits[:top], 1):
        same = f" Same curve: {', '.join(f.same_as)}." if f.same_as else ""
        what = f.variant.what[:1].upper() + f.variant.what[1:]
        x = math.exp(f.error)
        how = "within the model's error" if x <= math.exp(SIGMA) else "outside the model's error"
        lines += wrap(f"{i}. {f.variant.name}: fit x{x:.2f} ({how}), score {f.score:.1f}. {what}.{same}",
                      more="   ")
    if fits and math.exp(fits[0].error) > POOR_FIT:
        lines += wrap(f"warning: no variant fits within the model's error (the best is x{math.exp(fits[0].error):.2f} "
                      f"off): the run's cluster is not {spec} as modelled, or its cause is not among the variants"
                      + ("; pass --topology" if guessed else ""))
    return "\n".join(lines)


def svg(log: Log, spec: str, fits: list[Fit], top: int = 3, width: int = 720, height: int = 420) -> str:
    """A plot (SVG, no dependencies) of the measured busbw and the first ``top`` explanations' predicted busbw
    against the size (log scale), the cluster as given dashed."""
    rows = [r for r in log.rows if r.nbytes > 0]
    shown = list(fits[:top])
    base = next((f for f in fits if "as specified" in names(f)), None)
    if base is not None and base not in shown:
        shown.append(base)
    curves = [(f"measured ({log.collective})", [(r.nbytes, r.busbw) for r in rows], "#000000", "")]
    colors = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b")
    for i, f in enumerate(shown):
        dash = ' stroke-dasharray="6 4"' if f is base else ""
        curves.append((f"{i + 1 if f in fits[:top] else '-'}. {' = '.join(names(f))}",
                       [(b, bw) for b, _, bw, _ in f.predicted], colors[i % len(colors)], dash))
    xs = [math.log2(b) for _, pts, _, _ in curves for b, _ in pts]
    ys = [bw for _, pts, _, _ in curves for _, bw in pts]
    if not xs:
        return ""
    x0, x1 = min(xs), max(xs) + 1e-9
    y1 = max(ys) * 1.1 or 1.0
    L, R, T, B = 60, 20, 30, 50 + 16 * len(curves)

    def px(b: float) -> float:
        return L + (math.log2(b) - x0) / (x1 - x0) * (width - L - R)

    def py(v: float) -> float:
        return height - B - v / y1 * (height - T - B)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{L}" y="18">busbw (GB/s) against size, {spec}</text>',
           f'<line x1="{L}" y1="{py(0)}" x2="{width - R}" y2="{py(0)}" stroke="#888"/>',
           f'<line x1="{L}" y1="{py(0)}" x2="{L}" y2="{py(y1)}" stroke="#888"/>']
    for k in range(5):
        v = y1 * k / 4
        out.append(f'<text x="{L - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    for e in range(int(math.ceil(x0)), int(x1) + 1, 2):
        b = 2 ** e
        lab = f"{b >> 30}G" if b >= 1 << 30 else f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K" if b >= 1 << 10 else str(b)
        out.append(f'<text x="{px(b):.1f}" y="{py(0) + 14:.1f}" text-anchor="middle">{lab}</text>')
    for j, (label, pts, color, dash) in enumerate(curves):
        path = " ".join(f"{px(b):.1f},{py(v):.1f}" for b, v in sorted(pts))
        width_ = 2.5 if j == 0 else 1.5
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="{width_}"{dash} points="{path}"/>')
        ly = height - B + 34 + 16 * j
        out.append(f'<line x1="{L}" y1="{ly - 4}" x2="{L + 24}" y2="{ly - 4}" stroke="{color}" stroke-width="{width_}"'
                   f'{dash}/><text x="{L + 30}" y="{ly}">{_xml(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _xml(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
