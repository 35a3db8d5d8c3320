"""The wandb mirror: every built stage, and every run's aggregate, logged to wandb.

One identifier everywhere: the wandb run name is the run-id. A stage shared by several runs is
logged once, under the run that introduced it (plan index: ``stages[sid].owner``), with the stage's
role as job_type (``train-s1``, ``eval-s0``, ``distill-D``, ``aggregate``), the lineage
``root/…/run`` as group and the config that defines it as config. Per-step metrics come from the
stage's own history (train.jsonl, stage.json), eval metrics from metrics.json / eval.json, so the
mirror reads finished files and never changes what a stage computes.

Offline by default (``wandb.mode``; ``WANDB_MODE`` in the environment wins): no API key is needed
and ``wandb sync wandb/`` uploads later. Nothing here reads or writes an API key. A mirror that
fails logs a warning; the stage's results stand.
"""
from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path
from typing import Iterable, Optional

from .io import read_optional

log = logging.getLogger("martingale.tracking")


def _numeric(row: dict) -> dict[str, float]:
    """The loggable part of a row: finite numbers (bools and nulls dropped)."""
    return {k: float(v) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def wandb_id(text: str) -> str:
    """A wandb run id from a stage id or run-id (letters, digits, - and _ only)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)[:128]


def _mode(settings: dict) -> str:
    return os.environ.get("WANDB_MODE") or str(settings.get("mode") or "offline")


def log_run(*, name: str, run_id: str, job_type: str, group: Optional[str], config: dict,
            settings: dict, steps: Iterable[dict] = (), summary: Optional[dict] = None,
            root: Path | str = ".") -> Optional[Path]:
    """One wandb run: config, then each step row (its ``step`` key as the x-axis), then summary.
    Returns the run's local folder (None when wandb is disabled)."""
    mode = _mode(settings)
    if mode == "disabled":
        return None
    import wandb

    if group and len(group) > 128:  # wandb's limit: keep the run's end of the lineage
        group = "…" + group[-127:]
    run = wandb.init(project=settings.get("project") or "martingale", entity=settings.get("entity"),
                     name=name, id=wandb_id(run_id), job_type=job_type, group=group, config=config,
                     mode=mode, dir=str(Path(root)), reinit="create_new",
                     settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))
    try:
        for i, row in enumerate(steps):
            step = int(row.get("step", i))
            values = _numeric({k: v for k, v in row.items() if k != "step"})
            if values:
                run.log(values, step=step)
        for k, v in _numeric(summary or {}).items():
            run.summary[k] = v
        folder = Path(run.dir).parent
    finally:
        run.finish()
    return folder


def flush() -> None:
    """Stop wandb's service, which writes the offline run files asynchronously: after this they
    are complete on disk (a job's last step, so nothing is lost if the job is killed next)."""
    import sys
    if "wandb" in sys.modules:
        try:
            sys.modules["wandb"].teardown()
        except Exception as e:
            log.warning("wandb teardown failed: %s: %s", type(e).__name__, e)


def stage_history(out_dir: Path) -> tuple[list[dict], dict]:
    """(per-step rows, summary) of a finished stage folder, by what the stage wrote."""
    train_rows = read_optional(out_dir / "train.jsonl")
    if isinstance(train_rows, list):
        return train_rows, (train_rows[-1] if train_rows else {})
    metrics = read_optional(out_dir / "metrics.json")
    if isinstance(metrics, dict):
        return [], metrics
    stage = read_optional(out_dir / "stage.json")
    if isinstance(stage, dict):
        return list(stage.get("history") or []), {k: v for k, v in stage.items() if k != "history"}
    return [], {}


def mirror_stage(root: Path, sid: str, out_dir: Path, cfg: dict) -> Optional[Path]:
    """Log a finished stage under its owner run (from the plan index); warn, never raise."""
    try:
        from .plan import read_index
        index = read_index(root) or {}
        stage = (index.get("stages") or {}).get(sid)
        if stage is None:
            log.warning("wandb mirror: %s is not in results/_store/index.json; not logged", sid)
            return None
        run = index["runs"][stage["owner"]]
        steps, summary = stage_history(out_dir)
        return log_run(name=stage["owner"], run_id=sid, job_type=stage["job_type"], group=run.get("group"),
                       config={"run_id": stage["owner"], "stage_id": sid, **cfg},
                       settings=run.get("wandb") or {}, steps=steps, summary=summary, root=root)
    except Exception as e:  # the mirror must not undo a built stage
        log.warning("wandb mirror of %s failed: %s: %s", sid, type(e).__name__, e)
        return None


def mirror_run(root: Path, run_id: str, group: str, cfg: dict, evals: dict) -> Optional[Path]:
    """Log a run's aggregate: the resolved config, each stage's metrics as one step (s0, s1, …)
    and the last stage's metrics and the knob's headline effect as summary."""
    try:
        stages = evals.get("stages") or {}
        steps = [{"step": i, **{k: v for k, v in m.items() if not isinstance(v, dict)}}
                 for i, m in enumerate(stages.values())]
        summary = dict(steps[-1]) if steps else {}
        summary.pop("step", None)
        head = ((evals.get("effect") or {}).get("headline") or {})
        summary.update({f"effect/{k}": v for k, v in head.items()})
        return log_run(name=run_id, run_id=f"{run_id}-aggregate", job_type="aggregate", group=group,
                       config=cfg, settings=cfg.get("wandb") or {}, steps=steps, summary=summary, root=root)
    except Exception as e:
        log.warning("wandb mirror of %s failed: %s: %s", run_id, type(e).__name__, e)
        return None
