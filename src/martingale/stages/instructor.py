"""Stage kind instructor (claim C3): the instructor trained in the loop against the fixed human
(the body: stages/body/instructor.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..beliefs.section import PromptsConfig
from ..core.settings import COUNT, NONNEG, POSITIVE, Int, Section, setting
from ..episodes.section import SimulateConfig
from ..model.section import ModelSection
from ..world.section import WorldConfig
from . import declare
from .section import StageConfig


@dataclass
class InstructorConfig:
    """In-loop training of the episodes' instructor (``instructor``: this kind's section); its LoRA
    rank, lr, KL β and advantage clip are the stage's own keys; the episode rewards' λs are here."""
    iterations: int = setting(20, COUNT, "rounds of (play train episodes, one policy-gradient step)")
    train_episodes: int = setting(64, Int(2), "episodes played per iteration (training questions)")
    meta_size: int = setting(8, Int(3), "episodes per meta-episode: the episode_ms reward's MS is over one")
    lam_ms: float = setting(1.0, NONNEG, "λ of the episode rewards' entrenchment term")
    lam_brier: float = setting(1.0, NONNEG, "λ_B of the hinge reward's Brier term")
    temperature: float = setting(2.0, POSITIVE,
        "the policy's utterances while it trains (exploration: at 1 the pretrained instructor copies its first "
        "candidate every time); its episodes in eval sample at simulate.instructor_temperature")


INSTRUCTOR = declare("instructor", "step", keys=("world", "model", "prompts", "simulate"),
                     inputs=("start_model", "human_model"), per_seed=True, serves=True, trains=True, ranked=True,
                     section=Section("instructor", InstructorConfig))


class InstructorSlice(Protocol):
    """What an instructor stage's body reads: its slice, typed (config/slices.py builds it from the plan's)."""
    world: WorldConfig
    model: ModelSection
    prompts: PromptsConfig
    simulate: SimulateConfig
    instructor: InstructorConfig
    stage: StageConfig
    seed: int
