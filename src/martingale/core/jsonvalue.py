"""The type of a value parsed from JSON or YAML: ``Any`` until a reader checks its shape (a
schema, a dataclass, an isinstance), named so that each use says where the value came from."""
from __future__ import annotations

from typing import Any, TypeAlias

Json: TypeAlias = Any
JsonObject: TypeAlias = dict[str, Json]
