"""What a build costs before it runs, and which ancestors it can aggregate for free.

- **Which stages.** ``snakemake results/<run>/eval.json`` needs the run's chain and its parent's
  (the aggregate pairs the run's evals with the parent's): ``build_stages``. A stage is *reused*
  when its folder in the store has its ``MANIFEST.json`` (Snakemake's own test of a finished stage),
  else *new*.
- **How long.** Each stage job writes a Snakemake benchmark, ``logs/<kind>/<id>.benchmark.tsv``
  (the stage rule's ``benchmark:``; column ``s`` = the job's wall seconds). A new stage is estimated
  at the median of the recorded durations of stages of the same kind on the same model (stages of
  the current plan, any run); without any, at its model's ``resources.runtime_min``: the scheduler's
  limit, an upper bound. A local kind (linked weights) runs on the submitting host: not counted.
- **How much.** CPU-hours = wall × the stage's threads (``resources.cpus``), GPU-hours = wall ×
  its GPUs. The wall times are summed as *stage-hours*: stages that run side by side overlap, so a
  build's own wall time is shorter. Aggregates and the table (seconds, local) are not counted.
- **The budget.** ``budget.gpu_hours`` / ``budget.cpu_hours`` of conf/config.yaml cap one build:
  the Snakefile's ``onstart`` estimates the jobs Snakemake is about to run and stops, in one line
  (``over_budget``), unless ``--config allow_over_budget=1``.
- **Ancestors.** Building a run also aggregates each (valid) ancestor whose aggregate needs no
  stage beyond the run's own build (``ancestors_to_aggregate``: from the plan alone).

Reads only: no numerics library (the Snakefile imports this module at parse time).
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..config.schema import run_config
from ..config.sections import BudgetConfig
from ..core.jsonvalue import JsonObject
from ..core.typed import section_of
from ..model.section import model_section
from ..stages import kinds
from ..store import stage_dir
from ..store.manifest import MANIFEST
from . import Plan, Stage

BENCHMARK = "logs/{kind}/{sid}.benchmark.tsv"   # the stage rule's benchmark: (Snakemake's format)
OVERRIDE = "allow_over_budget"                  # snakemake --config allow_over_budget=1
RUNTIME_BASIS = "runtime_min limit"
LOCAL_BASIS = "local (not a job)"


def is_built(root: Path | str, sid: str) -> bool:
    """The stage's folder has its manifest: a finished stage, for Snakemake as for us."""
    return (Path(root) / stage_dir(sid) / MANIFEST).is_file()


def model_name(stage: Stage) -> str:
    """The model a stage runs on (``model.name``), for grouping its cost."""
    model = section_of(stage.cfg, "model")
    return "?" if model is None else str(model_section(model).name)


def build_stages(plan: Plan, runs: Iterable[str]) -> list[str]:
    """The stages ``snakemake results/<run>/eval.json`` needs for these runs, upstream first: each
    run's parent's chain (its evals are the aggregate's other input) and the run's own chain."""
    out: list[str] = []
    for run in runs:
        parent = plan.tree.specs[run].parent
        if parent is not None:
            out += plan.run_chain(parent)
        out += plan.run_chain(run)
    return list(dict.fromkeys(out))


def upstream(plan: Plan, sids: Iterable[str]) -> set[str]:
    """The stages and every stage upstream of them."""
    seen: set[str] = set()
    todo = list(sids)
    while todo:
        sid = todo.pop()
        if sid not in seen:
            seen.add(sid)
            todo += plan.stages[sid].inputs.values()
    return seen


def ancestors_to_aggregate(plan: Plan, run: str) -> list[str]:
    """The run's ancestors (parent first) whose aggregate building the run makes for free: a valid
    ancestor whose evals, its parent's evals and everything upstream of them are stages of this
    run's build (``build_stages``). An ancestor whose aggregate would need another model stage or
    eval (e.g. its parent trained a stage this run does not) is left out. From the plan alone, not
    the store: an aggregate's input set that changed with the store made aggregates stale."""
    covered = set(build_stages(plan, [run]))
    out = []
    for spec in reversed(plan.tree.lineage(run)[:-1]):
        if spec.invalid:
            continue
        needed = [r.eval_stage for r in plan.run_stages(spec.run_id)]
        needed += [e["eval_stage"] for e in plan.natural_evals(spec.run_id)]
        if spec.parent is not None:
            needed += [r.eval_stage for r in plan.run_stages(spec.parent)]
        if all(sid in covered for sid in upstream(plan, needed)):
            out.append(spec.run_id)
    return out


