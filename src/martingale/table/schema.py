"""The JSON Schema of runs.json (``runs.schema.json`` beside this file, draft-07) and its checks:
``schema_errors`` lists every violation (jsonschema, the reference validator); ``check_rows`` is the
fast guard the table runs before writing (fastjsonschema compiles the schema to Python)."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Callable


@lru_cache(maxsize=1)
def runs_schema() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("runs.schema.json").read_text(encoding="utf-8"))


def schema_errors(rows: Any) -> list[str]:
    """Every violation as '<path>: <message>' (empty: the rows are valid)."""
    from jsonschema import Draft7Validator

    validator = Draft7Validator(runs_schema())
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(rows), key=lambda e: list(map(str, e.absolute_path)))]


@lru_cache(maxsize=1)
def _compiled() -> Callable[[Any], Any]:
    import fastjsonschema
    return fastjsonschema.compile(runs_schema())


def check_rows(rows: Any) -> list[str]:
    """[] if the rows are valid; else every violation (the slow, complete listing)."""
    import fastjsonschema
    try:
        _compiled()(rows)
        return []
    except fastjsonschema.JsonSchemaException:
        return schema_errors(rows) or ["rows rejected by the schema"]
