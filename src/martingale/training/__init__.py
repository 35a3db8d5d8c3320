"""What the training stages share (train, instructor): the LoRA policy, the policy-gradient loss, the
progress lines, checkpoints a killed stage resumes from, the ranks they take their steps on.
Imported by stage bodies (and, for ``ranks_of``, by the plan: this file imports only the model's
section, no torch)."""

from ..model.section import ModelLike, model_section


def ranks_of(model: ModelLike) -> tuple[int, str, int]:
    """(ranks, strategy, nodes) of a model section's ``distributed`` (typed, or its keys); its
    defaults, (1, "ddp", 1), where it has none (a stage's slice leaves it out at one rank)."""
    d = model_section(model).distributed
    return d.ranks, d.strategy, d.nodes
