"""The layers of docs/architecture.md, checked on the source: each package imports only the packages
below it, and the modelling stack (topology, algorithms, model, sim) and the launchers use each other's
public names only (the simulator once read the cost model's private host terms)."""

from __future__ import annotations

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "src" / "interlink"

# package -> the interlink packages (and top-level modules) it may import
ALLOWED = {
    "errors": set(),
    "ops": {"errors"},
    "arrays": {"errors"},
    "devices": {"arrays", "errors"},
    "topology": {"errors"},
    "algorithms": {"errors", "ops"},
    "model": {"algorithms", "topology", "errors", "ops"},
    "sim": {"algorithms", "model", "topology", "errors", "ops"},
    "transport": {"errors", "ops", "arrays", "devices"},
    "launch": {"topology", "errors"},
    "runtime": {"algorithms", "arrays", "devices", "errors", "launch", "model", "ops", "topology", "transport"},
    "backends": {"runtime", "errors", "arrays", "devices", "transport"},
    "doctor": {"errors", "ops", "arrays", "devices", "algorithms", "topology", "model", "sim", "plan", "transport",
               "runtime", "launch", "bench"},
    "plan": {"errors", "ops", "algorithms", "topology", "model", "sim"},
}
NO_PRIVATE = {"topology", "algorithms", "model", "sim", "launch", "backends", "plan"}


def _imports() -> tuple[dict, list]:
    edges: dict = collections.defaultdict(set)
    private = []
    for f in ROOT.rglob("*.py"):
        rel = f.relative_to(ROOT)
        pkg = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        parts = list(rel.with_suffix("").parts)
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                target = parts[:len(parts) - node.level] + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "interlink":
                target = node.module.split(".")[1:]
            else:
                continue
            if not target or target[0] == pkg:
                continue
            edges[pkg].add(target[0])
            private += [(str(rel), ".".join(target), a.name) for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
        # module objects of other packages (``from ..model import cost as _cost``): their private attributes
        mods = {}
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = parts[:len(parts) - node.level] + (node.module.split(".") if node.module else [])
                if target and target[0] != pkg:
                    for a in node.names:
                        mods[a.asname or a.name] = ".".join(target + [a.name])
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in mods \
                    and node.attr.startswith("_") and not node.attr.startswith("__"):
                private.append((str(rel), mods[node.value.id], node.attr))
    return edges, private


def test_packages_import_only_the_layers_below() -> None:
    edges, _ = _imports()
    bad = {pkg: sorted(deps - ALLOWED[pkg]) for pkg, deps in edges.items() if pkg in ALLOWED
           and deps - ALLOWED[pkg]}
    assert bad == {}, bad


def test_the_modelling_stack_uses_public_names_only() -> None:
    _, private = _imports()
    bad = [p for p in private if pathlib.Path(p[0]).parts[0] in NO_PRIVATE]
    assert bad == [], bad


def test_the_checker_sees_imports() -> None:
    """The walk finds what is there (a checker that finds nothing passes everything)."""
    edges, _ = _imports()
    assert "model" in edges["sim"] and "transport" in edges["runtime"] and "launch" in edges["runtime"]
