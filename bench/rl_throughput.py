"""Bench: RL-stage throughput (completions/s) of our policy-gradient stage vs TRL's GRPOTrainer.

Same tiny model (an embedded pretrain at bench scale), same LoRA, same batch (8 questions × 4
generations), same completion length, same Brier reward on the stated P, both on this CPU, run
side by side in one process. Prints each throughput and the ratio (ours / TRL; goal ≥ 1.0).
Usage: python bench/rl_throughput.py [--steps 20] [--model results/_store/pretrain/<id>]
"""
from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from martingale.beliefs.parse import parse_p
from martingale.config.schema import Config
from martingale.stages import pretrain, train
from martingale.world import traces


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--model", type=Path, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(2)
    cfg = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)
    B, G = 8, 4
    cfg["world"]["n_train"] = B * args.steps
    work = Path(tempfile.mkdtemp(prefix="rlbench-"))
    model_dir = args.model
    if model_dir is None:
        model_dir = work / "pretrain"
        pretrain.run({"world": cfg["world"], "model": cfg["model"],
                      "pretrain": {**cfg["pretrain"], "steps": 150}}, model_dir)
    stage = {**cfg["stages"]["s1"], "reward": "B", "balance": False, "batch_questions": B,
             "generations": G, "kl_beta": 0.04, "lr": 1e-3}
    elicit = {"mode": "samemode", "judge": "trace", "cut": 0.5}

    t0 = time.perf_counter()
    train.run({"world": cfg["world"], "model": cfg["model"], "elicit": elicit, "stage": stage,
               "seed": 0}, model_dir, model_dir, work / "ours")
    ours = args.steps * B * G / (time.perf_counter() - t0)

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from martingale.world.synthetic import SyntheticWorld
    world = SyntheticWorld(cfg["world"])
    qs, _ = world.splits()
    data = Dataset.from_dict({"prompt": [traces.prompt(q) + " think" for q in qs],
                              "y": [q.y for q in qs]})

    def brier_reward(prompts, completions, y, **kw):
        out = []
        for c, yy in zip(completions, y):
            p = parse_p(c)
            out.append(None if p is None else -(yy - p) ** 2)
        return out

    tok = AutoTokenizer.from_pretrained(model_dir / "model", local_files_only=True)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir / "model", local_files_only=True)
    gcfg = GRPOConfig(output_dir=str(work / "trl"), per_device_train_batch_size=B * G,
                      num_generations=G, steps_per_generation=1,
                      max_completion_length=4 * world.n_clues + 6, temperature=1.0,
                      learning_rate=1e-3, beta=0.04, use_vllm=False, use_cpu=True, bf16=False,
                      gradient_checkpointing=False, max_steps=args.steps, logging_steps=10**6,
                      report_to=[], save_strategy="no", seed=0, top_k=0, top_p=1.0)
    trainer = GRPOTrainer(model=model, reward_funcs=[brier_reward], args=gcfg, train_dataset=data,
                          processing_class=tok,
                          peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=cfg["model"]["lora_targets"]))
    t0 = time.perf_counter()
    trainer.train()
    trl = args.steps * B * G / (time.perf_counter() - t0)
    print(f"ours (martingale.stages.train): {ours:8.1f} completions/s")
    print(f"TRL GRPOTrainer               : {trl:8.1f} completions/s")
    print(f"ratio ours/TRL                : {ours / trl:8.2f}  (goal >= 1.0)")


if __name__ == "__main__":
    main()
