"""The core config sections: what every run has, whatever extensions are installed. Each key is
written once, with its default, its domain and what it does (``setting``); the schema
(config/schema.py) adds what extensions declare where they are defined: a reward's parameters
(keys of the stage that uses it), a reader's, a backend's and a stage kind's own section.
``RunConfig`` is a run's resolved config typed: what the plan, the stage kinds and a run's readers
read (the schema's ``Config`` is its subclass with the extensions' sections).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..beliefs.section import ElicitConfig, EpisodePromptsConfig, PromptsConfig  # noqa: F401 (declared by beliefs)
from ..core.settings import (
    POSITIVE,
    SEED,
    Int,
    Maybe,
    OneOf,
    PathValue,
    Seeds,
    section,
    setting,
)
from ..model.section import Distributed, ModelConfig, Resources  # noqa: F401 (declared by the model package)
from ..stages.section import EvalConfig, StageConfig, StagesConfig  # noqa: F401 (declared by the stage kinds)
from ..store.tracking import WandbConfig  # noqa: F401 (declared where runs are tracked)
from ..world.section import WorldConfig  # noqa: F401 (declared by the world package)


@dataclass
class BudgetConfig:
    """A cap on what one build may cost, from `martingale plan --cost`'s estimate: the workflow
refuses to start a build whose estimate exceeds it (null = no cap)."""
    gpu_hours: Optional[float] = setting(None, Maybe(POSITIVE))
    cpu_hours: Optional[float] = setting(None, Maybe(POSITIVE))

    def caps(self) -> list[tuple[str, str, float]]:
        """(key, unit, cap) of each cap that is set."""
        return [(key, unit, cap) for key, unit, cap in (("gpu_hours", "GPU-hours", self.gpu_hours),
                                                        ("cpu_hours", "CPU-hours", self.cpu_hours)) if cap is not None]


@dataclass
class StoreConfig:
    """A durable stage store every machine pushes each finished stage to and pulls from instead of
rebuilding (docs/store.md); null = this machine only. ``$MARTINGALE_STORE`` wins over ``url``.
Credentials never go here: the environment or the library's own configuration gives them."""
    url: Optional[str] = setting(None, PathValue(), "s3://bucket/prefix, a mounted folder, or any fsspec URL")
    on_corrupt: str = setting("rebuild", OneOf(("rebuild", "stop")),
                              "a pulled blob that fails its sha256: build the stage here, or stop the build")
    jobs: int = setting(32, Int(1, 512), "transfers at once")


@dataclass
class RunConfig:
    """A run's resolved config, typed: the core sections (stages.section.RunView is what the stage
    kinds read of it). An extension's own section (a stage kind's, a reader's) is a field of the
    schema's subclass, read with ``extension``."""
    world: WorldConfig = section(WorldConfig)
    model: ModelConfig = section(ModelConfig)
    elicit: ElicitConfig = section(ElicitConfig)
    start: str = setting("base", OneOf(("base", "D")), "base: the natural model; D: the biased one (distill)")
    seeds: list[int] = setting(None, Seeds(), "one chain per seed, aggregated", factory=lambda: [42])
    seed_offset: int = setting(0, SEED, "added to every seed of every run: a reseed builds the whole "
                                        "campaign on other seeds (conf/config.yaml reads $MARTINGALE_SEED_OFFSET)")
    stages: StagesConfig = section(StagesConfig)
    eval: EvalConfig = section(EvalConfig)
    prompts: PromptsConfig = section(PromptsConfig)
    budget: BudgetConfig = section(BudgetConfig)
    wandb: WandbConfig = section(WandbConfig)
    store: StoreConfig = section(StoreConfig)

    def extension(self, key: str) -> object:
        """An extension's section (``simulate``, ``judge``); None where the schema has none."""
        return getattr(self, key, None)

    def run_seeds(self) -> list[int]:
        """The seeds the run's chains are built on: ``seeds``, each plus ``seed_offset`` (a reseed)."""
        return [s + self.seed_offset for s in self.seeds]
