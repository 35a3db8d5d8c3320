"""Glue for the thin scripts in workflow/scripts: logging into the rule's log file, and Paths; and
the ``snakemake`` object a stage's rule gives its job, for `martingale stage` (stage_snakemake).

A stage that fails leaves its traceback in its log (``logs/<kind>/<id>.log``), which is how the
runs table tells a crashed run from a queued one.
"""
from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Optional, TypeAlias, TypeVar

from martingale.records.aggregate import write_run_results

from ..config.schema import run_config
from ..config.slices import placed, slice_model, stage_config
from ..core.errors import StageError
from ..core.threads import use_threads
from ..model.section import ModelSection
from ..plan import Plan
from ..remote.hooks import after_run, after_stage
from ..stages import StageKind, kinds
from ..stats.seeds import combined_values
from ..store import stage_dir
from ..store.files import open_log, read_json, redact, write_json
from ..store.manifest import MANIFEST, require
from ..store.provenance import collecting
from ..store.tracking import WandbConfig, flush, mirror_run, mirror_stage, stage_context
from ..table import write_table
from ..training import ranks_of
from ..training.launch import launch
from . import warm

SmkJob: TypeAlias = Any   # snakemake's job object (snakemake ships no types)
R = TypeVar("R")


class Killed(BaseException):
    """The job was sent SIGTERM (a SLURM scancel or time limit, a Ctrl-C'd Snakemake). A
    BaseException, like KeyboardInterrupt, so library ``except Exception`` blocks (transformers'
    lazy imports) do not swallow or rewrap it."""


def _raise_killed(signum: int, frame: Optional[FrameType]) -> None:
    raise Killed(f"killed by signal {signal.Signals(signum).name} (scancel, time limit or an "
                 f"interrupted Snakemake): the stage's partial output is removed")


