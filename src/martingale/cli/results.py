"""`martingale table, status, seeds, decide, figure`: the runs table, the run tree with what can
launch, a finding over its seeds, deciding the open findings, the two-agent figure."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from .. import decide as deciding
from ..config.runs import RunError
from ..core.settings import ProjectPath
from ..plan import Plan, cost
from ..plan.needs import Need, unmet
from ..records.eval_schema import EvalSchemaError, check_eval
from ..records.plots import episodes_by_mode
from ..stats.replicates import MIN_SEEDS
from ..store.locks import live_snakemakes, locked, stale_lock
from ..table import OUTPUTS, TableError, build_table, findings, fmt, write_table
from ..table.runs_row import Row
from ..table.to_decide import describe, finding_runs, open_findings, routes
from .common import STATE, _tree, app, fail, out


@app.command("table")
def table_cmd() -> None:
    """Regenerate runs.json, RUNS.md and runs.html from conf/runs and results/."""

    try:
        write_table(STATE.root)
    except (RunError, TableError) as e:
        fail(str(e))
        return
    out.print(" ".join(str(STATE.root / name) for name in OUTPUTS), markup=False)


STATE_STYLE = {"done": "green", "stale": "yellow", "corrupt": "red", "running": "yellow", "queued": "dim",
               "crashed": "red", "invalid": "magenta"}


@app.command()
def status() -> None:
    """The run tree with each run's state and headline; then the runs that can launch now (their
    parent is done), like the research log's queued/candidate table."""
    try:
        rows = {r["run_id"]: r for r in build_table(STATE.root)}
    except (RunError, TableError) as e:
        fail(str(e))
        return
    unmet_here = {run_id: unmet([Need.from_tag(t) for t in r["needs"]], STATE.root) for run_id, r in rows.items()}
    Console(highlight=False).print(run_tree(rows, unmet_here))   # wraps long labels (the shared console crops them)
    pending = [r for r in rows.values() if r["state"] in ("queued", "crashed")]
    ready = [r for r in pending if (r["parent"] is None or rows[r["parent"]]["state"] == "done")
             and not unmet_here[r["run_id"]]]
    waiting = len(pending) - len(ready)
    table = Table(title=f"can launch now: {len(ready)} (parent done, needs met)  ·  waiting: {waiting}")
    for col in ("run-id", "parent", "Δ vs parent", "question", "state"):
        table.add_column(col)
    for r in ready:
        table.add_row(r["run_id"], r["parent"] or "-", r["knob"] or "-", r.get("question") or "-", r["state"])
    out.print(table)
    if ready:
        targets = " ".join(f"results/{r['run_id']}/eval.json" for r in ready)
        out.print(f"launch: snakemake --profile profiles/<local|slurm> {targets}", markup=False)
    for line in advice(rows) + provisional_lines(list(rows.values())) + open_findings(STATE.root, list(rows.values())):
        out.print(line, markup=False)


def run_label(r: Row, lacking: list) -> str:
    """A run's line in the tree: id, state, knob, headline, bug, what it lacks here, its log."""
    style = STATE_STYLE.get(r["state"], "")
    text = f"[bold]{r['run_id']}[/]  [{style}]{r['state']}[/]"
    if r.get("knob"):
        text += f"  [cyan]{r['knob']}[/]"
    if r["state"] == "done":
        text += f"  Brier {fmt.brier(r['metrics'])}  MS {fmt.ms(r['metrics'])}"
    if r.get("invalid"):
        text += f"  bug: {r['invalid']}"
    if lacking and r["state"] != "done":
        text += f"  [magenta]needs {'; '.join(map(str, lacking))}[/] (all skips it)"
    if r.get("log"):
        text += f"  log: {r['log']}"
    return text


