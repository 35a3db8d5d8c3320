"""Stage kind train (s1, s2 …): policy gradient over the model's own traces, LoRA, a KL anchor to the
start model (the body: stages/body/train.py)."""
from __future__ import annotations

from . import declare

TRAIN = declare("train", "step", keys=("world", "model", "elicit", "prompts"), inputs=("start_model", "judge_model"),
                per_seed=True, serves=True, trains=True, ranked=True)
