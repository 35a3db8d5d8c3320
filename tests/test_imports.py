"""The package's import graph has no cycle: statistics, world, stages and table import one way.

Every ``import martingale.x`` / ``from .x import`` / ``from ..x import`` anywhere in a module counts
(a function-level import is a hidden cycle all the same), except under ``if TYPE_CHECKING:``. A
package's ``__init__`` is a module like any other: ``from . import x`` imports the package (its
``__init__``) and ``x``, and a package that imports its submodules depends on them.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import martingale

ROOT = Path(martingale.__file__).parent


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (file, is a package) for every module of the package."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _imports(name: str, mods: dict[str, tuple[Path, bool]]) -> set[str]:
    """The package's modules that ``name`` imports: the module (or package) each import names, and
    each name it imports that is a submodule (``from . import fmt``: the package and its fmt)."""
    path, is_pkg = mods[name]
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found |= {target} | {f"{target}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m in mods} - {name}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, mods) for m in mods}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle of the graph: its strongly connected components of two or more modules,
    each sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(u: str) -> None:
        index[u] = low[u] = len(index)
        stack.append(u)
        for v in sorted(graph[u]):
            if v not in index:
                visit(v)
                low[u] = min(low[u], low[v])
            elif v in stack:
                low[u] = min(low[u], index[v])
        if low[u] == index[u]:
            component = []
            while not component or component[-1] != u:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return sorted(found)


def test_the_package_has_no_import_cycle():
    graph = _graph()
    assert graph["martingale.metrics.martingale"] >= {"martingale.stats", "martingale.stats.deattenuation"}   # the walk sees edges
    assert graph["martingale.store.tracking"] >= {"martingale.store"}           # from . import: the package
    assert graph["martingale.cli"] >= {"martingale.cli.runs", "martingale.cli.common"}   # an __init__'s own imports
    assert _cycles(graph) == []


@pytest.mark.parametrize("source, target", [
    ("martingale.cli.runs", "martingale.cli"),                 # a command module taking app from its package
    ("martingale.store.provenance", "martingale.store"),       # from . import manifest, the package importing files
    ("martingale.table.findings_md", "martingale.table"),      # from . import fmt, the package importing findings
])
def test_a_cycle_through_a_package_init_is_caught(source, target):
    """The cycles a package's ``__init__`` closes: the package imports a submodule that imports the
    package back (``from . import x``)."""
    graph = _graph()
    graph[source] = graph[source] | {target}
    assert any({source, target} <= set(cycle) for cycle in _cycles(graph))


def test_the_cycle_finder_finds_every_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "a"}}) == [["a", "b", "c"], ["d", "e"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []



# Each registry that finds its extensions by importing its package's modules: the package, the
# module holding its HELPERS (the modules discovery skips) and its discovery function.
REGISTRIES = {
    "martingale.stages": ("martingale.stages", "kinds"),
    "martingale.rewards": ("martingale.rewards", "rewards"),
    "martingale.beliefs": ("martingale.beliefs.readers", "readers"),
    "martingale.model": ("martingale.model.backend", "backends"),
    "martingale.world": ("martingale.world.registry", "worlds"),
    "martingale.metrics": ("martingale.metrics", "declared_metrics"),
}
DISCOVER = "; ".join(f"import {holder}; {holder}.{fn}()" for holder, fn in REGISTRIES.values())


def test_planning_imports_no_torch_transformers_or_peft_nor_a_body(tmp_path):
    """The Snakefile plans at parse time (every snakemake call, every cluster job): planning, and
    every registry's discovery after it, read declarations only: numpy (the rewards' and the world's
    arrays), never torch, transformers or peft, nor a stage kind's or a backend's body (a fresh
    process). Planning alone imports no scipy or pandas either. A helper module left off its
    registry's HELPERS is imported by discovery: one that brings torch fails here."""
    import json
    import subprocess
    import sys

    from projcopy import make_project
    root = make_project(tmp_path / "project")
    code = ("import json, sys; from martingale.plan import Plan; p = Plan.load('.'); p.stages_for(p.active_run_ids()); "
            "heavy = lambda: sorted(m for m in ('scipy', 'pandas', 'torch', 'transformers', 'peft') "
            "if m in sys.modules); "
            f"planned = heavy(); {DISCOVER}; "
            "bodies = sorted(m for m in sys.modules if m.startswith('martingale.stages.body.') "
            "or m in ('martingale.' + b for b in martingale.model.backend.BUILT_IN)); "
            "print(json.dumps({'planned': planned, 'discovered': heavy(), 'bodies': bodies}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    found = json.loads(out.stdout)
    assert found["planned"] == []
    assert set(found["discovered"]) & {"torch", "transformers", "peft"} == set()
    assert found["bodies"] == []


def test_each_registrys_helpers_are_the_modules_of_its_package_that_register_nothing():
    """A registry's HELPERS (the modules its discovery does not import) are exactly the modules of
    its package that register no extension: one left off the list is imported while planning, one
    on it that registers is never found. Each registration is traced, in a fresh process, to the
    module whose top level made it."""
    import json
    import subprocess
    import sys

    code = f"""
import importlib, json, pkgutil, sys
from martingale.core import registry
added, real_add = [], registry.Registry.add
def add(self, name, value):
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    added.append(frame.f_globals["__name__"])
    return real_add(self, name, value)
registry.Registry.add = add
found = {{}}
for package, (holder, fn) in {REGISTRIES!r}.items():
    getattr(importlib.import_module(holder), fn)()
    modules = sorted(m.name for m in pkgutil.iter_modules(importlib.import_module(package).__path__))
    for m in modules:
        importlib.import_module(f"{{package}}.{{m}}")
    found[package] = {{"helpers": sorted(importlib.import_module(holder).HELPERS), "modules": modules}}
print(json.dumps({{"found": found, "added": added}}))
"""
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)

    def registering(package: str) -> set[str]:
        return {a[len(package) + 1:].split(".")[0] for a in out["added"] if a.startswith(package + ".")}

    silent = {package: sorted(set(f["modules"]) - registering(package)) for package, f in out["found"].items()}
    assert silent == {package: f["helpers"] for package, f in out["found"].items()}


