"""A stage's typed slice: the config the plan hashes for a stage (plan.stage_slice, plain JSON)
rebuilt as the schema's dataclasses, so a stage body reads typed attributes (``cfg.stage.lr`` is a
float, ``cfg.seed`` an int) with no string lookups or casts. A setting the slice leaves out (not
in the stage's id) holds its declared default. Each section also answers ``sec["key"]`` and
``sec.get("key")``, as the model, world and belief code that takes a section reads it.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import Any, Optional

from ..core.registry import epoch
from ..stages import StageKind
from . import schema


class SectionView:
    """A section's settings by key as well as by attribute (a read-only mapping of its fields)."""

    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__:          # type: ignore[attr-defined]
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.__dataclass_fields__ else default   # type: ignore[attr-defined]

    def keys(self) -> typing.KeysView[str]:
        return self.__dataclass_fields__.keys()           # type: ignore[attr-defined]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in self.keys()]

    def __iter__(self) -> typing.Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        return key in self.keys()


Mapping.register(SectionView)     # json writers and mapping checks take a section as the mapping it is

@functools.lru_cache(maxsize=None)
def _view(cls: type) -> type:
    """``cls`` with SectionView's key access (a subclass: the same fields, defaults and checks)."""
    view = type(cls.__name__, (cls, SectionView), {"__module__": cls.__module__, "__doc__": cls.__doc__})
    return dataclasses.dataclass(view)


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_float(hint: Any) -> bool:
    return hint is float or (typing.get_origin(hint) is typing.Union and float in typing.get_args(hint))


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default   # type: ignore[misc]


def typed(cls: type, value: Any, where: str = "") -> Any:
    """``value`` (a mapping, or an instance of ``cls``) as ``cls``'s view: each key of its type, a
    key it lacks at its default; a key ``cls`` does not declare is an error naming it."""
    if isinstance(value, SectionView):
        return value
    given = value if isinstance(value, Mapping) else {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ValueError(f"{where or cls.__name__}: unknown key {unknown[0]!r}")
    hints = _hints(cls)
    out = {}
    for name, f in fields.items():
        v = given[name] if name in given else _default(f)
        inner = schema.dataclass_in(hints[name])
        if inner is not None and v is not None and (isinstance(v, Mapping) or dataclasses.is_dataclass(v)):
            v = typed(inner, v, f"{where}.{name}" if where else name)
        elif _is_float(hints[name]) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        out[name] = v
    return _view(cls)(**out)


@functools.lru_cache(maxsize=None)
def _model_slice_class(model: type) -> type:
    """The model section as a slice holds it: plus ``threads``, which the plan derives for a kind
    whose bytes depend on it (plan.compute_threads) and hashes with the model."""
    return dataclasses.make_dataclass(model.__name__, [("threads", Optional[int], dataclasses.field(default=None))],
                                      bases=(model,))


def slice_class(kind: StageKind) -> type:
    """The dataclass of a ``kind``'s slice: a field per key it sees (each its schema section), the
    reader sections it may see, ``stage`` for a model stage and ``seed`` for a per-seed kind."""
    return _slice_class(kind, epoch())


@functools.lru_cache(maxsize=None)
def _slice_class(kind: StageKind, registries: int) -> type:
    config = {f.name: f for f in dataclasses.fields(schema.config_class())}
    hints = {**_hints(schema.config_class()), "model": _model_slice_class(schema.model_class())}
    keys = list(kind.keys)
    if "elicit" in keys:
        keys += [d.path for d in schema.declared_sections() if d.by == "reader" and d.path not in keys]
    missing = [k for k in keys if k not in config]
    if missing:
        raise ValueError(f"stage kind {kind.name}: key {missing[0]!r} is no config section")
    fields: list[tuple[str, Any, Any]] = [(k, hints[k], dataclasses.field(default=None)) for k in keys]
    if kind.place == "step":
        fields.append(("stage", schema.StageConfig, dataclasses.field(default=None)))
    if kind.per_seed:
        fields.append(("seed", Optional[int], dataclasses.field(default=None)))
    name = "".join(part.title() for part in kind.name.split("_")) + "Slice"
    return dataclasses.make_dataclass(name, fields)


def stage_config(kind: StageKind, cfg: Any) -> Any:
    """``cfg``, a stage's slice as the plan made it (or already typed), as its kind's typed slice: a
    key the plan left out (``prompts`` where the prompt set is the embedded one) at its default."""
    if isinstance(cfg, SectionView):
        return cfg
    given = {k: v for k, v in cfg.items() if v is not None}
    for key in (*kind.keys, *(("stage",) if kind.place == "step" else ())):
        given.setdefault(key, {})
    return typed(slice_class(kind), given, f"{kind.name} stage config")
