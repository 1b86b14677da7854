"""Topology files (interlink.topology.io): YAML/JSON round trips, the short form, errors."""

from __future__ import annotations

import json
import sys

import pytest

from interlink.topology import (TopologyError, dumps, load_topology, loads, parse_topology, save_topology,
                                topology_from_dict, topology_to_dict)

SPECS = ["dgx-h100", "pcie-8gpu", "cpu-host", "gb200-nvl72", "4xdgx-a100:oversub=2", "3xcpu-host"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("ext", ["yaml", "json"])
def test_round_trip_is_equal(tmp_path, spec, ext):
    if ext == "yaml":
        pytest.importorskip("yaml")
    t = parse_topology(spec)
    f = tmp_path / f"t.{ext}"
    save_topology(t, f)
    u = load_topology(f)
    assert u == t
    assert u.path(0, u.nranks - 1) == t.path(0, t.nranks - 1)
    assert parse_topology(str(f)) == t


def test_yaml_lines_are_readable(tmp_path):
    pytest.importorskip("yaml")
    text = dumps(parse_topology("dgx-h100"))
    assert text.startswith("interlink_topology: 1\n")
    assert "- {id: gpu0, kind: gpu, host: 0, name: H100-SXM5-80GB" in text
    assert "- {a: gpu0, b: nvswitch, spec: nvlink4, count: 18}" in text


def test_json_fallback_without_pyyaml(tmp_path, monkeypatch):
    t = parse_topology("dgx-h100")
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml -> ImportError
    f = tmp_path / "t.yaml"
    save_topology(t, f)
    json.loads(f.read_text())  # JSON text, which is YAML too
    assert load_topology(f) == t


def test_hand_written_file_uses_catalog_and_overrides(tmp_path):
    pytest.importorskip("yaml")
    f = tmp_path / "mine.yaml"
    f.write_text("""
interlink_topology: 1
name: two-boxes
specs:
  slow-nvlink: {kind: nvlink, line_gbps: 25.0, effective_gbps: 10.0, latency_us: 0.3}
devices:
  - {id: a, kind: gpu, host: 0}
  - {id: b, kind: gpu, host: 0}
  - {id: c, kind: gpu, host: 0}
  - {id: sw, kind: nvswitch, host: 0}
links:
  - {a: a, b: sw, spec: slow-nvlink, count: 4}
  - {a: b, b: sw, spec: slow-nvlink, count: 4}
  - {a: c, b: sw, spec: nvlink4, count: 1}
ranks: [c, a]
""")
    t = load_topology(f)
    assert t.ranks == ("c", "a")
    assert t.bandwidth(0, 1) == pytest.approx(20.6)
    assert t.bandwidth("a", "b") == pytest.approx(40.0)


def test_short_form_preset():
    t = loads(json.dumps({"preset": "2xdgx-h100", "ranks": ["h0/gpu0", "h1/gpu0"]}))
    assert t.nranks == 2 and t.path(0, 1).path_type.value == "NET"


@pytest.mark.parametrize("data,match", [
    ({"devices": []}, "schema version"),
    ({"interlink_topology": 1, "devices": []}, "no devices"),
    ({"interlink_topology": 1, "devices": [{"id": "a"}]}, r"devices\[0\] needs"),
    ({"interlink_topology": 1, "devices": [{"id": "a", "kind": "tpu"}]}, "kind 'tpu'"),
    ({"interlink_topology": 1, "devices": [{"id": "a", "kind": "gpu", "colour": 1}]}, "unknown keys"),
    ({"interlink_topology": 1, "devices": [{"id": "a", "kind": "gpu"}, {"id": "b", "kind": "gpu"}],
      "links": [{"a": "a", "b": "b", "spec": "warp9"}]}, r"links\[0\] \(a - b\): unknown link 'warp9'"),
    ({"interlink_topology": 1, "devices": [{"id": "a", "kind": "gpu"}], "links": [{"a": "a", "b": "x",
                                                                                    "spec": "nvlink4"}]},
     "no device 'x'"),
])
def test_errors_name_the_entry(data, match):
    with pytest.raises(TopologyError, match=match):
        topology_from_dict(data)


def test_missing_file_and_bad_text(tmp_path):
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    pytest.importorskip("yaml")
    with pytest.raises(TopologyError):
        load_topology(bad)


def test_dict_is_plain_data():
    d = topology_to_dict(parse_topology("cpu-host"))
    assert json.loads(json.dumps(d)) == d
    assert d["specs"]["shm"]["effective_gbps"] == 8.0
