"""Stage kind weights: local weights (``model.path``) linked into the store, so every stage reads a
model the same way; no training. Runs on the submitting host (a link, not a job)."""
from __future__ import annotations

from typing import Protocol

from ..model.section import ModelSection
from . import declare

WEIGHTS = declare("weights", "source", keys=("model",), when=lambda cfg: bool(cfg.model.path), local=True)


class WeightsSlice(Protocol):
    """What a weights stage's body reads: its slice, typed (config/slices.py builds it from the plan's)."""
    model: ModelSection
