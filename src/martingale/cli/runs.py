"""`martingale new, show, diff, check`: add a run, read its lineage and config, compare two, validate the tree."""
from __future__ import annotations

from typing import Optional

import typer
import yaml
from rich.table import Table

from ..config.runs import RunError, RunTree, display_path
from ..config.values import flatten
from ..store.files import redact, write_text
from ..table import TableError, findings, load_claims
from ..table.looks import load_plan
from .common import STATE, _conf, _name, _need, _tree, app, fail, out


@app.command()
def new(child: str = typer.Argument(..., help="Run-id of the new run (its file name)."),
        parent: str = typer.Option(..., "--parent", "-p", help="Run-id of the parent run."),
        knob: str = typer.Option(..., "--knob", "-k", help="Exactly one Hydra override, e.g. stages.s1.lr=1e-3."),
        question: Optional[str] = typer.Option(None, "--question", "-q", help="The question the run answers."),
        claims: Optional[str] = typer.Option(None, "--claims", help="Comma-separated claims, e.g. C1,C2."),
        ) -> None:
    """Write conf/runs/CHILD.yaml, only if the whole tree validates with it."""
    _name(child)
    runs_dir = _conf() / "runs"
    for suffix in (".yaml", ".yml"):
        existing = runs_dir / f"{child}{suffix}"
        if existing.exists():
            fail(f"{display_path(existing)}: run-id: already exists; not overwritten")
    path = runs_dir / f"{child}.yaml"
    data: dict = {"parent": parent, "knob": knob}
    if question is not None:
        data["question"] = question
    data["claims"] = [c.strip() for c in claims.split(",") if c.strip()] if claims else []
    # redacted before it is checked, so the file checked is the file written (a key pasted into
    # a knob becomes "[redacted:<VAR>]", which then fails as a value, and nothing is written)
    text = yaml.safe_dump(redact(data), sort_keys=False, allow_unicode=True, default_flow_style=None, width=100)
    try:
        tree = RunTree.load(_conf(), extra={path: text})
    except RunError as e:
        fail(str(e))
        return
    write_text(path, text)
    out.print(f"wrote {display_path(path)} ({len(tree)} runs OK)", markup=False)


@app.command()
def show(run: str = typer.Argument(..., help="Run-id.")) -> None:
    """Lineage root→run with each knob, the override list and the resolved config."""
    tree = _tree()
    _need(tree, run)
    table = Table(title=f"lineage of {run}")
    table.add_column("run")
    table.add_column("knob")
    table.add_column("question")
    for spec in tree.lineage(run):
        table.add_row(spec.run_id, spec.knob or "(root)", spec.question or "")
    out.print(table)
    out.print("overrides (root first):", style="bold")
    out.print(" ".join(repr(o) if " " in o else o for o in tree.overrides(run)) or "(none)", markup=False)
    out.print("resolved config:", style="bold")
    out.print(yaml.safe_dump(tree.resolved_config(run), sort_keys=False).rstrip(), markup=False)


@app.command()
def diff(a: str = typer.Argument(..., help="Run-id A."), b: str = typer.Argument(..., help="Run-id B.")) -> None:
    """The knobs between two runs via their common ancestor, and the config keys that differ."""
    tree = _tree()
    _need(tree, a)
    _need(tree, b)
    la, lb = [s.run_id for s in tree.lineage(a)], [s.run_id for s in tree.lineage(b)]
    common = None
    for x, y in zip(la, lb):
        if x != y:
            break
        common = x
    out.print(f"common ancestor: {common or '(none: different roots)'}", markup=False)
    for name, chain in ((a, la), (b, lb)):
        start = chain.index(common) + 1 if common else 0
        knobs = [f"{r}: {tree.specs[r].knob}" for r in chain[start:] if tree.specs[r].knob]
        out.print(f"{common or 'root'} → {name}:", style="bold", markup=False)
        for k in knobs or ["(no knobs)"]:
            out.print(f"  {k}", markup=False)

    fa, fb = flatten(tree.resolved_config(a)), flatten(tree.resolved_config(b))
    table = Table(title="config keys that differ")
    table.add_column("key")
    table.add_column(a)
    table.add_column(b)
    for key in sorted(set(fa) | set(fb)):
        if fa.get(key, "<absent>") != fb.get(key, "<absent>"):
            table.add_row(key, repr(fa.get(key, "<absent>")), repr(fb.get(key, "<absent>")))
    out.print(table if table.row_count else "no config differences")


@app.command()
def check() -> None:
    """Validate every run file and compose every run's config; then the other config files the
    build reads: conf/claims.yaml, conf/findings.yaml (each finding's run must exist) and
    conf/decide.yaml (decide's plan)."""
    tree = _tree()
    try:
        load_claims(STATE.root)
        found = findings.load(STATE.root, set(tree.ids()))
        plan = load_plan(STATE.root)
    except TableError as e:
        fail(str(e))
        return
    out.print(f"{len(tree)} runs OK" + (f", {len(found)} findings OK" if found is not None else "")
              + (f", decide's plan OK ({plan.looks} looks)" if plan.looks > 1 else ""), markup=False)
