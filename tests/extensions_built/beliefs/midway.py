"""A belief reader with a setting: every trace read at one fixed belief, ``midway.value``."""
from dataclasses import dataclass

from martingale.beliefs.readers import reader
from martingale.core.settings import OPEN_UNIT, Section, setting


@dataclass
class MidwayConfig:
    """The midway reader's section (``midway``)."""
    value: float = setting(0.5, OPEN_UNIT, "the belief it reads in every trace, at every cut")


@reader("midway", section=Section("midway", MidwayConfig))
def midway(ctx, questions, texts, k):
    """Every trace read at ``midway.value``."""
    return [float(ctx.section("midway").value)] * len(texts)
