"""A stage's typed slice: the config the plan hashes for a stage (plan.stage_slice, plain JSON)
rebuilt as the schema's dataclasses, so a stage body reads typed attributes (``cfg.stage.lr`` is a
float, ``cfg.seed`` an int) with no string lookups or casts. A setting the slice leaves out (not
in the stage's id) holds its declared default. The model, world, belief and episode code types
what it is given the same way (core/typed.py), so it reads attributes whatever it is handed.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Optional, Protocol, cast

from ..core.registry import epoch
from ..core.typed import type_hints, typed
from ..model.section import ModelSection, model_section
from ..model.section import section_class as model_section_class
from ..stages import StageKind
from . import schema

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def slice_class(kind: StageKind) -> type:
    """The dataclass of a ``kind``'s slice: a field per key it sees (each its schema section), the
    reader sections it may see, ``stage`` for a model stage and ``seed`` for a per-seed kind."""
    return _slice_class(kind, epoch())


@functools.lru_cache(maxsize=None)
def _slice_class(kind: StageKind, registries: int) -> type:
    config = {f.name: f for f in dataclasses.fields(schema.config_class())}
    hints = {**type_hints(schema.config_class()), "model": model_section_class()}   # with the plan's threads
    keys = list(kind.keys)
    if "elicit" in keys:
        keys += [d.path for d in schema.declared_sections() if d.by == "reader" and d.path not in keys]
    missing = [k for k in keys if k not in config]
    if missing:
        raise ValueError(f"stage kind {kind.name}: key {missing[0]!r} is no config section")
    fields: list[tuple[str, object, object]] = [(k, hints[k], dataclasses.field(default=None)) for k in keys]
    if kind.place == "step":
        fields.append(("stage", schema.StageConfig, dataclasses.field(default=None)))
    if kind.per_seed:
        fields.append(("seed", Optional[int], dataclasses.field(default=None)))
    name = "".join(part.title() for part in kind.name.split("_")) + "Slice"
    return dataclasses.make_dataclass(name, fields)


def stage_config(kind: StageKind, cfg: object) -> object:
    """``cfg``, a stage's slice as the plan made it (or already typed), as its kind's typed slice: a
    key the plan left out (``prompts`` where the prompt set is the embedded one) at its default."""
    if dataclasses.is_dataclass(cfg):
        return cfg
    if not isinstance(cfg, Mapping):
        raise TypeError(f"{kind.name} stage config: a {type(cfg).__name__}, neither a mapping nor a typed slice")
    given = {k: v for k, v in cfg.items() if v is not None}
    for key in (*kind.keys, *(("stage",) if kind.place == "step" else ())):
        given.setdefault(key, {})
    return typed(slice_class(kind), given, f"{kind.name} stage config")


class _OnModel(Protocol):
    model: ModelSection


def slice_model(kind: StageKind, sliced: object) -> ModelSection:
    """The model section of ``kind``'s typed slice (stage_config); its defaults where the kind
    sees no model."""
    return model_section(cast(_OnModel, sliced).model if "model" in kind.keys else None)


def placed(kind: StageKind, sliced: object, device: str) -> object:
    """``kind``'s typed slice with its model on ``device``: placement travels as a resource, not in
    the stage's id, so the plan's slice does not hold it."""
    if "model" not in kind.keys:
        return sliced
    model = dataclasses.replace(slice_model(kind, sliced), device=device)
    return dataclasses.replace(cast("DataclassInstance", sliced), model=model)
