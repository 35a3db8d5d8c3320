"""The plan: runs → chains of content-addressed stages (planner.py), what a build would cost
(cost.py) and what a run needs from the machine (needs.py). The planner's names are this package's.
"""
from __future__ import annotations

from .planner import (  # noqa: F401
    NOT_RUN_IDENTITY,
    PLAN_CACHE,
    PLANS_KEPT,
    RESOURCE_KEYS,
    Plan,
    RunStage,
    Stage,
    _backend_sections,
    _model_slice,
    _one_kind,
    _resources,
    backend_sections,
    compute_threads,
    conf_hash,
    config_hash,
    current_index,
    kind_cpus,
    plan_cache_path,
    plan_key,
    reader_section,
    run_identity,
    run_seeds,
    section_class,
    section_identity,
    sha256_json,
    stage_id,
    stage_slice,
    step_config,
    unused_sections,
)
