"""The model and the simulator against published nccl-tests figures (busbw, GB/s) of real systems.

Each row cites its public source (GitHub issue threads of NVIDIA/nccl and NVIDIA/nccl-tests, vendor
result files); docs/reference.md section 5 and benchmarks/RESULTS.md section 10 hold the same table.
Target (the Schedule issue): predict and simulate within 15% of the published figure. Rows the project
cannot reach yet are strict xfails with the reason: when a change fixes one, the test says so.
"""

from __future__ import annotations

import re

import pytest

from interlink.model import predict
from interlink.sim import simulate_collective

G = 1 << 30
TOL = 0.15

# (id, collective, bytes, topology, algorithm or None = the model's choice, nranks or None, published busbw,
#  source)
ROWS = [
    ("A2", "all_reduce", 4 * G, "dgx-a100", None, None, 232.54, "NVIDIA/nccl-tests#175, 8x A100 SXM4"),
    ("A3", "all_reduce", G, "dgx-a100", None, None, 230.77, "NVIDIA/nccl#527, AWS p4dn (8x A100), 1 GiB"),
    ("A5", "all_reduce", 8 * G, "dgx-h100", None, None, 478.87, "Azure/AI-benchmarking-guide ND H100 v5, NVLS, 8G"),
    ("A6", "all_reduce", 8 * G, "hgx-h200", None, None, 479.98, "Azure/AI-benchmarking-guide ND H200 v5, NVLS, 8G"),
    ("A8", "all_reduce", 2 * G, "dgx-h100", "ring", None, 367.5, "NVIDIA/nccl#1455, 8x H100, NCCL_ALGO=RING: 365-370"),
    ("A13rs", "reduce_scatter", 4 * G, "dgx-h100", None, None, 360.0, "NVIDIA/nccl#1281, 8x H100 reduce_scatter"),
    ("A13ag", "all_gather", 4 * G, "dgx-h100", None, None, 350.0, "NVIDIA/nccl#1281, 8x H100 all_gather"),
    ("A17", "all_reduce", 4 * G, "h800", None, None, 215.0, "NVIDIA/nccl#1374, 8x H800"),
    ("A16", "all_reduce", 8 * G, "gb200-nvl72", "ring", 4, 679.61, "Azure ND GB200 v6, 4 GPUs per host, Ring, 8G"),
    ("C1", "all_reduce", 8 * G, "2xdgx-a100", "ring", None, 192.0, "NVIDIA/nccl#812, DGX-A100 8x HDR (measured)"),
    ("C9", "all_reduce", 16 * G, "4xdgx-h100", None, None, 365.84, "NVIDIA/nccl-tests#309, 4 nodes H100 8x400G IB"),
    ("C14", "all_reduce", 8 * G, "8xdgx-h100", None, None, 350.0, "uccl-project/uccl#205, 8 nodes H100"),
    ("C16-4", "reduce_scatter", 4 * G, "4xdgx-h100", None, None, 360.0, "NVIDIA/nccl#1229, 4 nodes H100 (approx.)"),
    ("C16-8", "reduce_scatter", 4 * G, "8xdgx-h100", None, None, 345.0, "NVIDIA/nccl#1229, 8 nodes H100 (approx.)"),
    ("C16-16", "reduce_scatter", 4 * G, "16xdgx-h100", None, None, 320.0, "NVIDIA/nccl#1229, 16 nodes H100 (approx.)"),
]

NOT_YET = [
    ("C21", "all_reduce", 8 * G, "gb200-nvl72", None, None, 834.57, "coreweave/nccl-tests#43, NVL72 rack, 8G",
     "the NVLS Schedule over 72 GPUs at 0.74 x NVLink5 gives 997 (+19%): the measured rack reaches less of "
     "its NVLink bandwidth than NCCL's Blackwell NVLS efficiency says"),
    ("C8", "all_reduce", 16 * G, "2xdgx-h100", None, None, 470.0, "NVIDIA/nccl-tests#309, 2 nodes H100, NVLSTree",
     "NVLS+Tree across hosts is not a Schedule yet (in-switch steps)"),
    ("C11", "all_reduce", 8 * G, "4xdgx-h100", None, None, 320.0, "NVIDIA/nccl#1221, 4 nodes H100 8x400G RoCE",
     "RoCE: the preset's fabric is InfiniBand NDR (no RoCE derating in the catalog)"),
    ("C15", "all_reduce", G // 2, "248xhgx-h200", None, None, 350.0, "NVIDIA/nccl-tests#283, 248 nodes H200, 512M",
     "1,984 ranks: nccl_tree (now priced from its traffic at any size) gives 279 (-20%); NCCL runs NVLS+Tree "
     "here (in-switch reduction inside each node), which has no Schedule yet"),
]


def _check(coll, nbytes, topo, algo, nranks, pub):
    pr = predict(coll, nbytes, topo, algorithm=algo, nranks=nranks)
    got = {"predict": pr.best.busbw_gbps}
    sim = simulate_collective(coll, nbytes, topo, algorithm=algo or pr.best.algorithm, nranks=nranks)
    got["simulate"] = sim.busbw_gbps
    for what, v in got.items():
        assert abs(v / pub - 1) <= TOL, f"{what}: {v:.1f} GB/s vs published {pub} ({pr.best.algorithm})"


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_within_15_percent_of_published(row):
    _, coll, nbytes, topo, algo, nranks, pub, _src = row
    _check(coll, nbytes, topo, algo, nranks, pub)


@pytest.mark.parametrize("row", [pytest.param(r[:-1], marks=pytest.mark.xfail(strict=True, reason=r[-1]))
                                 for r in NOT_YET], ids=[r[0] for r in NOT_YET])
def test_not_yet_within_15_percent(row):
    _, coll, nbytes, topo, algo, nranks, pub, _src = row
    _check(coll, nbytes, topo, algo, nranks, pub)


def test_at_least_twelve_published_figures_are_met():
    assert len(ROWS) >= 12  # by both predict and simulate
    assert len({r[3] for r in ROWS}) >= 5  # several systems
    nodes = {int(m.group(1)) if (m := re.match(r"(\d+)x", r[3])) else 1 for r in ROWS}
    assert nodes >= {1, 2, 4, 8, 16}  # 1 to 16 nodes
