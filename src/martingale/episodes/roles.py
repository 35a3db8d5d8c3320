"""An episode role's model config: the run's ``model`` with ``simulate.<role>_model``'s keys
changed. Read at plan time (a role's needs) and by the episode stages."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass

from ..core.jsonvalue import JsonObject
from ..core.typed import section_of
from ..model.api_client import ApiModelConfig
from ..model.section import WHERE
from .section import simulate_section


def role_model(cfg: object, role: str) -> JsonObject:
    """A role's model config: the run's ``model`` with ``simulate.<role>_model``'s keys changed
    (nested sections merged key by key, as OmegaConf.merge does; both are composed already)."""
    over = getattr(simulate_section(section_of(cfg, "simulate")), f"{role}_model")
    model = section_of(cfg, "model")
    model = asdict(model) if is_dataclass(model) and not isinstance(model, type) else dict(model)
    base = {"api": asdict(ApiModelConfig()), **model}   # a stage's slice holds model.api only where used
    return {**merged(base, over or {}), WHERE: f"simulate.{role}_model.api"}


def merged(base: JsonObject, over: JsonObject) -> JsonObject:
    """``base`` with ``over``'s keys: mappings in both merged recursively, anything else replaced."""
    out = {k: copy.deepcopy(v) for k, v in base.items()}   # base may be a typed section: out is a dict
    for key, value in over.items():
        both = isinstance(out.get(key), Mapping) and isinstance(value, Mapping)
        out[key] = merged(out[key], value) if both else copy.deepcopy(value)
    return out


def same_model(a: JsonObject, b: JsonObject) -> bool:
    """Two roles' model configs name the same model (where each is named in messages aside)."""
    return {k: v for k, v in a.items() if k != WHERE} == {k: v for k, v in b.items() if k != WHERE}
