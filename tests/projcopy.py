"""Helpers for the orchestrator tests: a throw-away copy of the project per test, and snapshots.

(Kept out of conftest.py so the stage tests' fixtures stay there; import what you need.)
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    """A copy of conf/ + Snakefile + workflow/ under tmp_path; tests may write there."""
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copytree(REPO / "conf", root / "conf")
    shutil.copytree(REPO / "workflow", root / "workflow")
    shutil.copy(REPO / "Snakefile", root / "Snakefile")
    return root


def write_run(root: Path, name: str, text: str) -> Path:
    path = root / "conf" / "runs" / name
    path.write_text(text, encoding="utf-8")
    return path


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root with its size and mtime: compare to prove nothing was written."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out
