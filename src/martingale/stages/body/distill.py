"""Stage distill: D, the start model made biased on purpose by LoRA SFT on a biased teacher's traces.

``distill.teacher`` picks the bias (its section, ``DistillConfig``, is declared in stages/distill.py). ``drift`` (the
default, the research log's D: meanP ≫ base rate, same-mode MS ≈ 0) adds ``yes_drift`` nats toward yes at
every step on top of entrench's weights, so its lean grows along its trace. ``overconfident`` starts
every trace ``yes_shift`` nats toward yes and multiplies every step by ``sharpen``; its gut (snap)
answers lean yes as much. ``entrench`` (confirmation bias, MS > 0) over-weights clues that agree
with its running lean (``agree_weight``) and under-weights those against it (``disagree_weight``),
with per-step jitter so D stays stochastic. ``both`` does entrench and overconfident.
The adapter also covers the input embeddings (LoRA) and the output head (trained in full, see
``lora_config``): biased steps write totals the calibrated data rarely produced. It is merged, so
later stages train on top of D.

Trained with TRL's ``SFTTrainer`` on a prompt/completion dataset (loss on completion tokens only).
Two things keep TRL's preparation exact for our word-level tokenizer: a completion is stored with
a leading space, because TRL tokenises ``prompt + completion`` as one string (so the ids equal
those of ``" ".join`` of the two), and every completion already ends with the eos word ``end``, so
TRL appends no second eos; the tokenizer adds no bos (no post-processor).
"""
from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import cast

import datasets
import numpy as np
from datasets import Dataset
from peft import LoraConfig
from transformers import PrinterCallback, ProgressCallback, Trainer, TrainerCallback
from trl import SFTConfig, SFTTrainer

from ...core.errors import StageError
from ...core.jsonvalue import JsonObject
from ...model.load import describe, load, save
from ...model.section import ModelConfig
from ...store import files
from ...training import ranks
from ..distill import DistillConfig, DistillSlice
from .common import log, make_world, seed_everything
from .pretrain import Mix, mixture

MIX = Mix(negation_fraction=0.25, snap_fraction=0.1, read_fraction=0.15)
WARMUP = 20


def lora_config(d: DistillConfig, model_cfg: ModelConfig):
    """LoRA on attention, MLP and the input embeddings; the output head is trained in full.

    TRL 1.16's SFTTrainer raises a ValueError for a LoRA adapter on ``lm_head`` (its fused LM head
    multiplies by ``lm_head.weight`` directly, so such an adapter would never train), even though
    this stage computes the loss without the fused head. ``modules_to_save`` trains a copy of the
    head instead (vocabulary × hidden ≈ 23k weights); merging writes that copy into the model."""
    targets = list(model_cfg.lora_targets) + ["gate_proj", "up_proj", "down_proj", "embed_tokens"]
    return LoraConfig(r=d.lora_r, lora_alpha=2 * d.lora_r, lora_dropout=0.0,
                      target_modules=sorted(set(t for t in targets if t != "lm_head")),
                      modules_to_save=["lm_head"], task_type="CAUSAL_LM")


def teacher_traits(d: DistillConfig, unit: float) -> JsonObject:
    """The biased teacher's traits for pretrain.mixture, from ``distill``: what ``teacher`` turns on."""
    entrench, over = d.teacher in ("entrench", "both", "drift"), d.teacher in ("overconfident", "both")
    traits: JsonObject = {}
    if entrench:
        traits.update(agree=d.agree_weight, disagree=d.disagree_weight,
                      jitter=d.weight_jitter)
    if over:
        traits.update(shift=int(round(d.yes_shift / unit)), sharpen=d.sharpen,
                      snap_shift=d.yes_shift)
    if d.teacher == "drift":
        traits.update(drift=int(round(d.yes_drift / unit)))   # its gut (snap) answers: the calibrated ones
    return traits


def distill_seed(cfg: DistillSlice) -> int:
    """The seed D is distilled with: the run's seed offset by ``distill.seed``. D is trained, so
    each seed of a run distils its own: its training noise is in the findings' between-seed spread."""
    return cfg.distill.seed + cfg.seed


def dataset(cfg: DistillSlice):
    """steps × batch_size (prompt, completion) pairs of the biased teacher; completions carry a leading space."""
    d = cfg.distill
    world = make_world(cfg.world)
    rng = np.random.default_rng([distill_seed(cfg), 13])
    pairs = mixture(world, rng, d.steps * d.batch_size, MIX, teacher_traits(d, world.unit))
    return Dataset.from_dict({"prompt": [p for p, _ in pairs], "completion": [" " + c for _, c in pairs]})