# ------------------------------------------------------------------ durations
def read_benchmark(path: Path | str) -> Optional[float]:
    """A Snakemake benchmark file's wall seconds (column ``s``; the mean over repeats), or None."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        col = lines[0].split("\t").index("s")
        values = [float(line.split("\t")[col]) for line in lines[1:] if line.strip()]
    except (OSError, ValueError, IndexError):
        return None
    if not values or any(not (v >= 0 and v < float("inf")) for v in values):
        return None
    return sum(values) / len(values)


def durations(plan: Plan, root: Path | str) -> dict[tuple[str, str], list[float]]:
    """(kind, model name) → the recorded wall seconds of finished stage jobs of the current plan
    (a benchmark is written only when its job succeeds)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    logs = Path(root) / "logs"
    for kind in kinds():
        folder = logs / kind
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.benchmark.tsv")):
            stage = plan.stages.get(path.name[: -len(".benchmark.tsv")])
            seconds = read_benchmark(path) if stage is not None and stage.kind == kind else None
            if stage is not None and seconds is not None:
                out[(kind, model_name(stage))].append(seconds)
    return dict(out)


# ------------------------------------------------------------------ estimate
@dataclass(frozen=True)
class StageCost:
    """One stage of a build: new or reused, its estimated wall time, CPU- and GPU-hours and their basis."""
    sid: str
    kind: str
    model: str
    new: bool
    hours: float          # estimated wall time of the stage job (0 for a local kind)
    threads: int
    gpus: int
    basis: str            # "history (n=3)", "runtime_min limit" or "local (not a job)"
    nodes: int = 1        # a ranked stage over several machines asks each for threads and gpus

    @property
    def cpu_hours(self) -> float:
        return self.hours * self.threads * self.nodes

    @property
    def gpu_hours(self) -> float:
        return self.hours * self.gpus * self.nodes


@dataclass(frozen=True)
class Group:
    """The new stages of one kind and model, summed."""
    kind: str
    model: str
    new: int
    reused: int
    stage_hours: float
    cpu_hours: float
    gpu_hours: float
    basis: str


@dataclass(frozen=True)
class Estimate:
    """Every stage a build needs, with the totals of the new ones."""
    stages: list[StageCost]

    @property
    def new(self) -> list[StageCost]:
        return [s for s in self.stages if s.new]

    @property
    def reused(self) -> list[StageCost]:
        return [s for s in self.stages if not s.new]

    @property
    def stage_hours(self) -> float:
        return sum(s.hours for s in self.new)

    @property
    def cpu_hours(self) -> float:
        return sum(s.cpu_hours for s in self.new)

    @property
    def gpu_hours(self) -> float:
        return sum(s.gpu_hours for s in self.new)

    def groups(self) -> list[Group]:
        """One row per (kind, model), in first-needed order; hours over the new stages only."""
        by: dict[tuple[str, str], list[StageCost]] = {}
        for s in self.stages:
            by.setdefault((s.kind, s.model), []).append(s)
        rows = []
        for (kind, model), items in by.items():
            new = [s for s in items if s.new]
            rows.append(Group(kind, model, len(new), len(items) - len(new), sum(s.hours for s in new),
                              sum(s.cpu_hours for s in new), sum(s.gpu_hours for s in new),
                              ", ".join(dict.fromkeys(s.basis for s in (new or items)))))
        return rows

    def from_limits(self) -> int:
        """New stages estimated from runtime_min (no recorded duration): upper bounds."""
        return sum(1 for s in self.new if s.basis == RUNTIME_BASIS)


