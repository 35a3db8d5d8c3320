"""Where stages live: ``results/_store/<kind>/<id>/`` and the plan's index of them
(``results/_store/index.json``), for the plan that writes the index and for whatever reads it
(tracking, the table) without planning."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from .files import read_optional
from .plan_index import PlanIndex

STORE = "results/_store"
ID_PATTERN = "[0-9a-f]{12}"


def stage_dir(stage_id: str) -> str:
    """``results/_store/<kind>/<id>`` (relative to the project root)."""
    return f"{STORE}/{stage_id.split('-', 1)[0]}/{stage_id}"


def read_index(root: Path | str) -> Optional[PlanIndex]:
    """``results/_store/index.json`` if it is there, readable, and in this format; else None."""
    return PlanIndex.from_json(read_optional(Path(root) / STORE / "index.json"))