def run_tree(rows: dict[str, Row], unmet_here: dict[str, list]) -> Tree:
    """The run tree, each run under its parent."""
    children: dict[Optional[str], list[str]] = {}
    for run_id, r in sorted(rows.items()):
        children.setdefault(r["parent"], []).append(run_id)
    tree = Tree(f"[bold]runs[/] ({len(rows)})")

    def grow(node, parent: Optional[str]) -> None:
        for run_id in children.get(parent, []):
            grow(node.add(run_label(rows[run_id], unmet_here[run_id])), run_id)
    grow(tree, None)
    return tree


def provisional_lines(rows: list[Row]) -> list[str]:
    """The provisional findings (trained, fewer than 3 seeds) and what building them to 3 would
    cost (cost.seed_hours: each more seed of the run, and of its parent for an effect)."""

    try:
        found, results, _ = findings.evaluate(STATE.root, rows)
    except TableError as e:
        return [f"findings: {e}"]
    waiting = [f for f in found or () if results[f.id].verdict == findings.PROVISIONAL]
    if not waiting:
        return []
    plan = Plan.load(STATE.root)
    lines = [f"provisional findings ({len(waiting)}: a trained finding needs {MIN_SEEDS} seeds):"]
    for f in waiting:
        combined = results[f.id].combined
        k = combined.k if combined is not None else 0
        hours = (MIN_SEEDS - k) * cost.seed_hours(plan, finding_runs(plan, f), STATE.root)
        lines.append(f"  {f.id}: {f.run}, {k} seed{'s' * (k != 1)}; {MIN_SEEDS - k} more ≈ {cost.hours(hours)} "
                     "stage-hours (martingale seeds " + f.id + ")")
    return lines


@app.command()
def seeds(finding: str = typer.Argument(..., help="A finding id of conf/findings.yaml.")) -> None:
    """A finding over its seeds: each seed's estimate with its question CI, the combined estimate
    (seeds × questions, crossed) with its CI, variance components, p, q and the verdict; how many
    seeds, or held-out questions, would decide it at its current estimate, and what each costs."""

    try:
        rows = build_table(STATE.root)
        found, results, _ = findings.evaluate(STATE.root, rows)
    except (RunError, TableError) as e:
        fail(str(e))
        return
    f = next((x for x in found or () if x.id == finding), None)
    if f is None:
        fail(f"{findings.FINDINGS}: no finding {finding!r} (martingale table lists them in FINDINGS.md)")
        return
    r = results[f.id]
    out.print(f"{f.id}: run {f.run}, {f.metric} {f.expect}" + (f" (margin ±{f.margin:g})" if f.margin else ""),
              markup=False)
    if r.combined is None:
        out.print(f"{r.verdict}" + (f" ({r.detail})" if r.detail else ""), markup=False)
        return
    d, signed = (4, True) if "brier" in f.metric else (3, True)
    table = Table(title=f"{'trained' if r.trained else 'untrained'}: each seed, question-bootstrap 95% CI")
    table.add_column("seed")
    table.add_column("estimate [CI]")
    for seed, value, ci in r.samples:
        table.add_row(str(seed if seed is not None else "-"), fmt.num(value, d, signed) + fmt.ci(ci, d, signed))
    out.print(table)
    c = r.combined
    out.print(f"combined ({c.k} seed{'s' * (c.k != 1)}): {fmt.num(c.estimate, d, signed)}{fmt.ci(c.ci, d, signed)}, "
              f"p {fmt.pval(r.p)}, q {fmt.pval(r.q)} → {r.verdict}" + (f" ({r.detail})" if r.detail else ""),
              markup=False)
    if c.crossed:
        out.print(findings.components_text(c, d), markup=False)
    plan = Plan.load(STATE.root)
    on = ", ".join(finding_runs(plan, f))
    way = routes(plan, STATE.root, f, r)
    if way is None:        # one seed: the spread is unknown
        if r.needed is None:
            out.print("seeds to decide: more than 100 at this estimate and spread", markup=False)
            return
        more = max(0, r.needed - c.k)
        hours = more * cost.seed_hours(plan, finding_runs(plan, f), STATE.root)
        out.print(f"seeds to decide: ≥ {r.needed} (at least: one seed shows no spread); {more} more ≈ "
                  f"{cost.hours(hours)} stage-hours (seeds=[…] on {on}: a knob, or the root's seeds)", markup=False)
        return
    for line in describe(way, c, d):
        out.print(line, markup=False)
    out.print(f"(seeds: seeds=[…] on {on}; questions: world.heldout_draw=1, a redraw: the evaluations, no training)",
              markup=False)


