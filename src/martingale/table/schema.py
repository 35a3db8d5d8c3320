"""The JSON Schema of runs.json (``runs.schema.json`` beside this file, draft-07) and its checks:
``schema_errors`` lists every violation (jsonschema, the reference validator); ``check_rows`` is the
fast guard the table runs before writing (fastjsonschema compiles the schema to Python)."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Callable

from ..core.jsonvalue import Json, JsonObject
from ..metrics import table_columns


def runs_schema() -> JsonObject:
    """runs.schema.json, the JSON schema every row is checked against, with each declared table
    metric (metrics.table_columns) and its CI among a row's ``metrics``."""
    return _schema(tuple(table_columns()))


@lru_cache(maxsize=4)
def _schema(extra: tuple[str, ...]) -> JsonObject:
    schema = json.loads(resources.files(__package__).joinpath("runs.schema.json").read_text(encoding="utf-8"))
    metrics = schema["definitions"]["run"]["properties"]["metrics"]["properties"]
    for key in extra:
        metrics[key] = metrics[f"{key}_ci"] = {"$ref": "#/definitions/metric"}
    return schema


def schema_errors(rows: Json) -> list[str]:
    """Every violation as '<path>: <message>' (empty: the rows are valid)."""
    from jsonschema import Draft7Validator

    validator = Draft7Validator(runs_schema())
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(rows), key=lambda e: list(map(str, e.absolute_path)))]


@lru_cache(maxsize=4)
def _compiled(extra: tuple[str, ...]) -> Callable[[Json], object]:
    import fastjsonschema
    return fastjsonschema.compile(_schema(extra))


def check_rows(rows: Json) -> list[str]:
    """[] if the rows are valid; else every violation (the slow, complete listing)."""
    import fastjsonschema
    try:
        _compiled(tuple(table_columns()))(rows)
        return []
    except fastjsonschema.JsonSchemaException:
        return schema_errors(rows) or ["rows rejected by the schema"]
