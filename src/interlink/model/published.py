"""Published nccl-tests figures (bus bandwidth, GB/s) of real systems: what the model and the simulator
are checked against (tests/test_model_published.py) and what ``interlink simulate --sweep-nodes --plot``
draws next to its curve.

Each row cites its public source (GitHub issue threads of NVIDIA/nccl and NVIDIA/nccl-tests, vendor
result files); docs/reference.md, 'Published measurements the model is checked against' describes them. ``miss``: why the project does not come within
15% of the row yet ("" where it does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Published", "PUBLISHED", "for_machine", "SmallPublished", "SMALL"]

G = 1 << 30


@dataclass(frozen=True)
class Published:
    id: str
    collective: str
    nbytes: int
    topology: str
    algorithm: str | None  # None: the model's choice (NCCL's default); else what the measurement forced
    nranks: int | None
    busbw_gbps: float
    source: str
    miss: str = ""

    @property
    def nodes(self) -> int:
        m = re.match(r"\s*(\d+)\s*x", self.topology)
        return int(m.group(1)) if m else 1

    @property
    def machine(self) -> str:
        """The preset measured (its options, such as the fabric, dropped)."""
        return re.sub(r"^\s*\d+\s*x\s*", "", self.topology).split(":")[0]


PUBLISHED: tuple[Published, ...] = (
    Published("A2", "all_reduce", 4 * G, "dgx-a100", None, None, 232.54, "NVIDIA/nccl-tests#175, 8x A100 SXM4"),
    Published("A3", "all_reduce", G, "dgx-a100", None, None, 230.77, "NVIDIA/nccl#527, AWS p4dn (8x A100), 1 GiB"),
    Published("A5", "all_reduce", 8 * G, "dgx-h100", None, None, 478.87,
              "Azure/AI-benchmarking-guide ND H100 v5, NVLS, 8G"),
    Published("A6", "all_reduce", 8 * G, "hgx-h200", None, None, 479.98,
              "Azure/AI-benchmarking-guide ND H200 v5, NVLS, 8G"),
    Published("A8", "all_reduce", 2 * G, "dgx-h100", "ring", None, 367.5,
              "NVIDIA/nccl#1455, 8x H100, NCCL_ALGO=RING: 365-370"),
    Published("A13rs", "reduce_scatter", 4 * G, "dgx-h100", None, None, 360.0, "NVIDIA/nccl#1281, 8x H100 reduce_scatter"),
    Published("A13ag", "all_gather", 4 * G, "dgx-h100", None, None, 350.0, "NVIDIA/nccl#1281, 8x H100 all_gather"),
    Published("A17", "all_reduce", 4 * G, "h800", None, None, 215.0, "NVIDIA/nccl#1374, 8x H800"),
    # NVLS by GPU count on one H100 server (NCCL_ALGO=NVLS, 2G-4G): 2-4 GPUs run at ring speed (365-370), then
    # busbw grows with the rank count as the NVLS Schedule's traffic n(1 + 1/p) each way says (algbw 258 -> 273)
    Published("A18-4", "all_reduce", 4 * G, "dgx-h100", None, 4, 367.5,
              "NVIDIA/nccl#1455, 4x H100, NCCL_ALGO=NVLS: 365-370 (ring speed)"),
    Published("A18-5", "all_reduce", 4 * G, "dgx-h100", "nvls", 5, 420.0, "NVIDIA/nccl#1455, 5x H100, NVLS: 420"),
    Published("A18-6", "all_reduce", 4 * G, "dgx-h100", "nvls", 6, 440.0, "NVIDIA/nccl#1455, 6x H100, NVLS: 440"),
    Published("A18-7", "all_reduce", 4 * G, "dgx-h100", "nvls", 7, 460.0, "NVIDIA/nccl#1455, 7x H100, NVLS: 460"),
    Published("A19", "all_reduce", 8 * G, "hgx-b200", None, None, 830.0,
              "NVIDIA/nccl#1807, 8x B200 in one server, NCCL 2.27.1: 830+ (size not stated: the peak)"),
    Published("A20", "all_reduce", 8 * G, "gb200-nvl72", None, 8, 811.0,
              "lixueduan.com 'GB200 MNNVL', 2 trays x 4 GB200 over MNNVL: 811 (size not stated: the peak)"),
    Published("A16", "all_reduce", 8 * G, "gb200-nvl72", "ring", 4, 679.61,
              "Azure ND GB200 v6, 4 GPUs per host, Ring, 8G"),
    Published("C1", "all_reduce", 8 * G, "2xdgx-a100", "ring", None, 192.0, "NVIDIA/nccl#812, DGX-A100 8x HDR (measured)"),
    Published("C9", "all_reduce", 16 * G, "4xdgx-h100", None, None, 365.84, "NVIDIA/nccl-tests#309, 4 nodes H100 8x400G IB"),
    Published("C14", "all_reduce", 8 * G, "8xdgx-h100", None, None, 350.0, "uccl-project/uccl#205, 8 nodes H100"),
    Published("C16-4", "reduce_scatter", 4 * G, "4xdgx-h100", None, None, 360.0, "NVIDIA/nccl#1229, 4 nodes H100 (approx.)"),
    Published("C16-8", "reduce_scatter", 4 * G, "8xdgx-h100", None, None, 345.0, "NVIDIA/nccl#1229, 8 nodes H100 (approx.)"),
    Published("C16-16", "reduce_scatter", 4 * G, "16xdgx-h100", None, None, 320.0,
              "NVIDIA/nccl#1229, 16 nodes H100 (approx.)"),
    Published("C21", "all_reduce", 8 * G, "gb200-nvl72", None, None, 834.57, "coreweave/nccl-tests#43, NVL72 rack, 8G",
              "the NVLS Schedule over 72 GPUs (NCCL's 32 heads) at 0.74 x NVLink5 gives 982 (+18%): published "
              "Blackwell NVLS busbw stays at 810-835 from 8 to 144 GPUs where the Schedule's traffic grows it "
              "25% from 8 to 72 (as H100's does from 5 to 8 GPUs, rows A18); what limits a full rack is not "
              "published"),
    # GB200 NVL72 racks joined by InfiniBand (NCCL 2.26.2, CoreWeave's README): NVLS inside each rack's NVLink
    # domain (72 GPUs over 18 trays), NCCL's NVLSTree across racks
    Published("C22", "all_reduce", 16 * G, "2xgb200-nvl72", None, None, 810.41,
              "coreweave/nccl-tests README, 2 NVL72 racks (144 GPUs), 16G",
              "NVLS over a 72-GPU domain, as C21: the model's 950 (+17%) is the NVLS Schedule's traffic at 0.74 x "
              "NVLink5 (32 heads per rack); the measured racks reach C21's 835 less a little for the tree"),
    Published("C23", "all_reduce", 16 * G, "20xgb200-nvl72", None, None, 405.74,
              "coreweave/nccl-tests README, 20 NVL72 racks (1,440 GPUs), 16G",
              "the model's 906 (+123%) sends each rack's share across racks through NCCL's most heads, 32 NICs, "
              "so the tree never limits; the published figure halves from 2 to 20 racks, as NCCL's own NVLSTree model "
              "says (src/tuning/pipeline_model/nvls.cc: inter bandwidth x2 at <= 2 nodes: an inner rack of a "
              "tree carries twice a leaf's bytes) with about 400 GB/s (8 NICs) leaving a rack: how many heads "
              "(<= 32) NCCL's graph search gives an NVL72 rack is not published"),
    # 3 partitions of GB200 NVL72 racks (4 or 8 GPUs each, on 3 racks), InfiniBand between, NVLS off (NCCL 2.27.3):
    # a ring leaves each partition through its NICs (4 or 8 x NDR), the trays of a partition talk over NVLink
    Published("C24r", "all_reduce", 16 * G, "3xgb200-nvl72:gpus=4", "ring", None, 196.72,
              "NVIDIA/nccl#1801, 3 NVL4 partitions (12 GPUs), NCCL_NVLS_ENABLE=0, Ring"),
    Published("C24t", "all_reduce", 16 * G, "3xgb200-nvl72:gpus=4", "nccl_tree", None, 234.43,
              "NVIDIA/nccl#1801, 3 NVL4 partitions (12 GPUs), NCCL_NVLS_ENABLE=0, Tree"),
    Published("C25r", "all_reduce", 16 * G, "3xgb200-nvl72:gpus=8", "ring", None, 393.66,
              "NVIDIA/nccl#1801, 3 NVL8 partitions (24 GPUs, 2 trays each), NCCL_NVLS_ENABLE=0, Ring"),
    Published("C25t", "all_reduce", 16 * G, "3xgb200-nvl72:gpus=8", "nccl_tree", None, 485.68,
              "NVIDIA/nccl#1801, 3 NVL8 partitions (24 GPUs, 2 trays each), NCCL_NVLS_ENABLE=0, Tree"),
    Published("C8", "all_reduce", 16 * G, "2xdgx-h100", None, None, 470.0, "NVIDIA/nccl-tests#309, 2 nodes H100, NVLSTree"),
    Published("C11", "all_reduce", 8 * G, "4xdgx-h100:net=roce-400g", None, None, 320.0,
              "NVIDIA/nccl#1221, 4 nodes H100 8x400G RoCE (the preset with its scale-out fabric RoCE v2 400 GbE)"),
    Published("C15", "all_reduce", G // 2, "248xhgx-h200", None, None, 350.0,
              "NVIDIA/nccl-tests#283, 248 nodes H200, 512M"),
    # NCCL's default on 2 A100 servers, 8 HDR NICs each (Azure NDv4): the best Schedule on paper (nccl_tree, 255)
    # is not what NCCL runs; NCCL's tuner picks the ring (interlink predict's 'nccl default' line: 191)
    Published("C26", "all_reduce", 8 * G, "2xdgx-a100", None, None, 185.0,
              "JonShelley/azure benchmarking/NDv4/cc-slurm-ngc/nccl/README.md: 'size 8589934592 (B) on 2-32 VMs is "
              "180-190 GB/s (Bus BW)', NCCL's default",
              "the best Schedule on paper (nccl_tree/simple, 255 GB/s, +38%) is not what NCCL runs here: NCCL's tuner "
              "picks the ring, which the model prices at 191 GB/s (+3%: the 'nccl default' line of interlink predict, "
              "tests/test_model_small_gpu.py)"),
)


def for_machine(machine: str, collective: str | None = None) -> list[Published]:
    """The rows measured on N x ``machine`` (any N; a bare preset is 1 node), of one collective if given."""
    m = re.sub(r"^\s*\d+\s*x\s*", "", machine).split(":")[0].strip().lower()
    return [r for r in PUBLISHED if r.machine.lower() == m and (collective is None or r.collective == collective)]


# ---- small messages on GPUs: published nccl-tests times (us), 8 B to 64 KiB ---------------------------------------


@dataclass(frozen=True)
class SmallPublished:
    """One published nccl-tests row at a small size: the out-of-place ``time_us`` of ``collective`` (float sum) of
    ``nbytes`` on ``topology`` (its first ``nranks`` ranks), ``gpus_per_thread`` GPUs launched by one host thread
    (nccl-tests ``-g``), ``algorithm`` forced by NCCL_ALGO (None: NCCL's own choice). ``fitted``: the parameter of
    interlink.model.params fitted to this row ("" where the row is held out); ``miss``: why the model is not
    within the tolerance of tests/test_model_small_gpu.py yet ("" where it is)."""

    id: str
    collective: str
    nbytes: int
    topology: str
    nranks: int | None
    time_us: float
    gpus_per_thread: int
    algorithm: str | None
    system: str
    nccl: str
    source: str
    fitted: str = ""
    miss: str = ""


_EXEMPLAR = "github.com/NVIDIA/exemplar-performance, microbenchmarks/nccl/README.md (sample all_reduce output)"
_OCI = "github.com/oracle-quickstart/oci-hpc-oke, README.md (NCCL test on 2 BM.GPU4.8 nodes)"
_AZ_H100 = ("github.com/Azure/AI-benchmarking-guide, 'Azure Results/ND_H100_v5_results.md' (busbw 0.53 at 8K, 2.72 at "
            "64K: time = S x 2(n-1)/n / busbw; Benchmarks/NVIDIA/NCCLBandwidth.py runs NCCL_ALGO=NVLS all_reduce_perf "
            "-g 8 -n 40)")
_AZ_A100 = ("github.com/Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md (busbw 0.33 at 8K, 2.70 at "
            "64K, 42-45 us flat from 1K; the same script, -g 8, NCCL_ALGO=NVLS, which an A100 cannot run)")
_SMALL_MISS_CH = ("NCCL runs a small call on fewer channels than a large one (its thread threshold), so its bytes "
                  "per step grow with the size; the nccl_tree Schedule spreads every size over 16 channels (a channel "
                  "of each tree per NIC), so the model stays near its 8-byte time")

SMALL: tuple[SmallPublished, ...] = (
    SmallPublished("H1-8", "all_reduce", 8, "dgx-h100", None, 13.67, 1, None, "DGX H100, 8x H100 80GB HBM3",
                   "not stated", _EXEMPLAR),
    SmallPublished("H1-1K", "all_reduce", 1024, "dgx-h100", None, 16.94, 1, None, "DGX H100, 8x H100 80GB HBM3",
                   "not stated", _EXEMPLAR),
    SmallPublished("H1-8K", "all_reduce", 8192, "dgx-h100", None, 17.40, 1, None, "DGX H100, 8x H100 80GB HBM3",
                   "not stated", _EXEMPLAR),
    SmallPublished("H1-64K", "all_reduce", 65536, "dgx-h100", None, 19.54, 1, None, "DGX H100, 8x H100 80GB HBM3",
                   "not stated", _EXEMPLAR),
    SmallPublished("H2-8K", "all_reduce", 8192, "dgx-h100", None, 27.05, 8, "nvls",
                   "Azure ND H100 v5 (8x H100, Xeon 8480C), one process", "2.18.5", _AZ_H100,
                   fitted="gpu.launch_us.intel (an upper bound)"),
    SmallPublished("H2-64K", "all_reduce", 65536, "dgx-h100", None, 42.16, 8, "nvls",
                   "Azure ND H100 v5 (8x H100, Xeon 8480C), one process", "2.18.5", _AZ_H100,
                   miss="NVLS takes 42 us at 64 KiB on 8 H100 here (27 at 8 KiB); the NVLS Schedule's steps and "
                        "NCCL's own NVLS latency (25 us) give 22-23 us: what grows it is not published"),
    SmallPublished("H3-8", "all_reduce", 8, "2xdgx-h100", None, 47.60, 1, "nvls_tree",
                   "2 nodes x 8 H20 (H100's NVLink4 and NVSwitch), 16 ConnectX-7 NDR", "2.21.5",
                   "github.com/NVIDIA/nccl/issues/1244 (NCCL_ALGO=NVLSTree, 2 x 8 H20)"),
    SmallPublished("H3-512", "all_reduce", 512, "2xdgx-h100", None, 46.58, 1, "nvls_tree",
                   "2 nodes x 8 H20 (H100's NVLink4 and NVSwitch), 16 ConnectX-7 NDR", "2.21.5",
                   "github.com/NVIDIA/nccl/issues/1244 (NCCL_ALGO=NVLSTree, 2 x 8 H20)"),
    SmallPublished("A1-8", "all_reduce", 8, "2xdgx-a100:net=roce-200g", None, 36.47, 1, None,
                   "2 x OCI BM.GPU4.8 (8x A100-SXM4-40GB), RoCE", "not stated", _OCI),
    SmallPublished("A1-1K", "all_reduce", 1024, "2xdgx-a100:net=roce-200g", None, 41.97, 1, None,
                   "2 x OCI BM.GPU4.8 (8x A100-SXM4-40GB), RoCE", "not stated", _OCI, miss=_SMALL_MISS_CH),
    SmallPublished("A1-8K", "all_reduce", 8192, "2xdgx-a100:net=roce-200g", None, 48.16, 1, None,
                   "2 x OCI BM.GPU4.8 (8x A100-SXM4-40GB), RoCE", "not stated", _OCI, miss=_SMALL_MISS_CH),
    SmallPublished("A1-64K", "all_reduce", 65536, "2xdgx-a100:net=roce-200g", None, 51.69, 1, None,
                   "2 x OCI BM.GPU4.8 (8x A100-SXM4-40GB), RoCE", "not stated", _OCI, miss=_SMALL_MISS_CH),
    SmallPublished("A2-8", "all_reduce", 8, "2xdgx-a100:gpus=1", None, 19.90, 1, None,
                   "2 nodes x 1 A100 80GB, HDR InfiniBand", "not stated",
                   "github.com/NVIDIA/nccl-tests/issues/150", fitted="gpu.net_step_us.ll"),
    SmallPublished("A2-64", "all_reduce", 64, "2xdgx-a100:gpus=1", None, 19.36, 1, None,
                   "2 nodes x 1 A100 80GB, HDR InfiniBand", "not stated", "github.com/NVIDIA/nccl-tests/issues/150"),
    SmallPublished("A3-32", "all_reduce", 32, "dgx-a100", 2, 10.14, 2, None,
                   "2x A100-SXM4-40GB of one server, one process (-g 2)", "not stated",
                   "github.com/NVIDIA/nccl/issues/583"),
    SmallPublished("A4-8K", "all_reduce", 8192, "dgx-a100", None, 43.44, 8, None,
                   "Azure ND A100 v4 (8x A100-SXM4-80GB, AMD EPYC 7V12), one process", "2.18.5", _AZ_A100,
                   fitted="gpu.launch_us.amd"),
    SmallPublished("A4-64K", "all_reduce", 65536, "dgx-a100", None, 42.47, 8, None,
                   "Azure ND A100 v4 (8x A100-SXM4-80GB, AMD EPYC 7V12), one process", "2.18.5", _AZ_A100,
                   fitted="gpu.launch_us.amd"),
)
