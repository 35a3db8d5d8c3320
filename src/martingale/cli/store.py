"""`martingale verify, plan`: the store's folders against their manifests; what a build would run
and its cost."""
from __future__ import annotations

from typing import List, Optional

import typer
from rich.table import Table

from ..config.runs import RunError
from ..plan import Plan, cost, current_index
from ..store import stage_dir
from ..store.manifest import problems, store_folders
from .common import STATE, _name, _need, app, fail, out


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
        info = current_index(STATE.root).runs.get(run)
        if info is None:
            fail(f"verify: unknown run {run!r}")
        chain = info.chain
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
    caps = ", ".join(f"{key} {cap}" for key, _, cap in budget.caps())
    message = cost.over_budget(est, budget)
    if not caps:
        out.print("budget: none set (budget.gpu_hours / budget.cpu_hours in conf/config.yaml)", markup=False)
    elif message is None:
        out.print(f"budget: {caps}: within it", markup=False)
    else:
        out.print(f"snakemake would refuse this build: {message}", markup=False)
