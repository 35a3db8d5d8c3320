"""Stage manifests: the sha256 of every file a stage wrote, written as its last act.

``MANIFEST.json`` is written inside the stage's temp folder just before the one rename that makes
the stage exist (files.atomic_dir), and it is the file Snakemake sees as the stage's output: a folder
without a valid manifest is, for Snakemake and for us alike, not a finished stage. A stage checks
its inputs' manifests before it loads them (``require``), so a corrupted or truncated artifact fails
the stage naming the file instead of being read as a model. ``martingale verify`` checks the store.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TypedDict

MANIFEST = "MANIFEST.json"
_CHUNK = 1 << 20


class FileEntry(TypedDict, total=False):
    """A manifest's entry for one path: a file's ``size`` and ``sha256``, or a link's target."""
    size: int
    sha256: str
    link: str


class CorruptArtifact(RuntimeError):
    """A stage folder whose files do not match its manifest (or that has none)."""


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _entries(folder: Path) -> dict[str, FileEntry]:
    """relative path → {size, sha256} for each file; a link (local weights) → {link: its target},
    not the content it points to (a model outside the store is the user's, not a stage's output)."""
    out: dict[str, FileEntry] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        base = Path(dirpath)
        for name in sorted(dirnames):
            if (base / name).is_symlink():
                out[(base / name).relative_to(folder).as_posix()] = {"link": os.readlink(base / name)}
        for name in sorted(filenames):
            path = base / name
            rel = path.relative_to(folder).as_posix()
            if rel == MANIFEST:
                continue
            out[rel] = {"link": os.readlink(path)} if path.is_symlink() else \
                {"size": path.stat().st_size, "sha256": sha256_file(path)}
    return dict(sorted(out.items()))


def write(folder: Path | str) -> None:
    """Write ``folder/MANIFEST.json`` over every other file in the folder."""
    folder = Path(folder)
    text = json.dumps({"files": _entries(folder)}, sort_keys=True, indent=1) + "\n"
    (folder / MANIFEST).write_text(text, encoding="utf-8")


def problems(folder: Path | str) -> list[str]:
    """What is wrong with a stage folder, one line per file: [] when every file matches."""
    folder = Path(folder)
    try:
        recorded = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{folder / MANIFEST}: missing or unreadable (the stage did not finish)"]
    found = _entries(folder)
    out = []
    for rel, want in recorded.items():
        have = found.get(rel)
        if have is None:
            out.append(f"{folder / rel}: missing")
        elif "link" in want:
            if have != want:
                out.append(f"{folder / rel}: link changed ({have} != {want})")
        elif have.get("size") != want.get("size"):
            out.append(f"{folder / rel}: {have.get('size')} bytes, the manifest says {want.get('size')}")
        elif have.get("sha256") != want.get("sha256"):
            out.append(f"{folder / rel}: sha256 differs from the manifest (corrupted)")
    out += [f"{folder / rel}: not in the manifest" for rel in found if rel not in recorded]
    return out


def require(folder: Path | str) -> None:
    """Raise CorruptArtifact naming the first bad file of an input stage folder."""
    bad = problems(folder)
    if bad:
        raise CorruptArtifact(f"{bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                              + ": run `martingale verify --all --remove`, then rebuild")


def store_folders(store: Path | str) -> list[Path]:
    """Every finished-or-not stage folder under results/_store/<kind>/ (temp folders excluded)."""
    store = Path(store)
    kinds = sorted(p for p in store.iterdir() if p.is_dir() and not p.name.startswith("_")) \
        if store.is_dir() else []
    return [p for kind in kinds for p in sorted(kind.iterdir())
            if p.is_dir() and not p.name.startswith(".")]
