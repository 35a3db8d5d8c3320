"""Bench: one training step's model work by route, side by side, on one thread.

The routes that could make a train step (and so k seeds) cheaper without changing steps, batch,
questions or eval size, against the lean forward the stages run today (model/lean.py):

- ``lean``: today's step (bench/seed_batching.py's ``step``: sample 32 traces, a judge-style
  read, the loss's two forwards and the backward);
- ``merged sampling``: the same, but sampling (and the read) on the start weights with the adapter
  merged in, W + s·B·A, rebuilt every step: one matmul per layer instead of three while decoding;
- ``compiled`` (``--compile``): Lean's decoder layers through ``torch.compile(dynamic=True)``
  (inductor's fused C++ kernels); its first step (the compile) is printed apart.

Best of R rounds each; the ratios are to ``lean`` (< 1: the route pays). Beside them, the rate of
one matmul at the step's shapes (a decode step's 32 rows; a loss forward's ~1,600 positions), the
arithmetic a step is made of since the lean forward. The model is a pretrain stage (``--model``),
else the bench's own 150-step pretrain, with a LoRA adapter of rank 8.
Usage: python bench/step_routes.py [--rounds 5] [--compile] [--model results/_store/pretrain/<id>]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from seed_batching import LINEARS, setup, step

from martingale.model.lean import Lean
from martingale.model.load import load
from martingale.training.policy import lora_model

FIELDS = ("q", "k", "v", "o", "gate", "up", "down")     # Lean's layer fields, in seed_batching.LINEARS' order


def merged(peft) -> Lean:
    """The policy as one Lean whose linear layers carry W + s·B·A (no adapter matmuls)."""
    lean = Lean.of(peft)
    for layer, mod in zip(lean.layers, peft.get_base_model().model.layers):
        for name, (block, attr) in zip(FIELDS, LINEARS):
            lin = getattr(getattr(mod, block), attr)
            if not hasattr(lin, "base_layer"):
                continue
            with torch.no_grad():
                w = lin.base_layer.weight + (lin.lora_B["default"].weight @ lin.lora_A["default"].weight) \
                    * lin.scaling["default"]
            setattr(layer, name, lambda x, w=w: F.linear(x, w))
    return lean


def matmul_rate(rows: int, inner: int, outer: int, calls: int = 400) -> float:
    """GFLOP/s of ``F.linear`` on [rows, inner] × [outer, inner]ᵀ, best of 5 runs of ``calls``."""
    x, w = torch.randn(rows, inner), torch.randn(outer, inner)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            F.linear(x, w)
        best = min(best, (time.perf_counter() - t0) / calls)
    return 2 * rows * inner * outer / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="add the torch.compile route (its compile: minutes)")
    ap.add_argument("--model", type=Path, default=None, help="a pretrain stage folder (default: pretrain one)")
    args = ap.parse_args()
    cfg, folder, train_q, tokenizer, ask, max_new = setup(args.model, "routebench-")
    model, _ = load(folder / "model", cfg["model"])
    prompts = [ask.reasoned(q) for q in train_q[:8] for _ in range(4)]
    torch.manual_seed(100)
    peft = lora_model(model, OmegaConf.create({"lora_r": 8}), OmegaConf.create(cfg["model"]))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)                  # an adapter part-way through training, not zero

    def off():
        with peft.disable_adapter():
            return Lean.of(peft)

    routes = {"lean (today)": lambda: step(lambda: Lean.of(peft), off, prompts, tokenizer, max_new),
              "merged sampling": lambda: step(lambda: Lean.of(peft), off, prompts, tokenizer, max_new,
                                              lean_sample=lambda: merged(peft))}
    same = torch.equal(routes["lean (today)"](), routes["merged sampling"]())
    best = {name: float("inf") for name in routes}

    def timed(name, fn):
        peft.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        fn()
        best[name] = min(best[name], time.perf_counter() - t0)

    for _ in range(args.rounds):
        for name, fn in routes.items():
            timed(name, fn)
    if args.compile:
        eager = Lean._layers
        Lean._layers = torch.compile(eager, dynamic=True)
        try:
            t0 = time.perf_counter()
            routes["lean (today)"]()
            first = time.perf_counter() - t0
            best["compiled"] = float("inf")
            for _ in range(args.rounds):
                timed("compiled", routes["lean (today)"])
        finally:
            Lean._layers = eager
    print(f"one step: {len(prompts)} traces, {max_new} new tokens at most, 1 thread, best of {args.rounds}; "
          f"merged sampling draws the same tokens: {same}")
    for name, seconds in best.items():
        print(f"{name:20s} {seconds * 1000:8.1f} ms a step   ratio to lean {seconds / best['lean (today)']:5.2f}")
    if args.compile:
        print(f"{'compiled, 1st step':20s} {first:8.1f} s (the compile)")
    hidden, mlp = model.config.hidden_size, model.config.intermediate_size
    for rows in (32, 1600):
        print(f"one matmul, {rows:4d} rows × {hidden} → {mlp}: {matmul_rate(rows, hidden, mlp, 4000 // rows * 10):6.1f} "
              f"GFLOP/s on 1 thread")


if __name__ == "__main__":
    main()
