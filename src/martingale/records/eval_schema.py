"""eval.json's contract: its JSON Schema (``eval.schema.json`` beside this file, draft-07), checked
on every write (aggregate) and in the tests. ``eval_errors`` lists every violation (jsonschema, the
reference validator); ``check_eval`` is the fast guard (fastjsonschema compiles the schema)."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Callable

from ..core.jsonvalue import Json, JsonObject


class EvalSchemaError(ValueError):
    """An eval.json that breaks its schema: str() is one line, the first violation's path and message."""


@lru_cache(maxsize=1)
def eval_schema() -> JsonObject:
    """eval.schema.json as a dict."""
    return json.loads(resources.files(__package__).joinpath("eval.schema.json").read_text(encoding="utf-8"))


def eval_errors(evals: Json) -> list[str]:
    """Every violation as '<path>: <message>' (empty: valid)."""
    from jsonschema import Draft7Validator

    validator = Draft7Validator(eval_schema())
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(evals), key=lambda e: list(map(str, e.absolute_path)))]


@lru_cache(maxsize=1)
def _compiled() -> Callable[[Json], object]:
    import fastjsonschema
    return fastjsonschema.compile(eval_schema())


def check_eval(evals: Json, where: str = "eval.json") -> None:
    """Raise EvalSchemaError naming ``where`` and the first violation, if ``evals`` breaks the schema."""
    import fastjsonschema
    try:
        _compiled()(evals)
    except fastjsonschema.JsonSchemaException as e:
        first = (eval_errors(evals) or [str(e)])[0]
        raise EvalSchemaError(f"{where}: {first[:300]}") from None
