"""The rows of ``runs.json``: one per run, read from the run files, the plan index and results/.

Every value comes from a file, so the same files give the same rows (no clock is read; the only
time is ``landed``, which the aggregate recorded in results/<run>/landed.json). States:

- ``invalid``: the run file names a bug (``invalid: "<bug>"``);
- ``done``: results/<run>/eval.json exists;
- ``running``: one of its stages is being written (a stage's temp folder exists) while a live
  Snakemake holds the project's lock (martingale.store.locks.lock_state);
- ``crashed``: a stage or its aggregate has no output and a job log shows a failure, or, under a
  stale lock (the Snakemake holding it was killed: kill -9, OOM, a lost node), a job of the run
  started and never finished (its job log is cut off mid-run, or a stage's temp folder is left).
  ``log`` gives that log's path; `martingale status` says when ``snakemake --unlock`` is safe;
- ``queued``: anything else (never built, or built only in part).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional, cast

from ..config.runs import RunTree
from ..core.typed import typed
from ..metrics import table_columns
from ..plan import current_index
from ..records.eval_record import EvalRecord, EvalSchemaError, Metric, Spread, read_eval
from ..store import STORE, stage_dir
from ..store.files import read_optional
from ..store.locks import lock_state
from ..store.manifest import MANIFEST
from ..store.plan_index import PlanIndex
from ..store.provenance import summary
from ..store.tracking import WandbConfig
from .runs_row import Artifacts, Provenance, Row, RowEffect, Seeded

HEADLINE = ("n", "brier", "brier_ci", "ms", "ms_ci", "bss", "parse_rate")


def headline_keys() -> tuple[str, ...]:
    """The metrics a row carries: HEADLINE, then each declared table metric and its CI."""
    return HEADLINE + tuple(k for key in table_columns() for k in (key, f"{key}_ci"))
# The knob's paired effect against the parent (eval.json's effect.headline): the run's final stage
# against the parent's final stage; one seed gives CI and p, several the spread and "beats parent" (k of n seeds).
EFFECT = ("stage", "parent_stage", "compares", "n_paired", "brier_delta", "brier_ci", "p_t", "p_wilcoxon", "share_child_wins",
          "ms_delta", "ms_ci", "p_perm_ms", "seeds", "brier_delta_sd", "ms_delta_sd", "beats_parent",
          "beats_parent_ci")
# A failed job's log: our stages log "stage failed" + the traceback (martingale.jobs.smk.run_logged);
# SLURM writes "CANCELLED" / "DUE TO TIME LIMIT" into its job log.
_ERROR_MARKS = ("stage failed", "Traceback (most recent call last)", "Error", "CANCELLED", "DUE TO TIME LIMIT")
RUN_FILES = ("eval.json", "records.jsonl", "config.yaml", "lineage.json")
ARTIFACT_KEYS: dict[str, Literal["eval", "records", "config", "lineage"]] = {
    "eval.json": "eval", "records.jsonl": "records", "config.yaml": "config", "lineage.json": "lineage"}


class TableError(ValueError):
    """The table cannot be regenerated without losing a row."""


def shown(metric: Metric) -> Seeded:
    """A stage metric as a row holds it (runs_row.Seeded): eval.json's mean and sd where it has
    them (a numeric metric), null otherwise, and each seed's value."""
    if isinstance(metric, Spread):
        return Seeded(mean=metric.mean, sd=metric.sd, per_seed=list(metric.per_seed))
    return Seeded(mean=None, sd=None, per_seed=list(metric.per_seed))


def _metrics(evals: Optional[EvalRecord]) -> dict[str, Seeded]:
    """The headline metrics of the run's last stage."""
    if evals is None:
        return {}
    last = evals.stages[evals.final].metrics
    return {k: shown(last[k]) for k in headline_keys() if k in last}


def _effect(evals: Optional[EvalRecord]) -> Optional[RowEffect]:
    head = evals.effect.headline if evals is not None and evals.effect is not None else None
    return cast(RowEffect, {k: head[k] for k in EFFECT if k in head}) if head is not None else None


def _provenance(evals: Optional[EvalRecord]) -> Optional[Provenance]:
    """What the run's stages ran with (eval.json's stage_provenance, compacted: martingale.store.provenance.
    summary): {versions, weights_sha256}."""
    return cast(Optional[Provenance], summary(dict(evals.stage_provenance), STORE)) if evals is not None else None


