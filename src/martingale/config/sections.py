"""The core config sections: what every run has, whatever extensions are installed. Each key is
written once, with its default, its domain and what it does (``setting``); the schema
(config/schema.py) adds what extensions declare where they are defined: a reward's parameters
(keys of the stage that uses it), a reader's, a backend's and a stage kind's own section.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..beliefs.section import ElicitConfig, EpisodePromptsConfig, PromptsConfig  # noqa: F401 (declared by beliefs)
from ..core.settings import (
    COUNT,
    FRACTION,
    LR,
    NONNEG,
    OMIT,
    OPEN_UNIT,
    POSITIVE,
    Flag,
    InChoices,
    Int,
    Maybe,
    Name,
    Names,
    OneOf,
    PathValue,
    Url,
    placement,
    section,
    serving,
    set_where,
    setting,
)
from ..world.section import WorldConfig  # noqa: F401 (the core's world section, declared by the world package)


@dataclass
class Resources:
    """What a stage on this model asks a scheduler for (Snakemake resources)."""
    cpus: int = setting(2, COUNT)
    mem_mb: int = setting(4000, COUNT)
    gpus: int = setting(0, Int(0))
    gpu_model: Optional[str] = setting(None, Name(optional=True))
    runtime_min: int = setting(60, COUNT)
    pretrain_cpus: Optional[int] = setting(None, Maybe(COUNT),
        "the pretrain stage's CPUs (it runs alone at the start of every chain); null: cpus")


def _ranked(value, sec, kind):
    """A training stage's ranks: out of every id at one rank (what every stage was before it
    existed) and out of a stage that takes no ranked gradient steps; the rest changes its bytes."""
    if int(value.get("ranks", 1)) == 1 and int(value.get("nodes", 1)) == 1:
        return OMIT
    return OMIT if kind is not None and not kind.ranked else value


@dataclass
class Distributed:
    """How many processes a training stage (train, instructor, distill) takes its steps on, and how:
    ``ddp`` splits each batch across ranks and reduces the gradients; ``fsdp`` (FSDP2) also shards the
    weights, for a model larger than one device. gloo on a CPU, NCCL on GPUs (training/ranks.py)."""
    ranks: int = setting(1, COUNT, "processes in all (one GPU each on a GPU model)")
    strategy: str = setting("ddp", OneOf(("ddp", "fsdp")), "ddp | fsdp (FSDP2: fully_shard per decoder layer)")
    nodes: int = setting(1, COUNT, "machines the ranks span (SLURM: srun + a c10d rendezvous); ranks per node = ranks / nodes")


@dataclass
class ModelConfig:
    """A causal LM: the embedded tiny Llama (built and pretrained here) or local weights."""
    name: str = setting("tiny", Name())
    family: str = setting("llama", Name())
    path: Optional[str] = setting(None, PathValue(), "local HF folder; None = pretrain the embedded model")
    backend: str = setting("hf", InChoices(),
        "hf (transformers in-process) | vllm (a vLLM server, its own env) | api (an OpenAI-compatible chat "
        "endpoint: an episode role only, simulate.human_model)", in_id=serving)
    hidden_size: int = setting(96, COUNT)
    num_layers: int = setting(3, COUNT)
    num_heads: int = setting(3, COUNT,
        "head_dim = hidden_size / num_heads = 32: a size vLLM's CPU attention serves (24 is refused)")
    intermediate_size: int = setting(256, COUNT)
    max_length: int = setting(96, COUNT)
    dtype: str = setting("float32", OneOf(("float32", "bfloat16", "float16", "auto")),
        "float32 | bfloat16 | float16 | auto (bfloat16 on a GPU, float32 on a CPU)")
    device: str = setting("auto", OneOf(("auto", "cuda", "cpu")),
        "auto (CUDA when one is visible) | cuda | cpu; where, not what: not in stage ids", in_id=placement)
    lora_targets: list[str] = setting(None, Names(), "", factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    generate_batch: int = setting(0, Int(0),
        "hf: prompts per generate call, grouped by length (0 = all at once); a real model's prompts vary in "
        "length, and left-padding to the longest is slow", in_id=set_where(lambda kind: kind.serves))
    loss_batch: int = setting(0, Int(0),
        "training: rollout rows per forward/backward of the loss, gradients accumulated (0 = the whole "
        "rollout at once); a real model's long prompts do not fit at once",
        in_id=set_where(lambda kind: kind.serves and kind.place == "step"))
    server_url: Optional[str] = setting(None, Url(),
        "backend vllm: a server you run (served as model.name); null = one per stage", in_id=serving)
    resources: Resources = section(Resources, in_id=placement)
    distributed: Distributed = section(Distributed, in_id=_ranked)


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
class WandbConfig:
    """How runs are tracked in wandb (store/tracking.py): offline by default."""
    mode: str = setting("offline", OneOf(("offline", "online", "disabled")), "offline | online | disabled")
    project: str = setting("martingale", Name())
    entity: Optional[str] = setting(None, Name(optional=True))


@dataclass
class BudgetConfig:
    """A cap on what one build may cost, from `martingale plan --cost`'s estimate: the workflow
refuses to start a build whose estimate exceeds it (null = no cap)."""
    gpu_hours: Optional[float] = setting(None, Maybe(POSITIVE))
    cpu_hours: Optional[float] = setting(None, Maybe(POSITIVE))
