"""Question sources, one file each, registered where they are defined (``@world``): ``synthetic``,
the embedded world with an exact Bayes oracle; ``jsonl``, a questions file's questions over the same
clue table. A new world is a class with ``splits()`` (train, held-out) and the oracle's ``bayes``,
in one module here; ``world.name`` then allows it and the stages open it (``open_world``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..core.registry import Registry

WORLDS: Registry = Registry("world")
HELPERS = ("questions", "traces", "forecastbench")   # modules of this package that declare no world


@dataclass(frozen=True)
class WorldKind:
    """A registered world: its class (built from the ``world`` section), whether its questions come
    from ``world.questions_file`` (checked when a run is composed), and whether its split is one draw
    of training and held-out questions at once (a held-out redraw then changes the training
    questions too, and the training stages' ids)."""
    name: str
    cls: Callable[[Any], Any]
    reads_file: bool = False
    one_split: bool = False


def world(name: str, reads_file: bool = False, one_split: bool = False) -> Callable[[type], type]:
    """Register the decorated class as world ``name`` (``world.name=<name>``)."""
    def register(cls: type) -> type:
        WORLDS.add(name, WorldKind(name, cls, reads_file, one_split))
        return cls
    return register


def worlds() -> Registry:
    """Every registered world, after importing each world module of this package (once)."""
    return WORLDS.discover(__name__, __path__, HELPERS)


def open_world(cfg: Any) -> Any:
    """The world a ``world`` section names (a section without a name: the synthetic clue table)."""
    name = cfg.get("name") or "synthetic"
    every = worlds()
    if name not in every:
        raise KeyError(f"world={name!r}: no such world ({', '.join(every)})")
    return every[name].cls(cfg)
