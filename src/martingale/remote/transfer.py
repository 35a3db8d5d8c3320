"""Moving one stage's (or run's) folder to and from the store. A push uploads the blobs the store
lacks, then creates the record; a pull downloads every blob into a temp folder beside the target,
checks each against its digest and renames the folder into place: a corrupted or truncated blob is
refused naming the stage and the file, and nothing is left half-written."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..store.files import _FILE_MODE, _umask
from ..store.manifest import sha256_file
from .backend import Backend
from .records import BadRecord, Record, blob_key, parse
from .settings import StoreError


class CorruptBlob(StoreError):
    """A blob whose bytes are not the digest its record names: refused, never placed."""


def read_record(backend: Backend, key: str) -> Optional[Record]:
    """The record at ``key``, None when there is none; BadRecord when it is not readable."""
    data = backend.read(key)
    return None if data is None else parse(data, key)


def read_records(backend: Backend, keys: Sequence[str]) -> dict[str, Record]:
    """Every readable record of ``keys`` (all read at once); an unreadable one is left out."""
    from concurrent.futures import ThreadPoolExecutor

    def one(key: str) -> Optional[Record]:
        try:
            return read_record(backend, key)
        except BadRecord:
            return None
    with ThreadPoolExecutor(max_workers=max(1, min(backend.jobs, len(keys)))) as pool:
        found = list(pool.map(one, keys)) if keys else []
    return {k: r for k, r in zip(keys, found) if r is not None}


def upload_blobs(backend: Backend, folder: Path, record: Record) -> tuple[int, int]:
    """Upload the record's blobs the store lacks (skipping those already there, asked all at once):
    (files sent, bytes sent)."""
    by_digest = {e["sha256"]: folder / rel for rel, e in record.files.items() if "sha256" in e}
    keys = [blob_key(d) for d in by_digest]
    there = backend.exists_many(keys)
    todo = [(path, key) for path, key, have in zip(by_digest.values(), keys, there) if not have]
    backend.upload_many(todo)
    return len(todo), sum(path.stat().st_size for path, _ in todo)


@dataclass
class Pull:
    """One folder to pull: the record and where it goes."""
    record: Record
    dest: Path
    tmp: Optional[Path] = None


def _describe(record: Record) -> str:
    return f"stage {record.name}" if record.kind == "stage" else f"run {record.name}"


def download(backend: Backend, pulls: Sequence[Pull]) -> list[tuple[Pull, str]]:
    """Pull many folders at once: every blob downloaded into each folder's temp twin, verified, and
    each good folder renamed into place (replacing what was there). Returns the refused ones with
    their one-line reason; nothing of them is left on disk."""
    jobs: list[tuple[str, Path]] = []
    for p in pulls:
        p.dest.parent.mkdir(parents=True, exist_ok=True)
        p.tmp = Path(tempfile.mkdtemp(prefix=f".{p.dest.name}.", suffix=".tmp", dir=p.dest.parent))
        os.chmod(p.tmp, 0o777 & ~_umask())
        seen: dict[str, Path] = {}
        for rel, entry in p.record.files.items():
            target = p.tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if "link" in entry:
                os.symlink(entry["link"], target)
            elif entry["sha256"] not in seen:
                seen[entry["sha256"]] = target
                jobs.append((blob_key(entry["sha256"]), target))
    try:
        backend.download_many(jobs)
    except BaseException:
        for p in pulls:
            shutil.rmtree(p.tmp, ignore_errors=True)   # type: ignore[arg-type]
        raise
    refused = []
    for p in pulls:
        problem = _verify(p)
        if problem is None:
            _place(p)
        else:
            shutil.rmtree(p.tmp, ignore_errors=True)   # type: ignore[arg-type]
            refused.append((p, problem))
    return refused


def _verify(p: Pull) -> Optional[str]:
    """None when every file of the pulled folder is the record's bytes (duplicates copied from the
    first), else the one line that refuses it."""
    assert p.tmp is not None
    firsts: dict[str, Path] = {}
    for rel, entry in p.record.files.items():
        if "link" in entry:
            continue
        path = p.tmp / rel
        first = firsts.get(entry["sha256"])
        if first is not None:
            shutil.copyfile(first, path)
            continue
        firsts[entry["sha256"]] = path
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return f"{_describe(p.record)}: {rel}: missing from the store"
        if size != int(entry["size"]) or sha256_file(path) != entry["sha256"]:
            return (f"{_describe(p.record)}: {rel}: {size} bytes whose sha256 is not the record's "
                    f"(corrupted or truncated in the store at {blob_key(entry['sha256'])})")
        os.chmod(path, _FILE_MODE)
    return None


def _place(p: Pull) -> None:
    """Rename the verified temp folder into place; an existing folder is moved aside first and
    removed after (a rename cannot replace a non-empty folder)."""
    assert p.tmp is not None
    old = None
    if p.dest.exists() or p.dest.is_symlink():
        old = p.dest.with_name(f".{p.dest.name}.replaced.{os.getpid()}.tmp")
        os.replace(p.dest, old)
    os.replace(p.tmp, p.dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def forget_blob(backend: Backend, key: str) -> None:
    """Remove a blob found corrupted, so that the next push of those bytes uploads them again."""
    with contextlib.suppress(StoreError):
        backend.delete_many([key])


def commit(backend: Backend, key: str, record: Record) -> tuple[bool, Optional[Record]]:
    """Create a record: (True, None) if this push created it, else (False, the store's record)."""
    if backend.create(key, record.to_bytes()):
        return True, None
    return False, read_record(backend, key)