def run_logged(snakemake: SmkJob, body: Callable[[], R]) -> R:
    """Run body() with logging, stdout and stderr going to the rule's log; tracebacks logged.
    SIGTERM becomes an exception, so a killed stage logs why and leaves no partial output. A
    failure prints one line on the job's stderr (failure_line) and exits 1: the traceback is in
    the log, not in Snakemake's output."""
    signal.signal(signal.SIGTERM, _raise_killed)
    try:
        return _logged(snakemake, body)
    except (Exception, Killed) as e:
        print(failure_line(snakemake, e), file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def failure_cause(e: BaseException) -> str:
    """A failure in a few words: a StageError's message as written (its first line); anything else
    named by its type."""
    text = str(e).strip().splitlines()
    return (text[0] if text else "") if isinstance(e, StageError) else f"{type(e).__name__}: {text[0] if text else ''}"


def failure_line(snakemake: SmkJob, e: BaseException) -> str:
    """``martingale: <rule> <wildcards> failed: <cause> (traceback in <log>)`` (failure_cause)."""
    cause = failure_cause(e)
    wildcards = getattr(snakemake, "wildcards", ())
    values = wildcards if isinstance(wildcards, (list, tuple)) else vars(wildcards).values()
    job = " ".join([str(getattr(snakemake, "rule", "job")), *(str(v) for v in values)])
    return redact(f"martingale: {job} failed: {cause} (traceback in {snakemake.log[0]})")


def _logged(snakemake: SmkJob, body: Callable[[], R]) -> R:
    with open_log(snakemake.log[0]) as log_file:   # key-like environment values redacted
        handler = logging.StreamHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        old_handlers, old_level = root.handlers[:], root.level
        root.handlers = [handler]
        root.setLevel(logging.INFO)
        logging.getLogger("martingale").info("job started %s", "warm (a child of the build's worker)"
                                             if warm.in_child() else "in its own process")
        try:
            with contextlib.redirect_stdout(log_file), contextlib.redirect_stderr(log_file):
                try:
                    return body()
                except BaseException:
                    logging.getLogger("martingale").exception("stage failed")
                    raise
        finally:
            handler.flush()
            root.handlers, root.level = old_handlers, old_level
            sys.stdout.flush()


def compute_threads(model: ModelSection, given: int) -> int:
    """The threads a stage job computes with: a training stage's own count (in its id:
    plan.compute_threads) even where Snakemake gives fewer (``--cores 1``), so its bytes never
    depend on the machine; any other stage takes what it is given."""
    fixed = model.threads
    if fixed is None:
        return given
    if int(fixed) != given:
        logging.getLogger("martingale").warning(
            "computing with %d threads (this stage's own count, in its id) where Snakemake gives %d",
            int(fixed), given)
    return int(fixed)


def ranked(kind: StageKind, model: ModelSection) -> int:
    """The ranks a stage job runs on this node: ``model.distributed`` ranks / nodes for a kind that
    takes ranked steps, else 1."""
    n, _, nodes = ranks_of(model)
    return n // nodes if kind.ranked else 1


def run_stage(snakemake: SmkJob) -> None:
    """The job of the generic stage rule: each upstream stage folder is checked against its
    manifest, then the kind named by the rule runs its ``run`` with the stage's config slice, each
    upstream folder under its role, and the output folder; then the finished stage is mirrored to
    wandb."""
    kind = kinds()[snakemake.rule]
    cfg = dict(snakemake.params.cfg)
    sliced = stage_config(kind, cfg)     # the slice typed once: each of its sections checked
    model = slice_model(kind, sliced)
    ranks_here = ranked(kind, model)      # a ranked stage's job holds its ranks' threads (on this node)
    threads = compute_threads(model, int(snakemake.threads) // ranks_here)
    use_threads(threads)
    inputs = {role: Path(marker).parent for role, marker in snakemake.input.items()}
    for folder in inputs.values():
        require(folder)
    device = getattr(snakemake.resources, "device", "auto")   # placement: a resource, not in the id
    out_dir = Path(snakemake.output[0]).parent
    try:
        # The stage's context: a training loop logs its steps live to the stage's wandb run,
        # which the mirror (track_stage) then finishes with the summary.
        with stage_context(Path.cwd(), snakemake.wildcards.sid, dict(snakemake.params.cfg)):
            # provenance.json (versions, vLLM server, weights' sha256) goes into out_dir
            with collecting(out_dir, Path.cwd()):
                if kind.ranked and ranks_of(model)[0] > 1:
                    launch(kind.name, cfg, inputs, out_dir, threads, model, device)
                else:
                    kind.run(placed(kind, sliced, device), out_dir=out_dir, **inputs)
            # In the store before the job reports done (a store is set: martingale.remote)
            after_stage(Path.cwd(), snakemake.wildcards.sid, inputs)
            track_stage(snakemake)
    except BaseException:
        # The job fails, so Snakemake deletes its output (the manifest): a folder the body had
        # already put in place (killed while mirroring to wandb) would stay behind without one.
        shutil.rmtree(out_dir, ignore_errors=True)
        raise


def stage_snakemake(plan: Plan, sid: str, threads: int) -> SmkJob:
    """The ``snakemake`` object stage ``sid``'s rule gives its job (workflow/rules/stages.smk), in
    Snakemake's own classes: its upstream manifests by role in, its MANIFEST.json out, its config
    slice as ``params.cfg``, its log, ``threads`` and its resources (those not None)."""
    # imported here: only `martingale stage` builds one (a job unpickles its own)
    from snakemake.iocontainers import InputFiles, Log, OutputFiles, Params, ResourceList, Snakemake, Wildcards

    stage = plan.stages[sid]
    inputs = {role: f"{stage_dir(uid)}/{MANIFEST}" for role, uid in stage.inputs.items()}
    resources = {k: v for k, v in stage.resources.items() if k != "threads" and v is not None}
    return Snakemake(InputFiles(fromdict=inputs), OutputFiles([f"{stage_dir(sid)}/{MANIFEST}"]),
                     Params(fromdict={"cfg": stage.cfg}), Wildcards(fromdict={"sid": sid}), threads,
                     ResourceList(fromdict=resources), Log([f"logs/{stage.kind}/{sid}.log"]), {}, stage.kind, None)


def track_stage(snakemake: SmkJob) -> None:
    """Mirror the finished stage to wandb under its owner run (martingale.store.tracking)."""
    mirror_stage(Path.cwd(), snakemake.wildcards.sid, Path(snakemake.output[0]).parent, dict(snakemake.params.cfg))
    flush()


def track_run(run_id: str, cfg: dict, settings: WandbConfig, lineage: list[dict], evals_path: Path) -> None:
    """Mirror a run's aggregate (resolved config, metrics per stage) to wandb as ``aggregate``,
    tracked as the run's ``wandb`` section (``settings``) says."""
    evals = read_json(evals_path)
    stages = [combined_values(block) for block in (evals.get("stages") or {}).values()]
    mirror_run(Path.cwd(), run_id, "/".join(str(x["run_id"]) for x in lineage), cfg, settings, stages,
               (evals.get("effect") or {}).get("headline"))
    flush()


def record_landing(path: Path) -> None:
    """results/<run>/landed.json: when the run's results landed (UTC, to the second)."""
    from datetime import datetime, timezone

    write_json(path, {"landed": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})


def aggregate_fn() -> Callable[..., object]:
    """``martingale.records.aggregate.write_run_results``."""
    return write_run_results


# The jobs of the three scripts in workflow/scripts, each ``fn(snakemake)``: a script calls its job
# in place, or in a warm child of the build's worker that runs the script (martingale.jobs.warm).
def stage_job(snakemake: SmkJob) -> None:
    """workflow/scripts/stage.py: the stage kind named by the rule (run_stage), logged."""
    run_logged(snakemake, lambda: run_stage(snakemake))


def aggregate_job(snakemake: SmkJob) -> None:
    """workflow/scripts/aggregate.py: one run gathered (its evals, its parent's and the natural
    model's checked against their manifests first): eval.json with the knob's paired effect and the
    plots (records.aggregate.write_run_results), landed.json, then the run's wandb mirror."""
    def body() -> None:
        evals, parent_evals, natural_evals = ([dict(e, dir=Path(e["dir"])) for e in group]
                                              for group in (snakemake.params.evals, snakemake.params.parent_evals,
                                                            snakemake.params.natural_evals))
        for e in evals + parent_evals + natural_evals:
            require(e["dir"])
        cfg, lineage = dict(snakemake.params.cfg), list(snakemake.params.lineage)
        aggregate_fn()(snakemake.wildcards.run, cfg, lineage, evals, Path(snakemake.output.evals).parent,
                       parent_evals=parent_evals, natural_evals=natural_evals)
        record_landing(Path(snakemake.output.landed))
        after_run(Path.cwd(), snakemake.wildcards.run, cfg, lineage,
                  [e["eval_stage"] for e in evals + parent_evals + natural_evals])
        track_run(snakemake.wildcards.run, cfg, run_config(cfg, f"results/{snakemake.wildcards.run}").wandb, lineage,
                  Path(snakemake.output.evals))
    run_logged(snakemake, body)


def table_job(snakemake: SmkJob) -> None:
    """workflow/scripts/runs_table.py: runs.json, RUNS.md, runs.html and FINDINGS.md regenerated
    from the run files and the results (table.write_table)."""
    run_logged(snakemake, lambda: write_table(Path(snakemake.output.table).resolve().parent))
