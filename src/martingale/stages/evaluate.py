"""Stage kind evaluate: a model stage read on the held-out questions, per seed: records and metrics
(the body: stages/body/evaluate.py)."""
from __future__ import annotations

from . import declare

EVALUATE = declare("evaluate", "measure", keys=("world", "model", "elicit", "eval", "prompts"),
                   inputs=("model", "judge_model"), per_seed=True, serves=True)
