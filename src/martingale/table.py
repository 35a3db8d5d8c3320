"""``runs.json``: the master runs table, regenerated from conf/runs and results/, never hand-edited.

One row per run, sorted by run-id, as canonical JSON: the same inputs always give the same bytes
(no timestamps), and the file is rewritten only when its content changes. A row is never dropped
silently: if a run that the previous table had is gone (its file, or a done run's results), this
is an error that says how to record it.

States: ``invalid`` (the run file names a bug), ``done`` (results/<run>/eval.json exists),
``crashed`` (a stage or the aggregate of the run has no output and its log shows an error),
``queued`` (anything else).

A done run's row carries its last stage's headline metrics and, for a run with a parent, the
knob's headline paired effect (``effect``: stage, ΔBrier with CI, paired-t and Wilcoxon p, ΔMS
with CI); ``effect`` is null otherwise.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from .config.runs import RunTree
from .io import canonical_json, write_text
from .plan import read_index, stage_dir

TABLE = "runs.json"
HEADLINE = ("brier", "ms", "ms_ci", "bss", "n")
# The knob's paired effect against the parent (eval.json's effect.headline): the last stage with
# a defined ΔBrier; one seed gives CI and p, several the spread and "beats parent k/n".
EFFECT = ("stage", "n_paired", "brier_delta", "brier_ci", "p_t", "p_wilcoxon", "share_child_wins",
          "ms_delta", "ms_ci", "p_perm_ms", "seeds", "brier_delta_sd", "ms_delta_sd", "beats_parent",
          "beats_parent_ci")
_ERROR_MARKS = ("Traceback (most recent call last)", "Error")


class TableError(ValueError):
    """The table cannot be regenerated without losing a row."""


def _last_stage(evals: Any) -> tuple[Optional[str], dict]:
    stages = evals.get("stages") if isinstance(evals, dict) else None
    if isinstance(stages, dict) and stages:
        name = list(stages)[-1]
        return str(name), stages[name] if isinstance(stages[name], dict) else {}
    if isinstance(stages, list) and stages:
        last = stages[-1] if isinstance(stages[-1], dict) else {}
        return last.get("stage"), last
    return None, {}


def _effect(evals: Any) -> Optional[dict]:
    eff = evals.get("effect") if isinstance(evals, dict) else None
    head = eff.get("headline") if isinstance(eff, dict) else None
    return {k: head[k] for k in EFFECT if k in head} if isinstance(head, dict) else None


def _log_failed(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(mark in text for mark in _ERROR_MARKS)


def _crashed(root: Path, run_id: str, stage_ids: list[str]) -> bool:
    for sid in stage_ids:
        kind = sid.split("-", 1)[0]
        if not (root / stage_dir(sid)).exists() and _log_failed(root / "logs" / kind / f"{sid}.log"):
            return True
    return _log_failed(root / "logs" / "aggregate" / f"{run_id}.log")


def build_table(root: Path | str = ".", tree: RunTree | None = None) -> list[dict]:
    """One row per run (sorted by run-id). Reads run files (not composed: fast) and results."""
    root = Path(root)
    tree = tree if tree is not None else RunTree.load(root / "conf", compose=False)
    index = read_index(root) or {}
    rows = []
    for run_id in tree.ids():
        spec = tree.specs[run_id]
        row: dict[str, Any] = {"run_id": run_id, "parent": spec.parent, "knob": spec.knob}
        row.update(spec.metadata())
        eval_path = root / "results" / run_id / "eval.json"
        stage, metrics = None, {}
        if spec.invalid:
            state = "invalid"
        elif eval_path.exists():
            state = "done"
        elif _crashed(root, run_id, index.get(run_id, [])):
            state = "crashed"
        else:
            state = "queued"
        effect = None
        if eval_path.exists():
            try:
                evals = json.loads(eval_path.read_text(encoding="utf-8"))
            except ValueError:
                evals = None
            stage, last = _last_stage(evals)
            metrics = {k: last[k] for k in HEADLINE if k in last}
            effect = _effect(evals)
        row.update(state=state, stage=stage, metrics=metrics, effect=effect)
        rows.append(row)
    return rows


def _previous(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [r for r in data if isinstance(r, dict) and "run_id" in r] if isinstance(data, list) else []


def check_no_vanished(previous: list[dict], rows: list[dict]) -> None:
    now = {r["run_id"]: r for r in rows}
    for old in previous:
        run_id = old["run_id"]
        new = now.get(run_id)
        if new is None:
            raise TableError(
                f"conf/runs/{run_id}.yaml vanished but runs.json has its row ({old.get('state')}): "
                f"restore the file and mark the run `invalid: \"<bug>\"` instead of deleting it")
        if old.get("state") == "done" and new["state"] not in ("done", "invalid"):
            raise TableError(
                f"results/{run_id}/eval.json vanished: mark the run `invalid: \"<bug>\"` in "
                f"conf/runs/{run_id}.yaml or rebuild it")


def write_table(root: Path | str = ".", tree: RunTree | None = None) -> Path:
    """Regenerate ``<root>/runs.json``; unchanged content leaves the file untouched."""
    root = Path(root)
    path = root / TABLE
    rows = build_table(root, tree)
    check_no_vanished(_previous(path), rows)
    text = canonical_json(rows)
    try:
        same = path.read_text(encoding="utf-8") == text
    except OSError:
        same = False
    if not same:
        write_text(path, text)
    return path
