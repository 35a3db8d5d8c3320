"""What a stage ran with: its package versions, the vLLM server that served it, the weights it loaded.

A stage folder's ``provenance.json`` says which python, torch, transformers, peft, trl and
accelerate the stage ran with, the version of each vLLM server that served it (``GET /version``;
null when a server has no such endpoint: TRL supports a narrow vLLM range, and a silently upgraded
server is a silent bug), and the sha256 of every ``*.safetensors`` file of every model folder it
loaded (links followed: a model folder may link to local weights outside the store).

A collector is active only while a stage job runs (``collecting``, around the kind's ``run`` in
``martingale.jobs.smk.run_stage``): ``model.load.load`` calls ``record_weights`` with each folder it
loads and the vllm backend calls ``record_server_at`` when a server is ready. ``files.atomic_dir``
writing the stage's own folder (not a checkpoint or any other folder the job writes) then writes
``for_folder``'s object just before the manifest, so the manifest covers the file. Outside a stage job
nothing is recorded or written.

The file is deterministic — the same environment and the same inputs give the same bytes: sorted
keys, no clock, no hostname, no port, no absolute path outside the project (a model folder is
recorded relative to the project root, or by its name alone when it is outside the project; each
weight file by its path relative to that folder). A weight file's sha256 is computed once per
(path, size, mtime) in a process, so a folder loaded twice is hashed once.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from ..core.jsonvalue import Json, JsonObject
from .manifest import sha256_file

if TYPE_CHECKING:
    from requests import Session

FILE = "provenance.json"
PACKAGES = ("accelerate", "peft", "torch", "transformers", "trl")
SERVER_KEY = "vllm_server"    # in ``versions``: the version of the vLLM server(s) that served the stage
OUTSIDE = "<outside the project>/"
WEIGHT_GLOB = "*.safetensors"


class Collector:
    """What one stage job loaded and what served it; written into ``out_dir`` (see write_into)."""

    def __init__(self, out_dir: Path | str, root: Path | str):
        self.out_dir = os.path.realpath(out_dir)
        self.root = Path(os.path.abspath(root))
        self.weights: dict[str, dict[str, str]] = {}
        self.servers: list[Optional[str]] = []

    def folder_name(self, folder: Path | str) -> str:
        """How a model folder is recorded: relative to the project root (links not resolved: a
        store folder stays a store folder), else ``<outside the project>/<name>``."""
        path = Path(os.path.abspath(folder))
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return OUTSIDE + path.name

    def document(self) -> JsonObject:
        """The provenance.json object."""
        out_versions: JsonObject = versions()
        if self.servers:
            out_versions[SERVER_KEY] = _one_or_all(self.servers)
        return {"versions": out_versions,
                "weights": {k: dict(sorted(v.items())) for k, v in sorted(self.weights.items())}}


_ACTIVE: Optional[Collector] = None
_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def active() -> Optional[Collector]:
    """The collector of the stage job running in this process, or None."""
    return _ACTIVE


@contextlib.contextmanager
def collecting(out_dir: Path | str, root: Path | str = ".") -> Iterator[Collector]:
    """Collect the provenance of the stage that writes ``out_dir`` (paths recorded against
    ``root``, the project root), for the duration of the block."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, Collector(out_dir, root)
    try:
        yield _ACTIVE
    finally:
        _ACTIVE = previous


