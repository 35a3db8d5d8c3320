"""Stage kind simulate (claim C2): two-agent episodes, an instructor and a simulated human, per seed
(the body: stages/body/simulate.py)."""
from __future__ import annotations

from ..core.settings import Section
from ..episodes.section import SimulateConfig
from . import declare

SIMULATE = declare("simulate", "measure", keys=("world", "model", "elicit", "eval", "prompts"),
                   inputs=("model", "human_model"), per_seed=True, serves=True,
                   section=Section("simulate", SimulateConfig))
