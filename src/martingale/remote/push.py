"""Pushing a finished stage, or a run's results, to the store, and what a push found.

A stage is pushed only on the lineage the store holds: each input it was built from must be in the
store with the very bytes it read (the job notes them in ``results/_store/_lineage/<id>.json``).
When the store already holds the stage with other bytes (another machine pushed first: float
kernels differ between CPUs), the store's copy is the stage: the job pulls it over its own and the
build goes on from it, so no chain mixes lineages."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..store import STORE, stage_dir
from ..store.files import read_optional, write_json
from .backend import Backend
from .records import Record, folder_files, manifest_digest, run_key, stage_key, stage_record
from .transfer import Pull, commit, download, read_record, upload_blobs

LINEAGE = f"{STORE}/_lineage"   # stage id -> the input bytes it was built from (noted by the job)


@dataclass(frozen=True)
class Pushed:
    """What one push did: ``state`` is pushed, already (the store held these bytes), replaced (the
    store held other bytes: they are now the local copy too), or refused (``why``: not pushed)."""
    name: str
    state: str
    files: int = 0
    bytes: int = 0
    why: str = ""

    def line(self) -> str:
        """The one line a build prints for a push that did not simply succeed."""
        if self.state == "replaced":
            return (f"martingale: store: {self.name}: this machine's bytes differ from the store's (another machine "
                    f"pushed first); building on the store's copy")
        if self.state == "refused":
            return f"martingale: store: {self.name} not pushed: {self.why} (`martingale push` sends it later)"
        return f"martingale: store: {self.name} {self.state}"


def lineage_path(root: Path, sid: str) -> Path:
    """``results/_store/_lineage/<id>.json``: the input bytes a stage was built from."""
    return root / LINEAGE / f"{sid}.json"


def note_lineage(root: Path, sid: str, inputs: dict[str, Path]) -> dict[str, dict[str, str]]:
    """Note which bytes of each input a stage was built from (role → {stage, manifest})."""
    built_from = {role: {"stage": folder.name, "manifest": manifest_digest(folder)} for role, folder in inputs.items()}
    write_json(lineage_path(root, sid), built_from)
    return built_from


def built_from(root: Path, sid: str, inputs: dict[str, str]) -> dict[str, dict[str, str]]:
    """What a local stage was built from: its note, else (built before a store was set) its inputs
    as they are now."""
    noted = read_optional(lineage_path(root, sid))
    if isinstance(noted, dict) and set(noted) == set(inputs):
        return noted
    return {role: {"stage": uid, "manifest": manifest_digest(root / stage_dir(uid))} for role, uid in inputs.items()}


def _on_store_lineage(backend: Backend, refs: dict[str, dict[str, str]]) -> Optional[str]:
    """Why these inputs are not the store's lineage, or None when each is in the store with those bytes."""
    for ref in refs.values():
        held = read_record(backend, stage_key(ref["stage"]))
        if held is None:
            return f"its input {ref['stage']} is not in the store"
        if held.digest != ref["manifest"]:
            return f"it was built on other bytes of {ref['stage']} than the store's"
    return None


def push_stage(backend: Backend, root: Path, sid: str, inputs: dict[str, str]) -> Pushed:
    """Push a finished local stage (role → input stage id given): blobs first, the record last."""
    folder = root / stage_dir(sid)
    refs = built_from(root, sid, inputs)
    why = _on_store_lineage(backend, refs)
    if why is not None:
        return Pushed(sid, "refused", why=why)
    record = stage_record(folder, sid, refs)
    held = read_record(backend, stage_key(sid))
    files = size = 0
    if held is None:
        files, size = upload_blobs(backend, folder, record)
        created, held = commit(backend, stage_key(sid), record)
        if created:
            return Pushed(sid, "pushed", files, size)
    assert held is not None
    if held.digest == record.digest:
        return Pushed(sid, "already", files, size)
    if held.inputs != refs:
        return Pushed(sid, "refused", why="the store holds it built on other inputs")
    refused = download(backend, [Pull(held, folder)])
    if refused:
        return Pushed(sid, "refused", why=refused[0][1])
    return Pushed(sid, "replaced", files, size)


def run_record(root: Path, run: str, key: str, eval_stages: list[str]) -> Record:
    """The record of a run's results folder, naming the bytes of every eval it gathered."""
    inputs = {sid: {"stage": sid, "manifest": manifest_digest(root / stage_dir(sid))} for sid in sorted(set(eval_stages))}
    return Record("run", run, key, folder_files(root / "results" / run), inputs)


def push_run(backend: Backend, root: Path, run: str, key: str, eval_stages: list[str]) -> Pushed:
    """Push a run's results (results/<run>/), once its evals are the store's."""
    record = run_record(root, run, key, eval_stages)
    why = _on_store_lineage(backend, record.inputs)
    if why is not None:
        return Pushed(f"results/{run}", "refused", why=why)
    files, size = upload_blobs(backend, root / "results" / run, record)
    created, held = commit(backend, run_key(run, key), record)
    return Pushed(f"results/{run}", "pushed" if created else "already", files, size)
