"""``martingale``: add, inspect, check and plan runs; regenerate the runs table.

Keeps torch/transformers out of its import path: only config, plan and table code is loaded.
Every error is one line on stderr and exit status 1.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
import yaml
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from . import decide as deciding
from .config.compose import flatten
from .config.runs import RunError, RunTree, display_path, run_id_problem
from .core.settings import ProjectPath
from .plan import Plan, cost, current_index
from .plan.needs import Need, unmet
from .records.plots import episodes_by_mode
from .stats.replicates import MIN_SEEDS
from .store import stage_dir
from .store.files import redact, write_jsonl, write_text
from .store.locks import live_snakemakes, locked, stale_lock
from .store.manifest import problems, store_folders
from .table import OUTPUTS, TableError, build_table, findings, fmt, load_claims, write_table
from .table.looks import load_plan
from .table.to_decide import describe, finding_runs, open_findings, routes
from .world.forecastbench import ImportProblem, import_forecastbench
from .world.jsonl import exported_rows
from .world.questions import QuestionsError, load_questions, summary, write_questions
from .world.synthetic import SyntheticWorld

app = typer.Typer(
    name="martingale",
    help="One-knob experiment runs: add, show, diff, check and plan them; regenerate runs.json.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class _State:
    root: Path = Path(".")


STATE = _State()


def fail(message: str) -> None:
    """Print an error line and exit 1."""
    err.print(f"error: {message}", markup=False, style="bold red")
    raise typer.Exit(1)


def _conf() -> Path:
    return STATE.root / "conf"


def _tree(compose: bool = True) -> RunTree:
    try:
        return RunTree.load(_conf(), compose=compose)
    except RunError as e:
        fail(str(e))
        raise  # unreachable


def _name(run_id: str) -> None:
    """Refuse, in one line, a run-id that is not a name (a path, '..', too long ...): nothing is
    read or written under a name the run-id rule (config.runs.run_id_problem) refuses."""
    problem = run_id_problem(run_id)
    if problem:
        fail(f"{_conf().name}/runs: run-id: {problem}")


def _need(tree: RunTree, run_id: str) -> None:
    _name(run_id)
    if run_id not in tree:
        fail(f"unknown run {run_id!r} (no conf/runs/{run_id}.yaml)")


@app.callback()
def main(root: Path = typer.Option(Path("."), "--root", help="Project folder (holds conf/, results/).",
                                   file_okay=False)) -> None:
    """martingale: a declarative experiment tree of one-knob runs."""
    STATE.root = root


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


def run_label(r: dict, lacking: list) -> str:
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


def run_tree(rows: dict[str, dict], unmet_here: dict[str, list]) -> Tree:
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


def provisional_lines(rows: list[dict]) -> list[str]:
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
        k = results[f.id].combined.k
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


def advice(rows: dict[str, dict]) -> list[str]:
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


@app.command()
def verify(run: Optional[str] = typer.Argument(None, help="Run-id: its stages (default with --all: the whole store)."),
           all_stages: bool = typer.Option(False, "--all", help="Every stage folder in results/_store."),
           remove: bool = typer.Option(False, "--remove", help="Delete each bad stage folder, so Snakemake rebuilds it.")
           ) -> None:
    """Check stage folders against their manifests (the sha256 of every file); exit 1 on any mismatch."""
    import shutil

    if (run is None) == (not all_stages):
        fail("verify: name a run-id or pass --all")
    if run is not None:
        _name(run)
        chain = current_index(STATE.root)["runs"].get(run, {}).get("chain")
        if chain is None:
            fail(f"verify: unknown run {run!r}")
        folders = [STATE.root / stage_dir(s) for s in chain if (STATE.root / stage_dir(s)).is_dir()]
    else:
        folders = store_folders(STATE.root / "results/_store")
    bad = {folder: problems(folder) for folder in folders}
    bad = {folder: lines for folder, lines in bad.items() if lines}
    for folder, lines in bad.items():
        for line in lines:
            out.print(f"corrupt: {line}", markup=False)
        if remove:
            shutil.rmtree(folder)
            out.print(f"removed {folder.relative_to(STATE.root)}: rebuild it with snakemake", markup=False)
    out.print(f"{len(folders)} stage folders checked, {len(bad)} bad", markup=False)
    if bad and not remove:
        raise typer.Exit(1)


@app.command()
def plan(runs: Optional[List[str]] = typer.Argument(None, help="Run-ids (default: every valid run)."),
         cost: bool = typer.Option(False, "--cost", help="What building these runs would run (new vs reused "
                                   "from the store) and its estimated stage-hours, CPU- and GPU-hours.")) -> None:
    """Stages with their ids; distinct stages vs the naive per-run chain sum. --cost: the build's estimate."""

    try:
        p = Plan.load(STATE.root)
    except RunError as e:
        fail(str(e))
        return
    ids = list(runs) if runs else p.active_run_ids()
    for r in ids:
        _need(p.tree, r)
    if cost:
        _plan_cost(p, ids)
        return
    users: dict[str, list[str]] = {}
    for r in ids:
        for sid in p.run_chain(r):
            users.setdefault(sid, []).append(r)
    table = Table(title="stages")
    for col in ("stage", "upstream", "runs"):
        table.add_column(col)
    for sid in p.stages_for(ids):
        st = p.stages[sid]
        shown = users[sid]
        table.add_row(sid, ", ".join(dict.fromkeys(st.inputs.values())) or "-",
                      ", ".join(shown[:3]) + (f" +{len(shown) - 3}" if len(shown) > 3 else ""))
    out.print(table)
    out.print(f"{len(ids)} runs: {len(p.stages_for(ids))} distinct stages "
              f"(naive per-run chains: {p.naive_count(ids)})", markup=False)


