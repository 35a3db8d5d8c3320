"""A stage kind with its own section, in one file: a step that shrinks every weight of its start
model by ``anneal.cooling`` per mille (a real, if simple, model stage)."""
from dataclasses import dataclass

from martingale.core.settings import OPEN_UNIT, Section, setting
from martingale.stages import stage_kind


@dataclass
class AnnealConfig:
    """The anneal kind's section (``anneal``)."""
    cooling: float = setting(0.9, OPEN_UNIT, "per mille of every weight taken off")


@stage_kind("anneal", "step", keys=("world", "model"), inputs=("start_model",), per_seed=True,
            section=Section("anneal", AnnealConfig))
def run(cfg, start_model, out_dir):
    """The start model with every weight × (1 − cooling/1000), saved as this stage's model."""
    import torch  # a one-file kind: planning imports this module, so torch waits for the job

    from martingale.model.load import load, save
    from martingale.store import files
    model, tok = load(start_model, cfg.model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 - cfg.anneal.cooling / 1000)
    with files.atomic_dir(out_dir) as tmp:
        save(model, tok, tmp)
        files.write_json(tmp / "stage.json", {"kind": "anneal", "cooling": cfg.anneal.cooling})
