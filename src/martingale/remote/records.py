"""What the store holds, by key: ``cas/<ab>/<sha256>`` a blob (a file's bytes, named by their
digest), ``stages/<kind>/<stage-id>.json`` a stage's record, ``runs/<run-id>/<key>.json`` a run's
results. A record lists every file with its digest and names the records of what it was built from
(a stage's input stages, a run's evals, each by the sha256 of its MANIFEST.json): it is written
after every blob it lists, once, and is the only sign that the stage (or result) exists."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..store.files import canonical_json, redact
from ..store.manifest import MANIFEST, FileEntry, sha256_file

FORMAT = 1
BLOBS, STAGES, RUNS = "cas", "stages", "runs"


class BadRecord(ValueError):
    """A record in the store that is not one of ours (truncated, another format)."""


def blob_key(sha256: str) -> str:
    """``cas/<first two hex digits>/<sha256>``."""
    return f"{BLOBS}/{sha256[:2]}/{sha256}"


def stage_key(sid: str) -> str:
    """``stages/<kind>/<stage-id>.json``."""
    return f"{STAGES}/{sid.split('-', 1)[0]}/{sid}.json"


def run_key(run: str, key: str) -> str:
    """``runs/<run-id>/<key>.json``: one run's results built from one set of evals."""
    return f"{RUNS}/{run}/{key}.json"


def sha256_bytes(data: bytes) -> str:
    """The hex sha256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def manifest_digest(folder: Path) -> str:
    """A stage folder's identity as built: the sha256 of its MANIFEST.json (which holds every
    other file's)."""
    return sha256_file(folder / MANIFEST)


@dataclass(frozen=True)
class Record:
    """A stage's or a run's record: ``name`` (stage id or run id), ``digest`` (a stage's MANIFEST.json
    sha256; a run's key), ``files`` (relative path → {sha256, size} or {link}), ``inputs`` (role or
    eval stage id → {stage, manifest}: what it was built from)."""
    kind: str                    # "stage" or "run"
    name: str
    digest: str
    files: dict[str, FileEntry]
    inputs: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """Canonical JSON: the same record is the same bytes on every machine."""
        return redact(canonical_json({"format": FORMAT, "kind": self.kind, "name": self.name, "digest": self.digest,
                                      "files": self.files, "inputs": self.inputs})).encode("utf-8")

    @property
    def blobs(self) -> dict[str, int]:
        """sha256 → size of every file's bytes (links have none)."""
        return {e["sha256"]: int(e["size"]) for e in self.files.values() if "sha256" in e}

    @property
    def size(self) -> int:
        return sum(self.blobs.values())


def parse(data: bytes, key: str) -> Record:
    """A record from its bytes; BadRecord (naming the key) when it is not a complete one of ours."""
    try:
        doc = json.loads(data.decode("utf-8"))
        files, inputs = doc["files"], doc.get("inputs") or {}
        ok = doc.get("format") == FORMAT and doc["kind"] in ("stage", "run") and isinstance(files, dict) \
            and all(isinstance(e, dict) and ("link" in e or ("sha256" in e and "size" in e)) for e in files.values())
        if not ok:
            raise ValueError("not a record of this format")
        for rel in files:
            _safe_rel(rel)
        return Record(doc["kind"], str(doc["name"]), str(doc["digest"]), files, inputs)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise BadRecord(f"{key}: unreadable record ({e})") from None


def _safe_rel(rel: str) -> str:
    """A record's file path, refused when it would leave the folder it is pulled into."""
    parts = Path(rel).parts
    if not parts or rel.startswith("/") or ".." in parts:
        raise ValueError(f"file path {rel!r} leaves its folder")
    return rel


def stage_record(folder: Path, sid: str, inputs: dict[str, dict[str, str]]) -> Record:
    """The record of a finished local stage folder: its manifest's files plus MANIFEST.json itself."""
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
    files = dict(manifest)
    files[MANIFEST] = {"sha256": manifest_digest(folder), "size": (folder / MANIFEST).stat().st_size}
    return Record("stage", sid, files[MANIFEST]["sha256"], dict(sorted(files.items())), inputs)


def folder_files(folder: Path) -> dict[str, FileEntry]:
    """relative path → {sha256, size} of every file under a folder (hidden temp files left out)."""
    out: dict[str, FileEntry] = {}
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            out[path.relative_to(folder).as_posix()] = {"sha256": sha256_file(path), "size": path.stat().st_size}
    return dict(sorted(out.items()))


def run_digest(run: str, identity: object, lineage: object, eval_stages: list[str]) -> str:
    """A run's results key: what its aggregate was given (its config, lineage and the eval stages it
    gathered); the evals' bytes are named in the record's inputs."""
    text = canonical_json({"run": run, "config": identity, "lineage": lineage, "evals": sorted(set(eval_stages))})
    return sha256_bytes(text.encode("utf-8"))[:24]
