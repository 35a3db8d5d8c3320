"""Stage kind train (s1, s2 …): policy gradient over the model's own traces, LoRA, a KL anchor to the
start model (the body: stages/body/train.py)."""
from __future__ import annotations

from typing import Optional, Protocol

from ..beliefs.api_judge import JudgeConfig
from ..beliefs.section import ElicitConfig, PromptsConfig
from ..model.section import ModelSection
from ..world.section import WorldConfig
from . import declare
from .section import StageConfig

TRAIN = declare("train", "step", keys=("world", "model", "elicit", "prompts"), inputs=("start_model", "judge_model"),
                per_seed=True, serves=True, trains=True, ranked=True)


class TrainSlice(Protocol):
    """What a train stage's body reads: its slice, typed (config/slices.py builds it from the plan's)."""
    world: WorldConfig
    model: ModelSection
    elicit: ElicitConfig
    prompts: PromptsConfig
    judge: Optional[JudgeConfig]     # the api reader's section, where elicit.judge=api
    stage: StageConfig
    seed: int
