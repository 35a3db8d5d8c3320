"""Stage kind simulate (claim C2): two-agent episodes, an instructor and a simulated human, per seed
(the body: stages/body/simulate.py)."""
from __future__ import annotations

from typing import Optional, Protocol

from ..beliefs.api_judge import JudgeConfig
from ..beliefs.section import ElicitConfig, PromptsConfig
from ..core.settings import Section
from ..episodes.section import SimulateConfig
from ..model.section import ModelConfig
from ..world.section import WorldConfig
from . import declare
from .section import EvalConfig

SIMULATE = declare("simulate", "measure", keys=("world", "model", "elicit", "eval", "prompts"),
                   inputs=("model", "human_model"), per_seed=True, serves=True,
                   section=Section("simulate", SimulateConfig))


class SimulateSlice(Protocol):
    """What a simulate stage's body reads: its slice, typed (config/slices.py builds it from the plan's)."""
    world: WorldConfig
    model: ModelConfig
    elicit: ElicitConfig
    eval: EvalConfig
    prompts: PromptsConfig
    judge: Optional[JudgeConfig]     # the api reader's section, where elicit.judge=api
    simulate: SimulateConfig
    seed: int
