"""Bench: RL-stage throughput (completions/s) of our policy-gradient stage vs TRL's GRPOTrainer.

Same tiny model (an embedded pretrain at bench scale), same LoRA, same batch (8 questions × 4
generations), same completion length, same Brier reward on the stated P, both on this CPU, run
side by side in one process. Prints each throughput and the ratio (ours / TRL; goal ≥ 1.0).
Usage: python bench/rl_throughput.py [--steps 20] [--model results/_store/pretrain/<id>]

``--smollm2``: the same comparison on a real chat model, SmolLM2-135M-Instruct (`make smollm2`;
conf/model/smollm2_135m.yaml), with the composed config of the run ``smollm2``: the same LoRA on
both (r 8, alpha 16, q/k/v/o), 4 questions × 2 generations a step, 48 completion tokens at most,
temperature 0.7, lr 1e-3 and KL β 0.1 (its s1 stage), seed 0, on the CPU, fp32. The prompts are the
log's reasoned prompt through the chat template (beliefs.prompts.Prompts, conf/prompts/log.yaml) on
the run's ForecastBench questions (stages.common.make_world), and only the **shortest** of them:
the 36 run 131–1,462 tokens, so the bench sorts them by token length and takes the 4·steps
shortest (steps ≤ 9; the default 2 steps: the 8 shortest, 131–282 tokens), which keeps it to
minutes. The reward is Brier on the stated P (reward B), read verbally on both (TRL's reward
function sees only the text: parse_p on each completion); ours runs samemode with the trace reader
(no extra model call, one sample per completion as TRL's), and is timed a second time with
elicit.read=forced (P from the next-token distribution after "P = 0.": one more forward pass per
completion, printed on a third line). Rates are over the training steps only (ours: the stage's
per-step times, sampling + reward + loss + update; TRL: on_step_begin → on_step_end), model
loading, the merge and the save left out (their wall times are printed on a line of their own).
Our loss runs in rows of the run's model.loss_batch (2: gradients accumulated), TRL's in one batch
of 8; ``--loss-batch 0`` runs ours in one batch too.
Usage: python bench/rl_throughput.py --smollm2 [--steps 2] [--loss-batch N] [--model models/SmolLM2-135M-Instruct]
"""
from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from martingale.beliefs.parse import parse_p
from martingale.config.schema import Config
from martingale.config.slices import stage_config
from martingale.stages import kinds
from martingale.stages.body import pretrain, train
from martingale.training import progress
from martingale.world import traces


def typed(kind: str, cfg: dict):
    """A body's config as a job hands it over: the slice typed (config/slices.py)."""
    return stage_config(kinds()[kind], cfg)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=None, help="training steps (default 20; --smollm2: 2)")
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--smollm2", action="store_true",
                    help="SmolLM2-135M-Instruct on the run smollm2's questions and prompts (see the docstring)")
    ap.add_argument("--loss-batch", type=int, default=None,
                    help="--smollm2: our model.loss_batch (default: the run's; 0 = the 8 rows at once, as TRL)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(2)
    if args.smollm2:
        smollm2(2 if args.steps is None else args.steps, args.model, args.loss_batch)
        return
    args.steps = 20 if args.steps is None else args.steps
    cfg = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)
    B, G = 8, 4
    cfg["world"]["n_train"] = B * args.steps
    work = Path(tempfile.mkdtemp(prefix="rlbench-"))
    model_dir = args.model
    if model_dir is None:
        model_dir = work / "pretrain"
        pretrain.run(typed("pretrain", {"world": cfg["world"], "model": cfg["model"],
                                        "pretrain": {**cfg["pretrain"], "steps": 150}}), model_dir)
    stage = {**cfg["stages"]["s1"], "reward": "B", "balance": False, "batch_questions": B,
             "generations": G, "kl_beta": 0.04, "lr": 1e-3}
    elicit = {"mode": "samemode", "judge": "trace", "cut": 0.5}

    t0 = time.perf_counter()
    train.run(typed("train", {"world": cfg["world"], "model": cfg["model"], "elicit": elicit, "stage": stage,
                              "seed": 0}), model_dir, model_dir, work / "ours")
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


REPO = Path(__file__).resolve().parents[1]
SMOL_B, SMOL_G, SMOL_TOKENS = 4, 2, 48      # questions a step, generations each, completion tokens


