"""Structured-config schema, assembled from declarations: the core sections (config/sections.py),
and what each extension declares where it is defined — a reward's parameters (new keys of the stage
that uses it), a reader's section (the api reader's ``judge``), a backend's under ``model``
(``model.vllm``, ``model.api``), a stage kind's (``pretrain``, ``distill``, ``simulate``,
``instructor``). Each key is written once, with its domain beside its default (``settings.setting``).

``config_class()`` is the ``Config`` dataclass Hydra's ConfigStore holds as ``martingale_schema``
(named first in ``conf/config.yaml``'s defaults): composing an unknown key or a value of the wrong
type is an error naming the key. ``domains()`` reads every leaf key's domain off the fields,
checked when a run is composed (compose.check_domains), so a value out of range is an error naming
the key too; ``choices()`` the names the registries allow. Both are rebuilt when a registry
changes (an extension registered at test time). The rules across keys are config/checks.py's.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass, make_dataclass
from typing import Any, Optional

from ..beliefs.readers import readers
from ..core.jsonvalue import Json
from ..core.registry import epoch
from ..core.settings import Domain, Section, section
from ..core.typed import dataclass_in, default_of, typed
from ..episodes import chat, synthetic  # noqa: F401 (their modes)
from ..episodes.chat import CHAT_MODES
from ..episodes.synthetic import MODES
from ..model.backend import backend_sections, backends
from ..rewards import reward_settings, rewards
from ..stages import kind_names, kinds
from ..world import worlds
from . import sections as core

STEPS = ("s1", "s2")   # the model stages a run may have, stages.s1 and stages.s2
CORE_KEYS = ("world", "model", "elicit", "start", "seeds", "seed_offset", "stages", "eval", "prompts", "budget", "wandb", "store")
ROLE_MODELS = ("simulate.human_model", "simulate.instructor_model")   # model.* keys changed for one role


@dataclass(frozen=True)
class Declared:
    """An extension's section as placed in the config: its dotted ``path`` (``judge``,
    ``model.vllm``), the declaration, and which extension declared it (``by``: kind, reader or
    backend; ``name``: the extension's name)."""
    path: str
    section: Section
    by: str
    name: str


def declared_sections() -> tuple[Declared, ...]:
    """Every section an extension declares: a stage kind's and a reader's at the top level, a
    backend's under ``model``. A path declared twice, or a core key, is an error naming both."""
    return _declared(_registries())


@functools.lru_cache(maxsize=4)
def _declared(registries: int) -> tuple[Declared, ...]:
    found = [Declared(k.section.key, k.section, "stage kind", k.name) for k in kinds().values() if k.section]
    found += [Declared(r.section.key, r.section, "reader", r.name) for r in readers().values() if r.section]
    found += [Declared(f"model.{s.key}", s, "backend", name) for name, s in backend_sections().items()]
    taken = {k: "the core config" for k in CORE_KEYS} | {f"model.{f.name}": "the core model config"
                                                         for f in dataclasses.fields(core.ModelConfig)}
    for d in found:
        if d.path in taken:
            raise ValueError(f"{d.by} {d.name}: config section {d.path!r} is already {taken[d.path]}'s")
        taken[d.path] = f"{d.by} {d.name}"
    return tuple(found)


def _annotation(f: dataclasses.Field) -> object:
    """The type of a reward's new stage key, from its default (unconstrained where the default is null)."""
    default = default_of(f)
    return type(default) if isinstance(default, (bool, int, float, str, list, dict)) else Any


def _make(name: str, fields: list, base: Optional[type] = None) -> type:
    """A dataclass of this module (pickled DictConfigs name it: schema.<name>, see __getattr__)."""
    cls = make_dataclass(name, fields, bases=(base,) if base else ())
    cls.__module__, cls.__qualname__ = __name__, name
    if base is not None:
        cls.__doc__ = base.__doc__
    return cls


@functools.lru_cache(maxsize=4)
def _build(registries: int) -> dict[str, type]:
    declared = declared_sections()
    model = _make("ModelConfig", [(d.section.key, d.section.schema, section(d.section.schema))
                                  for d in declared if d.by == "backend"], core.ModelConfig)
    stage = _make("StageConfig", [(key, _annotation(f), f) for key, (_, f) in reward_settings().items()],
                  core.StageConfig)
    stages = _make("StagesConfig", [(s, stage, section(stage)) for s in STEPS], core.StagesConfig)
    top: list[tuple[str, object, object]] = [("model", model, section(model)), ("stages", stages, section(stages))]
    top += [(d.path, d.section.schema, section(d.section.schema)) for d in declared if d.by != "backend"]
    return {"Config": _make("Config", top, core.RunConfig), "ModelConfig": model, "StageConfig": stage, "StagesConfig": stages}


_DISCOVERED = [False]


def _registries() -> int:
    """The registries' epoch once every extension module of the package is imported (its
    declarations registered): the key of what is built from them."""
    if not _DISCOVERED[0]:
        kinds()
        backends()
        readers()
        rewards()
        _DISCOVERED[0] = True
    return epoch()


def config_class() -> type[core.RunConfig]:
    """The ``Config`` dataclass for the extensions registered now: RunConfig and their sections."""
    return typing.cast("type[core.RunConfig]", _build(_registries())["Config"])


def run_config(cfg: core.RunConfig | Mapping[str, object], where: str = "") -> core.RunConfig:
    """A run's resolved config (typed, or its JSON) as the schema's ``Config``."""
    return typed(config_class(), cfg, where)


def model_class() -> type:
    """The ``model`` section's dataclass (core keys and every backend's section): a role's model keys."""
    return _build(_registries())["ModelConfig"]


def __getattr__(name: str) -> object:
    """``schema.Config``, ``ModelConfig``, ``StageConfig``, ``StagesConfig``: built from the registries
    (a pickled composed config names them); ``DOMAINS``: ``domains()``."""
    if name in ("Config", "ModelConfig", "StageConfig", "StagesConfig"):
        return _build(_registries())[name]
    if name == "DOMAINS":
        return domains()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.lru_cache(maxsize=4)
def _domains(registries: int) -> dict[str, Domain]:
    out: dict[str, Domain] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            if "domain" in f.metadata:
                out[key] = f.metadata["domain"]
            inner = dataclass_in(hints[f.name])
            if key == "stages":
                walk(_build(registries)["StageConfig"], "stages.*.")   # one domain for every step's key
            elif inner is not None:
                walk(inner, key + ".")
    walk(config_class(), "")
    return out


@functools.lru_cache(maxsize=4)
def _shape(registries: int) -> str:
    def walk(cls: type, prefix: str) -> list[str]:
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            inner = dataclass_in(hints[f.name])
            out += walk(inner, f"{prefix}{f.name}.") if inner is not None else [f"{prefix}{f.name}"]
        return out
    return " ".join(walk(config_class(), ""))


def shape() -> str:
    """Every key of the schema, dotted: what a cached typed config was made with (a cache key; an
    extension registered in this process changes it)."""
    return _shape(_registries())


def domains() -> dict[str, Domain]:
    """Every leaf key's domain (``stages.*.x`` for each step's), read off the fields' metadata."""
    return _domains(_registries())


def domain_key(key: str) -> str:
    """The domains() entry of a dotted key: itself, its ``stages.*.x`` form, ``model.x`` for a role's
    ``simulate.human_model.x``, ``prompts.episode.instructor`` for each mode's prompt under it."""
    known = domains()
    if key in known:
        return key
    for role in ROLE_MODELS:
        if key.startswith(role + "."):
            return "model." + key[len(role) + 1:]
    if key.startswith("prompts.episode.instructor."):
        return "prompts.episode.instructor"
    parts = key.split(".")
    return ".".join([parts[0], "*", *parts[2:]]) if len(parts) > 2 else key


def choices() -> dict[str, tuple[Json, ...]]:
    """Allowed values of the keys whose domain is a registry (``InChoices``; ``*`` matches one
    level): a reward, reader, backend, mode or stage kind added in its own file is allowed here
    with no second list."""
    return {"simulate.mode": tuple(dict.fromkeys([*MODES, *CHAT_MODES])),
            "elicit.judge": tuple(readers()),
            "stages.*.reward": (None, *rewards()),
            "model.backend": tuple(backends()),
            "stages.*.kind": kind_names("step"),
            "eval.kind": kind_names("measure"),
            "world.name": tuple(worlds())}
