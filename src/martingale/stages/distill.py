"""Stage distill: D, the start model made biased on purpose by LoRA SFT on confirmation-biased traces.

The teacher over-weights clues that agree with its running lean (``agree_weight``) and
under-weights those against it (``disagree_weight``), with per-step jitter so D stays stochastic.
The adapter also covers the embeddings and the output head: biased steps write totals the
calibrated data rarely produced. It is merged, so later stages train on top of D.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from peft import LoraConfig, get_peft_model

from .. import io
from ..model.load import load, save
from .common import log, make_world, seed_everything, supervised_loop
from .pretrain import mixture


def run(cfg: dict[str, Any], base_model: Path, out_dir: Path) -> None:
    d = cfg["distill"]
    seed_everything(int(d["seed"]))
    world = make_world(cfg["world"])
    model, tok = load(base_model, cfg["model"])
    targets = list(cfg["model"]["lora_targets"]) + ["gate_proj", "up_proj", "down_proj", "lm_head", "embed_tokens"]
    peft_model = get_peft_model(model, LoraConfig(r=int(d["lora_r"]), lora_alpha=2 * int(d["lora_r"]),
                                                  lora_dropout=0.0, target_modules=sorted(set(targets))))
    rng = np.random.default_rng([int(d["seed"]), 13])
    mix = {"negation_fraction": 0.25, "snap_fraction": 0.1, "read_fraction": 0.15}
    t0 = time.time()
    history: list[dict] = []

    def on_step(step: int, loss: float) -> None:
        if step % 50 == 0 or step == d["steps"] - 1:
            log.info("distill step %d loss %.4f (%.0fs)", step, loss, time.time() - t0)
            history.append({"step": step, "loss": round(loss, 6)})

    final = supervised_loop(
        peft_model, tok,
        lambda s: mixture(world, rng, int(d["batch_size"]), mix, float(d["agree_weight"]),
                          float(d["disagree_weight"]), float(d["weight_jitter"])),
        steps=int(d["steps"]), lr=float(d["lr"]), warmup=20, on_step=on_step)
    merged = peft_model.merge_and_unload()
    with io.atomic_dir(out_dir) as tmp:
        save(merged, tok, tmp)
        io.write_json(tmp / "stage.json", {"kind": "distill", "final_loss": round(final, 6),
                                           "history": history})
