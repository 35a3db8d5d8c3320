"""A model stage's section (``stages.s1``, ``stages.s2``: a step's kind, reward and optimiser) and
the ``eval`` section (how a measure kind reads every model stage), declared where the stage kinds
are; a reward adds its parameters to a step's keys (config/schema.py)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Protocol

from ..core.settings import (
    COUNT,
    FRACTION,
    LR,
    NONNEG,
    OPEN_UNIT,
    POSITIVE,
    Flag,
    InChoices,
    Int,
    OneOf,
    section,
    setting,
)
from ..model.section import ModelConfig


@dataclass
class StageConfig:
    """One model stage (s1, s2, ...); ``reward: null`` means the stage is absent."""
    kind: str = setting("train", InChoices(), "a registered step kind (martingale.stages): train = policy gradient")
    reward: Optional[str] = setting(None, InChoices(),
        "a registered reward (martingale.rewards.REWARDS); null: the stage is absent")
    filter: Optional[str] = setting(None, OneOf((None, "top-half", "top-quartile")),
        "top-half | top-quartile of the start model's |Δ|; null = all")
    epochs: int = setting(1, COUNT)
    lr: float = setting(1e-3, LR)
    kl_beta: float = setting(0.1, NONNEG)
    lora_r: int = setting(8, COUNT)
    batch_questions: int = setting(8, COUNT, "questions per step")
    generations: int = setting(4, Int(2), "sampled traces per question")
    temperature: float = setting(1.0, POSITIVE)
    adv_clip: float = setting(3.0, POSITIVE)
    info_coef: float = setting(1.0, NONNEG)
    info_eps: float = setting(0.02, FRACTION)
    lam: float = setting(0.5, FRACTION, "C: λ·z(A) + (1 − λ)·z(B)")
    balance: bool = setting(True, Flag(), "add each question's negation (y' = 1 − y)")
    checkpoint_every: int = setting(20, Int(0),
        "steps between resumable checkpoints (stages/checkpoint.py); 0 = none")


@dataclass
class EvalConfig:
    """How every model stage is measured, per seed."""
    kind: str = setting("evaluate", InChoices(), "a registered measure kind (martingale.stages)")
    temperature: float = setting(1.0, NONNEG)
    n_bootstrap: int = setting(1000, COUNT)
    ci: float = setting(0.95, OPEN_UNIT)
    prior_draws: int = setting(0, Int(0),
        "K extra snap-prior draws per question (snap mode): de-attenuated MS; 0 = off")
    negations: bool = setting(False, Flag(),
        "also ask each held-out question's negation: coherence |P(A) + P(¬A) − 1|")
    balance: bool = setting(False, Flag(),
        "evaluate on held-out + each question's negation as questions of their own: ȳ = 0.5, the base-rate "
        "constant's Brier 0.25 (the research log's balanced regime)")
    min_parse_rate: float = setting(0.0, FRACTION,
        "an eval whose answers state a P less often fails, quoting some (conf/config.yaml: 0.5)")


@dataclass
class StagesConfig:
    """The model stages a run may have: each a step, absent while its reward is null."""
    s1: StageConfig = section(StageConfig)
    s2: StageConfig = section(StageConfig)

    def steps(self) -> dict[str, StageConfig]:
        """Each step by name (``s1``, ``s2``), in order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class RunView(Protocol):
    """What a kind's ``when`` and a run's chain read of its resolved config (config.sections.RunConfig)."""

    @property
    def start(self) -> str: ...

    @property
    def model(self) -> ModelConfig: ...

    @property
    def stages(self) -> StagesConfig: ...

    @property
    def eval(self) -> EvalConfig: ...
