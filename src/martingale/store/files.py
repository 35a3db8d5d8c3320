"""Atomic writes: a reader sees the old file or the complete new one, never a half-written one;
and no key-like environment value in it (the redaction pass below)."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, TypeVar, cast

import yaml

from ..core.jsonvalue import Json
from ..core.settings import SECRET_WORDS
from .manifest import write as write_manifest
from .provenance import FILE as PROVENANCE
from .provenance import for_folder as provenance_of

T = TypeVar("T")


def _finite(obj: object) -> object:
    """NaN and ±inf become null: JSON has no NaN, and a missing number must not look like one."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):   # a typed config section (core/typed.py)
        return {f.name: _finite(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def canonical_json(obj: object) -> str:
    """JSON with sorted keys and a trailing newline: the same object always gives the same bytes."""
    return json.dumps(_finite(obj), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()   # what open() would give a new file (mkstemp gives 0600)


# --------------------------------------------------------------------------- redaction
# No environment value that looks like a key is ever written: every writer below goes through
# write_bytes, which replaces each such value (and its JSON/YAML-escaped forms) with
# "[redacted:<VARNAME>]". A variable looks like a key when its name contains one of SECRET_WORDS
# (any case) and its value has at least SECRET_MIN_LEN characters. The set is compiled once per
# environment: each write rescans only the variable names (cached) to notice a change.
SECRET_MIN_LEN = 8
_SECRET_NAME = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def _is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


@dataclass(frozen=True)
class Redactor:
    """The secret values of one environment: (form, marker) pairs, longest form first."""
    pairs: tuple[tuple[str, str], ...]

    def text(self, s: str) -> str:
        """``s`` with every secret form replaced by its marker."""
        for form, marker in self.pairs:
            if form in s:
                s = s.replace(form, marker)
        return s

    def data(self, b: bytes) -> bytes:
        """The same on UTF-8 bytes."""
        for form, marker in self.pairs:
            raw = form.encode("utf-8")
            if raw in b:
                b = b.replace(raw, marker.encode("utf-8"))
        return b

    def obj(self, obj: object) -> object:
        """A copy of a JSON/YAML-like object with every string (keys too) redacted."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.obj(k): self.obj(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.obj(v) for v in obj]
        return obj


def _forms(value: str) -> set[str]:
    """How a value can appear in a written file: as is, JSON-escaped (ASCII or not), in a
    single-quoted YAML scalar."""
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1],
            value.replace("'", "''")}


def _build(secrets: tuple[tuple[str, str], ...]) -> Redactor:
    pairs: dict[str, str] = {}
    for name, value in sorted(secrets):
        for form in _forms(value):
            pairs.setdefault(form, f"[redacted:{name}]")
    return Redactor(tuple(sorted(pairs.items(), key=lambda p: (-len(p[0]), p[0]))))


_REDACTOR: tuple[tuple[tuple[str, str], ...], Redactor] = ((), Redactor(()))


def redactor() -> Redactor:
    """The Redactor of the current os.environ (rebuilt only when a key-like variable changes)."""
    global _REDACTOR
    env = os.environ
    secrets = tuple((k, env[k]) for k in env if _is_secret_name(k) and len(env[k]) >= SECRET_MIN_LEN)
    if secrets != _REDACTOR[0]:
        _REDACTOR = (secrets, _build(secrets))
    return _REDACTOR[1]


def redact(obj: T) -> T:
    """A copy of ``obj`` (a string, or a JSON/YAML-like object) with no key-like environment
    value left in any of its strings: for text built and written by other means."""
    r = redactor()
    return cast(T, r.obj(obj)) if r.pairs else obj


class RedactingLog:
    """A text stream for a log that is appended to while a job runs (it cannot be written
    atomically): each write is redacted first. A secret split across two writes is not seen;
    logging and print write a value in one piece."""

    def __init__(self, raw: IO[str]):
        self._raw = raw

    def write(self, s: str) -> int:
        self._raw.write(redact(s))
        return len(s)

    def flush(self) -> None:
        self._raw.flush()

    def __getattr__(self, name: str) -> object:   # fileno, isatty, close ... of the file
        return getattr(self._raw, name)


@contextlib.contextmanager
def open_log(path: Path | str) -> Iterator[RedactingLog]:
    """Open a job's log for appending (its folder made), as a RedactingLog."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        yield RedactingLog(f)


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write bytes to path via a temp file in the same folder and an atomic rename; the file gets
    the usual mode for a new file (umask applied), so a table or result is readable as usual.
    Every key-like environment value is redacted first (see redactor)."""
    r = redactor()
    if r.pairs:
        data = r.data(data)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_pickle(path: Path | str) -> object:
    """An on-disk cache's object, or None when the file is absent or unreadable (the caller
    computes it again)."""
    import pickle
    try:
        return pickle.loads(Path(path).read_bytes())
    except Exception:
        return None


def write_pickle(path: Path | str, obj: object, keep: int) -> None:
    """An on-disk cache's object, pickled and written atomically (write_bytes); only the ``keep``
    newest files of its folder stay (a cache keyed by content gains a file per edit, and only the
    recent keys are read again). An object that does not pickle, or a read-only tree, writes
    nothing: the next process computes it again."""
    import pickle
    try:
        blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):   # a value no module holds
        return
    try:
        write_bytes(path, blob)
    except OSError:
        return
    keep_newest(Path(path).parent, keep, f"*{Path(path).suffix}")


def keep_newest(folder: Path, keep: int, pattern: str, group: Callable[[Path], str] = lambda p: p.name) -> None:
    """Delete the files of ``folder`` matching ``pattern`` but those of the ``keep`` groups written
    last (``group``: a file's group, by default the file itself; a group's time: its newest file)."""
    newest: dict[str, int] = {}
    files = []
    for f in folder.glob(pattern):
        try:
            t = f.stat().st_mtime_ns
        except OSError:          # removed meanwhile by another process pruning the same folder
            continue
        g = group(f)
        newest[g] = max(newest.get(g, 0), t)
        files.append((g, f))
    kept = set(sorted(newest, key=newest.__getitem__)[-keep:])
    for g, f in files:
        if g not in kept:
            with contextlib.suppress(OSError):
                f.unlink()


def write_text(path: Path | str, text: str) -> None:
    """Write UTF-8 text to path atomically (see write_bytes)."""
    write_bytes(path, text.encode("utf-8"))


def write_text_if_changed(path: Path | str, text: str) -> bool:
    """write_text unless the file already holds exactly this text, redacted (its mtime then stays,
    so regenerating an unchanged table or index triggers nothing downstream). True if written."""
    return write_bytes_if_changed(path, redact(text).encode("utf-8"))


def write_bytes_if_changed(path: Path | str, data: bytes) -> bool:
    """write_bytes unless the file already holds exactly these bytes (a figure regenerated with
    the table keeps its mtime). Compared as written: redacted. True if written."""
    path, r = Path(path), redactor()
    data = r.data(data) if r.pairs else data
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    write_bytes(path, data)
    return True


def write_json(path: Path | str, obj: object) -> None:
    """Canonical JSON (sorted keys), written atomically and redacted."""
    write_text(path, canonical_json(obj))


def write_yaml(path: Path | str, obj: object) -> None:
    """YAML of obj; its strings are redacted before dumping, because YAML may fold a long scalar
    across lines and a marker must stay a quoted string, not become a flow sequence."""
    write_text(path, yaml.safe_dump(redact(obj), sort_keys=True, allow_unicode=True))


def write_jsonl(path: Path | str, rows: list[dict]) -> None:
    """One canonical JSON object a line, written atomically and redacted."""
    write_text(path, "".join(json.dumps(_finite(r), sort_keys=True, ensure_ascii=False) + "\n" for r in rows))


def read_json(path: Path | str) -> Json:
    """The JSON document at ``path``."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_jsonl(path: Path | str) -> list[dict]:
    """Every JSON object of a JSON-lines file."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_optional(path: Path | str) -> Json:
    """read_json (read_jsonl for a .jsonl file), or None when the file is missing or not valid
    JSON: for readers of files another job may not have written (yet)."""
    try:
        return read_jsonl(path) if Path(path).suffix == ".jsonl" else read_json(path)
    except (OSError, ValueError):
        return None


def read_optional_yaml(path: Path | str) -> Json:
    """A YAML file's content, or None when it is missing or not valid YAML."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError):
        return None


@contextlib.contextmanager
def atomic_dir(path: Path | str) -> Iterator[Path]:
    """Yield a temp folder beside ``path``; on success its manifest (the sha256 of every file,
    martingale.store.manifest) is written last and the folder replaces ``path`` in one rename. The folder
    of a stage job being collected (martingale.store.provenance) gets its provenance.json just before
    the manifest, which covers it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())   # a normal folder mode (mkdtemp gives 0700)
    try:
        yield tmp
        provenance = provenance_of(path)
        if provenance is not None:
            write_json(tmp / PROVENANCE, provenance)
        write_manifest(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
