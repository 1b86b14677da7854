"""The link catalog (interlink.topology.links): lookups, the per-direction convention, overrides."""

from __future__ import annotations

import json

import pytest

from interlink.topology import CATALOG, SWITCHES, LinkSpec, TopologyError, link, load_catalog, pcie, switch


def test_every_entry_has_source_and_sane_numbers():
    assert len(CATALOG) >= 30
    for name, s in CATALOG.items():
        assert s.name == name
        assert s.source, name
        assert 0 < s.effective_gbps <= s.line_gbps + 1e-9, name
        assert s.latency_us > 0, name


@pytest.mark.parametrize("name,line,eff", [
    ("pcie-gen3", 15.754, 12.0),    # NCCL PCI_BW 12 for Gen3 x16
    ("pcie-gen4", 31.508, 24.0),
    ("pcie-gen5", 63.015, 48.0),
    ("pcie-gen6", 121.0, 96.0),
    ("nvlink3", 25.0, 20.0),
    ("nvlink4", 25.0, 20.6),        # NCCL SM90_NVLINK_BW
    ("nvlink5", 50.0, 40.1),
    ("ib-hdr", 25.0, 24.0),
    ("ib-ndr", 50.0, 47.0),
    ("ib-xdr", 100.0, 94.0),
    ("roce-400g", 50.0, 46.0),
    ("eth-10g", 1.25, 1.17),
    ("shm", 8.0, 8.0),
])
def test_catalog_figures_are_per_direction(name, line, eff):
    s = link(name)
    assert s.line_gbps == pytest.approx(line, abs=1e-3)
    assert s.effective_gbps == pytest.approx(eff)
    assert s.gbps == s.effective_gbps


def test_nvlink_per_gpu_totals_match_the_marketing_figures_halved():
    # vendors quote both directions summed: 600 / 900 / 1800 GB/s
    assert link("nvlink3").per_device_line_gbps * 2 == pytest.approx(600)
    assert link("nvlink4").per_device_line_gbps * 2 == pytest.approx(900)
    assert link("nvlink5").per_device_line_gbps * 2 == pytest.approx(1800)
    assert link("nvlink4").per_device_gbps == pytest.approx(18 * 20.6)


def test_pcie_width_scaling():
    x8 = link("pcie-gen4-x8")
    assert x8.lanes == 8
    assert x8.effective_gbps == pytest.approx(12.0)
    assert x8.line_gbps == pytest.approx(link("pcie-gen4").line_gbps / 2, rel=1e-3)
    assert pcie(5, 4).effective_gbps == pytest.approx(12.0)
    with pytest.raises(TopologyError, match="generation"):
        pcie(9)


def test_unknown_link_lists_names():
    with pytest.raises(TopologyError) as e:
        link("nvlink9")
    msg = str(e.value)
    assert "nvlink4" in msg and "ib-ndr" in msg and "pcie-genG-xW" in msg


def test_switches_nvls_and_sharp():
    assert not switch("nvswitch2").nvls
    assert switch("nvswitch3").nvls and switch("nvswitch4").nvls
    assert switch("ib-ndr-switch").ports == 64 and switch("ib-ndr-switch").sharp
    assert set(SWITCHES) >= {"nvswitch1", "nvswitch2", "nvswitch3", "nvswitch4"}
    with pytest.raises(TopologyError, match="nvswitch3"):
        switch("nope")


def test_linkspec_validates():
    with pytest.raises(TopologyError, match="kind"):
        LinkSpec("x", "warp", "", 1.0, 1.0, 1.0)
    with pytest.raises(TopologyError, match="latency_us"):
        LinkSpec("x", "pcie", "", 1.0, 1.0, -1.0)


def test_override_from_json_and_yaml(tmp_path):
    p = tmp_path / "links.json"
    p.write_text(json.dumps({"shm": {"effective_gbps": 11.5},
                             "my-link": {"kind": "ethernet", "line_gbps": 5.0, "latency_us": 3.0}}))
    cat = load_catalog(p)
    assert cat["shm"].effective_gbps == 11.5 and cat["shm"].line_gbps == 8.0
    assert link("my-link", cat).effective_gbps == 5.0
    assert CATALOG["shm"].effective_gbps == 8.0  # the default is untouched
    pytest.importorskip("yaml")
    y = tmp_path / "links.yaml"
    y.write_text("links:\n  ib-ndr: {effective_gbps: 45.0}\n")
    assert load_catalog(y)["ib-ndr"].effective_gbps == 45.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"shm": {"speed": 1}}))
    with pytest.raises(TopologyError, match="unknown fields"):
        load_catalog(bad)
