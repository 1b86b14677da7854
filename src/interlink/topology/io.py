"""Topology files: YAML (PyYAML, imported lazily) or JSON, one schema.

Schema, version 1 (``docs/topology.md`` has a worked example)::

    interlink_topology: 1          # schema version (required when devices are given)
    name: my-cluster               # optional
    meta: {...}                    # optional free mapping (preset, hosts, oversubscription ...)
    specs:                         # optional: LinkSpecs used by the links, by name. Entries override the
      nvlink4: {kind: nvlink, generation: "4", line_gbps: 25.0, effective_gbps: 20.6,   # catalog; a name not
                latency_us: 0.3, lanes: 0, typical_count: 18, source: "..."}            # given here comes from
                                                                                         # the catalog
    devices:                       # required (unless "preset" is given)
      - {id: gpu0, kind: gpu, host: 0, name: H100-SXM5-80GB, attrs: {numa: 0, socket: 0}}
      - {id: net/spine, kind: net_switch, host: null}         # host null: a fabric device
    links:                         # undirected; count parallel links; factor derates (1/oversubscription)
      - {a: gpu0, b: nvswitch, spec: nvlink4, count: 18}
      - {a: net/leaf0.0, b: net/spine, spec: ib-ndr, count: 32, factor: 0.5}
    ranks: [gpu0, gpu1]            # optional: default all GPUs, else CPU cores, else CPU sockets

Short form: ``{preset: "16xdgx-h100:oversub=2"}`` (any spec :func:`parse_topology` accepts), with an
optional ``ranks`` list. Device kinds, link kinds and spec fields are those of
:mod:`interlink.topology.graph` and :mod:`interlink.topology.links`; bandwidths are GB/s per direction.

``save_topology`` writes YAML for ``.yaml``/``.yml`` paths when PyYAML is installed (JSON text otherwise,
which YAML readers accept too; ``json_fallback=False`` raises instead, before the file is opened, as
``interlink topo --save`` does) and JSON for every other path. ``load_topology`` reads either.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

from .graph import DEVICE_KINDS, Device, Link, Topology
from .links import CATALOG, LinkSpec, TopologyError, catalog_from_dict, link

__all__ = ["SCHEMA_VERSION", "topology_to_dict", "topology_from_dict", "save_topology", "load_topology",
           "dumps", "loads", "is_yaml_path", "require_yaml"]

SCHEMA_VERSION = 1


def topology_to_dict(topo: Topology) -> dict[str, Any]:
    """The schema-1 mapping of a Topology (every spec used is written in full)."""
    specs: dict[str, LinkSpec] = {}
    for ln in topo.links:
        old = specs.get(ln.spec.name)
        if old is not None and old != ln.spec:
            raise TopologyError(f"two different link specs are both named {ln.spec.name!r}; rename one")
        specs[ln.spec.name] = ln.spec
    devices = []
    for d in topo.devices:
        e: dict[str, Any] = {"id": d.id, "kind": d.kind, "host": d.host}
        if d.name:
            e["name"] = d.name
        if d.attrs:
            e["attrs"] = dict(d.attrs)
        devices.append(e)
    links = []
    for ln in topo.links:
        e = {"a": ln.a, "b": ln.b, "spec": ln.spec.name}
        if ln.count != 1:
            e["count"] = ln.count
        if ln.factor != 1.0:
            e["factor"] = ln.factor
        links.append(e)
    out: dict[str, Any] = {"interlink_topology": SCHEMA_VERSION, "name": topo.name}
    if topo.meta:
        out["meta"] = dict(topo.meta)
    out["specs"] = {n: {k: v for k, v in dataclasses.asdict(s).items() if k != "name"} for n, s in specs.items()}
    out["devices"] = devices
    out["links"] = links
    out["ranks"] = list(topo.ranks)
    return out


def topology_from_dict(data: Mapping[str, Any], catalog: Mapping[str, LinkSpec] | None = None,
                       where: str = "topology") -> Topology:
    """A Topology from a schema-1 mapping (or the short ``preset:`` form); errors name the entry."""
    if not isinstance(data, Mapping):
        raise TopologyError(f"{where}: expected a mapping at the top level, got {type(data).__name__}")
    ranks = data.get("ranks")
    if "preset" in data:
        from .presets import parse_topology

        topo = parse_topology(str(data["preset"]), catalog=catalog)
        return topo.with_ranks(list(ranks)) if ranks is not None else topo
    version = data.get("interlink_topology")
    if version != SCHEMA_VERSION:
        raise TopologyError(f"{where}: 'interlink_topology: {SCHEMA_VERSION}' (schema version) is required, "
                            f"got {version!r}; or give 'preset: SPEC'")
    cat = dict(CATALOG if catalog is None else catalog)
    if data.get("specs"):
        cat = catalog_from_dict(data["specs"], cat)
    devices = []
    for k, e in enumerate(data.get("devices") or []):
        if not isinstance(e, Mapping) or "id" not in e or "kind" not in e:
            raise TopologyError(f"{where}: devices[{k}] needs at least id and kind, got {e!r}")
        unknown = set(e) - {"id", "kind", "host", "name", "attrs"}
        if unknown:
            raise TopologyError(f"{where}: devices[{k}] ({e['id']}): unknown keys {sorted(unknown)}")
        if e["kind"] not in DEVICE_KINDS:
            raise TopologyError(f"{where}: devices[{k}] ({e['id']}): kind {e['kind']!r} is not one of "
                                f"{', '.join(DEVICE_KINDS)}")
        host = e.get("host")
        if host is not None and (isinstance(host, bool) or not isinstance(host, int)):
            raise TopologyError(f"{where}: devices[{k}] ({e['id']}): host must be an integer or null")
        devices.append(Device(str(e["id"]), e["kind"], host, str(e.get("name") or ""), dict(e.get("attrs") or {})))
    if not devices:
        raise TopologyError(f"{where}: no devices")
    links = []
    for k, e in enumerate(data.get("links") or []):
        if not isinstance(e, Mapping) or not {"a", "b", "spec"} <= set(e):
            raise TopologyError(f"{where}: links[{k}] needs a, b and spec, got {e!r}")
        unknown = set(e) - {"a", "b", "spec", "count", "factor"}
        if unknown:
            raise TopologyError(f"{where}: links[{k}] ({e['a']} - {e['b']}): unknown keys {sorted(unknown)}")
        try:
            spec = link(str(e["spec"]), cat)
        except TopologyError as exc:
            raise TopologyError(f"{where}: links[{k}] ({e['a']} - {e['b']}): {exc}") from None
        links.append(Link(k, str(e["a"]), str(e["b"]), spec, int(e.get("count", 1)), float(e.get("factor", 1.0))))
    try:
        return Topology(devices, links, None if ranks is None else [str(r) for r in ranks],
                        str(data.get("name") or ""), data.get("meta") or {})
    except TopologyError as exc:
        raise TopologyError(f"{where}: {exc}") from None


def _yaml():
    try:
        import yaml
    except ImportError:
        return None
    return yaml


def is_yaml_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a YAML file (.yaml/.yml), which :func:`save_topology` writes as YAML."""
    return os.fspath(path).lower().endswith((".yaml", ".yml"))