def _plan_cost(p, ids: list[str]) -> None:
    """`plan --cost`: the stages `snakemake results/<run>/eval.json` needs for these runs (each run's
    chain and its parent's), new or reused, with estimated hours (martingale.plan.cost); the budget."""

    est = cost.estimate(p, cost.build_stages(p, ids), STATE.root)
    h = cost.hours
    stages = Table(title="stages a build would run")
    stages.add_column("stage", no_wrap=True)
    stages.add_column("model")
    stages.add_column("state")
    for col in ("wall min", "cpu-h", "gpu-h"):
        stages.add_column(col, justify="right")
    for s in est.stages:
        stages.add_row(s.sid, s.model, "new" if s.new else "reused", f"{s.hours * 60:.1f}" if s.new else "-",
                       h(s.cpu_hours) if s.new else "-", h(s.gpu_hours) if s.new else "-")
    out.print(stages)
    kinds = Table(title="by stage kind: hours of the new stages")
    kinds.add_column("kind", no_wrap=True)
    kinds.add_column("model")
    for col in ("new", "reused", "wall-h", "cpu-h", "gpu-h"):
        kinds.add_column(col, justify="right")
    kinds.add_column("basis", no_wrap=True)
    groups = est.groups()
    for i, g in enumerate(groups):
        kinds.add_row(g.kind, g.model, str(g.new), str(g.reused), h(g.stage_hours), h(g.cpu_hours), h(g.gpu_hours),
                      g.basis, end_section=i == len(groups) - 1)
    kinds.add_row("total", "", str(len(est.new)), str(len(est.reused)), h(est.stage_hours), h(est.cpu_hours),
                  h(est.gpu_hours), "")
    out.print(kinds)
    out.print(f"{len(ids)} run{'s' * (len(ids) != 1)}: {len(est.stages)} stages, {len(est.new)} new, "
              f"{len(est.reused)} reused from the store; ~{h(est.stage_hours)} stage-hours, "
              f"~{h(est.cpu_hours)} CPU-hours, ~{h(est.gpu_hours)} GPU-hours", markup=False)
    out.print("wall-h: stage-hours, the sum of the new stages' wall times (stages that run side by side overlap: "
              "the build itself takes less); cpu-h = wall x cpus, gpu-h = wall x gpus (model resources). basis: "
              "history = median wall time of finished stages of that kind and model (their Snakemake "
              "benchmarks, logs/<kind>/<id>.benchmark.tsv); runtime_min limit = none recorded yet, "
              "the model's resources.runtime_min, the scheduler's limit: an upper bound.", markup=False)
    budget = cost.base_budget(p)
    caps = ", ".join(f"{key} {budget.get(key)}" for key, _ in cost.BUDGET_KEYS if budget.get(key) is not None)
    message = cost.over_budget(est, budget)
    if not caps:
        out.print("budget: none set (budget.gpu_hours / budget.cpu_hours in conf/config.yaml)", markup=False)
    elif message is None:
        out.print(f"budget: {caps}: within it", markup=False)
    else:
        out.print(f"snakemake would refuse this build: {message}", markup=False)


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
        try:
            runs[run_id] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            fail(f"{path}: unreadable ({e})")
    written = episodes_by_mode(runs, STATE.root / output)
    out.print(str(written), markup=False)