def smollm2_setup(steps: int, model_path: Path | None, work: Path, loss_batch: int | None):
    """(config slices for the train stage, model folder, the questions, their reasoned prompts):
    the run smollm2's composed config, its world shrunk to the 4·steps questions whose reasoned
    chat prompts are the shortest, written to a questions file of their own (every line marked
    train) so the train stage's make_world reads exactly those."""
    import json

    from transformers import AutoTokenizer

    from martingale.beliefs.prompts import Prompts
    from martingale.config.runs import RunTree
    from martingale.stages.body.common import make_world
    cfg = RunTree.load(REPO / "conf").resolved_config("smollm2")
    model_cfg = {**cfg["model"], "device": "cpu", "backend": "hf"}   # TRL runs with use_cpu
    if loss_batch is not None:
        model_cfg["loss_batch"] = loss_batch
    folder = model_path or REPO / model_cfg["path"]
    if not (folder / "config.json").is_file():
        raise SystemExit(f"rl_throughput --smollm2: no model at {folder}: `make smollm2` fetches it")
    prompts_cfg = {**cfg["prompts"], "max_new_tokens": SMOL_TOKENS}
    world_cfg = {**cfg["world"], "questions_file": str(REPO / cfg["world"]["questions_file"])}
    everything = make_world(world_cfg).questions        # the file's questions (world=jsonl)
    need = SMOL_B * steps
    if not 1 <= steps or need > len(everything):
        raise SystemExit(f"rl_throughput --smollm2: --steps {steps}: 1 to {len(everything) // SMOL_B} "
                         f"({len(everything)} questions, {SMOL_B} a step, each once)")
    all_q, _ = make_world({**world_cfg, "n_train": len(everything), "n_heldout": 0}).splits()
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    ask = Prompts(prompts_cfg, tok)
    length = {q.qid: len(tok(ask.reasoned(q), add_special_tokens=False)["input_ids"]) for q in all_q}
    chosen = set(sorted(length, key=lambda qid: (length[qid], qid))[:need])
    lines = [json.loads(line) for line in Path(world_cfg["questions_file"]).read_text().splitlines() if line.strip()]
    qfile = work / "questions.jsonl"
    qfile.write_text("".join(json.dumps({**row, "split": "train"}) + "\n" for row in lines if row["id"] in chosen))
    world_cfg = {**world_cfg, "questions_file": str(qfile), "n_train": need, "n_heldout": 0}
    questions, _ = make_world(world_cfg).splits()
    prompts = [ask.reasoned(q) for q in questions]
    stage = {**cfg["stages"]["s1"], "reward": "B", "balance": False, "filter": None, "epochs": 1,
             "batch_questions": SMOL_B, "generations": SMOL_G, "lora_r": 8, "checkpoint_every": 0}
    slices = {"world": world_cfg, "model": model_cfg, "prompts": prompts_cfg, "judge": cfg["judge"],
              "stage": stage, "seed": 0}
    return slices, folder, questions, prompts, [length[q.qid] for q in questions]


def time_ours(slices: dict, folder: Path, out: Path, read: str) -> tuple[float, float, float, list[float]]:
    """The train stage (train.run) on SmolLM2, elicit read ``read``: (seconds in its steps, wall
    seconds of the whole call, completion tokens sampled, each step's parse rate of the stated P).
    The steps' times are the ones the stage reports for its progress line (progress.report_step)."""
    from martingale.stages.body import train
    steps: list[tuple[float, int, float]] = []
    report = progress.report_step

    def record(name, unit, index, pace, row, tokens, seconds, *a, **kw):
        steps.append((seconds, tokens, row["parse_rate"]))
        return report(name, unit, index, pace, row, tokens, seconds, *a, **kw)

    elicit = {"mode": "samemode", "judge": "trace", "judge_model": "base", "cut": 0.5, "read": read}
    progress.report_step = record
    try:
        t0 = time.perf_counter()
        train.run(typed("train", {**slices, "elicit": elicit}), folder, folder, out)
        wall = time.perf_counter() - t0
    finally:
        progress.report_step = report
    return sum(s for s, _, _ in steps), wall, sum(t for _, t, _ in steps), [r for _, _, r in steps]


