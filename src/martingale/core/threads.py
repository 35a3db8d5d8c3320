"""A job's CPU threads (smk.compute_threads: what Snakemake gave it, or a training stage's own
count), applied to every pool that would otherwise take all cores."""
from __future__ import annotations

import logging
import os

# What a job's `threads` sets: BLAS/OpenMP pools (as Snakemake's shell jobs export them), the HF
# tokenizers' rayon pool, and torch's intra-op pool. The vLLM server drops these (model/vllm.py).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "GOTO_NUM_THREADS", "RAYON_NUM_THREADS")


def use_threads(threads: int) -> None:
    """Run this job on ``threads`` CPU threads, so two 1-thread jobs share 2 cores instead of four
    threads fighting over them."""
    threads = max(1, int(threads))
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    import torch
    torch.set_num_threads(threads)
    logging.getLogger("martingale").info("job threads: %d (torch %d)", threads, torch.get_num_threads())