def versions() -> dict[str, Optional[str]]:
    """{python, accelerate, peft, torch, transformers, trl}: the installed distributions'
    versions (importlib.metadata: no import of torch); null for one that is not installed."""
    import importlib.metadata
    import platform
    out: dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def weight_sha256(path: Path) -> str:
    """sha256 of a weight file (its link followed), once per (real path, size, mtime) per process."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = (real, st.st_size, st.st_mtime_ns)
    sha = _SHA_CACHE.get(key)
    if sha is None:
        sha = _SHA_CACHE[key] = sha256_file(Path(real))
    return sha


def record_weights(folder: Path | str) -> None:
    """Record the sha256 of each ``*.safetensors`` file of a model folder being loaded (nothing
    outside a stage job). A folder without one is recorded with no files: visible, not hidden."""
    c = _ACTIVE
    if c is None:
        return
    folder = Path(folder)
    c.weights[c.folder_name(folder)] = {
        p.relative_to(folder).as_posix(): weight_sha256(p) for p in sorted(folder.glob(WEIGHT_GLOB))}


def record_server(info: Optional[JsonObject]) -> None:
    """Record a vLLM server that serves the stage: ``info`` is its ``/version`` answer
    ({"version": "0.10.1"}), or None when it had none (recorded as null)."""
    c = _ACTIVE
    if c is None:
        return
    version = info.get("version") if isinstance(info, dict) else None
    c.servers.append(str(version) if version is not None else None)


def server_info(http: Session, url: str, timeout: float = 5.0) -> Optional[JsonObject]:
    """A server's ``GET /version`` answer, or None when it has no such endpoint or does not
    answer it (never raises: provenance must not fail a stage)."""
    try:
        r = http.get(url.rstrip("/") + "/version", timeout=timeout)
        data = r.json() if r.status_code == 200 else None
    except Exception:   # noqa: BLE001 (requests errors, a non-JSON body)
        return None
    return data if isinstance(data, dict) else None


def record_server_at(http: Session, url: str) -> None:
    """record_server(server_info(...)) for a server that just became ready (asked only while a
    stage job runs)."""
    if _ACTIVE is not None:
        record_server(server_info(http, url))


def for_folder(path: Path | str) -> Optional[JsonObject]:
    """The provenance.json object to write into ``path``'s temp folder (files.atomic_dir) when
    ``path`` is the folder of the stage being collected; else None."""
    c = _ACTIVE
    if c is None or os.path.realpath(path) != c.out_dir:
        return None
    return c.document()


def read(folder: Path | str) -> Optional[JsonObject]:
    """A stage folder's provenance.json, or None (none recorded: built before provenance, or
    outside a stage job; or unreadable)."""
    import json
    try:
        with open(Path(folder) / FILE, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _one_or_all(values: list[Json]) -> Json:
    """The value when all agree, else the sorted distinct values (null last)."""
    distinct = sorted(set(values), key=lambda v: (v is None, str(v)))
    return distinct[0] if len(distinct) == 1 else distinct


def summary(docs: dict[str, Optional[JsonObject]], store: str = "results/_store") -> Optional[JsonObject]:
    """The runs table's compact view of several stages' provenance ({stage id: provenance.json}):
    ``versions`` (a package the stages ran at different versions: the sorted distinct versions)
    and ``weights_sha256`` {model: {file: sha256}}, a store folder named by its stage id
    (``pretrain-1a2b…``; ``…/model`` dropped). None when no stage recorded any."""
    stages = {k: v for k, v in docs.items() if isinstance(v, dict)}
    if not stages:
        return None
    seen: dict[str, list] = {}
    weights: dict[str, dict[str, list]] = {}
    for _, doc in sorted(stages.items()):
        for name, version in (doc.get("versions") or {}).items():
            for v in (version if isinstance(version, list) else [version]):
                seen.setdefault(name, []).append(v)
        for folder, files in (doc.get("weights") or {}).items():
            key = _model_key(folder, store)
            for rel, sha in (files or {}).items():
                weights.setdefault(key, {}).setdefault(rel, []).append(sha)
    return {"versions": {k: _one_or_all(v) for k, v in sorted(seen.items())},
            "weights_sha256": {k: {rel: _one_or_all(s) for rel, s in sorted(f.items())}
                               for k, f in sorted(weights.items())}}


def _model_key(folder: str, store: str) -> str:
    """``results/_store/<kind>/<id>/model`` → ``<id>``; any other folder as recorded."""
    prefix = store.rstrip("/") + "/"
    if not folder.startswith(prefix):
        return folder
    parts = folder[len(prefix):].split("/")
    if len(parts) < 2:
        return folder
    rest = "/".join(parts[2:])
    return parts[1] if rest in ("", "model") else f"{parts[1]}/{rest}"
