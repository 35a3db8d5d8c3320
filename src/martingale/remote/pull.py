"""Pulling instead of building. Before Snakemake builds its DAG, every stage the targets need that
the store holds and this machine lacks is pulled (verified, renamed into place), and so are the
targeted runs' results; Snakemake then finds them done and schedules only what no machine has
finished. One listing of the store's records answers which stages it holds (a thousand keys a
request), then the needed records are read at once.

Lineage: a stage is pulled only on inputs that are the bytes its record names; a local stage whose
bytes differ from the store's is replaced by the store's copy (one line), and a local stage built on
bytes that were just replaced is set aside to be built again."""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..plan.cost import is_built
from ..store import stage_dir
from ..store.manifest import MANIFEST
from .backend import Backend
from .push import built_from
from .records import STAGES, Record, blob_key, manifest_digest, run_key, stage_key
from .transfer import Pull, download, forget_blob, read_records


class CorruptInStore(RuntimeError):
    """A pulled blob failed its digest and the build was told to stop (store.on_corrupt: stop)."""


@dataclass
class Synced:
    """What a sync did, for its summary line and the tests."""
    held: int = 0                                   # needed stages the store holds
    pulled: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    set_aside: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)   # one line each
    bytes: int = 0
    seconds: float = 0.0

    def summary(self, url: str, needed: int) -> str:
        mb = self.bytes / 1e6
        return (f"martingale: store {url}: {needed} stages needed, {self.held} held there; pulled "
                f"{len(self.pulled)} stages and {len(self.runs)} runs' results ({mb:.1f} MB, {self.seconds:.1f} s)")


def held_stages(backend: Backend) -> set[str]:
    """The ids of every stage the store holds (one listing of its records)."""
    return {key.rsplit("/", 1)[-1][: -len(".json")] for key in backend.list_keys(STAGES) if key.endswith(".json")}


def _consistent(record: Record, records: dict[str, Record]) -> bool:
    """A stage record whose inputs are each the store's record of that input."""
    return all(ref["stage"] in records and records[ref["stage"]].digest == ref["manifest"]
               for ref in record.inputs.values())


def _pull_all(backend: Backend, pulls: list[Pull], out: Synced, stop: bool, say: Callable[[str], None]) -> set[str]:
    """Pull these folders; the names refused (a corrupted blob: its key forgotten, one line)."""
    refused = download(backend, pulls)
    bad = set()
    for p, why in refused:
        line = f"martingale: store: {why}: not pulled" + ("" if stop else "; it is built here instead")
        out.refused.append(line)
        say(line)
        for entry in p.record.files.values():
            if "sha256" in entry and why.endswith(f"{blob_key(entry['sha256'])})"):
                forget_blob(backend, blob_key(entry["sha256"]))
        bad.add(p.record.name)
    if bad and stop:
        raise CorruptInStore(out.refused[-1])
    return bad


def sync_stages(backend: Backend, root: Path, order: Sequence[str], inputs: dict[str, dict[str, str]],
                stop_on_corrupt: bool, say: Callable[[str], None]) -> Synced:
    """Make every stage of ``order`` (upstream first; ``inputs``: id → role → input id) that the
    store holds present here with the store's bytes. A stage is pulled in the wave after its inputs
    are settled, all of one wave at once."""
    out, start = Synced(), time.monotonic()
    held = held_stages(backend) & set(order)
    records = {r.name: r for r in read_records(backend, [stage_key(s) for s in sorted(held)]).values()}
    out.held = len(records)
    settled: dict[str, Optional[str]] = {}     # id -> its local MANIFEST digest (None: to be built)
    pending = list(order)
    while pending:
        wave = [s for s in pending if all(i in settled for i in inputs[s].values())]
        if not wave:
            raise ValueError(f"stages whose inputs are not in the order: {pending[:3]}")
        pending = [s for s in pending if s not in wave]
        pulls: list[Pull] = []
        for sid in wave:
            settled[sid] = _settle(root, sid, inputs[sid], records, settled, pulls, out, say)
        bad = _pull_all(backend, pulls, out, stop_on_corrupt, say)
        out.pulled = [s for s in out.pulled if s not in bad]
        out.replaced = [s for s in out.replaced if s not in bad]
        for p in pulls:
            if p.record.name in bad:
                settled[p.record.name] = None
            else:
                settled[p.record.name] = p.record.digest
                out.bytes += p.record.size
    _order_mtimes(root, [s for s in order if s in set(out.pulled) | set(out.replaced)])
    out.seconds = time.monotonic() - start
    return out


