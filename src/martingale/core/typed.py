"""A section typed: a mapping (a composed config's section, a stage slice's JSON) rebuilt as the
schema's dataclass, so code reads typed attributes (``sec.lr`` a float) with no string lookups
or casts. A key the mapping lacks holds its declared default; a key the dataclass does not declare
is an error naming it. Below every layer, so a world or a reader types its own section."""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Optional, TypeVar

from .jsonvalue import Json, JsonObject

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")


def dataclass_in(annotation: object) -> Optional[type]:
    """The dataclass an annotation holds (``Optional[EpisodePromptsConfig]`` too), else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


_HINTS: dict[type, dict[str, object]] = {}


def type_hints(cls: type) -> dict[str, object]:
    """A dataclass's field types, resolved (its annotations are strings), once per class."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _is_float(hint: object) -> bool:
    return hint is float or (typing.get_origin(hint) is typing.Union and float in typing.get_args(hint))


def default_of(f: dataclasses.Field[Json]) -> Json:
    """A field's declared default (its factory's value for a list or a section)."""
    if f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def typed(cls: type[T], value: object, where: str = "") -> T:
    """``value`` (a mapping, or a dataclass instance) as an instance of ``cls``: each key of its
    type, a key it lacks at its default; a key ``cls`` does not declare is an error naming it. An
    instance of ``cls`` already is returned as it is."""
    if isinstance(value, cls):
        return value
    given = value if isinstance(value, Mapping) else fields_of(value)
    fields = {f.name: f for f in dataclasses.fields(typing.cast("type[DataclassInstance]", cls))}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ValueError(f"{where or cls.__name__}: unknown key {unknown[0]!r}")
    hints = type_hints(cls)
    out: dict[str, object] = {}
    for name, f in fields.items():
        v = given[name] if name in given else default_of(f)
        inner = dataclass_in(hints[name])
        if inner is not None and v is not None and (isinstance(v, Mapping) or dataclasses.is_dataclass(v)):
            v = typed(inner, v, f"{where}.{name}" if where else name)
        elif _is_float(hints[name]) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        out[name] = v
    return cls(**out)


def section_of(cfg: object, key: str) -> Json:
    """The section ``key`` of a config, whether a mapping (a composed config) or typed (a stage's
    slice); None where it has none."""
    return cfg.get(key) if isinstance(cfg, Mapping) else getattr(cfg, key, None)


def fields_of(section: object) -> JsonObject:
    """A section's settings by name, one level deep: a typed section's fields, or the mapping's
    keys (a reward binds its parameters from either)."""
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        return {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    if isinstance(section, Mapping):
        return dict(section)
    raise TypeError(f"not a section: {section!r}")
