"""nccl-tests output -> what the hardware allows, and which explanation fits the measured curve best.

:func:`parse` reads the output of any nccl-tests binary (``all_reduce_perf``, ``all_gather_perf`` ...) of
any version: the column layout is taken from the rows themselves (size, count, type, an optional
reduction and root, then out-of-place and in-place groups of time, algbw, busbw and errors), the ranks,
hosts and GPU model from the ``# Rank N ... on HOST device D [..] NAME`` lines.

:func:`explain` prices named *variants* of the cluster with the cost model (interlink.model.predict over
NCCL's algorithms ring, nccl_tree, nvls and nvls_tree) at every measured size: the cluster as specified,
NVLS off, one algorithm or one protocol only, NVLink at a fraction of its rate, peer-to-peer over PCIe or
through host memory instead of NVLink, a fraction of the network (fewer NICs, a slower link), TCP
sockets instead of InfiniBand. Each variant's fit is the median over the sizes from ``min_bytes`` of
``|log(measured time / predicted time)|``; the variants are ranked by it. The first is the doctor's answer.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..model import predict
from ..topology import catalog_from_dict, parse_topology
from ..topology.io import topology_from_dict
from ..topology.links import CATALOG

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


def parse(text: str, collective: Optional[str] = None) -> Log:
    rows: list[Row] = []
    ranks: dict[int, tuple[str, str]] = {}
    coll = collective
    avg = None
    env = {}
    for line in text.splitlines():
        s = line.strip()
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
    return Log(_COLL.get(coll or "all_reduce", coll or "all_reduce"), rows, len(ranks), hosts, gpus[0] if gpus else "",
               avg, env)


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
    # prefix (a timestamp): tags become spaces, and the row starts at the first size
    toks = _TAG.sub(" ", s).split()
    for start in range(min(3, len(toks))):
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
    return f"{hosts}x{preset}:gpus={per}" if per != 8 or hosts > 1 or preset == "gb200-nvl72" else preset


@dataclass
class Variant:
    name: str
    what: str  # the cause it stands for, and what to check
    topology: str = ""  # "" = the cluster as given
    scale: dict = field(default_factory=dict)  # link kind -> factor on its bandwidth
    algos: tuple = NCCL_ALGOS
    protocols: tuple = PROTOCOLS
    net: str = ""


_NET = ("infiniband", "roce", "ethernet", "ipoib")


def variants() -> list[Variant]:
    ib = [a for a in NCCL_ALGOS]
    no_nvls = tuple(a for a in ib if not a.startswith("nvls"))
    return [
        Variant("as specified", "the cluster as given: the measured curve is what the hardware allows"),
        Variant("NVLS off", "NVLink SHARP unused (NCCL_NVLS_ENABLE=0, nvidia-fabricmanager or IMEX not running, "
                            "an older NCCL): check `nvidia-smi -q | grep -i fabric` and NCCL_DEBUG=INFO's NVLS lines",
                algos=no_nvls),
        Variant("ring only", "the ring algorithm only (NCCL_ALGO=Ring, or trees unavailable)", algos=("ring",)),
        Variant("tree only", "the tree algorithm only (NCCL_ALGO=Tree)", algos=("nccl_tree",)),
        Variant("LL protocol only", "the LL protocol at every size (NCCL_PROTO=LL)", algos=no_nvls, protocols=("ll",)),
        Variant("LL128 off", "no LL128 (NCCL_PROTO without LL128, or a platform NCCL disables it on)",
                protocols=("ll", "simple")),
        Variant("NVLink at half rate", "half the NVLink bandwidth: links down (nvidia-smi nvlink -s), fewer "
                                       "channels (NCCL_MAX_NCHANNELS / NCCL_MIN_NCHANNELS), or a GPU throttled",
                scale={"nvlink": 0.5}, algos=no_nvls),
        Variant("P2P over PCIe", "peer-to-peer over PCIe instead of NVLink (a PCIe machine, NVLink not up, or "
                                 "NCCL_P2P_LEVEL limiting it): check `nvidia-smi topo -m`",
                scale={"nvlink": "pcie"}, algos=no_nvls),
        Variant("P2P through host memory", "no direct peer-to-peer: copies through host memory (PCIe ACS or the "
                                           "IOMMU redirecting P2P, NCCL_P2P_DISABLE=1, a VM without P2P): disable "
                                           "ACS (lspci -vvv | grep ACSCtl) or set iommu=pt",
                scale={"nvlink": "host"}, algos=no_nvls),
        Variant("network at half rate", "half the network: half the NICs used, ports at a lower speed, or congestion",
                scale={n: 0.5 for n in _NET}),
        Variant("one NIC in eight", "one NIC carries the traffic of eight GPUs (NCCL_IB_HCA naming one device, "
                                    "GPUDirect RDMA off with PXN, or a rail misconfigured)",
                scale={n: 0.125 for n in _NET}),
        Variant("TCP sockets instead of InfiniBand", "NCCL's socket transport (NCCL_NET=Socket, NCCL_IB_DISABLE=1, or "
                                                     "the IB plugin not found): check NCCL_DEBUG=INFO for 'NET/Socket'",
                net="eth-100g"),
    ]


def _scaled_catalog(scale: dict, base: Optional[dict] = None) -> Optional[dict]:
    """``base`` (default the link catalog) with the links of the kinds in ``scale`` scaled."""
    if not scale:
        return base
    cat = CATALOG if base is None else base
    entries = {}
    for name, spec in cat.items():
        f = scale.get(spec.kind)
        if f is None:
            continue
        if f == "pcie" or f == "host":  # the GPU's NVLink total brought to one PCIe Gen4/Gen5 x16 port
            per_gpu = 24.0 if f == "pcie" else 10.0
            f = per_gpu / max(1e-9, spec.effective_gbps * max(1, spec.typical_count))
        entries[name] = {"line_gbps": spec.line_gbps * f, "effective_gbps": spec.effective_gbps * f}
        if scale.get(spec.kind) in ("pcie", "host"):
            entries[name]["latency_us"] = spec.latency_us + 1.0
    return catalog_from_dict(entries, cat)


def _is_file(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml", ".json")) or os.path.sep in spec or os.path.isfile(spec)


def _topology(spec: str, v: Variant) -> Any:
    s = spec
    if _is_file(s) and not v.net:
        # a topology file may carry its own link specs, which take precedence over a catalog given to the
        # loader: scale those too, or the variant would be the cluster as given
        text = open(s, encoding="utf-8").read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            import yaml  # the loader needs PyYAML for a YAML file as well

            data = yaml.safe_load(text)
        if isinstance(data, dict) and data.get("specs") and v.scale:
            base = catalog_from_dict(data["specs"])
            data = {k: val for k, val in data.items() if k != "specs"}
            return topology_from_dict(data, catalog=_scaled_catalog(v.scale, base), where=s)
    if v.net:
        head, _, opts = s.partition(":")
        if not re.match(r"^\d+x", head):
            head = f"1x{head}"
        opts = ",".join([o for o in opts.split(",") if o and not o.startswith("net=")] + [f"net={v.net}"])
        s = f"{head}:{opts}"
    return parse_topology(s, catalog=_scaled_catalog(v.scale))


@dataclass
class Fit:
    variant: Variant
    error: float  # median |log(measured / predicted)| over the sizes from min_bytes
    predicted: list[tuple[int, float, float, str]]  # (bytes, time us, busbw GB/s, algorithm/protocol)


def explain(log: Log, topology: Optional[str] = None, min_bytes: int = 1 << 20,
            only: Optional[Callable[[Variant], bool]] = None) -> tuple[str, list[Fit]]:
    spec = topology or guess_topology(log)
    rows = [r for r in log.rows if r.nbytes > 0 and r.time_us > 0]
    big = [r for r in rows if r.nbytes >= min_bytes] or rows[-3:]
    dtype = rows[0].dtype if rows else "float32"
    fits = []
    for v in variants():
        if only is not None and not only(v):
            continue
        try:
            topo = _topology(spec, v)
        except Exception:  # noqa: BLE001 - a variant this cluster cannot express (no network on one host)
            continue
        if v.net and topo.meta.get("hosts", 1) <= 1:
            continue
        if v.scale and all(k in _NET for k in v.scale) and int(topo.meta.get("hosts", 1) or 1) <= 1:
            continue  # a network variant of one host: the same as the cluster
        pred = []
        ok = True
        for r in rows:
            try:
                p = predict(log.collective, r.nbytes, topo, nranks=log.nranks or None, dtype=dtype,
                            candidates=[a for a in v.algos], fast_path=False)
            except Exception:  # noqa: BLE001
                ok = False
                break
            cands = [c for c in p.table if c.protocol in v.protocols] or list(p.table)
            c = min(cands, key=lambda c: c.time_us)
            pred.append((r.nbytes, c.time_us, c.busbw_gbps, f"{c.algorithm}/{c.protocol}"))
        if not ok or not pred:
            continue
        by = {b: t for b, t, _, _ in pred}
        err = statistics.median(abs(math.log(r.time_us / by[r.nbytes])) for r in big if by.get(r.nbytes))
        fits.append(Fit(v, err, pred))
    fits.sort(key=lambda f: f.error)
    return spec, fits


def report(log: Log, spec: str, fits: list[Fit], top: int = 5) -> str:
    base = next((f for f in fits if f.variant.name == "as specified"), None)
    lines = [f"{log.collective}: {len(log.rows)} sizes, {log.nranks or '?'} ranks on {len(log.hosts) or '?'} host(s)"
             + (f", {log.gpu}" if log.gpu else "") + f"; topology {spec}"]
    if base is not None:
        lines.append(f"{'bytes':>12s} {'measured':>9s} {'allowed':>9s}   busbw GB/s (out-of-place); allowed = the model "
                     f"on {spec}")
        pb = {b: (bw, a) for b, _, bw, a in base.predicted}
        for r in log.rows:
            if r.nbytes in pb:
                bw, a = pb[r.nbytes]
                lines.append(f"{r.nbytes:>12d} {r.busbw:>9.2f} {bw:>9.2f}   {a}")
    lines.append("explanations, best fit first (error: median |log(measured/predicted time)| over sizes >= 1 MiB):")
    for i, f in enumerate(fits[:top], 1):
        lines.append(f"{i}. {f.variant.name} (error {f.error:.2f}, x{math.exp(f.error):.2f}): {f.variant.what}")
    return "\n".join(lines)