def estimate(plan: Plan, sids: Iterable[str], root: Path | str,
             new: Optional[Callable[[str], bool]] = None) -> Estimate:
    """Each stage's estimated wall time, CPU- and GPU-hours. ``new(sid)``: does the build run it
    (default: its folder has no manifest)."""
    root = Path(root)
    is_new = new if new is not None else (lambda sid: not is_built(root, sid))
    history = durations(plan, root)
    local = {name for name, kind in kinds().items() if kind.local}
    out = []
    for sid in dict.fromkeys(sids):
        stage = plan.stages[sid]
        model, res = model_name(stage), stage.resources
        if stage.kind in local:
            hours, basis = 0.0, LOCAL_BASIS
        elif history.get((stage.kind, model)):
            seen = history[(stage.kind, model)]
            hours, basis = statistics.median(seen) / 3600, f"history (n={len(seen)})"
        else:
            hours, basis = float(res.get("runtime", 60)) / 60, RUNTIME_BASIS
        out.append(StageCost(sid, stage.kind, model, bool(is_new(sid)), hours, int(res.get("threads", 1)),
                             int(res.get("gpu") or 0), basis, int(res.get("nodes") or 1)))
    return Estimate(out)


def seed_stages(plan: Plan, run: str, seed: int) -> list[str]:
    """The stages one seed of a run adds: every per-seed stage of its chain built for that seed
    (its D, training stages and evals), upstream first."""
    every = kinds()
    rows = [r for r in plan.run_stages(run) if r.seed == seed]
    ids = {sid for r in rows for sid in upstream(plan, [r.model_stage, r.eval_stage])}
    return [sid for sid in plan.run_chain(run) if sid in ids and every[plan.stages[sid].kind].per_seed]


def seed_estimate(plan: Plan, runs: Iterable[str], root: Path | str) -> Estimate:
    """One more seed of each of ``runs``: their first seed's per-seed stages, priced as new from the
    store's history."""
    sids: list[str] = []
    for run in runs:
        seeds = [r.seed for r in plan.run_stages(run)]
        if seeds:
            sids += seed_stages(plan, run, seeds[0])
    return estimate(plan, sids, root, new=lambda sid: True)


def seed_hours(plan: Plan, runs: Iterable[str], root: Path | str) -> float:
    """Estimated stage-hours of one more seed of each of ``runs`` (``seed_estimate``)."""
    return seed_estimate(plan, runs, root).stage_hours


def redraw_estimate(plan: Plan, runs: Iterable[str], root: Path | str) -> Estimate:
    """A redraw of the held-out questions for ``runs``: every seed's evaluation (measure) stages,
    priced as new; the training stages are kept (world.heldout_draw)."""
    every = kinds()
    sids = [r.eval_stage for run in runs for r in plan.run_stages(run)
            if every[plan.stages[r.eval_stage].kind].place == "measure"]
    return estimate(plan, sids, root, new=lambda sid: True)


def redraw_hours(plan: Plan, runs: Iterable[str], root: Path | str) -> float:
    """Estimated stage-hours of a redraw of the held-out questions for ``runs`` (``redraw_estimate``)."""
    return redraw_estimate(plan, runs, root).stage_hours


# ------------------------------------------------------------------ budget
def base_budget(plan: Plan) -> BudgetConfig:
    """``budget`` of conf/config.yaml as composed (no run's knobs)."""
    return run_config(plan.tree.composer.compose([]), "conf/config.yaml").budget


def overridden(config: JsonObject) -> bool:
    """``snakemake --config allow_over_budget=1`` (or true / yes)."""
    return str(config.get(OVERRIDE, "")).strip().lower() in ("1", "true", "yes", "y", "on")


def hours(x: float) -> str:
    """Hours for a one-line message: 3.2, 12, 0.0042."""
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}" if x >= 1 else f"{x:.2g}"


def over_budget(est: Estimate, budget: BudgetConfig) -> Optional[str]:
    """The one-line refusal when the estimate exceeds a cap of ``budget``, else None."""
    parts, keys = [], []
    for key, label, cap in budget.caps():
        need = est.gpu_hours if key == "gpu_hours" else est.cpu_hours
        if need > cap:
            parts.append(f"~{hours(need)} {label} > budget.{key} {hours(cap)} (by {hours(need - cap)})")
            keys.append(f"budget.{key}")
    if not parts:
        return None
    n, limits = len(est.new), est.from_limits()
    basis = (f"{limits} of them from runtime_min limits, an upper bound" if limits
             else "from recorded durations")
    return (f"budget: this build needs {' and '.join(parts)} for {n} new stage{'s' * (n != 1)} ({basis}); "
            f"raise {' / '.join(keys)} in conf/config.yaml or rerun with --config {OVERRIDE}=1")


def going_ahead(message: str) -> str:
    """The refusal turned into a note, for a build run with the override."""
    return f"{message.split('; raise ')[0]}; going ahead: --config {OVERRIDE}=1"
