"""The JSON Schema of runs.json (``runs.schema.json`` beside this file) and its check."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any


@lru_cache(maxsize=1)
def runs_schema() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("runs.schema.json").read_text(encoding="utf-8"))


def schema_errors(rows: Any) -> list[str]:
    """Every violation as '<path>: <message>' (empty: the rows are valid)."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(runs_schema())
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(rows), key=lambda e: list(map(str, e.absolute_path)))]