def _settle(root: Path, sid: str, roles: dict[str, str], records: dict[str, Record],
            settled: dict[str, Optional[str]], pulls: list[Pull], out: Synced,
            say: Callable[[str], None]) -> Optional[str]:
    """Decide one stage: keep the local copy, pull the store's (appended to ``pulls``), or leave it
    to be built. Returns its digest when kept now, None otherwise (a pull settles it after)."""
    folder = root / stage_dir(sid)
    local = manifest_digest(folder) if is_built(root, sid) else None
    record = records.get(sid)
    usable = record is not None and _consistent(record, records) and all(
        settled.get(ref["stage"]) == ref["manifest"] for ref in record.inputs.values())
    if local is not None and record is not None and local == record.digest:
        return local
    if local is not None:
        current = {role: settled.get(uid) for role, uid in roles.items()}
        noted = built_from(root, sid, roles) if all(current.values()) else None
        on_inputs = noted is not None and all(noted[r]["manifest"] == current[r] for r in roles)
        if record is not None and usable:
            pulls.append(Pull(record, folder))
            out.replaced.append(sid)
            say(f"martingale: store: {sid}: this machine's bytes differ from the store's (another machine "
                f"pushed first); using the store's copy")
            return None
        if on_inputs:
            return local                                   # this machine's only: `martingale push` sends it
        aside = folder.with_name(f".{sid}.other-lineage.{os.getpid()}.tmp")
        os.replace(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)
        out.set_aside.append(sid)
        say(f"martingale: store: {sid}: built here on inputs since replaced by the store's; it is built again")
        return None
    if usable:
        assert record is not None
        pulls.append(Pull(record, folder))
        out.pulled.append(sid)
    return None


def _order_mtimes(root: Path, sids: Sequence[str]) -> None:
    """Give pulled stages' manifests increasing mtimes, upstream first and newer than anything here,
    so Snakemake sees no input newer than its output."""
    now = time.time()
    for i, sid in enumerate(sids):
        path = root / stage_dir(sid) / MANIFEST
        if path.is_file():
            os.utime(path, (now + i * 1e-6, now + i * 1e-6))


def sync_runs(backend: Backend, root: Path, wanted: dict[str, tuple[str, list[str]]], out: Synced,
              check_local: bool = True) -> None:
    """Pull the results of each run (run → (key, its eval stage ids)) whose results/<run>/eval.json
    is missing here and whose record the store holds on the evals it names (the local evals' bytes
    when ``check_local``, else the store's records of them)."""
    todo = {run: v for run, v in wanted.items() if not (root / "results" / run / "eval.json").is_file()}
    found = read_records(backend, [run_key(run, key) for run, (key, _) in sorted(todo.items())])
    stage_records = read_records(backend, sorted({stage_key(s) for r in found.values() for s in r.inputs})) \
        if not check_local else {}
    digests = {r.name: r.digest for r in stage_records.values()}
    pulls = []
    for record in found.values():
        def have(sid: str) -> Optional[str]:
            if not check_local:
                return digests.get(sid)
            return manifest_digest(root / stage_dir(sid)) if is_built(root, sid) else None
        if all(have(ref["stage"]) == ref["manifest"] for ref in record.inputs.values()):
            pulls.append(Pull(record, root / "results" / record.name))
    start = time.monotonic()
    bad = download(backend, pulls)
    refused = {p.record.name for p, _ in bad}
    out.refused += [f"martingale: store: {why}: not pulled" for _, why in bad]
    now = time.time() + 1e-3
    for p in pulls:
        if p.record.name in refused:
            continue
        out.runs.append(p.record.name)
        out.bytes += p.record.size
        for dirpath, _, names in os.walk(p.dest):
            for name in names:
                os.utime(Path(dirpath) / name, (now, now))
    out.seconds += time.monotonic() - start
