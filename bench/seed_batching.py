"""Bench: k seeds of a training stage as one batched model vs k models one after another.

A train stage's step on the embedded model, its model work only: sample B·G = 32 traces of the
world's reasoned prompts (max 4·clues + 6 new tokens, temperature 1), one judge-style read (a
forward over each prompt + trace, the last position's logits), and the loss's two forwards (the
LoRA policy with autograd, the start model without) and its backward. Three ways for k seeds:

- ``solo``: k LoRA policies, each on its own start model, one after another (what k stage jobs do);
- ``stacked``: the same k models as one (torch.func-style stacked weights: every linear layer one
  ``bmm`` over the k models' weights and adapters, rows in k blocks), one call per op for all k;
- ``shared``: k adapters on one shared start model (multi-LoRA: the base matmul once over all rows,
  the adapters batched), the case of seeds that start from the same model.

Each way is timed best of R rounds, on one thread (a stage job's count), in one process; the
stacked forward's logits are checked equal to the solo ones (the print says how far apart). The
start models are the bench's pretrained model (``--model``, else a 150-step embedded pretrain),
each perturbed by its seed so the k models differ.
Usage: python bench/seed_batching.py [--k 3] [--rounds 5] [--model results/_store/pretrain/<id>]
"""
from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from martingale.config.schema import Config
from martingale.model.lean import Cache, Lean, _constant
from martingale.model.load import load
from martingale.training.policy import lora_model