def smollm2(steps: int, model_path: Path | None, loss_batch: int | None) -> None:
    import shutil

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer
    hf_logging.disable_progress_bar()
    logging.getLogger("trl").setLevel(logging.ERROR)   # "all reward functions returned None": counted below
    work = Path(tempfile.mkdtemp(prefix="rlbench-smollm2-"))
    try:
        slices, folder, questions, prompts, lengths = smollm2_setup(steps, model_path, work, loss_batch)
        stage, n = slices["stage"], steps * SMOL_B * SMOL_G
        ours_s, ours_wall, ours_tok, ours_parsed = time_ours(slices, folder, work / "ours-verbal", "verbal")
        forced_s, forced_wall, forced_tok, forced_parsed = time_ours(slices, folder, work / "ours-forced", "forced")
        assert len(ours_parsed) == len(forced_parsed) == steps, (ours_parsed, forced_parsed, steps)
        shutil.rmtree(work / "ours-verbal", ignore_errors=True)   # two merged 538 MB models
        shutil.rmtree(work / "ours-forced", ignore_errors=True)

        torch.use_deterministic_algorithms(False)   # the train stage's seed_everything turned it on
        trl_tokens: list[int] = []
        trl_parsed: list[bool] = []

        def brier_reward(prompts, completions, y, completion_ids=None, **kw):
            trl_tokens.extend(len(c) for c in completion_ids or [])
            out = []
            for c, yy in zip(completions, y):
                p = parse_p(c)
                trl_parsed.append(p is not None)
                out.append(None if p is None else -(yy - p) ** 2)
            return out

        class StepClock(TrainerCallback):
            """Seconds inside each optimizer step: generation, reward, loss, backward, update."""
            def __init__(self):
                self.seconds: list[float] = []

            def on_step_begin(self, args, state, control, **kw):
                self.t0 = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                self.seconds.append(time.perf_counter() - self.t0)

        t0 = time.perf_counter()
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        tok.padding_side = "left"
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
        data = Dataset.from_dict({"prompt": prompts, "y": [float(q.y) for q in questions]})
        gcfg = GRPOConfig(output_dir=str(work / "trl"), per_device_train_batch_size=SMOL_B * SMOL_G,
                          num_generations=SMOL_G, steps_per_generation=1, max_completion_length=SMOL_TOKENS,
                          temperature=float(stage["temperature"]), top_k=0, top_p=1.0,
                          learning_rate=float(stage["lr"]), beta=float(stage["kl_beta"]), use_vllm=False,
                          use_cpu=True, bf16=False, gradient_checkpointing=False, max_steps=steps,
                          logging_steps=10**6, report_to=[], save_strategy="no", seed=0, disable_tqdm=True)
        clock = StepClock()
        trainer = GRPOTrainer(model=model, reward_funcs=[brier_reward], args=gcfg, train_dataset=data,
                              processing_class=tok, callbacks=[clock],
                              peft_config=LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                                     target_modules=list(slices["model"]["lora_targets"])))
        trainer.train()
        trl_wall = time.perf_counter() - t0
        trl_s = sum(clock.seconds)
        assert len(clock.seconds) == steps, (clock.seconds, steps)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ours, forced, trl = n / ours_s, n / forced_s, n / trl_s
    where = folder.relative_to(REPO) if folder.resolve().is_relative_to(REPO) else folder
    print(f"SmolLM2-135M-Instruct ({where}), CPU fp32, {torch.get_num_threads()} threads: {steps} steps × "
          f"{SMOL_B} questions × {SMOL_G} generations = {n} completions each, ≤ {SMOL_TOKENS} tokens, "
          f"T {stage['temperature']}, LoRA r 8 q/k/v/o, lr {stage['lr']}, KL β {stage['kl_beta']}; "
          f"the {len(prompts)} shortest reasoned chat prompts ({min(lengths)}–{max(lengths)} tokens); our loss in "
          f"rows of model.loss_batch {slices['model'].get('loss_batch') or 'all'}, TRL's in one batch of {SMOL_B * SMOL_G}")
    print(f"completion tokens sampled: ours {ours_tok:.0f} (forced {forced_tok:.0f}), TRL {sum(trl_tokens)}; "
          f"verbal P parsed: ours {sum(ours_parsed) / steps:.0%}, TRL {sum(trl_parsed) / max(1, len(trl_parsed)):.0%} "
          f"(forced read: {sum(forced_parsed) / steps:.0%}); an unparsed P: ours A = -clip, TRL reward None (→ 0)")
    print(f"wall incl. load/merge/save: ours {ours_wall:.1f} s, ours forced {forced_wall:.1f} s, "
          f"TRL (load + trainer + train) {trl_wall:.1f} s; rates below: the training steps only")
    print(f"ours (martingale.stages.train): {ours:8.2f} completions/s  (elicit.read=verbal)")
    print(f"TRL GRPOTrainer               : {trl:8.2f} completions/s")
    print(f"ratio ours/TRL                : {ours / trl:8.2f}  (goal >= 1.0)")
    print(f"ours, elicit.read=forced      : {forced:8.2f} completions/s  (the forced read: one more "
          f"forward pass per completion, after 'P = 0.')")


if __name__ == "__main__":
    main()
