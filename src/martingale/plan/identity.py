"""What of a run's config enters a stage's id and a run's identity.

A stage's id is ``<kind>-<12 hex>``, the sha256 of the canonical JSON of its kind, the config slice
that affects it and its upstream ids (a Merkle chain): two runs with a common prefix share the ids of
that prefix. What of a setting enters is declared at the setting (``settings.setting(in_id=...)``:
one rule, settings.identity): ``model.resources`` (scheduling only) is not hashed, so asking for more
memory does not invalidate a model. ``wandb`` is in no slice.

What is used is read off the typed config; what is hashed is its JSON (each section's fields as
the composed config holds them), so every id is the sha256 of the same canonical JSON.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Callable, Optional

from ..config import sections as core
from ..config.schema import declared_sections, run_config
from ..config.sections import ModelConfig, RunConfig, StageConfig
from ..core.jsonvalue import Json, JsonObject
from ..core.settings import identity
from ..rewards import reward_settings, rewards
from ..stages import StageKind, uses_key
from .resources import compute_threads

Resolved = RunConfig | Mapping[str, object]   # a run's resolved config, typed or as its JSON


def sha256_json(obj: object) -> str:
    """sha256 hex of an object's compact sorted-key JSON (the C encoder: thousands per second)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def stage_id(kind: str, cfg: Mapping[str, object], inputs: Mapping[str, str]) -> str:
    """``<kind>-<first 12 hex of sha256>`` of the canonical (sorted-key, compact) JSON."""
    return f"{kind}-{sha256_json({'kind': kind, 'slice': cfg, 'upstream': inputs})[:12]}"