LINEARS = (("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"), ("self_attn", "o_proj"),
           ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj"))


class _Layer:
    def __init__(self, norm1, q, k, v, o, norm2, gate, up, down) -> None:
        self.norm1, self.q, self.k, self.v, self.o = norm1, q, k, v, o
        self.norm2, self.gate, self.up, self.down = norm2, gate, up, down


class StackedLean(Lean):
    """Lean's forward and sampler over k models' stacked weights: a batch is k equal row blocks."""

    row_chunked = False          # row chunks would cut across the blocks

    def __init__(self, k: int, embed: torch.Tensor, *args) -> None:
        super().__init__(None, *args)
        self.k, self.embed_weight = k, embed

    def embedded(self, input_ids: torch.Tensor) -> torch.Tensor:
        k, vocab = self.k, self.embed_weight.shape[1]
        block = torch.arange(k).repeat_interleave(input_ids.shape[0] // k)[:, None] * vocab
        return F.embedding(input_ids + block, self.embed_weight.reshape(k * vocab, -1))

    def rms(self, x: torch.Tensor, norm) -> torch.Tensor:
        weight, eps = norm
        h = x.to(torch.float32)
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
        return (weight[:, None, :] * h.reshape(self.k, -1, h.shape[-1])).reshape(h.shape)


class Stack:
    """k peft models as one: their frozen weights stacked once (a shared base: its one weight);
    ``lean(adapters)`` adds their LoRA weights as they are now, inside autograd, and gives the
    StackedLean (adapters off: the start models)."""

    def __init__(self, models: list, shared: bool) -> None:
        self.k, self.shared = len(models), shared
        bases = [m.get_base_model() for m in models]
        inner = [b.model for b in bases]

        def norm(mods):
            return torch.stack([m.weight for m in mods]), _constant(mods[0].variance_epsilon, torch.float32, "cpu")

        self.layers = []
        for i in range(len(inner[0].layers)):
            per = [m.layers[i] for m in inner]
            linears = [[getattr(getattr(p, block), name) for p in per] for block, name in LINEARS]
            self.layers.append((norm([p.input_layernorm for p in per]), [(mods, self._base(mods)) for mods in linears],
                                norm([p.post_attention_layernorm for p in per])))
        self.embed = torch.stack([m.embed_tokens.weight for m in inner])
        self.norm = norm([m.norm for m in inner])
        self.head = torch.stack([b.lm_head.weight for b in bases]).transpose(1, 2)
        one = Lean.of(models[0])
        self.rope = (one.inv_freq, one.rope_scale, one.heads, one.head_dim)

    def _base(self, mods):
        """A layer's frozen weight: [k, in, out] stacked, or the shared base's own [out, in]."""
        weights = [getattr(m, "base_layer", m).weight for m in mods]
        return weights[0] if self.shared else torch.stack(weights).transpose(1, 2)

    def lean(self, adapters: bool) -> StackedLean:
        k, shared = self.k, self.shared

        def linear(mods, base):
            lora = None
            if adapters and hasattr(mods[0], "base_layer"):          # a layer with an adapter
                a = torch.stack([m.lora_A["default"].weight for m in mods]).transpose(1, 2)   # [k, in, r]
                b = torch.stack([m.lora_B["default"].weight for m in mods]).transpose(1, 2)   # [k, r, out]
                lora = a, b, _constant(mods[0].scaling["default"], base.dtype, base.device)

            def fn(x):
                flat = x.reshape(k, -1, x.shape[-1])
                out = F.linear(x, base).reshape(k, -1, base.shape[0]) if shared else torch.bmm(flat, base)
                if lora is not None:
                    out = out + torch.bmm(torch.bmm(flat, lora[0]), lora[1]) * lora[2]
                return out.reshape(*x.shape[:-1], out.shape[-1])
            return fn

        def head(x):
            return torch.bmm(x.reshape(k, -1, x.shape[-1]), self.head).reshape(*x.shape[:-1], self.head.shape[-1])

        layers = []
        for norm1, linears, norm2 in self.layers:
            fns = [linear(mods, base) for mods, base in linears]
            layers.append(_Layer(norm1, *fns[:4], norm2, *fns[4:]))
        return StackedLean(k, self.embed, layers, self.norm, head, *self.rope)


def step(lean_on, lean_off, prompts, tokenizer, max_new: int, lean_sample=None) -> torch.Tensor:
    """One step's model work on one (possibly stacked) model; returns the sampled ids.
    ``lean_sample``: the policy it samples with, where not ``lean_on`` (bench/step_routes.py)."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(0)
    ids = (lean_sample or lean_on)().sample(enc["input_ids"], enc["attention_mask"], max_new, 1.0,
                           tokenizer.pad_token_id, tokenizer.eos_token_id)
    attn = (ids != tokenizer.pad_token_id).long()
    attn[:, :enc["input_ids"].shape[1]] = enc["attention_mask"]
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():                                   # a judge-style read: the last position
        lean_off().forward(ids, attn, pos, None, 1)
    logp = torch.log_softmax(lean_on().forward(ids, attn, pos, Cache())[:, :-1].float(), -1)
    with torch.no_grad():
        ref = torch.log_softmax(lean_off().forward(ids, attn, pos, Cache())[:, :-1].float(), -1)
    tok = ids[:, 1:, None]
    diff = ref.gather(-1, tok) - logp.gather(-1, tok)
    (torch.exp(diff) - diff - 1 - logp.gather(-1, tok)).mean().backward()
    return ids


def setup(folder: Path | None, prefix: str):
    """On one thread: the default config, the start model's folder (``folder``, else a 150-step
    embedded pretrain in a temporary folder), the world's training questions, the tokenizer, the
    prompt set and a trace's most new tokens."""
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    from martingale.beliefs.prompts import Prompts
    from martingale.config.slices import stage_config
    from martingale.stages import kinds
    from martingale.stages.body import pretrain
    from martingale.world.synthetic import SyntheticWorld

    cfg = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix=prefix)) / "pretrain"
        pretrain.run(stage_config(kinds()["pretrain"], {"world": cfg["world"], "model": cfg["model"],
                                                        "pretrain": {**cfg["pretrain"], "steps": 150}}), folder)
    world = SyntheticWorld(cfg["world"])
    train_q, _ = world.splits()
    _, tokenizer = load(folder / "model", cfg["model"])
    ask = Prompts(None, tokenizer)
    return cfg, folder, train_q, tokenizer, ask, ask.trace_tokens(world.n_clues)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=3, help="seeds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", type=Path, default=None, help="a pretrain stage folder (default: pretrain one)")
    args = ap.parse_args()
    cfg, folder, train_q, tokenizer, ask, max_new = setup(args.model, "seedbench-")
    k, B, G = args.k, 8, 4
    blocks = [[ask.reasoned(q) for q in train_q[j * B:(j + 1) * B] for _ in range(G)] for j in range(k)]

    def policies(shared: bool) -> list:
        out, base = [], None
        for j in range(k):
            model, _ = load(folder / "model", cfg["model"])
            if shared and base is not None:
                for name, p in model.named_parameters():
                    p.data = base[name]                 # the very tensors of the first: one base
            else:
                with torch.no_grad():
                    gen = torch.Generator().manual_seed(j)
                    for p in model.parameters():
                        p.add_(torch.randn(p.shape, generator=gen) * 1e-3)
                base = {name: p.data for name, p in model.named_parameters()}
            torch.manual_seed(100 + j)
            peft = lora_model(model, OmegaConf.create({"lora_r": 8}), OmegaConf.create(cfg["model"]))
            with torch.no_grad():
                for name, p in peft.named_parameters():
                    if "lora_B" in name:
                        p.normal_(0, 0.02)
            out.append(peft)
        return out

    def solo(models):
        def run():
            for m, prompts in zip(models, blocks):
                def off(m=m):
                    with m.disable_adapter():
                        return Lean.of(m)
                step(lambda m=m: Lean.of(m), off, prompts, tokenizer, max_new)
        return run

    def together(models, shared):
        flat, stack = [p for b in blocks for p in b], Stack(models, shared)
        return lambda: step(lambda: stack.lean(True), lambda: stack.lean(False), flat, tokenizer, max_new)

    distinct, common = policies(False), policies(True)
    # the stacked forward against each model's own, on the same rows (no sampling)
    enc = tokenizer([p for b in blocks for p in b], return_tensors="pt", padding=True, add_special_tokens=False)
    pos = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        one = Stack(distinct, False).lean(True).forward(enc["input_ids"], enc["attention_mask"], pos)
        each = torch.cat([Lean.of(m).forward(enc["input_ids"][j * B * G:(j + 1) * B * G],
                                             enc["attention_mask"][j * B * G:(j + 1) * B * G],
                                             pos[j * B * G:(j + 1) * B * G]) for j, m in enumerate(distinct)])
    ways = {"solo (k models, one after another)": solo(distinct),
            "stacked (k models as one)": together(distinct, False),
            "solo on a shared base": solo(common),
            "shared base, k adapters batched": together(common, True)}
    best = {name: float("inf") for name in ways}
    for _ in range(args.rounds):
        for name, fn in ways.items():
            for m in distinct + common:
                m.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    print(f"k = {k} seeds, {B * G} traces each, {max_new} new tokens at most, 1 thread; "
          f"stacked logits vs each model's own: max |diff| {float((one - each).abs().max()):.2e}")
    for name, seconds in best.items():
        print(f"{name:40s} {seconds * 1000:8.1f} ms a step")
    names = list(ways)
    print(f"ratio stacked / solo                     {best[names[1]] / best[names[0]]:8.2f}  (< 1: batching pays)")
    print(f"ratio shared-base batched / solo         {best[names[3]] / best[names[2]]:8.2f}")


if __name__ == "__main__":
    main()
