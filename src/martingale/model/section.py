"""The ``model`` section's core keys: which causal LM, how it is served, what a stage on it asks a
scheduler for and how many ranks train it, declared where the backends are. A backend adds its own
section under it (``model.vllm``, ``model.api``: backend.declare_backend); the config schema
assembles the whole ``model`` section from both."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from ..core.jsonvalue import Json
from ..core.registry import epoch
from ..core.settings import (
    COUNT,
    OMIT,
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
from ..core.typed import typed
from .api_client import ApiModelConfig
from .backend import backend_sections
from .serving import VLLMConfig


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


WHERE = "_where"   # a role's model config names its api section for messages (episodes/roles.py)


@dataclass
class ModelSection(ModelConfig):
    """The ``model`` section as a stage reads it: the core keys, the built-in backends' sections and
    ``threads``, which the plan derives for a kind whose bytes depend on it (plan.compute_threads)
    and hashes with the model. A backend declared in its own file adds its section (section_class)."""
    api: ApiModelConfig = section(ApiModelConfig)
    vllm: VLLMConfig = section(VLLMConfig)
    threads: Optional[int] = None


ModelLike = ModelConfig | Mapping[str, Json] | None   # a model section typed, or its keys (None: the defaults)


@functools.lru_cache(maxsize=4)
def _section_class(registries: int) -> type[ModelSection]:
    have = {f.name for f in dataclasses.fields(ModelSection)}
    extra = [(s.key, s.schema, section(s.schema)) for s in backend_sections().values() if s.key not in have]
    return dataclasses.make_dataclass("ModelSection", extra, bases=(ModelSection,)) if extra else ModelSection


def section_class() -> type[ModelSection]:
    """The ``model`` section's dataclass as a stage's slice and model_section hold it."""
    return _section_class(epoch())


def model_section(cfg: ModelLike) -> ModelSection:
    """``cfg`` (a ``model`` section, typed or its keys; None: the defaults) typed: the core keys and
    each backend's section as attributes (a role's ``_where`` aside)."""
    if isinstance(cfg, ModelSection):
        return cfg
    given = {k: v for k, v in (cfg or {}).items() if k != WHERE} if isinstance(cfg, Mapping) or cfg is None else cfg
    return typed(section_class(), given, "model")
