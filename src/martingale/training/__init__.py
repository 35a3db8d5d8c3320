"""What the training stages share (train, instructor): the LoRA policy, the policy-gradient loss, the
progress lines, checkpoints a killed stage resumes from, the ranks they take their steps on.
Imported by stage bodies (and, for ``ranks_of``, by the plan: this file imports nothing)."""


def ranks_of(model: dict | None) -> tuple[int, str, int]:
    """(ranks, strategy, nodes) of a model config's ``distributed``; (1, "ddp", 1) where it has none
    (a stage's slice leaves it out at one rank)."""
    d = (model or {}).get("distributed") or {}
    return int(d.get("ranks", 1)), str(d.get("strategy", "ddp")), int(d.get("nodes", 1))
