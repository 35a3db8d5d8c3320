"""The world registry: each world module registers its class (``@world``) and ``worlds()`` finds
them all, the way the other extension points do."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..core.registry import Registry

if TYPE_CHECKING:
    from .synthetic import SyntheticWorld

WORLDS: Registry[WorldKind] = Registry("world")
# modules that declare no world (tests/test_imports.py checks)
HELPERS = ("questions", "traces", "forecastbench", "registry", "section")


@dataclass(frozen=True)
class WorldKind:
    """A registered world: its class (built from the ``world`` section), whether its questions come
    from ``world.questions_file`` (checked when a run is composed), and whether its split is one draw
    of training and held-out questions at once (a held-out redraw then changes the training
    questions too, and the training stages' ids)."""
    name: str
    cls: Callable[[object], SyntheticWorld]
    reads_file: bool = False
    one_split: bool = False


def world(name: str, reads_file: bool = False, one_split: bool = False) -> Callable[[type], type]:
    """Register the decorated class as world ``name`` (``world.name=<name>``)."""
    def register(cls: type) -> type:
        WORLDS.add(name, WorldKind(name, cls, reads_file, one_split))
        return cls
    return register


def worlds() -> Registry[WorldKind]:
    """Every registered world, after importing each world module of this package (once)."""
    return WORLDS.discover("martingale.world", [str(Path(__file__).parent)], HELPERS)