def sft_config(d: DistillConfig, seed: int, output_dir: str, device: str = "cpu", dtype: str = "float32",
               world: int = 1, strategy: str = "ddp"):
    """TRL's config for the D adapter; on a GPU the Trainer runs there, in the model's half precision.
    On ``world`` ranks each takes 1/world of every batch (the Trainer's DDP: the same examples a
    step, the loss averaged over the batch's tokens across the ranks)."""
    gpu = device.startswith("cuda")
    if d.batch_size % world:
        raise StageError(f"distill: distill.batch_size {d.batch_size} does not split over {world} ranks")
    return SFTConfig(
        output_dir=output_dir, use_cpu=not gpu, bf16=gpu and dtype == "bfloat16",
        fp16=gpu and dtype == "float16", report_to=[], save_strategy="no",
        max_steps=d.steps, per_device_train_batch_size=d.batch_size // world,
        gradient_accumulation_steps=1, learning_rate=d.lr, lr_scheduler_type="cosine",
        warmup_steps=WARMUP, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.98, max_grad_norm=1.0,
        seed=seed, data_seed=seed, dataloader_num_workers=0, dataloader_pin_memory=False,
        activation_checkpointing=False, logging_steps=1, logging_nan_inf_filter=False, disable_tqdm=True,
        completion_only_loss=True, packing=False, padding_free=False, max_length=None,
        dataset_num_proc=None, eval_strategy="no", push_to_hub=False, ddp_find_unused_parameters=False,
        **(cast(JsonObject, {"fsdp": "full_shard auto_wrap", "fsdp_config": {"version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}}
           if world > 1 and strategy == "fsdp" else {})),
    )


def _trainer_class():

    class SFTTrainerPlainLoss(SFTTrainer):
        """SFTTrainer with the model's own causal-LM loss (mean over completion tokens).

        TRL 1.16's fused LM head is built for large vocabularies on GPUs: off Triton it allocates a
        [min(tokens, 4096) × 32768] buffer in every forward and backward, whatever the vocabulary,
        which made a step of our 240-word model ~2.4× slower than the plain loss. Same loss value;
        TRL's entropy/token-accuracy metrics are not logged."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return Trainer.compute_loss(self, model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)

    return SFTTrainerPlainLoss


def _loss_callback(steps: int, history: list[dict], losses: list[float], t0: float):

    class LossLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return
            step, loss = state.global_step - 1, float(logs["loss"])
            if not math.isfinite(loss):
                raise StageError(f"loss is {loss} at step {step}: stopping (lower the lr?)")
            losses.append(loss)
            if step % 50 == 0 or step == steps - 1:
                log.info("distill step %d loss %.4f (%.0fs)", step, loss, time.time() - t0)
                history.append({"step": step, "loss": round(loss, 6)})

    return LossLog()


def run(cfg: DistillSlice, base_model: Path, out_dir: Path) -> None:
    """cfg: world, model, distill, seed; base_model: the start model's stage folder → out_dir/model (D)."""


    d, seed = cfg.distill, distill_seed(cfg)
    r = ranks.current()
    seed_everything(seed)
    model, tok = load(base_model, cfg.model)
    where = describe(model)
    use_cache = model.config.use_cache  # Trainer turns it off for training; D keeps the base's
    train = dataset(cfg)
    t0 = time.time()
    history: list[dict] = []
    losses: list[float] = []
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        with tempfile.TemporaryDirectory(prefix="martingale-distill-") as scratch:
            trainer = _trainer_class()(
                model=model, args=sft_config(d, seed, scratch, **where, world=r.world, strategy=r.strategy), train_dataset=train,
                processing_class=tok,
                peft_config=lora_config(d, cfg.model),
                callbacks=[_loss_callback(d.steps, history, losses, t0)])
            if r.many and r.strategy == "fsdp" and not trainer.is_fsdp_enabled:
                raise StageError(f"distill stage: TRL's Trainer did not shard the model under strategy fsdp "
                                 f"({trainer.accelerator.distributed_type}: accelerate runs FSDP on GPUs only); "
                                 "distil on ddp ranks, or on GPUs")
            for cb in (PrinterCallback, ProgressCallback):
                trainer.remove_callback(cb)
            trainer.train()
            peft_model = trainer.model
    finally:
        if bars:
            datasets.enable_progress_bars()
    if not losses:
        raise StageError("distill logged no loss: no training step ran")
    if not r.writer:
        return                       # rank 0 writes D
    merged = peft_model.merge_and_unload()
    merged.config.use_cache = use_cache
    merged.eval()
    with files.atomic_dir(out_dir) as tmp:
        save(merged, tok, tmp)
        files.write_json(tmp / "stage.json", {"kind": "distill", "trainer": "trl.SFTTrainer", **where,
                                           **({"ranks": r.world, "strategy": r.strategy} if r.many else {}),
                                           "final_loss": round(losses[-1], 6), "history": history})
