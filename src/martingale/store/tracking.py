"""The wandb mirror: every built stage, and every run's aggregate, logged to wandb.

One identifier everywhere: the wandb run name is the run-id. A stage shared by several runs is
logged once, under the run that introduced it (plan index: ``stages[sid].owner``), with the stage's
role as job_type (``train-s1``, ``eval-s0``, ``distill-D``, ``aggregate``), the lineage
``root/…/run`` as group and the config that defines it as config. Per-step metrics come from the
stage's own history (train.jsonl, stage.json), eval metrics from metrics.json / eval.json, so the
mirror reads finished files and never changes what a stage computes.

A training stage (train, instructor) also logs live: smk.run_stage sets the stage's context
(``stage_context``: root, stage id, config), the stage's loop opens the stage's run when training
starts (``live_run``: the same name, id, job_type, group and config as the mirror) and logs each
step as it completes, with its timings (tokens/s, step seconds, ETA: wandb and the job log only,
never a file of the stage). The mirror then finishes that run with the summary (and any step the
live run did not log: ``unlogged``) instead of logging the steps again. No stage context (a unit
test calling the loop) or ``wandb.mode=disabled``: no wandb at all.

Offline by default (``wandb.mode``; ``WANDB_MODE`` in the environment wins): no API key is needed
and ``wandb sync wandb/`` uploads later. Nothing here reads or writes an API key. A mirror that
fails logs a warning; the stage's results stand. A live run that fails warns once and stops
logging; the stage goes on unchanged.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Literal, Optional, cast, get_args

from ..core.jsonvalue import JsonObject
from ..core.settings import Name, OneOf, setting
from ..core.typed import typed
from . import read_index
from .files import read_optional

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

log = logging.getLogger("martingale.store.tracking")


def _numeric(row: dict) -> dict[str, float]:
    """The loggable part of a row: finite numbers (bools and nulls dropped)."""
    return {k: float(v) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def wandb_id(text: str) -> str:
    """A wandb run id from a stage id or run-id (letters, digits, - and _ only)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)[:128]


@dataclass
class WandbConfig:
    """How runs are tracked in wandb: offline by default."""
    mode: str = setting("offline", OneOf(("offline", "online", "disabled")), "offline | online | disabled")
    project: str = setting("martingale", Name())
    entity: Optional[str] = setting(None, Name(optional=True))


WandbMode = Literal["offline", "online", "disabled", "shared"]   # wandb.init's modes


def _mode(settings: WandbConfig) -> WandbMode:
    """WANDB_MODE where set (``disabled`` in tests), else the run's ``wandb.mode``."""
    mode = os.environ.get("WANDB_MODE") or settings.mode
    if mode not in get_args(WandbMode):
        raise ValueError(f"WANDB_MODE={mode}: wandb's mode is one of {', '.join(get_args(WandbMode))}")
    return cast(WandbMode, mode)


def _init(*, name: str, run_id: str, job_type: str, group: Optional[str], config: dict,
          settings: WandbConfig | dict, root: Path | str = ".") -> Optional[Run]:
    """wandb.init of one run (None when wandb is disabled)."""
    tracked = typed(WandbConfig, settings or {}, "wandb")
    mode = _mode(tracked)
    if mode == "disabled":
        return None
    import wandb

    if group and len(group) > 128:  # wandb's limit: keep the run's end of the lineage
        group = "…" + group[-127:]
    return wandb.init(project=tracked.project, entity=tracked.entity,
                      name=name, id=wandb_id(run_id), job_type=job_type, group=group, config=config,
                      mode=mode, dir=str(Path(root)), reinit="create_new",
                      settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))


def _row_step(row: dict, i: int) -> int:
    """A history row's x-axis: its ``step`` key, else its index (an instructor's iteration)."""
    return int(row.get("step", i))


def _log_rows(run: Run, steps: Iterable[dict]) -> None:
    for i, row in enumerate(steps):
        values = _numeric({k: v for k, v in row.items() if k != "step"})
        if values:
            run.log(values, step=_row_step(row, i))


def _set_summary(run: Run, summary: Optional[dict]) -> None:
    for k, v in _numeric(summary or {}).items():
        run.summary[k] = v


def log_run(*, name: str, run_id: str, job_type: str, group: Optional[str], config: dict,
            settings: WandbConfig | dict, steps: Iterable[dict] = (), summary: Optional[dict] = None,
            root: Path | str = ".") -> Optional[Path]:
    """One wandb run: config, then each step row (its ``step`` key as the x-axis), then summary.
    Returns the run's local folder (None when wandb is disabled)."""
    run = _init(name=name, run_id=run_id, job_type=job_type, group=group, config=config,
                settings=settings, root=root)
    if run is None:
        return None
    try:
        _log_rows(run, steps)
        _set_summary(run, summary)
        folder = Path(run.dir).parent
    finally:
        run.finish()
    return folder


@dataclass
class StageContext:
    """The stage this job builds (set by smk.run_stage): the project root, its id, the config the
    mirror logs, and its live wandb run once training opened one."""
    root: Path
    sid: str
    cfg: dict
    live: Optional["LiveRun"] = None


_STAGE: contextvars.ContextVar[Optional[StageContext]] = contextvars.ContextVar("martingale_stage", default=None)


@contextlib.contextmanager
def stage_context(root: Path | str, sid: str, cfg: dict) -> Iterator[StageContext]:
    """The stage's context while its body runs; a live run the mirror did not finish (the stage
    failed or was killed) is finished on the way out, marked failed."""
    ctx = StageContext(Path(root), sid, dict(cfg))
    token = _STAGE.set(ctx)
    ok = False
    try:
        yield ctx
        ok = True
    finally:
        _STAGE.reset(token)
        live, ctx.live = ctx.live, None
        if live is not None:
            live.finish(exit_code=0 if ok else 1)


