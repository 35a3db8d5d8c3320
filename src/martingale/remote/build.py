"""The store in a build: which stages and runs a Snakemake call needs (from the plan and its
targets), pulled before the DAG is built; and the settings every job of the build inherits."""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..config.schema import run_config
from ..plan import Plan, cost
from ..store import STORE
from .backend import open_store
from .pull import CorruptInStore, Synced, held_stages, sync_runs, sync_stages
from .records import run_digest
from .settings import StoreError, StoreSettings, export, resolve

_STAGE_TARGET = re.compile(rf"^{STORE}/[a-z0-9_]+/([a-z0-9_]+-[0-9a-f]{{12}})/MANIFEST\.json$")


def settings_of(plan: Plan) -> Optional[StoreSettings]:
    """The build's store: ``store`` of conf/config.yaml as composed (no run's knobs), the
    environment winning (settings.resolve)."""
    return resolve(run_config(plan.tree.composer.compose([]), "conf/config.yaml").store)


def run_inputs(plan: Plan, run: str) -> list[str]:
    """The eval stages a run's aggregate gathers: its own, its parent's, the natural model's."""
    parent = plan.tree.specs[run].parent
    evals = plan.evals(run) + (plan.evals(parent) if parent else []) + plan.natural_evals(run)
    return [e["eval_stage"] for e in evals]


def run_key_of(plan: Plan, run: str) -> str:
    """The key of a run's results in the store (records.run_digest of what its aggregate is given)."""
    return run_digest(run, plan.run_identity(run), plan.lineage(run), run_inputs(plan, run))


def wanted(plan: Plan, runs: Iterable[str], stage_targets: Iterable[str]) -> tuple[list[str], dict[str, tuple[str, list[str]]]]:
    """(every stage these runs' results and these stages need, upstream first; run → (key, evals))."""
    runs = sorted(set(runs))
    needed: set[str] = set(stage_targets)
    for run in runs:
        needed |= set(run_inputs(plan, run))
    closure = cost.upstream(plan, needed)
    order = [sid for sid in plan.stages if sid in closure]
    return order, {run: (run_key_of(plan, run), run_inputs(plan, run)) for run in runs}


def stage_targets(targets: Iterable[str]) -> list[str]:
    """Stage ids named on the command line as their manifests."""
    return [m.group(1) for t in targets if (m := _STAGE_TARGET.match(t))]


def before_dag(plan: Plan, root: Path, runs: Iterable[str], targets: Iterable[str], dry: bool = False,
               say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> Optional[Synced]:
    """Pull what the store holds of this build, before Snakemake decides what to run. No store:
    nothing. A dry run: how many needed stages the store holds, nothing pulled. An unreachable
    store: one line, and the build goes on locally. A corrupted blob with ``store.on_corrupt:
    stop``: SystemExit with its line."""
    try:
        settings = settings_of(plan)
    except StoreError as e:
        sys.exit(f"martingale: {e}")
    if settings is None:
        return None
    export(settings)
    order, run_keys = wanted(plan, runs, stage_targets(targets))
    if not order:
        return None
    start = time.monotonic()
    try:
        backend = open_store(settings.url, settings.jobs)
        if dry:
            held = held_stages(backend) & set(order)
            say(f"martingale: store {settings.url}: {len(held)} of the {len(order)} stages this build needs are "
                f"held there (a dry run pulls nothing: the jobs above that they cover will be pulled, not run)")
            return None
        inputs = {sid: dict(plan.stages[sid].inputs) for sid in order}
        synced = sync_stages(backend, root, order, inputs, settings.on_corrupt == "stop", say)
        sync_runs(backend, root, run_keys, synced)
    except CorruptInStore as e:
        sys.exit(str(e))
    except StoreError as e:
        say(f"martingale: {e}: building locally, nothing pulled")
        return None
    synced.seconds = time.monotonic() - start
    say(synced.summary(settings.url, len(order)))
    return synced
