"""`martingale push, pull, store ls, store gc`: the durable stage store (martingale.remote) by hand:
send what a failed push left behind, fetch runs' results to read, see what the store holds."""
from __future__ import annotations

from typing import List, Optional

import typer
from rich.table import Table

from ..config.runs import RunError
from ..plan import Plan
from ..plan.cost import is_built
from ..remote.backend import Backend, open_store
from ..remote.build import run_inputs, run_key_of, settings_of, wanted
from ..remote.pull import CorruptInStore, Synced, held_stages, sync_runs, sync_stages
from ..remote.push import push_run, push_stage
from ..remote.records import BLOBS, RUNS, STAGES, Record, run_key, stage_key
from ..remote.settings import StoreError
from ..remote.transfer import read_records
from ..store.files import read_optional
from .common import STATE, _need, app, err, fail, out

store_app = typer.Typer(help="What the durable stage store holds (docs/store.md).", no_args_is_help=True)
app.add_typer(store_app, name="store")


def _plan() -> Plan:
    try:
        return Plan.load(STATE.root)
    except RunError as e:
        fail(str(e))
        raise


def _backend(plan: Plan) -> tuple[Backend, str]:
    try:
        settings = settings_of(plan)
        if settings is None:
            fail("no store: set store.url in conf/config.yaml or MARTINGALE_STORE (docs/store.md)")
        assert settings is not None
        return open_store(settings.url, settings.jobs), settings.url
    except StoreError as e:
        fail(str(e))
        raise


def _current(plan: Plan, run: str) -> bool:
    """results/<run>/eval.json is there and was built with the run's config as it is now."""
    evals = read_optional(STATE.root / "results" / run / "eval.json")
    info = plan.index().runs.get(run)
    return info is not None and isinstance(evals, dict) and evals.get("config_hash") == info.config_hash


@app.command()
def push() -> None:
    """Push every finished stage and run result this machine has that the store lacks (upstream first)."""
    plan = _plan()
    backend, url = _backend(plan)
    counts = {"pushed": 0, "already": 0, "replaced": 0, "refused": 0}
    sent = 0
    try:
        for sid in [s for s in plan.stages if is_built(STATE.root, s)]:
            result = push_stage(backend, STATE.root, sid, dict(plan.stages[sid].inputs))
            counts[result.state] += 1
            sent += result.bytes
            if result.state in ("refused", "replaced"):
                err.print(result.line(), markup=False)
        for run in [r for r in plan.run_ids() if _current(plan, r)]:
            result = push_run(backend, STATE.root, run, run_key_of(plan, run), run_inputs(plan, run))
            counts[result.state] += 1
            if result.state == "refused":
                err.print(result.line(), markup=False)
    except StoreError as e:
        fail(str(e))
    out.print(f"store {url}: {counts['pushed']} pushed ({sent / 1e6:.1f} MB), {counts['already']} already there, "
              f"{counts['replaced']} replaced by the store's copy, {counts['refused']} not pushed", markup=False)
    if counts["refused"]:
        raise typer.Exit(1)


@app.command()
def pull(runs: List[str] = typer.Argument(..., help="Run-ids whose results to fetch."),
         weights: bool = typer.Option(False, "--weights", help="Also every stage the runs' results come from "
                                      "(models, adapters, evals): what a build from here needs.")) -> None:
    """Fetch runs' results (eval.json, records, plots: what `martingale table` reads) from the store."""
    plan = _plan()
    for run in runs:
        _need(plan.tree, run)
    backend, url = _backend(plan)
    order, keys = wanted(plan, runs, [])
    try:
        synced = sync_stages(backend, STATE.root, order, {s: dict(plan.stages[s].inputs) for s in order}, True,
                             lambda line: err.print(line, markup=False)) if weights else Synced()
        sync_runs(backend, STATE.root, keys, synced, check_local=weights)
    except (StoreError, CorruptInStore) as e:
        fail(str(e))
    for line in synced.refused:
        err.print(line, markup=False)
    missing = [r for r in runs if not (STATE.root / "results" / r / "eval.json").is_file()]
    out.print(f"store {url}: {len(synced.runs)} runs' results and {len(synced.pulled)} stages pulled "
              f"({synced.bytes / 1e6:.1f} MB)" + (f"; not in the store: {', '.join(missing)}" if missing else "")
              + "; `martingale table` regenerates runs.json, RUNS.md and FINDINGS.md from them", markup=False)
    if missing:
        raise typer.Exit(1)


@store_app.command("ls")
def store_ls(run: str = typer.Argument(..., help="Run-id.")) -> None:
    """The run's stages and results: held by the store or not, here or not, their size."""
    plan = _plan()
    _need(plan.tree, run)
    backend, url = _backend(plan)
    order, keys = wanted(plan, [run], [])
    try:
        records = {r.name: r for r in read_records(backend, [stage_key(s) for s in order]).values()}
        results = read_records(backend, [run_key(run, keys[run][0])])
    except StoreError as e:
        fail(str(e))
        return
    table = Table(title=f"{run} in {url}")
    for col in ("stage", "store", "here", "MB"):
        table.add_column(col)
    for sid in order:
        rec = records.get(sid)
        table.add_row(sid, "held" if rec else "-", "yes" if is_built(STATE.root, sid) else "-",
                      f"{rec.size / 1e6:.2f}" if rec else "")
    got: Optional[Record] = next(iter(results.values()), None)
    table.add_row(f"results/{run}", "held" if got else "-",
                  "yes" if (STATE.root / "results" / run / "eval.json").is_file() else "-",
                  f"{got.size / 1e6:.2f}" if got else "")
    out.print(table)
    out.print(f"{len(records)} of {len(order)} stages held; results {'held' if got else 'not held'}", markup=False)


@store_app.command("gc")
def store_gc(dry_run: bool = typer.Option(False, "--dry-run", help="List what would go; delete nothing.")) -> None:
    """Stages and results no run file reaches (a knob edited or a run removed since); without
    --dry-run they are deleted, with the blobs no remaining record names. Run it when no build pushes."""
    plan = _plan()
    backend, url = _backend(plan)
    try:
        held = held_stages(backend)
        gone = sorted(held - set(plan.stages))
        current = {run_key(r, run_key_of(plan, r)) for r in plan.run_ids()}
        run_keys = [k for k in backend.list_keys(RUNS) if k.endswith(".json")]
        gone_runs = sorted(k for k in run_keys if k not in current)
        records = read_records(backend, [stage_key(s) for s in gone] + gone_runs)
    except StoreError as e:
        fail(str(e))
        return
    for key in [stage_key(s) for s in gone] + gone_runs:
        rec = records.get(key)
        out.print(f"{'would delete' if dry_run else 'delete'} {key}" + (f" ({rec.size / 1e6:.2f} MB)" if rec else ""),
                  markup=False)
    if dry_run:
        out.print(f"{len(gone)} stages and {len(gone_runs)} results no run file reaches (of {len(held)} stages held)",
                  markup=False)
        return
    try:
        backend.delete_many([stage_key(s) for s in gone] + gone_runs)
        kept = read_records(backend, [k for k in backend.list_keys(STAGES) + backend.list_keys(RUNS) if k.endswith(".json")])
        named = {f"{BLOBS}/{d[:2]}/{d}" for r in kept.values() for d in r.blobs}
        orphans = [k for k in backend.list_keys(BLOBS) if k not in named]
        backend.delete_many(orphans)
    except StoreError as e:
        fail(str(e))
        return
    out.print(f"deleted {len(gone)} stages, {len(gone_runs)} results and {len(orphans)} blobs", markup=False)
