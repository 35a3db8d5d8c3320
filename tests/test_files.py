"""Atomic writes: the whole new file or the old one, never a half-written one; a normal file mode."""
from __future__ import annotations

import os
import stat

import pytest

from martingale.store import files


def test_write_text_leaves_no_temp_file_and_the_usual_mode(tmp_path):
    path = tmp_path / "runs.json"
    files.write_text(path, "[]\n")
    mask = os.umask(0)
    os.umask(mask)
    assert path.read_text() == "[]\n" and os.listdir(tmp_path) == ["runs.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask      # not mkstemp's 0600


def test_a_failed_write_keeps_the_old_file_and_removes_its_temp(tmp_path, monkeypatch):
    path = tmp_path / "eval.json"
    files.write_text(path, "old")

    def broken_replace(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(files.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        files.write_text(path, "new")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["eval.json"]


def test_canonical_json_turns_nan_into_null_and_sorts_keys():
    assert files.canonical_json({"b": float("nan"), "a": 1}) == '{\n  "a": 1,\n  "b": null\n}\n'


def test_atomic_dir_appears_whole_with_the_usual_folder_mode(tmp_path):
    with files.atomic_dir(tmp_path / "stage") as tmp:
        (tmp / "model.bin").write_bytes(b"x")
        assert not (tmp_path / "stage").exists()
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "stage/model.bin").read_bytes() == b"x"
    assert stat.S_IMODE((tmp_path / "stage").stat().st_mode) == 0o777 & ~mask