questions_app = typer.Typer(help="Resolved binary forecasting questions in a JSONL file (world=jsonl).",
                            no_args_is_help=True)
app.add_typer(questions_app, name="questions")


def fail_with_problems(problems: list[str], summary: str) -> None:
    """Each problem on its own ``error:`` line, then ``summary`` (``{n}``: "N problem(s)"), exit 1."""
    for line in problems:
        err.print(f"error: {line}", markup=False, style="bold red")
    fail(summary.replace("{n}", f"{len(problems)} problem{'s' * (len(problems) != 1)}"))


@questions_app.command("check")
def questions_check(path: Path = typer.Argument(..., help="A questions file: one JSON object per line.")) -> None:
    """Validate a questions file: its counts, base rate and constant-predictor Brier, or each problem (exit 1).

    Every problem is one line, file:line: field: what is wrong. Nothing is written."""

    try:
        s = summary(load_questions(path))
    except QuestionsError as e:
        fail_with_problems(e.problems, f"{path}: {{n}}; no questions loaded")
        return
    table = Table(title="questions")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("questions", str(s["n"]))
    table.add_row("resolved yes", str(s["n_yes"]))
    table.add_row("base rate", f"{s['base_rate']:.4f}")
    table.add_row("constant-predictor Brier", f"{s['constant_brier']:.4f}")
    table.add_row("dates", f"{s['first_date']} .. {s['last_date']}" if s["first_date"] else "(none given)")
    if s.get("crowd_n"):
        table.add_row(f"crowd Brier ({s['crowd_n']} with crowd_p)", f"{s['crowd_brier']:.4f}")
    out.print(f"{path}: OK", markup=False)
    out.print(table)


@questions_app.command("import")
def questions_import(
    source: str = typer.Argument(..., help="Whose files: forecastbench."),
    files: List[Path] = typer.Argument(..., help="Question sets and resolution sets (known by their content)."),
    out_path: str = typer.Option(..., "--out", "-o", help="The questions file to write, inside the project."),
) -> None:
    """Import resolved binary questions from another format: ForecastBench's question and resolution
    sets (world/forecastbench.py: market questions resolved 0/1, joined by source and id, the crowd's
    probability kept as crowd_p). Every problem is one line; nothing is written on a failure."""
    if source != "forecastbench":
        fail(f"questions import: {source!r}: the one format known is forecastbench")
    problem = ProjectPath().problem(out_path)
    if problem:
        fail(f"questions import: {problem}")
    try:
        found = import_forecastbench(list(files))
    except ImportProblem as e:
        fail_with_problems(e.problems, "questions import: {n}; nothing written")
        return
    if not found.rows:
        fail(f"questions import: no resolved market question in {len(files)} files; nothing written")
    try:
        write_questions(STATE.root / out_path, found.rows)
    except QuestionsError as e:
        fail(f"questions import: {e.problems[0]}")
    s = summary(load_questions(STATE.root / out_path))
    left = ", ".join(f"{n} {why}" for why, n in found.left_out.items() if n) or "none"
    out.print(f"{out_path}: {s['n']} questions ({s['n_yes']} yes, base rate {s['base_rate']:.3f}) from "
              f"{found.question_sets} question sets and {found.resolution_sets} resolution sets; left out: {left}",
              markup=False)


@questions_app.command("export-synthetic")
def questions_export(
    out_path: str = typer.Argument("data/questions/synthetic-world.jsonl",
                                   help="Where to write the file, inside the project."),
    run: str = typer.Option("base", "--run", help="Whose world.* to export (its synthetic questions)."),
) -> None:
    """Write a run's synthetic world (train and held-out questions) as a questions file.

    Each line: English question text, the clue words as background, y, its split, the clues and
    the oracle's final belief; world=jsonl on this file asks exactly the synthetic world's questions."""
    problem = ProjectPath().problem(out_path)
    if problem:
        fail(f"export-synthetic: {problem}")
    tree = _tree(compose=False)
    _need(tree, run)
    try:
        world = SyntheticWorld({**tree.resolved_config(run)["world"], "name": "synthetic"})
        rows = exported_rows(world)
    except (RunError, ValueError) as e:
        fail(str(e).splitlines()[0])
        return
    write_jsonl(STATE.root / out_path, rows)
    n_held = sum(r["split"] == "heldout" for r in rows)
    out.print(f"{out_path}: {len(rows)} questions ({len(rows) - n_held} train, {n_held} held-out) "
              f"from {run}'s synthetic world", markup=False)


if __name__ == "__main__":  # pragma: no cover
    app()
