"""Stage kind evaluate: a model stage read on the held-out questions, per seed: records and metrics
(the body: stages/body/evaluate.py)."""
from __future__ import annotations

from typing import Optional, Protocol

from ..beliefs.api_judge import JudgeConfig
from ..beliefs.section import ElicitConfig, PromptsConfig
from ..model.section import ModelSection
from ..world.section import WorldConfig
from . import declare
from .section import EvalConfig

EVALUATE = declare("evaluate", "measure", keys=("world", "model", "elicit", "eval", "prompts"),
                   inputs=("model", "judge_model"), per_seed=True, serves=True)


class EvaluateSlice(Protocol):
    """What an evaluate stage's body reads: its slice, typed (config/slices.py builds it from the plan's)."""
    world: WorldConfig
    model: ModelSection
    elicit: ElicitConfig
    eval: EvalConfig
    prompts: PromptsConfig
    judge: Optional[JudgeConfig]     # the api reader's section, where elicit.judge=api
    seed: int
