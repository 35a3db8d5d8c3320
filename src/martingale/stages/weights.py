"""Stage weights: local weights (``model.path``) linked into the store as ``<stage>/model``, so every
stage reads a model the same way; no training. Runs on the submitting host (a link, not a job)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..io import atomic_dir
from . import stage_kind


@stage_kind("weights", "source", keys=("model",), when=lambda cfg: bool(cfg["model"].get("path")), local=True)
def run(cfg: dict[str, Any], out_dir: Path) -> None:
    """cfg: model (with its path) → out_dir/model, a link to the local HF folder."""
    src = Path(cfg["model"]["path"]).resolve()
    if not src.is_dir():
        raise FileNotFoundError(f"model.path {src} is not a folder of weights")
    with atomic_dir(out_dir) as tmp:
        os.symlink(src, tmp / "model", target_is_directory=True)
