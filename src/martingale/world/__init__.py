"""Question sources, one file each, registered where they are defined (``@world``): ``synthetic``,
the embedded world with an exact Bayes oracle; ``jsonl``, a questions file's questions over the same
clue table. A new world is a class with ``splits()`` (train, held-out) and the oracle's ``bayes``,
in one module here; ``world.name`` then allows it and the stages open it (``open_world``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .registry import HELPERS, WORLDS, WorldKind, world, worlds
from .section import WorldConfig, world_section

if TYPE_CHECKING:
    from .synthetic import SyntheticWorld

__all__ = ["HELPERS", "WORLDS", "WorldConfig", "WorldKind", "open_world", "world", "world_section", "worlds"]


def open_world(cfg: object) -> SyntheticWorld:
    """The world a ``world`` section names (a section without a name: the synthetic clue table)."""
    section = world_section(cfg)
    every = worlds()
    if section.name not in every:
        raise KeyError(f"world={section.name!r}: no such world ({', '.join(every)})")
    return every[section.name].cls(section)
