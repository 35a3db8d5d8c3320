"""A section's typed view: a mapping (a composed config's section, a stage slice's JSON) rebuilt as
the schema's dataclass, so code reads typed attributes (``sec.lr`` a float) with no string lookups
or casts. A key the mapping lacks holds its declared default; a key the dataclass does not declare
is an error naming it. Below every layer, so a world or a reader types its own section."""
from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import Any, Optional


def dataclass_in(annotation: Any) -> Optional[type]:
    """The dataclass an annotation holds (``Optional[EpisodePromptsConfig]`` too), else None."""
    if dataclasses.is_dataclass(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


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
def type_hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types, resolved (its annotations are strings), once per class."""
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
    hints = type_hints(cls)
    out = {}
    for name, f in fields.items():
        v = given[name] if name in given else _default(f)
        inner = dataclass_in(hints[name])
        if inner is not None and v is not None and (isinstance(v, Mapping) or dataclasses.is_dataclass(v)):
            v = typed(inner, v, f"{where}.{name}" if where else name)
        elif _is_float(hints[name]) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        out[name] = v
    return _view(cls)(**out)


def section_of(cfg: Any, key: str) -> Any:
    """The section ``key`` of a config, whether a mapping (a composed config) or typed (a stage's
    slice); None where it has none."""
    return cfg.get(key) if isinstance(cfg, Mapping) else getattr(cfg, key, None)
