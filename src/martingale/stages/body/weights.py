"""Stage weights: local weights (``model.path``) linked into the store as ``<stage>/model``, so every
stage reads a model the same way; no training. Runs on the submitting host (a link, not a job).

``model.path`` is the only way a model from outside the project gets in, so it is checked before
anything is linked: a folder with a model in it (its ``config.json``), never ``/``, a system
folder, or the home folder itself."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ...core.errors import StageError
from ...core.settings import system_path_problem
from ...store.files import atomic_dir
from ..weights import WeightsSlice


def model_dir_problem(path: str) -> Optional[str]:
    """Why ``path`` (as configured) is not a local model folder to link, or None."""
    problem = system_path_problem(path)
    if problem:
        return problem
    src = Path(path).resolve()
    problem = system_path_problem(str(src))
    if problem or src == Path.home().resolve():
        return f"{path!r} resolves to {str(src)!r}, a system or home folder, not a model folder"
    if not src.is_dir():
        return f"{path!r} is not a folder" + (" (no such path)" if not src.exists() else "")
    if not (src / "config.json").is_file():
        return f"{path!r} has no config.json: not a model folder"
    return None


def run(cfg: WeightsSlice, out_dir: Path) -> None:
    """cfg: model (with its path) → out_dir/model, a link to the local HF folder."""
    path = cfg.model.path
    if path is None:
        raise StageError("model.path: not set (the weights kind runs where it is)")
    problem = model_dir_problem(path)
    if problem:
        hint = " (conf/model/<name>.yaml says how to get it; SmolLM2: `make smollm2`)" if "no such path" in problem else ""
        raise StageError(f"model.path: {problem}{hint}")
    with atomic_dir(out_dir) as tmp:
        os.symlink(Path(path).resolve(), tmp / "model", target_is_directory=True)
