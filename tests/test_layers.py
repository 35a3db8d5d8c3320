"""The architecture as a test: imports point down the layers, never up (no cycle between modules:
tests/test_imports.py). A package or top-level module a layer does not name fails here, so a new
one is placed on purpose. Imports inside functions count (they are edges all the same)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom to top: a module may import its own layer's modules and any layer below, nothing above.
# config sits above the extensions (rewards, readers, backends, modes, stage kinds) because its
# schema is computed from their registries; the plan above config (it composes and validates runs);
# records, the table and the entry points on top.
LAYERS: list[tuple[str, set[str]]] = [
    ("core", {"core"}),       # errors, settings, registries: what every layer uses, store included
    ("store", {"store"}),     # files, manifests, provenance, tracking: they check settings' domains
    ("science", {"stats", "metrics", "rewards"}),
    ("model", {"model"}),
    ("world", {"world"}),
    ("beliefs", {"beliefs"}),
    ("episodes", {"episodes"}),
    ("training", {"training"}),
    ("stages", {"stages"}),
    ("config", {"config"}),
    ("plan", {"plan"}),
    ("remote", {"remote"}),   # the stage store at a URL: it pulls what a plan's build needs
    ("records", {"records"}),
    ("table", {"table"}),
    ("entry", {"jobs", "decide", "cli", ""}),   # "": the package's own __init__
]
RANK = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}
LAYER_NAME = {unit: name for name, units in LAYERS for unit in units}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> list[tuple[str, str, int]]:
    """(importer, imported module, line) for every martingale import under src/, resolved to a
    module where the name is one (``from . import io`` -> martingale.store.files)."""
    files = sorted((SRC / "martingale").rglob("*.py"))
    modules = {module_name(p) for p in files}
    edges = []
    for path in files:
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] == "martingale":
                    for alias in node.names:
                        sub = f"{target}.{alias.name}"
                        edges.append((name, sub if sub in modules else target, node.lineno))
            elif isinstance(node, ast.Import):
                edges += [(name, a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "martingale"]
    return edges


def unit(module: str) -> str:
    """The package or top-level module a module belongs to (martingale.stages.train -> stages)."""
    return module.split(".")[1] if "." in module else ""


def test_every_package_and_top_level_module_has_a_layer():
    units = {unit(module_name(p)) for p in (SRC / "martingale").rglob("*.py")}
    assert units - set(RANK) == set(), "place each new package or module in a layer of LAYERS"


def test_imports_point_down_the_layers():
    up = [f"{a} (line {line}, {LAYER_NAME[unit(a)]}) imports {b} ({LAYER_NAME[unit(b)]})"
          for a, b, line in imports() if RANK[unit(b)] > RANK[unit(a)]]
    assert up == []


@pytest.mark.parametrize("source, target", [("model.load", "stages.common"), ("stages.train", "plan"),
                                            ("world.synthetic", "beliefs.parse"), ("core.settings", "store.files")])
def test_an_upward_import_is_caught(source, target, monkeypatch):
    """The rule fails where it should: an added import from a lower layer to a higher one."""
    real = imports()
    fake = [*real, (f"martingale.{source}", f"martingale.{target}", 1)]
    monkeypatch.setattr(sys.modules[__name__], "imports", lambda: fake)
    with pytest.raises(AssertionError):
        test_imports_point_down_the_layers()

