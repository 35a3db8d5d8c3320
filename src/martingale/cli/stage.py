"""`martingale stage`: one stage's job run in this process, as its Snakemake job runs it: the way to
step through a stage's body (a breakpoint stops here, not in a job's log)."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Iterator

import typer

from ..config.runs import RunError
from ..jobs.smk import failure_cause, run_stage, stage_snakemake
from ..plan import Plan
from ..store import STORE, stage_dir
from ..store.manifest import MANIFEST
from .common import STATE, app, fail, out


@app.command("stage")
def stage(stage_id: str = typer.Argument(..., help="A stage of the plan (`martingale plan <run>` lists a run's)."),
          force: bool = typer.Option(False, "--force", help="Run it where it is built too: its folder is replaced.")
          ) -> None:
    """Run one stage's job here, in this process, as its Snakemake job runs it (the same bytes in
    results/_store/<kind>/<id>): its inputs must be built. Its log lines come to the terminal."""
    root = STATE.root
    try:
        plan = Plan.load(root)
    except RunError as e:
        fail(str(e))
        return
    if stage_id not in plan.stages:
        fail(f"stage {stage_id!r}: no stage of the plan has this id (`martingale plan <run>` lists a run's)")
    for role, uid in plan.stages[stage_id].inputs.items():
        if not (root / stage_dir(uid) / MANIFEST).is_file():
            fail(f"stage {stage_id}: its {role} input {uid} is not built: snakemake -c2 {stage_dir(uid)}/{MANIFEST}")
    if (root / stage_dir(stage_id) / MANIFEST).is_file() and not force:
        fail(f"stage {stage_id} is built ({stage_dir(stage_id)}): --force runs it again")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    job = stage_snakemake(plan, stage_id, min(int(plan.stages[stage_id].resources["threads"]), cores))
    with contextlib.chdir(root), _logging_to_stderr():
        plan.write_index(Path(STORE) / "index.json")    # what a build's onstart writes first
        try:
            run_stage(job)
        except Exception as e:
            logging.getLogger("martingale").exception("stage failed")
            fail(f"stage {stage_id} failed: {failure_cause(e)}")
    out.print(f"{stage_dir(stage_id)}: built", markup=False)


@contextlib.contextmanager
def _logging_to_stderr() -> Iterator[None]:
    """The job's log lines (its format) on stderr for the block, where a job writes them to its log."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    old_handlers, old_level = root.handlers[:], root.level
    root.handlers, root.level = [handler], logging.INFO
    try:
        yield
    finally:
        root.handlers, root.level = old_handlers, old_level
