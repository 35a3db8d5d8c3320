"""Structured-config schema: every key a run may set, with its type and default.

Registered in Hydra's ConfigStore as ``martingale_schema`` and named first in ``conf/config.yaml``'s
defaults, so composing an unknown key or a value of the wrong type is an error naming the key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class WorldConfig:
    """The question source: the embedded synthetic world, or a JSONL file for real models."""
    name: str = "synthetic"
    seed: int = 0                 # draws the clue likelihood table and the question splits
    base_rate: float = 0.3        # P(y = 1)
    n_clue_types: int = 40        # distinct clues; each has a fixed log-likelihood ratio
    clues_per_question: int = 8   # clues listed in a question, read one by one by a reasoner
    dirichlet_alpha: float = 6.0  # concentration of the two clue distributions (y = 1, y = 0)
    logodds_unit: float = 0.25    # nats per integer step written in traces
    max_step: int = 12            # |rounded llr| cap, in units
    snap_noise: float = 1.5       # sd (nats) of the gut prior's per-draw noise
    n_train: int = 640            # training questions
    n_heldout: int = 1000         # disjoint held-out questions (eval)
    questions_file: Optional[str] = None  # JSONL of real questions (world=jsonl)


@dataclass
class Resources:
    """What a stage on this model asks a scheduler for (Snakemake resources)."""
    cpus: int = 2
    mem_mb: int = 4000
    gpus: int = 0
    gpu_model: Optional[str] = None
    runtime_min: int = 60


@dataclass
class ModelConfig:
    """A causal LM: the embedded tiny Llama (built and pretrained here) or local weights."""
    name: str = "tiny"
    family: str = "llama"
    path: Optional[str] = None    # local HF folder; None = pretrain the embedded model
    backend: str = "hf"           # hf (transformers generate) | vllm (GPU, separate env)
    hidden_size: int = 96
    num_layers: int = 3
    num_heads: int = 4
    intermediate_size: int = 256
    max_length: int = 96
    dtype: str = "float32"
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    resources: Resources = field(default_factory=Resources)


@dataclass
class PretrainConfig:
    """Next-token training of the embedded model on calibrated traces, snap answers and reads."""
    seed: int = 0
    steps: int = 800
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 50
    snap_fraction: float = 0.25
    read_fraction: float = 0.15
    negation_fraction: float = 0.25


@dataclass
class DistillConfig:
    """SFT of a LoRA adapter on confirmation-biased traces: the biased start model D."""
    seed: int = 0
    steps: int = 300
    batch_size: int = 32
    lr: float = 3e-3
    lora_r: int = 16
    agree_weight: float = 1.8     # multiplier on clues that agree with the current lean
    disagree_weight: float = 0.5  # multiplier on clues that disagree with it
    weight_jitter: float = 0.3    # sd of per-step noise on the multipliers (keeps D stochastic)


@dataclass
class StageConfig:
    """One model stage (s1, s2, ...); ``reward: null`` means the stage is absent."""
    kind: str = "train"           # a registered step kind (martingale.stages): train = policy gradient
    reward: Optional[str] = None  # a registered reward (martingale.rewards): A | B | C | BP
    filter: Optional[str] = None  # top-half | top-quartile of the start model's |Δ|; null = all
    epochs: int = 1
    lr: float = 1e-3
    kl_beta: float = 0.1
    lora_r: int = 8
    batch_questions: int = 8      # questions per step
    generations: int = 4          # sampled traces per question
    temperature: float = 1.0
    adv_clip: float = 3.0
    info_coef: float = 1.0
    info_eps: float = 0.02
    lam: float = 0.5              # C: λ·z(A) + (1 − λ)·z(B)
    balance: bool = True          # add each question's negation (y' = 1 − y)


@dataclass
class StagesConfig:
    s1: StageConfig = field(default_factory=StageConfig)
    s2: StageConfig = field(default_factory=StageConfig)


@dataclass
class ElicitConfig:
    """How prior and posterior are read: snap prior + reasoned posterior, or one trace at cut/100%."""
    mode: str = "samemode"        # snap | samemode
    judge: str = "self"           # samemode reader: self | trace | oracle
    cut: float = 0.5              # fraction of the trace read as the prior (samemode)


@dataclass
class EvalConfig:
    """How every model stage is measured, per seed."""
    kind: str = "evaluate"        # a registered measure kind (martingale.stages)
    temperature: float = 1.0
    n_bootstrap: int = 1000
    ci: float = 0.95
    prior_draws: int = 0          # K extra snap-prior draws per question (snap mode): de-attenuated MS; 0 = off
    negations: bool = False       # also ask each held-out question's negation: coherence |P(A) + P(¬A) − 1|


@dataclass
class WandbConfig:
    mode: str = "offline"         # offline | online | disabled
    project: str = "martingale"
    entity: Optional[str] = None


@dataclass
class Config:
    world: WorldConfig = field(default_factory=WorldConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    elicit: ElicitConfig = field(default_factory=ElicitConfig)
    start: str = "base"           # base | D
    seeds: list[int] = field(default_factory=lambda: [42])
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    stages: StagesConfig = field(default_factory=StagesConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)


FIXED_CHOICES: dict[str, tuple[Any, ...]] = {
    "start": ("base", "D"),
    "elicit.mode": ("snap", "samemode"),
    "stages.*.filter": (None, "top-half", "top-quartile"),
    "model.backend": ("hf", "vllm"),
    "wandb.mode": ("offline", "online", "disabled"),
}


def choices() -> dict[str, tuple[Any, ...]]:
    """Allowed values per key (``*`` matches one level): the fixed enums above, and the names the
    registries hold — a reward, reader or stage kind added in its own file is allowed here with
    no second list."""
    from ..beliefs.readers import READERS
    from ..rewards import REWARDS
    from ..stages import kind_names
    return {**FIXED_CHOICES,
            "elicit.judge": tuple(READERS),
            "stages.*.reward": (None, *REWARDS),
            "stages.*.kind": kind_names("step"),
            "eval.kind": kind_names("measure")}
