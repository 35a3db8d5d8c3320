"""The ``world`` section: the question source's settings, declared where the worlds are (a world's
class types it with ``world_section``); the config schema places it at ``world``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..core.settings import (
    COUNT,
    NONNEG,
    OMIT,
    OPEN_UNIT,
    POSITIVE,
    SEED,
    InChoices,
    Int,
    PathValue,
    Real,
    asked,
    setting,
)
from ..core.typed import typed
from .registry import worlds


def _redrawn(value, sec, kind):
    """A held-out redraw: out of every id at 0 (the first draw, what every id was before it existed);
    else in the run's identity and the id of a kind that reads held-out questions (a measure), and
    for a world with one split (world=jsonl: it draws train and held-out at once) of every kind that
    asks questions."""
    if not value:
        return OMIT
    if kind is None or kind.place == "measure":
        return value
    known = worlds().get(sec.get("name"))
    return value if kind.questions and known is not None and known.one_split else OMIT


@dataclass
class WorldConfig:
    """The question source: the embedded synthetic world, or a JSONL file for real models."""
    name: str = setting("synthetic", InChoices(), "a registered world (martingale.world: synthetic, jsonl)",
                        in_id=asked("synthetic"))
    seed: int = setting(0, SEED, "draws the clue likelihood table and the question splits")
    base_rate: float = setting(0.3, OPEN_UNIT, "P(y = 1)")
    n_clue_types: int = setting(40, Int(2), "distinct clues; each has a fixed log-likelihood ratio")
    clues_per_question: int = setting(8, COUNT, "clues listed in a question, read one by one by a reasoner")
    dirichlet_alpha: float = setting(6.0, POSITIVE, "concentration of the two clue distributions (y = 1, y = 0)")
    logodds_unit: float = setting(0.25, POSITIVE, "nats per integer step written in traces")
    max_step: int = setting(12, COUNT, "|rounded llr| cap, in units")
    snap_clues: float = setting(0.5, Real(0, 1, lo_open=True),
        "the gut (snap) prior reads this first fraction of the clues only ...")
    snap_gain: float = setting(3.0, POSITIVE,
        "... and weighs each vote at this × the average clue strength (it jumps)")
    snap_noise: float = setting(2.0, NONNEG,
        "sd (nats) of the gut prior's per-draw noise. With these three the snap prior is a different "
        "functional, not only a noisy read: de-attenuation leaves MS_adj < 0, as the research log's table (base −0.548"
        " → MS_adj −0.321)")
    n_train: int = setting(640, COUNT, "training questions", in_id=asked(OMIT))
    n_heldout: int = setting(1000, Int(2), "disjoint held-out questions (eval)", in_id=asked(OMIT))
    questions_file: Optional[str] = setting(None, PathValue(), "JSONL of real questions (world=jsonl)",
                                            in_id=asked(None))
    heldout_draw: int = setting(0, SEED,
        "0: the held-out questions world.seed draws; k > 0: a fresh held-out set from the same world (the same "
        "clue table and training questions): a redraw rebuilds the evals, no training (world=jsonl: the split "
        "is one draw, its training questions change too; a file that marks its split keeps it). conf/config.yaml "
        "reads $MARTINGALE_HELDOUT_DRAW", in_id=_redrawn)


def world_section(cfg: object) -> WorldConfig:
    """``cfg`` (a ``world`` section, or its keys as a mapping) as the typed WorldConfig: a key it
    lacks at its default, a key the schema does not declare an error naming it."""
    return typed(WorldConfig, cfg, "world")
