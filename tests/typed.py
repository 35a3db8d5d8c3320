"""Configs as a stage job hands them to a stage body: its typed slice (config/slices.py), and a
section of one, from the plain dicts the tests write."""
import dataclasses
from typing import Any

from martingale.config import schema
from martingale.config.slices import slice_class, stage_config, typed
from martingale.plan import section_class
from martingale.stages import kinds


def typed_slice(kind: str, cfg: dict) -> Any:
    """``cfg``, a slice of stage kind ``kind`` or a whole config (its keys the kind does not see
    left out), typed as the job types it."""
    seen = {f.name for f in dataclasses.fields(slice_class(kinds()[kind]))}
    return stage_config(kinds()[kind], {k: v for k, v in cfg.items() if k in seen})


def typed_section(key: str, value: dict) -> Any:
    """``value`` as top-level section ``key`` (``stage``: a model stage's own config)."""
    cls = {"stage": schema.StageConfig, "model": schema.model_class()}.get(key) or section_class(key)
    return typed(cls, value, key)
