"""Stage pretrain: the embedded natural model, trained on calibrated traces, snap answers and reads.

The calibrated (Bayes) reasoner writes every trace; snap answers come from the gut functional;
reads teach the model to state the belief a partial trace has reached (the self judge's skill).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.jsonvalue import JsonObject
from ...model.load import build_tiny, describe, placement, save
from ...model.tokenizer import build_tokenizer
from ...store import files
from ...world import traces
from ..pretrain import PretrainConfig, PretrainSlice
from .common import log, make_world, seed_everything, supervised_loop


@dataclass(frozen=True)
class Mix:
    """A training mixture's shares: questions negated, snap answers, partial-trace reads (the rest
    reasoned traces). The pretrain section has the same three settings."""
    negation_fraction: float
    snap_fraction: float
    read_fraction: float


def mixture(world, rng: np.random.Generator, n: int, cfg: Mix | PretrainConfig, teacher: JsonObject | None = None
            ) -> list[tuple[str, str]]:
    """n (prompt, completion) pairs in ``cfg``'s shares (a Mix, or the pretrain section): reasoned
    traces, snap answers and partial-trace reads, written
    by the calibrated reasoner, or by ``teacher`` (distill.teacher_traits: traces.reasoned's
    agree/disagree/jitter/shift/sharpen, and snap_shift for its gut answers)."""
    teacher = dict(teacher or {})
    snap_shift = float(teacher.pop("snap_shift", 0.0))
    questions = world.sample(n, rng, "pt")
    pairs = []
    for q in questions:
        if rng.random() < cfg.negation_fraction:
            q = q.negation()
        u = rng.random()
        trace, _ = traces.reasoned(world, q, rng, **teacher)
        if u < cfg.snap_fraction:
            pairs.append((traces.prompt(q), traces.snap(world, q, rng, snap_shift)))
        elif u < cfg.snap_fraction + cfg.read_fraction:
            pairs.append(traces.read(q, trace, int(rng.integers(0, world.n_clues + 1)), world.unit))
        else:
            pairs.append((traces.prompt(q), trace))
    return pairs




def teacher_traits(p: PretrainConfig, unit: float) -> JsonObject | None:
    """The natural base's teacher for mixture: None (the calibrated reasoner) or the miscalibrated
    one's lean, sharpening and misreads (``pretrain.teacher``), its gut answers leaning as its traces."""
    if p.teacher == "calibrated":
        return None
    return {"shift": int(round(p.yes_shift / unit)), "sharpen": p.sharpen,
            "misread": p.misread, "snap_shift": p.yes_shift}


def run(cfg: PretrainSlice, out_dir: Path) -> None:
    """cfg: world, model, pretrain → out_dir/model (HF folder) and stage.json."""


    p = cfg.pretrain
    seed_everything(p.seed)
    world = make_world(cfg.world)
    tokenizer = build_tokenizer(traces.vocabulary(world.n_types))
    device, dtype = placement(cfg.model)
    model = build_tiny(cfg.model, tokenizer)
    model.to(device=device, dtype=dtype)   # type: ignore[call-arg]  # transformers types its wrapped Module.to with self twice
    rng = np.random.default_rng([p.seed, 7])
    t0 = time.time()
    history: list[dict] = []

    def on_step(step: int, loss: float) -> None:
        if step % 100 == 0 or step == p.steps - 1:
            log.info("pretrain step %d loss %.4f (%.0fs)", step, loss, time.time() - t0)
            history.append({"step": step, "loss": round(loss, 6)})

    teacher = teacher_traits(p, world.unit)
    final = supervised_loop(model, tokenizer, lambda s: mixture(world, rng, p.batch_size, p, teacher),
                            steps=p.steps, lr=p.lr, warmup=p.warmup,
                            on_step=on_step)
    with files.atomic_dir(out_dir) as tmp:
        save(model, tokenizer, tmp)
        files.write_json(tmp / "stage.json", {"kind": "pretrain", **describe(model), "final_loss": round(final, 6),
                                           "parameters": sum(x.numel() for x in model.parameters()),
                                           "history": history})