def _log_failed(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(mark in text for mark in _ERROR_MARKS)


class _Files:
    """One listing of the store, the logs and the cluster job logs, taken once per table: a
    thousand runs share their stages, so each stage is looked up in memory, not on disk."""

    def __init__(self, root: Path):
        self.root = root
        store = root / STORE
        self.built: set[str] = set()
        self.writing: set[str] = set()            # stage ids with a files.atomic_dir temp folder
        for kind_dir in (store.iterdir() if store.is_dir() else ()):
            if not kind_dir.is_dir():
                continue
            for entry in kind_dir.iterdir():
                name = entry.name
                if name.startswith(".") and name.endswith(".tmp"):
                    self.writing.add(name[1:].split(".", 1)[0])
                elif (entry / MANIFEST).is_file():   # a finished stage (martingale.store.manifest)
                    self.built.add(name)
        # stage id -> its logs, the job log first: the cluster's job logs, newest job id first
        # (.snakemake/slurm_logs/rule_<rule>/<stage id>/<job id>.log, kept only for failed jobs),
        # then the stage's own logs/<kind>/<stage id>.log (appended across attempts).
        self.logs: dict[str, list[Path]] = {}
        slurm = root / ".snakemake" / "slurm_logs"
        job_logs = slurm.glob("rule_*/*/*.log") if slurm.is_dir() else ()
        for log in sorted(job_logs, key=lambda p: (len(p.stem), p.stem), reverse=True):
            self.logs.setdefault(log.parent.name, []).append(log)
        logs = root / "logs"
        for kind_dir in (logs.iterdir() if logs.is_dir() else ()):
            for log in (kind_dir.glob("*.log") if kind_dir.is_dir() else ()):
                self.logs.setdefault(log.stem, []).append(log)
        # "live": a live Snakemake holds the lock; "stale": a killed one left it; None: no lock
        self.lock = lock_state(root)

    def failed_log(self, run_id: str, chain: list[str]) -> Optional[str]:
        """The first failed job log of a stage of the run without output (or of its aggregate)."""
        for sid in chain:
            if sid in self.built:
                continue
            for log in self.logs.get(sid, ()):
                if _log_failed(log):
                    return log.relative_to(self.root).as_posix()
        agg = self.root / "logs" / "aggregate" / f"{run_id}.log"
        return agg.relative_to(self.root).as_posix() if _log_failed(agg) else None

    def being_written(self, chain: list[str]) -> bool:
        """A stage's temp folder (files.atomic_dir) exists, without a finished folder, while a live
        Snakemake holds the lock."""
        return self.lock == "live" and any(sid in self.writing and sid not in self.built for sid in chain)

    def killed(self, run_id: str, chain: list[str]) -> Optional[str]:
        """Under a stale lock (the Snakemake that held it was killed: kill -9, an OOM kill, a lost
        node), a job of the run that started and never finished: a stage without output whose temp
        folder is left or whose job log exists (cut off mid-run, so no failure is written), or the
        aggregate's log without eval.json. That log's path, "" for a job without one; None if no
        such job."""
        if self.lock != "stale":
            return None
        for sid in chain:
            if sid not in self.built and (sid in self.writing or sid in self.logs):
                logs = self.logs.get(sid)
                return logs[0].relative_to(self.root).as_posix() if logs else ""
        agg = self.root / "logs" / "aggregate" / f"{run_id}.log"
        return agg.relative_to(self.root).as_posix() if agg.is_file() else None


def _artifacts(root: Path, run_id: str, chain: list[str]) -> Artifacts:
    out = f"results/{run_id}"
    stages = [stage_dir(s) for s in chain]
    try:
        present = set(os.listdir(root / out))
    except OSError:
        return {"plots": [], "stages": stages}
    plots = sorted(f"{out}/plots/{p}" for p in os.listdir(root / out / "plots") if p.endswith(".png")) \
        if "plots" in present else []
    found: Artifacts = {"plots": plots, "stages": stages}
    for name in RUN_FILES:
        if name in present:
            found[ARTIFACT_KEYS[name]] = f"{out}/{name}"
    return found


def _read(root: Path, run_id: str) -> tuple[Optional[EvalRecord], bool]:
    """(the run's eval.json, whether it exists); an unreadable one, or one of an older shape, is
    (None, True): the row is corrupt."""
    path = root / "results" / run_id / "eval.json"
    if not path.exists():
        return None, False
    try:
        return read_eval(path, f"results/{run_id}/eval.json"), True
    except EvalSchemaError:
        return None, True


def _state(spec_invalid: bool, done: bool, evals: Optional[EvalRecord], built_for: Optional[str],
           files: _Files, run_id: str, chain: list[str]) -> tuple[str, Optional[str]]:
    """(state, log) by the module docstring's rules."""
    log = None if done else files.failed_log(run_id, chain)
    if spec_invalid:
        return "invalid", log
    if done and evals is None:
        return "corrupt", f"results/{run_id}/eval.json"
    if evals is not None:
        return ("stale" if evals.config_hash != built_for else "done"), log
    if files.being_written(chain):
        return "running", None
    if log:
        return "crashed", log
    if (aborted := files.killed(run_id, chain)) is not None:
        return "crashed", aborted or None
    return "queued", None


def build_row(root: Path, tree: RunTree, index: PlanIndex, files: _Files, run_id: str) -> Row:
    """The run's row (the module docstring's states)."""
    spec = tree.specs[run_id]
    info = index.runs.get(run_id)
    chain = list(info.chain) if info is not None else []
    evals, done = _read(root, run_id)
    state, log = _state(bool(spec.invalid), done, evals, info.config_hash if info else None, files, run_id, chain)
    landed = read_optional(root / "results" / run_id / "landed.json")
    wandb = typed(WandbConfig, info.wandb if info else {}, f"{run_id}.wandb")
    row: Row = {
        "run_id": run_id, "parent": spec.parent, "knob": spec.knob, "question": spec.question,
        "claims": list(spec.claims), "owner": spec.owner, "verdict": spec.verdict, "invalid": spec.invalid,
        "model": info.model if info else None, "start": info.start if info else None,
        "elicit": info.elicit if info else None, "stage_chain": list(info.stage_chain) if info else None,
        "seeds": list(info.seeds) if info else None, "config_hash": info.config_hash if info else None,
        "needs": list(info.needs) if info else [], "state": state, "log": log,
        "stage": evals.final if evals is not None else None,
        "metrics": _metrics(evals), "effect": _effect(evals), "provenance": _provenance(evals),
        "replicates": len(evals.stages[evals.final].seeds) if evals is not None else 0,
        "landed": landed.get("landed") if isinstance(landed, dict) else None,
        "artifacts": _artifacts(root, run_id, chain),
        "wandb": {"name": run_id, "group": info.group if info else None, "project": wandb.project},
    }
    if state == "stale" and evals is not None:
        row["built_knob"] = evals.knob
    return row


def build_table(root: Path | str = ".", tree: RunTree | None = None) -> list[Row]:
    """One row per run, sorted by run-id. Run files are read without composing; model, stage chain
    and config hash come from the plan index (re-planned only when conf/ changed)."""
    root = Path(root)
    tree = tree if tree is not None else RunTree.load(root / "conf", compose=False)
    index = current_index(root)
    files = _Files(root)
    return [build_row(root, tree, index, files, run_id) for run_id in tree.ids()]


def previous_states(path: Path) -> dict[str, Optional[str]]:
    """Each run of the runs.json written last and its state (none if absent or unreadable): all
    the no-vanish check reads of a file about to be rewritten, whatever shape it was written in."""
    data = read_optional(path)
    rows = [r for r in data if isinstance(r, dict) and isinstance(r.get("run_id"), str)] if isinstance(data, list) else []
    return {r["run_id"]: r.get("state") if isinstance(r.get("state"), str) else None for r in rows}


def check_no_vanished(previous: dict[str, Optional[str]], rows: list[Row]) -> None:
    """A row is never dropped: a vanished run file or a done run's vanished results is an error
    that says how to record the run as invalid instead."""
    now = {r["run_id"]: r for r in rows}
    for run_id, state in previous.items():
        new = now.get(run_id)
        if new is None:
            raise TableError(
                f"conf/runs/{run_id}.yaml vanished but runs.json has its row ({state}): "
                f"restore the file and mark the run `invalid: \"<bug>\"` instead of deleting it")
        if state in ("done", "stale") and new["state"] not in ("done", "stale", "invalid", "corrupt"):
            raise TableError(
                f"results/{run_id}/eval.json vanished: mark the run `invalid: \"<bug>\"` in "
                f"conf/runs/{run_id}.yaml or rebuild it")


def check_no_corrupt(root: Path, rows: list[Row]) -> None:
    """An unreadable result, or one of an older shape, is never shown as a row: the table step
    fails in one line naming it and what it breaks."""
    bad = [r for r in rows if r["state"] == "corrupt"]
    if not bad:
        return
    where = str(bad[0]["log"])
    try:
        read_eval(root / where, where)
        why = f"{where}: unreadable"
    except EvalSchemaError as e:
        why = str(e)
    raise TableError(f"{why}: delete it and rebuild with `snakemake {where}`"
                     + (f" ({len(bad) - 1} more corrupt)" if len(bad) > 1 else ""))


__all__ = ["Row", "TableError", "build_table", "check_no_corrupt", "check_no_vanished", "previous_states", "STORE"]
