"""Discovery of this machine (interlink.topology.discover): degrades to a CPU host without GPUs."""

from __future__ import annotations

import importlib
import os

import pytest

from interlink.topology import PathType, discover, measure_memcpy_gbps, parse_nvidia_smi_topo

# the package exports the function discover(), which hides the submodule of the same name
discover_mod = importlib.import_module("interlink.topology.discover")

DGX_SMI = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tNV18\tPIX\tSYS\t0-55\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tNV18\tPIX\tSYS\t0-55\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tNV18\tSYS\tPIX\t56-111\t1\t\tN/A
GPU3\tNV18\tNV18\tNV18\t X \tSYS\tPIX\t56-111\t1\t\tN/A
NIC0\tPIX\tPIX\tSYS\tSYS\t X \tSYS
NIC1\tSYS\tSYS\tPIX\tPIX\tSYS\t X

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""


def test_discover_here_degrades_to_cpu_host():
    d = discover(use_nvml=False) if not _has_gpu() else pytest.skip("this machine has a GPU")
    notes = " ".join(d.notes)
    assert "no GPU" in notes
    t = d.topology
    assert t.nranks == len(os.sched_getaffinity(0)) or t.nranks == 256
    assert all(t.device(r).kind == "cpu" for r in range(t.nranks))
    if t.nranks > 1:
        assert t.path(0, 1).path_type in (PathType.PHB, PathType.SYS)
        assert t.path(0, 1, via={"tcp"}).path_type == PathType.NET
    assert d.facts["cpu_count"] >= 1


def _has_gpu() -> bool:
    return os.path.exists("/dev/nvidia0")


def test_measure_hook_puts_memcpy_into_shm():
    bw = measure_memcpy_gbps(8 << 20, repeats=3)
    assert bw > 0.05
    d = discover(measure=True, use_nvml=False, use_nvidia_smi=False)
    shm = [ln for ln in d.topology.links if ln.spec.name == "shm"]
    assert shm and shm[0].spec.effective_gbps == pytest.approx(d.facts["memcpy_gbps"], rel=1e-3)
    assert "measured" in shm[0].spec.source


def test_parse_nvidia_smi_topo():
    r = parse_nvidia_smi_topo(DGX_SMI)
    assert r["devices"] == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"]
    assert r["matrix"][("GPU0", "GPU1")] == "NV18"
    assert r["matrix"][("GPU2", "NIC1")] == "PIX"
    assert r["numa"] == {"GPU0": 0, "GPU1": 0, "GPU2": 1, "GPU3": 1}
    assert r["nic_names"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert parse_nvidia_smi_topo("garbage")["devices"] == []


def _fake_root(tmp_path):
    root = tmp_path
    for n, cpus in ((0, "0-1"), (1, "2-3")):
        p = root / f"sys/devices/system/node/node{n}"
        p.mkdir(parents=True)
        (p / "cpulist").write_text(cpus + "\n")
    (root / "proc").mkdir()
    (root / "proc/cpuinfo").write_text("vendor_id\t: GenuineIntel\nmodel name\t: Test Xeon\n")
    (root / "proc/meminfo").write_text("MemTotal:       16000000 kB\n")
    return root


def test_fake_two_socket_cpu_host(tmp_path, monkeypatch):
    root = _fake_root(tmp_path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    d = discover(root=str(root), use_nvml=False, use_nvidia_smi=False)
    t = d.topology
    assert t.ranks == ("core0", "core1", "core2", "core3")
    assert t.path(0, 1).path_type == PathType.PHB
    p = t.path(0, 2)
    assert p.path_type == PathType.SYS and "upi" in {t.links[h].spec.name for h in p.hops}
    assert d.facts["mem_total_gb"] == pytest.approx(16.38, abs=0.01)


def test_fake_gpus_from_nvidia_smi(tmp_path, monkeypatch):
    root = _fake_root(tmp_path)
    monkeypatch.setattr(discover_mod, "_gpus_nvml", lambda notes: None)
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3", "bdf": None} for i in range(4)]
    monkeypatch.setattr(discover_mod, "_nvidia_smi", lambda notes: (parse_nvidia_smi_topo(DGX_SMI), gpus))
    d = discover(root=str(root))
    t = d.topology
    assert t.ranks == ("gpu0", "gpu1", "gpu2", "gpu3")
    assert t.path(0, 1).path_type == PathType.NVL
    assert t.bandwidth(0, 3) == pytest.approx(18 * 20.6)
    assert t.device(2).attrs["numa"] == 1


def test_fake_gpus_from_nvml_with_sysfs_pcie(tmp_path, monkeypatch):
    root = _fake_root(tmp_path)
    base = root / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    devs = {"0000:03:00.0": base / "0000:02:00.0/0000:03:00.0", "0000:04:00.0": base / "0000:02:01.0/0000:04:00.0"}
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    for bdf, path in devs.items():
        path.mkdir(parents=True)
        (path / "current_link_speed").write_text("32.0 GT/s PCIe\n")
        (path / "current_link_width").write_text("16\n")
        (path / "numa_node").write_text("0\n")
        os.symlink(path, root / "sys/bus/pci/devices" / bdf)
    nvsw = "0000:99:00.0"
    gpus = [{"index": i, "name": "NVIDIA H100", "bdf": bdf, "gen": None, "width": None,
             "nvlinks": [{"link": k, "version": 6, "remote": nvsw} for k in range(18)]}
            for i, bdf in enumerate(devs)]
    monkeypatch.setattr(discover_mod, "_gpus_nvml", lambda notes: gpus)
    d = discover(root=str(root))
    t = d.topology
    assert t.path(0, 1).path_type == PathType.NVL
    assert t.nvls_switch(0) == "nvswitch"
    # both GPUs hang off the same upstream bridge: one PCIe switch, Gen5 x16
    pcie = t.path(0, 1, via={"pcie"})
    assert pcie.path_type == PathType.PIX and pcie.bottleneck_gbps == pytest.approx(48.0)
