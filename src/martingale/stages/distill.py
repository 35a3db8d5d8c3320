"""Stage kind distill: D, the start model made biased on purpose by LoRA SFT on a biased teacher's
traces, one per seed (the body: stages/body/distill.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..core.settings import COUNT, LR, NONNEG, POSITIVE, SEED, OneOf, Real, Section, omitted_unless, setting
from ..model.section import ModelSection
from ..world.section import WorldConfig
from . import declare


@dataclass
class DistillConfig:
    """SFT of a LoRA adapter on a biased teacher's traces: the biased start model D (``distill``)."""
    seed: int = setting(0, SEED, "offsets the run's seed: each seed of a run distils its own D")
    steps: int = setting(300, COUNT)
    batch_size: int = setting(32, COUNT)
    lr: float = setting(3e-3, LR)
    lora_r: int = setting(16, COUNT)
    agree_weight: float = setting(1.8, POSITIVE, "multiplier on clues that agree with the current lean")
    disagree_weight: float = setting(0.5, NONNEG, "multiplier on clues that disagree with it")
    weight_jitter: float = setting(0.3, NONNEG, "sd of per-step noise on the multipliers (keeps D stochastic)")
    teacher: str = setting("drift", OneOf(("entrench", "overconfident", "both", "drift")),
        "drift (default): the research log's D as it describes it (meanP 0.61–0.64 against a base rate ≈ 0.30, "
        "extremizing along its trace): entrench's weights plus yes_drift nats toward yes at every step, so "
        "its lean grows along the trace. overconfident: leans yes from the start and sharpens every step "
        "(yes_shift, sharpen), and its reasoning corrects the lean (docs/findings.md, FINDINGS A-on-D); entrench: "
        "agree/disagree_weight only; both: entrench + overconfident")
    yes_shift: float = setting(2.5, Real(-20, 20), "nats the over-confident teacher starts toward yes")
    sharpen: float = setting(1.3, POSITIVE, "its multiplier on every step (beliefs more extreme than the evidence)")
    yes_drift: float = setting(0.25, Real(-5, 5), "nats per step toward yes of the drifting teacher",
                               in_id=omitted_unless("teacher", "drift"))


DISTILL = declare("distill", "start", keys=("world", "model"), inputs=("base_model",), questions=False, trains=True,
                  ranked=True,
                  per_seed=True, when=lambda cfg: cfg.start == "D",
                  section=Section("distill", DistillConfig, in_every_run=True))


class DistillSlice(Protocol):
    """What a distill stage's body reads: its slice, typed (config/slices.py builds it from the plan's)."""
    world: WorldConfig
    model: ModelSection
    distill: DistillConfig
    seed: int
