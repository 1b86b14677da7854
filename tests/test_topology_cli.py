"""The ``interlink topo`` command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from interlink.cli.main import main
from interlink.topology import load_topology, parse_topology


def test_json_preset(capsys):
    assert main(["topo", "--topology", "dgx-h100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["nranks"] == 8
    assert out["matrix"]["rows"][0][:2] == ["X", "NV18"]
    assert out["matrix"]["rows"][0][8] == "PIX"          # gpu0 -> nic0
    assert out["topology"]["interlink_topology"] == 1
    assert out["examples"][0]["path_type"] == "NVL"


def test_text_cluster_and_save(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    assert main(["topo", "-t", "4xdgx-h100:oversub=2", "--save", str(f)]) == 0
    text = capsys.readouterr().out
    assert "NV18" in text and "NET" in text and "oversubscription=2.0" in text
    assert load_topology(f) == parse_topology("4xdgx-h100:oversub=2")


def test_text_without_rich(capsys, monkeypatch):
    for m in ("rich", "rich.console", "rich.table"):
        monkeypatch.setitem(sys.modules, m, None)
    assert main(["topo", "-t", "pcie-8gpu"]) == 0
    text = capsys.readouterr().out
    assert "gpu0  X     PIX   PHB" in text


def test_default_discovers_this_machine(capsys):
    assert main(["topo", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["nranks"] >= 1
    assert isinstance(out["notes"], list)


def test_draw(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    f = tmp_path / "t.png"
    assert main(["topo", "-t", "2xdgx-h100", "--draw", str(f)]) == 0
    assert f.stat().st_size > 10_000
    assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_draw_without_networkx(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setitem(sys.modules, "networkx", None)
    f = tmp_path / "t.png"
    assert main(["topo", "-t", "cpu-host", "--draw", str(f)]) == 0
    assert f.stat().st_size > 1000


def test_draw_without_matplotlib_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["topo", "-t", "cpu-host", "--draw", str(tmp_path / "x.png")]) == 1
    assert "matplotlib" in capsys.readouterr().err


def test_bad_spec_lists_presets(capsys):
    assert main(["topo", "-t", "dgx-z9"]) == 2
    err = capsys.readouterr().err
    assert "dgx-h100" in err and "gb200-nvl72" in err


def test_list_and_link_override(tmp_path, capsys):
    f = tmp_path / "l.json"
    f.write_text(json.dumps({"ib-ndr": {"effective_gbps": 40.0}}))
    assert main(["topo", "-t", "2xdgx-h100", "--links", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["examples"][1]["bottleneck_gbps"] == 40.0
    assert main(["topo", "--list"]) == 0
    assert "nvlink4" in capsys.readouterr().out


def test_console_script():
    r = subprocess.run([sys.executable, "-m", "interlink", "topo", "-t", "cpu-host", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"]["ranks_per_host"] == 2
