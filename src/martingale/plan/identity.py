"""What of a run's config enters a stage's id and a run's identity.

A stage's id is ``<kind>-<12 hex>``, the sha256 of the canonical JSON of its kind, the config slice
that affects it and its upstream ids (a Merkle chain): two runs with a common prefix share the ids of
that prefix. What of a setting enters is declared at the setting (``settings.setting(in_id=...)``:
one rule, settings.identity): ``model.resources`` (scheduling only) is not hashed, so asking for more
memory does not invalidate a model. ``wandb`` is in no slice.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Optional

from ..config import sections as core
from ..config.schema import declared_sections
from ..core.settings import identity
from ..rewards import reward_settings, rewards
from ..stages import StageKind, uses_key
from .resources import compute_threads


def sha256_json(obj: Any) -> str:
    """sha256 hex of an object's compact sorted-key JSON (the C encoder: thousands per second)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def stage_id(kind: str, cfg: dict, inputs: dict[str, str]) -> str:
    """``<kind>-<first 12 hex of sha256>`` of the canonical (sorted-key, compact) JSON."""
    return f"{kind}-{sha256_json({'kind': kind, 'slice': cfg, 'upstream': inputs})[:12]}"


def backend_sections(model: dict) -> dict[str, bool]:
    """Each backend's section under ``model`` (its key) → whether this model uses it: its backend is
    the one that declared it, or the section was in every generating stage's id before backends
    declared sections (``in_every_run``: vllm's)."""
    return {key: always or model.get("backend") == name for key, name, always in _backend_sections()}


def _backend_sections() -> tuple[tuple[str, str, bool], ...]:
    """(key, backend, in_every_run) of each backend's section."""
    return tuple((d.section.key, d.name, d.section.in_every_run) for d in declared_sections() if d.by == "backend")


def section_class(key: str) -> Optional[type]:
    """The dataclass of a top-level section (a core one, or the one an extension declares): whose
    settings declare what of them enters an id (settings.identity)."""
    return CORE_SECTIONS.get(key) or next((d.section.schema for d in declared_sections() if d.path == key), None)


CORE_SECTIONS: dict[str, type] = {"world": core.WorldConfig, "model": core.ModelConfig, "elicit": core.ElicitConfig,
                                  "eval": core.EvalConfig, "prompts": core.PromptsConfig}


def _model_slice(model: dict, kind: Optional[StageKind]) -> dict:
    """The model as its settings declare it enters an id (settings.identity: where and how it is served,
    the batch sizes only where set), a backend's section only where the stage generates with that
    backend (backend_sections), and a training kind's thread count."""
    used = backend_sections(model)
    out = {k: v for k, v in identity(core.ModelConfig, model, kind).items()
           if used.get(k, True) and (k not in used or kind is None or kind.serves)}
    threads = compute_threads(model, kind) if kind is not None else None
    if threads is not None:
        out["threads"] = threads
    return out


def step_config(stage: dict) -> dict:
    """A step's own config (``stages.<s>``) without the keys other rewards bring (reward_settings):
    a reward's new key is in a stage's id only where that stage's reward declares it."""
    mine = rewards()[stage["reward"]].settings if stage.get("reward") in rewards() else {}
    others = [k for k in reward_settings() if k not in mine]
    return {k: v for k, v in stage.items() if k not in others}


def section_identity(key: str, value: Any, kind: Optional[StageKind]) -> Any:
    """A top-level section as a stage of ``kind`` (None: the run) hashes it."""
    if key == "model":
        return _model_slice(value, kind)
    cls = section_class(key)
    return identity(cls, value, kind) if cls is not None and isinstance(value, dict) else value


# Core keys a stage sees only where they are used, so a run that does not keeps its ids whatever
# they say: prompts.* where the prompt set is not the embedded model's own format. A reader's own
# section is seen the same way (reader_section): where the run reads beliefs with that reader.
USED_WHEN: dict[str, Callable[[dict], bool]] = {
    "prompts": lambda cfg: cfg.get("prompts", {}).get("name", "embedded") != "embedded",
}


def reader_section(cfg: dict) -> Optional[str]:
    """The key of the section of the reader the run reads beliefs with (``elicit.judge``), if it
    declares one (the api reader's ``judge``: its address too, like a generating stage's serving
    keys; a rebuild at a new address reads the same answers from the cache)."""
    judge = (cfg.get("elicit") or {}).get("judge")
    return next((d.path for d in declared_sections() if d.by == "reader" and d.name == judge), None)


def stage_slice(kind: StageKind, cfg: dict, step: Optional[str] = None, seed: Optional[int] = None) -> dict:
    """The config a stage of this kind sees (and its id hashes): the kind's keys, each section as its
    settings declare they enter an id (section_identity; its own section is one of them), the
    section of the reader it reads beliefs with (a kind that reads ``elicit``), the step's own
    config as ``stage``, the seed for a per-seed kind."""
    keys = [*kind.keys]
    if "elicit" in kind.keys and reader_section(cfg) is not None:
        keys.append(reader_section(cfg))
    out = {key: section_identity(key, cfg[key], kind) for key in keys if key not in USED_WHEN or USED_WHEN[key](cfg)}
    if step is not None:
        out["stage"] = step_config(cfg["stages"][step])
    if kind.per_seed:
        out["seed"] = seed
    return out


def run_seeds(cfg: dict) -> list[int]:
    """The seeds a run's chains are built on: ``seeds``, each plus ``seed_offset`` (a reseed)."""
    return [int(s) + int(cfg.get("seed_offset") or 0) for s in cfg["seeds"]]
NOT_RUN_IDENTITY = ("budget", "store")   # what a build may cost, where it keeps stages: never makes a run stale


def unused_sections(cfg: dict) -> list[str]:
    """The top-level sections extensions declare that this run does not use: a stage kind's where
    no kind of its chain reads it, a reader's where the run reads with another (none of them a
    section that was in every run's identity before extensions declared theirs)."""
    judge = (cfg.get("elicit") or {}).get("judge")
    out = []
    for d in declared_sections():
        if d.by == "backend" or d.section.in_every_run:
            continue
        used = uses_key(cfg, d.path) if d.by == "stage kind" else judge == d.name
        if not used:
            out.append(d.path)
    return out


def run_identity(cfg: dict) -> dict:
    """A resolved config without the keys that say nothing about the run (NOT_RUN_IDENTITY), nor
    what it does not use — the sections extensions declare (``simulate`` where it plays no episode,
    ``instructor`` where it trains none: unused_sections; a backend's section off that backend), a
    reward's key where the stage's reward is another — so a new key there leaves every other run
    fresh; nor ``prompts.episode`` or a role's model where null (chat episodes' keys)."""
    unused = unused_sections(cfg)
    out = {k: section_identity(k, v, None) for k, v in cfg.items() if k not in (*NOT_RUN_IDENTITY, *unused)}
    if "stages" in out:
        out["stages"] = {name: step_config(st) for name, st in out["stages"].items()}
    return out

def config_hash(cfg: dict) -> str:
    """``sha256:<hex>`` of a resolved config's run identity (sha256_json): equal configs, equal hashes."""
    return "sha256:" + sha256_json(run_identity(cfg))
