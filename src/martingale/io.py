"""Atomic writes: a reader sees the old file or the complete new one, never a half-written one."""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import yaml


def _finite(obj: Any) -> Any:
    """NaN and ±inf become null: JSON has no NaN, and a missing number must not look like one."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and a trailing newline: the same object always gives the same bytes."""
    return json.dumps(_finite(obj), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()   # what open() would give a new file (mkstemp gives 0600)


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write bytes to path via a temp file in the same folder and an atomic rename; the file gets
    the usual mode for a new file (umask applied), so a table or result is readable as usual."""
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


def write_text(path: Path | str, text: str) -> None:
    """Write UTF-8 text to path atomically (see write_bytes)."""
    write_bytes(path, text.encode("utf-8"))


def write_text_if_changed(path: Path | str, text: str) -> bool:
    """write_text unless the file already holds exactly this text (its mtime then stays, so
    regenerating an unchanged table or index triggers nothing downstream). True if written."""
    path = Path(path)
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    write_text(path, text)
    return True


def write_json(path: Path | str, obj: Any) -> None:
    write_text(path, canonical_json(obj))


def write_yaml(path: Path | str, obj: Any) -> None:
    write_text(path, yaml.safe_dump(obj, sort_keys=True, allow_unicode=True))


def write_jsonl(path: Path | str, rows: list[dict]) -> None:
    write_text(path, "".join(json.dumps(_finite(r), sort_keys=True, ensure_ascii=False) + "\n" for r in rows))


def read_json(path: Path | str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_jsonl(path: Path | str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_optional(path: Path | str) -> Any:
    """read_json (read_jsonl for a .jsonl file), or None when the file is missing or not valid
    JSON: for readers of files another job may not have written (yet)."""
    try:
        return read_jsonl(path) if Path(path).suffix == ".jsonl" else read_json(path)
    except (OSError, ValueError):
        return None


def read_optional_yaml(path: Path | str) -> Any:
    """A YAML file's content, or None when it is missing or not valid YAML."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError):
        return None


@contextlib.contextmanager
def atomic_dir(path: Path | str) -> Iterator[Path]:
    """Yield a temp folder beside ``path``; on success its manifest (the sha256 of every file,
    martingale.manifest) is written last and the folder replaces ``path`` in one rename."""
    from .manifest import write as write_manifest
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())   # a normal folder mode (mkdtemp gives 0700)
    try:
        yield tmp
        write_manifest(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
