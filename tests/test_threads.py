"""A stage job runs on the threads Snakemake gives it: torch's pool, BLAS/OpenMP and rayon."""
from __future__ import annotations

import torch

from martingale.core.threads import THREAD_VARS, use_threads


def test_a_job_given_one_thread_runs_torch_and_every_pool_on_one(monkeypatch):
    before = torch.get_num_threads()
    for var in THREAD_VARS:
        monkeypatch.setenv(var, "8")
    torch.set_num_threads(2)
    try:
        use_threads(1)
        assert torch.get_num_threads() == 1
        import os
        assert {var: os.environ[var] for var in THREAD_VARS} == dict.fromkeys(THREAD_VARS, "1")
    finally:
        torch.set_num_threads(before)


def test_a_training_stage_computes_with_its_own_count_even_where_snakemake_gives_fewer():
    from martingale.jobs.smk import compute_threads
    from martingale.model.section import model_section
    assert compute_threads(model_section({"threads": 2}), given=1) == 2     # --cores 1: same bytes
    assert compute_threads(model_section({"name": "tiny"}), given=1) == 1    # an eval takes what it is given
    assert compute_threads(model_section(None), given=2) == 2               # a stage with no model
