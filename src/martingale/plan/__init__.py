"""The plan: runs → chains of content-addressed stages (planner.py), what of a config each stage's
id hashes (identity.py), what it asks the scheduler for (resources.py), what a build would cost
(cost.py) and what a run needs from the machine (needs.py). The planner's names are this package's.
"""
from __future__ import annotations

from .identity import (  # noqa: F401
    NOT_RUN_IDENTITY,
    _backend_sections,
    _model_slice,
    backend_sections,
    config_hash,
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
from .planner import (  # noqa: F401
    PLAN_CACHE,
    PLANS_KEPT,
    Plan,
    RunStage,
    Stage,
    _one_kind,
    conf_hash,
    current_index,
    plan_cache_path,
    plan_key,
)
from .resources import RESOURCE_KEYS, _resources, compute_threads, kind_cpus  # noqa: F401
