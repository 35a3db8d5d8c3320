"""Stage kind pretrain: the embedded natural model, trained on calibrated traces, snap answers and
reads (the body: stages/body/pretrain.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..core.settings import (
    COUNT,
    FRACTION,
    LR,
    POSITIVE,
    SEED,
    Int,
    OneOf,
    Real,
    Section,
    omitted_unless,
    setting,
)
from ..model.section import ModelSection
from ..world.section import WorldConfig
from . import declare

TEACHER = omitted_unless("teacher", "miscalibrated")   # the teacher's keys: in an id only where it is miscalibrated


@dataclass
class PretrainConfig:
    """Next-token training of the embedded model on calibrated traces, snap answers and reads (``pretrain``)."""
    seed: int = setting(0, SEED)
    steps: int = setting(800, COUNT)
    batch_size: int = setting(64, COUNT)
    lr: float = setting(3e-3, LR)
    warmup: int = setting(50, Int(0))
    snap_fraction: float = setting(0.25, FRACTION, "of the examples: snap answers")
    read_fraction: float = setting(0.15, FRACTION, "of the examples: reads of a partial trace (the self judge's skill)")
    negation_fraction: float = setting(0.25, FRACTION, "of the questions: asked negated")
    teacher: str = setting("calibrated", OneOf(("calibrated", "miscalibrated")), in_id=TEACHER, help=
        "the natural base's teacher: calibrated (the Bayes reasoner), or miscalibrated as the research log's real "
        "natural bases were (Llama-3.1-8B: Brier 0.2546 against the constant's 0.211, mean belief ≈ +0.1 "
        "above the base rate): it leans yes_shift nats toward yes, sharpens every step and misreads a "
        "clue's sign with probability misread. Its keys are in no id while calibrated")
    yes_shift: float = setting(0.5, Real(-20, 20), "nats", in_id=TEACHER)
    sharpen: float = setting(1.3, POSITIVE, in_id=TEACHER)
    misread: float = setting(0.3, Real(0, 0.5, hi_open=True), "a probability below ½ (at ½ a clue says nothing)",
                             in_id=TEACHER)


PRETRAIN = declare("pretrain", "source", keys=("world", "model"), questions=False, trains=True,
                   when=lambda cfg: not cfg.model.path,
                   section=Section("pretrain", PretrainConfig, in_every_run=True))


class PretrainSlice(Protocol):
    """What a pretrain stage's body reads: its slice, typed (config/slices.py builds it from the plan's)."""
    world: WorldConfig
    model: ModelSection
    pretrain: PretrainConfig