def current_stage() -> Optional[StageContext]:
    """The stage context set by smk.run_stage, or None (a unit test calling a stage's loop)."""
    return _STAGE.get()


def _stage_run_args(root: Path, sid: str, cfg: dict) -> Optional[JsonObject]:
    """The wandb run a stage is logged as (plan index: its owner run, role, lineage, settings);
    None when the stage is not in the index."""
    index = read_index(root)
    if index is None or sid not in index.stages:
        return None
    stage = index.stages[sid]
    run = index.runs[stage.owner]
    return dict(name=stage.owner, run_id=sid, job_type=stage.job_type, group=run.group,
                config={"run_id": stage.owner, "stage_id": sid, **cfg}, settings=run.wandb, root=root)


class LiveRun:
    """A stage's wandb run, open while it trains: ``log`` each step as it completes; the mirror
    (``finish``) adds the summary. ``run`` None: off (no stage context, wandb disabled, or a wandb
    call failed: it warned once), and every method does nothing."""

    def __init__(self, run: Optional[Run] = None, sid: str = ""):
        self.run, self.sid = run, sid
        self.last_step: Optional[int] = None

    def __bool__(self) -> bool:
        return self.run is not None

    def _fail(self, what: str, e: Exception) -> None:
        log.warning("wandb live run of %s: %s failed (%s: %s); live logging stops, the stage goes on",
                    self.sid, what, type(e).__name__, e)
        run, self.run = self.run, None
        if run is not None:
            with contextlib.suppress(Exception):
                run.finish(exit_code=1)

    def log(self, row: dict, step: int) -> None:
        """One step's values (a ``step`` key is the x-axis, not a value, as in the mirror)."""
        if self.run is None:
            return
        try:
            values = _numeric({k: v for k, v in row.items() if k != "step"})
            if values:
                self.run.log(values, step=int(step))
            self.last_step = int(step)
        except Exception as e:
            self._fail(f"logging step {step}", e)

    def finish(self, steps: Iterable[dict] = (), summary: Optional[dict] = None,
               exit_code: int = 0) -> Optional[Path]:
        """Log ``steps`` (the ones not logged live), set the summary, finish; the run's folder."""
        if self.run is None:
            return None
        run, self.run = self.run, None
        try:
            _log_rows(run, steps)
            _set_summary(run, summary)
            folder = Path(run.dir).parent
            run.finish(exit_code=exit_code)
            return folder
        except Exception as e:
            log.warning("wandb live run of %s: finishing failed: %s: %s", self.sid, type(e).__name__, e)
            with contextlib.suppress(Exception):
                run.finish(exit_code=1)
            return None


def live_run() -> LiveRun:
    """The stage's live wandb run, opened on the first call (training starts); off without a
    stage context, with wandb disabled, or when opening fails (a warning)."""
    ctx = _STAGE.get()
    if ctx is None:
        return LiveRun()
    if ctx.live is not None:
        return ctx.live
    try:
        args = _stage_run_args(ctx.root, ctx.sid, ctx.cfg)
        run = _init(**args) if args is not None else None   # not in the index: the mirror warns
    except Exception as e:
        log.warning("wandb live run of %s failed to open: %s: %s; the stage goes on",
                    ctx.sid, type(e).__name__, e)
        run = None
    ctx.live = LiveRun(run, ctx.sid)
    return ctx.live


def unlogged(steps: list[dict], last_step: Optional[int]) -> list[dict]:
    """The history rows a live run has not logged yet: those after its last logged step."""
    if last_step is None:
        return list(steps)
    return [row for i, row in enumerate(steps) if _row_step(row, i) > last_step]


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
    """Log a finished stage under its owner run (from the plan index); warn, never raise. A stage
    that logged its steps live (its context's live run, still open) gets that run finished with
    the summary and any step it missed, not a second copy of its steps."""
    try:
        steps, summary = stage_history(out_dir)
        ctx = _STAGE.get()
        if ctx is not None and ctx.sid == sid and ctx.live:
            live, ctx.live = ctx.live, None
            return live.finish(steps=unlogged(steps, live.last_step), summary=summary)
        args = _stage_run_args(root, sid, cfg)
        if args is None:
            log.warning("wandb mirror: %s is not in results/_store/index.json; not logged", sid)
            return None
        return log_run(**args, steps=steps, summary=summary)
    except Exception as e:  # the mirror must not undo a built stage
        log.warning("wandb mirror of %s failed: %s: %s", sid, type(e).__name__, e)
        return None


def mirror_run(root: Path, run_id: str, group: str, cfg: dict, settings: WandbConfig,
               stages: list[dict[str, float]], headline: Optional[dict[str, float]]) -> Optional[Path]:
    """Log a run's aggregate (tracked as its ``wandb`` section, ``settings``, says): the resolved
    config, each stage's metrics (one value each: the
    caller combines its seeds) as one step (s0, s1, …), and the last stage's metrics and the
    knob's headline effect as summary."""
    try:
        steps = [{"step": i, **m} for i, m in enumerate(stages)]
        summary = dict(steps[-1]) if steps else {}
        summary.pop("step", None)
        summary.update({f"effect/{k}": v for k, v in (headline or {}).items()})
        return log_run(name=run_id, run_id=f"{run_id}-aggregate", job_type="aggregate", group=group,
                       config=cfg, settings=settings, steps=steps, summary=summary, root=root)
    except Exception as e:
        log.warning("wandb mirror of %s failed: %s: %s", run_id, type(e).__name__, e)
        return None
