"""Stage kind simulate (claim C2): two-agent episodes, an instructor and a simulated human, per seed
(the body: stages/body/simulate.py)."""
from __future__ import annotations

from typing import Protocol

from ..core.settings import Section
from ..episodes.section import SimulateConfig
from . import declare
from .evaluate import EvaluateSlice

SIMULATE = declare("simulate", "measure", keys=("world", "model", "elicit", "eval", "prompts"),
                   inputs=("model", "human_model"), per_seed=True, serves=True,
                   section=Section("simulate", SimulateConfig))


class SimulateSlice(EvaluateSlice, Protocol):
    """What a simulate stage's body reads: an evaluate stage's slice and the simulate section."""
    simulate: SimulateConfig
