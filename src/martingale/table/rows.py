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
from typing import Any, Optional

from ..config.runs import RunTree
from ..metrics import table_columns
from ..plan import config_hash, current_index
from ..stats.seeds import as_shown
from ..store import STORE, stage_dir
from ..store.files import read_optional, read_optional_yaml
from ..store.locks import lock_state
from ..store.manifest import MANIFEST
from ..store.provenance import summary

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


class TableError(ValueError):
    """The table cannot be regenerated without losing a row."""


def _last_stage(evals: Any) -> tuple[Optional[str], dict]:
    stages = evals.get("stages") if isinstance(evals, dict) else None
    if isinstance(stages, dict) and stages:
        name = list(stages)[-1]
        return str(name), stages[name] if isinstance(stages[name], dict) else {}
    return None, {}


def _effect(evals: Any) -> Optional[dict]:
    eff = evals.get("effect") if isinstance(evals, dict) else None
    head = eff.get("headline") if isinstance(eff, dict) else None
    return {k: head[k] for k in EFFECT if k in head} if isinstance(head, dict) else None


def _provenance(evals: Any) -> Optional[dict]:
    """What the run's stages ran with (eval.json's stage_provenance, compacted: martingale.store.provenance.
    summary): {versions, weights_sha256}; None for results without it."""
    docs = evals.get("stage_provenance") if isinstance(evals, dict) else None
    return summary(docs, STORE) if isinstance(docs, dict) else None


def _replicates(stage: dict) -> int:
    """Seeds that reached the last stage: a multi-seed stage lists them, one seed is one."""
    seeds = stage.get("seeds")
    return len(seeds) if isinstance(seeds, list) else (1 if stage else 0)


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


def _built_hash(root: Path, run_id: str, evals: dict) -> Optional[str]:
    """The config hash a run's results were built with: eval.json records it; older results are
    hashed from their results/<run>/config.yaml."""
    if isinstance(evals.get("config_hash"), str):
        return evals["config_hash"]
    cfg = read_optional_yaml(root / "results" / run_id / "config.yaml")
    return config_hash(cfg) if isinstance(cfg, dict) else None


def _artifacts(root: Path, run_id: str, chain: list[str]) -> dict[str, Any]:
    out = f"results/{run_id}"
    stages = [stage_dir(s) for s in chain]
    try:
        present = set(os.listdir(root / out))
    except OSError:
        return {"plots": [], "stages": stages}
    files = {name.split(".")[0]: f"{out}/{name}" for name in RUN_FILES if name in present}
    plots = sorted(f"{out}/plots/{p}" for p in os.listdir(root / out / "plots") if p.endswith(".png")) \
        if "plots" in present else []
    return {**files, "plots": plots, "stages": stages}


def build_row(root: Path, tree: RunTree, index: dict, files: _Files, run_id: str) -> dict[str, Any]:
    spec = tree.specs[run_id]
    info = index["runs"].get(run_id, {})
    chain = list(info.get("chain", []))
    row: dict[str, Any] = {"run_id": run_id, "parent": spec.parent, "knob": spec.knob}
    row.update(spec.metadata())
    row.update({k: info.get(k) for k in ("model", "start", "elicit", "stage_chain", "seeds", "config_hash")})
    row["needs"] = list(info.get("needs", []))
    evals_path = root / "results" / run_id / "eval.json"
    done = evals_path.exists()
    evals = read_optional(evals_path) if done else None
    log = None if done else files.failed_log(run_id, chain)
    if spec.invalid:
        state = "invalid"
    elif done and not isinstance(evals, dict):
        state, log = "corrupt", evals_path.relative_to(root).as_posix()
    elif done and _built_hash(root, run_id, evals) != info.get("config_hash"):
        state = "stale"
        row["built_knob"] = evals.get("knob")
    elif done:
        state = "done"
    elif files.being_written(chain):
        state, log = "running", None
    elif log:
        state = "crashed"
    elif (aborted := files.killed(run_id, chain)) is not None:
        state, log = "crashed", aborted or None
    else:
        state = "queued"
    stage, last = _last_stage(evals)
    landed = read_optional(root / "results" / run_id / "landed.json")
    row.update(
        state=state,
        log=log,
        stage=stage,
        metrics={k: as_shown(last[k]) for k in headline_keys() if k in last},
        effect=_effect(evals),
        provenance=_provenance(evals),
        replicates=_replicates(last),
        landed=landed.get("landed") if isinstance(landed, dict) else None,
        artifacts=_artifacts(root, run_id, chain),
        wandb={"name": run_id, "group": info.get("group"),
               "project": str((info.get("wandb") or {}).get("project") or "martingale")},
    )
    return row


def build_table(root: Path | str = ".", tree: RunTree | None = None) -> list[dict]:
    """One row per run, sorted by run-id. Run files are read without composing; model, stage chain
    and config hash come from the plan index (re-planned only when conf/ changed)."""
    root = Path(root)
    tree = tree if tree is not None else RunTree.load(root / "conf", compose=False)
    index = current_index(root)
    files = _Files(root)
    return [build_row(root, tree, index, files, run_id) for run_id in tree.ids()]


def previous_rows(path: Path) -> list[dict]:
    """The rows of the runs.json written last (none if absent or unreadable)."""
    data = read_optional(path)
    return [r for r in data if isinstance(r, dict) and "run_id" in r] if isinstance(data, list) else []


def check_no_vanished(previous: list[dict], rows: list[dict]) -> None:
    """A row is never dropped: a vanished run file or a done run's vanished results is an error
    that says how to record the run as invalid instead."""
    now = {r["run_id"]: r for r in rows}
    for old in previous:
        run_id = old["run_id"]
        new = now.get(run_id)
        if new is None:
            raise TableError(
                f"conf/runs/{run_id}.yaml vanished but runs.json has its row ({old.get('state')}): "
                f"restore the file and mark the run `invalid: \"<bug>\"` instead of deleting it")
        if old.get("state") in ("done", "stale") and new["state"] not in ("done", "stale", "invalid", "corrupt"):
            raise TableError(
                f"results/{run_id}/eval.json vanished: mark the run `invalid: \"<bug>\"` in "
                f"conf/runs/{run_id}.yaml or rebuild it")


def check_no_corrupt(rows: list[dict]) -> None:
    """An unreadable result is never shown as a row: the table step fails naming it."""
    bad = [r for r in rows if r["state"] == "corrupt"]
    if bad:
        raise TableError(f"{bad[0]['log']}: unreadable (not a JSON object): delete it and rebuild with "
                         f"`snakemake {bad[0]['log']}`" + (f" ({len(bad) - 1} more corrupt)" if len(bad) > 1 else ""))


__all__ = ["TableError", "build_table", "check_no_corrupt", "check_no_vanished", "previous_rows", "STORE"]