def advice(rows: dict[str, Row]) -> list[str]:
    """What to run about stale and corrupt results and about Snakemake's lock after a crash."""
    lines = []
    for r in rows.values():
        if r["state"] == "stale":
            lines.append(f"stale: {r['run_id']} was built with {r.get('built_knob')!r}, its file now says "
                         f"{r['knob']!r}: rebuild with `snakemake results/{r['run_id']}/eval.json`")
        elif r["state"] == "corrupt":
            lines.append(f"corrupt: {r['log']} is not readable JSON: delete it, then "
                         f"`snakemake results/{r['run_id']}/eval.json`")
    if stale_lock(STATE.root):
        lines.append("lock: .snakemake/locks is left from a killed Snakemake (none runs in this project): "
                     "`snakemake --unlock` is safe, then rerun the same command (the profiles add --rerun-incomplete)")
    elif locked(STATE.root):
        pids = ", ".join(map(str, live_snakemakes(STATE.root)))
        lines.append(f"lock: held by a running Snakemake (pid {pids}): do not unlock")
    return lines


@app.command(name="decide")
def decide_cmd(budget: float = typer.Option(1.0, "--budget", help="CPU-hours to spend at most (the budget is "
                                             "exceeded by one stage at most; counted across decides)."),
               all_: bool = typer.Option(False, "--all", help="Provisional findings too, not only inconclusive ones."),
               profile: str = typer.Option("local", "--profile", help="profiles/<name>: local or slurm."),
               jobs: int = typer.Option(2, "--jobs", help="Stages launched at once (a wave).")) -> None:
    """Decide the open findings: in rounds, give each open finding its next look by the cheaper route
    (more seeds, or a held-out redraw) as run files, build them with Snakemake, regenerate the table;
    until the budget is spent or nothing is open. The plan is conf/decide.yaml."""
    if budget < 0 or jobs < 1:
        fail("decide: --budget must be ≥ 0 and --jobs ≥ 1")
        return
    try:
        tallies = deciding.decide(STATE.root, budget, all_, profile, jobs, say=lambda m: out.print(m, markup=False))
    except (RunError, TableError) as e:
        fail(str(e))
        return
    out.print("decided: " + ", ".join(f"{n} {v}" for v, n in sorted(tallies.items())), markup=False)




@app.command("figure")
def figure(which: str = typer.Argument("modes", help="modes: the two-agent runs side by side, by instructor mode."),
           output: Path = typer.Option(Path("results/episodes_by_mode.png"), "--out", "-o",
                                       help="The PNG to write (inside the project).")) -> None:
    """Draw a figure across runs from their results: `modes` = every two-agent run (eval.kind=
    simulate) with results, its MS and CI and the human's lean across turns (plots.episodes_by_mode)."""
    import json

    if which != "modes":
        fail(f"figure: unknown figure {which!r} (known: modes)")
    if (why := ProjectPath().problem(str(output))):
        fail(f"figure --out: {why}")
    tree = _tree(compose=False)
    runs = {}
    for run_id in tree.ids():
        path = STATE.root / "results" / run_id / "eval.json"
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            check_eval(data, str(path))   # an older shape is refused in one line before it is plotted
        except EvalSchemaError as e:
            fail(str(e))
        except (OSError, ValueError) as e:
            fail(f"{path}: unreadable ({e})")
        runs[run_id] = data
    written = episodes_by_mode(runs, STATE.root / output)
    out.print(str(written), markup=False)