def test_each_built_in_stage_kinds_body_is_a_module_with_its_run():
    """The stage-kind registry resolves a built-in kind's body by name (StageKind.run imports
    ``martingale.stages.body.<kind>`` when a job runs it, so planning never does): each such module
    exists with ``run(cfg, <its input roles>, out_dir)``, and every module of stages/body/ but the
    helpers they share is a kind's body."""
    from martingale.stages import kinds

    body = ROOT / "stages" / "body"
    named = {}
    for kind in kinds().values():
        if callable(kind.body):                      # a one-file kind: its run, where it is declared
            continue
        assert kind.body == f"martingale.stages.body.{kind.name}"
        tree = ast.parse((body / f"{kind.name}.py").read_text())
        run = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run")
        named[kind.name] = [a.arg for a in run.args.args]
        assert named[kind.name] == ["cfg", *kind.inputs, "out_dir"], kind.name
    assert {p.stem for p in body.glob("*.py")} - set(named) == {"__init__", "common"}


def test_no_module_of_the_package_is_imported_inside_a_function():
    """Every import of a martingale module is at the top of its module (under ``if TYPE_CHECKING:``
    at most): an import inside a function is an edge of the architecture nobody sees. A module that
    must stay light for planning reads declarations, never a body (stages/, model/backend.py)."""
    inside = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    own = (isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("martingale"))
                           or isinstance(node, ast.Import) and any(a.name.startswith("martingale") for a in node.names))
                    if own:
                        inside.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert inside == []


def test_the_cli_defers_scipy_and_matplotlib_until_a_command_needs_them():
    """`martingale --help` does not pay for scipy.stats or matplotlib (~2 s): martingale.core.lazy;
    nor for torch, transformers or peft (~7 s), which only a stage's body imports (`martingale stage`
    runs one)."""
    import subprocess
    import sys
    code = ("import sys; import martingale.cli; "
            "print(sorted(m for m in ('scipy.stats', 'matplotlib.figure', 'torch', 'transformers', 'peft') "
            "if m in sys.modules and type(sys.modules[m]).__name__ != '_LazyModule'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_function_of_the_package_runs_over_60_lines():
    """A function one reads in one sitting: none in src/ runs over 60 lines (its docstring included)."""
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.end_lineno - fn.lineno + 1 > 60:
                long.append(f"{path.relative_to(ROOT.parent)}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1})")
    assert long == []
