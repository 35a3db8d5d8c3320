"""A stage kind with its own section: a step that would cool the model (``anneal.cooling``)."""
from dataclasses import dataclass

from martingale.core.settings import OPEN_UNIT, Section, setting
from martingale.stages import stage_kind


@dataclass
class AnnealConfig:
    """The anneal kind's section (``anneal``)."""
    cooling: float = setting(0.9, OPEN_UNIT, "the factor it cools the model's temperature by each step")


@stage_kind("anneal", "step", keys=("world", "model"), inputs=("start_model",), per_seed=True,
            section=Section("anneal", AnnealConfig))
def run(cfg, start_model, out_dir):
    raise AssertionError("a dry run runs no stage")