def as_json(value: object) -> Json:
    """A typed section as the JSON the composed config holds (a setting's value as it is)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def backend_sections(model: ModelConfig) -> dict[str, bool]:
    """Each backend's section under ``model`` (its key) → whether this model uses it: its backend is
    the one that declared it, or the section was in every generating stage's id before backends
    declared sections (``in_every_run``: vllm's)."""
    return {key: always or model.backend == name for key, name, always in _backend_sections()}


def _backend_sections() -> tuple[tuple[str, str, bool], ...]:
    """(key, backend, in_every_run) of each backend's section."""
    return tuple((d.section.key, d.name, d.section.in_every_run) for d in declared_sections() if d.by == "backend")


def section_class(key: str) -> Optional[type]:
    """The dataclass of a top-level section (a core one, or the one an extension declares): whose
    settings declare what of them enters an id (settings.identity)."""
    return CORE_SECTIONS.get(key) or next((d.section.schema for d in declared_sections() if d.path == key), None)


CORE_SECTIONS: dict[str, type] = {"world": core.WorldConfig, "model": core.ModelConfig, "elicit": core.ElicitConfig,
                                  "eval": core.EvalConfig, "prompts": core.PromptsConfig}


def _model_slice(model: ModelConfig, kind: Optional[StageKind]) -> JsonObject:
    """The model as its settings declare it enters an id (settings.identity: where and how it is served,
    the batch sizes only where set), a backend's section only where the stage generates with that
    backend (backend_sections), and a training kind's thread count."""
    used = backend_sections(model)
    out = {k: v for k, v in identity(core.ModelConfig, as_json(model), kind).items()
           if used.get(k, True) and (k not in used or kind is None or kind.serves)}
    threads = compute_threads(model, kind) if kind is not None else None
    if threads is not None:
        out["threads"] = threads
    return out


def step_config(stage: StageConfig) -> JsonObject:
    """A step's own config (``stages.<s>``) without the keys other rewards bring (reward_settings):
    a reward's new key is in a stage's id only where that stage's reward declares it."""
    reward = rewards().get(stage.reward) if stage.reward is not None else None
    others = [k for k in reward_settings() if reward is None or k not in reward.settings]
    return {k: v for k, v in as_json(stage).items() if k not in others}


def section_identity(key: str, value: object, kind: Optional[StageKind]) -> Json:
    """A top-level section (typed) as a stage of ``kind`` (None: the run) hashes it."""
    if key == "model":
        assert isinstance(value, ModelConfig), key
        return _model_slice(value, kind)
    cls, data = section_class(key), as_json(value)
    return identity(cls, data, kind) if cls is not None and isinstance(data, dict) else data


# Core keys a stage sees only where they are used, so a run that does not keeps its ids whatever
# they say: prompts.* where the prompt set is not the embedded model's own format. A reader's own
# section is seen the same way (reader_section): where the run reads beliefs with that reader.
USED_WHEN: dict[str, Callable[[RunConfig], bool]] = {
    "prompts": lambda run: run.prompts.name != "embedded",
}


def reader_section(run: RunConfig) -> Optional[str]:
    """The key of the section of the reader the run reads beliefs with (``elicit.judge``), if it
    declares one (the api reader's ``judge``: its address too, like a generating stage's serving
    keys; a rebuild at a new address reads the same answers from the cache)."""
    return next((d.path for d in declared_sections() if d.by == "reader" and d.name == run.elicit.judge), None)


def stage_slice(kind: StageKind, cfg: Resolved, step: Optional[str] = None, seed: Optional[int] = None) -> JsonObject:
    """The config a stage of this kind sees (and its id hashes): the kind's keys, each section as its
    settings declare they enter an id (section_identity; its own section is one of them), the
    section of the reader it reads beliefs with (a kind that reads ``elicit``), the step's own
    config as ``stage``, the seed for a per-seed kind."""
    run = run_config(cfg)
    keys = [*kind.keys]
    reader = reader_section(run)
    if "elicit" in kind.keys and reader is not None:
        keys.append(reader)
    out = {key: section_identity(key, getattr(run, key), kind) for key in keys
           if key not in USED_WHEN or USED_WHEN[key](run)}
    if step is not None:
        out["stage"] = step_config(run.stages.steps()[step])
    if kind.per_seed:
        out["seed"] = seed
    return out


def run_seeds(cfg: Resolved) -> list[int]:
    """The seeds a run's chains are built on: ``seeds``, each plus ``seed_offset`` (a reseed)."""
    return run_config(cfg).run_seeds()


NOT_RUN_IDENTITY = ("budget", "store")   # what a build may cost, where it keeps stages: never makes a run stale


def unused_sections(run: RunConfig) -> list[str]:
    """The top-level sections extensions declare that this run does not use: a stage kind's where
    no kind of its chain reads it, a reader's where the run reads with another (none of them a
    section that was in every run's identity before extensions declared theirs)."""
    out = []
    for d in declared_sections():
        if d.by == "backend" or d.section.in_every_run:
            continue
        used = uses_key(run, d.path) if d.by == "stage kind" else run.elicit.judge == d.name
        if not used:
            out.append(d.path)
    return out


def run_identity(cfg: Resolved) -> JsonObject:
    """A resolved config without the keys that say nothing about the run (NOT_RUN_IDENTITY), nor
    what it does not use — the sections extensions declare (``simulate`` where it plays no episode,
    ``instructor`` where it trains none: unused_sections; a backend's section off that backend), a
    reward's key where the stage's reward is another — so a new key there leaves every other run
    fresh; nor ``prompts.episode`` or a role's model where null (chat episodes' keys)."""
    run = run_config(cfg)
    skip = (*NOT_RUN_IDENTITY, *unused_sections(run))
    out = {f.name: section_identity(f.name, getattr(run, f.name), None)
           for f in dataclasses.fields(run) if f.name not in skip}
    if "stages" in out:
        out["stages"] = {name: step_config(st) for name, st in run.stages.steps().items()}
    return out


def config_hash(cfg: Resolved) -> str:
    """``sha256:<hex>`` of a resolved config's run identity (sha256_json): equal configs, equal hashes."""
    return "sha256:" + sha256_json(run_identity(cfg))