def require_yaml(path: str | os.PathLike[str]) -> None:
    """Raise TopologyError, saying what to install, when ``path`` is a YAML file and PyYAML is missing
    (call it before writing anything)."""
    if is_yaml_path(path) and _yaml() is None:
        raise TopologyError(f"cannot write {os.fspath(path)!r} as YAML: PyYAML is not installed; "
                            "pip install 'interlink[topology]' (PyYAML), or save to a .json file")


def dumps(topo: Topology, fmt: str = "yaml") -> str:
    """The topology as YAML (falls back to JSON text if PyYAML is missing) or JSON (``fmt="json"``)."""
    data = topology_to_dict(topo)
    yaml = _yaml() if fmt == "yaml" else None
    if yaml is None:
        return json.dumps(data, indent=1) + "\n"
    base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

    class _Dumper(base):  # type: ignore[misc, valid-type]
        pass

    _Dumper.add_representer(_Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))
    data["devices"] = [_Flow(e) for e in data["devices"]]
    data["links"] = [_Flow(e) for e in data["links"]]
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=200)


class _Flow(dict):
    """A mapping written on one line in YAML (devices and links)."""


def loads(text: str, catalog: Mapping[str, LinkSpec] | None = None, where: str = "topology") -> Topology:
    """A Topology from YAML or JSON text (JSON is tried first; YAML needs PyYAML)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        yaml = _yaml()
        if yaml is None:
            raise TopologyError(f"{where}: not JSON, and reading YAML needs PyYAML "
                                "(pip install 'interlink[topology]')") from None
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            data = yaml.load(text, Loader=loader)
        except yaml.YAMLError as exc:
            raise TopologyError(f"{where}: not valid YAML: {exc}") from None
    return topology_from_dict(data, catalog, where)


def save_topology(topo: Topology, path: str | os.PathLike[str], *, json_fallback: bool = True) -> None:
    """Write ``topo`` to ``path``: YAML for .yaml/.yml (JSON text if PyYAML is missing, or TopologyError
    before anything is written when ``json_fallback`` is False), else JSON."""
    p = os.fspath(path)
    fmt = "yaml" if is_yaml_path(p) else "json"
    if not json_fallback:
        require_yaml(p)
    with open(p, "w", encoding="utf-8") as f:
        f.write(dumps(topo, fmt))


def load_topology(path: str | os.PathLike[str], catalog: Mapping[str, LinkSpec] | None = None) -> Topology:
    """Read a topology file written by :func:`save_topology` or by hand (see the schema above)."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise TopologyError(f"cannot read topology file {p!r}: {exc}") from None
    return loads(text, catalog, where=p)
