"""Bench: sampling throughput (completions/s) of the vLLM backend vs the in-process HF backend.

The embedded model at the default size (schema Config: hidden 96, 3 heads of 32), untrained unless
``--pretrain-steps`` is given, saved to a temp folder and opened through each backend
(``martingale.model.backend.open_model``). Each samples the same N prompts (held-out questions of
the synthetic world, ``prompt(q) + " think"``, max_new_tokens = 4·clues + 6, temperature 1.0);
only ``sample`` is timed (after a short warm-up), rounds alternate which backend goes first, and
the best of R rounds is kept. vLLM's start-up (server start + /health + the HF copy it keeps for
log-probs) is reported on its own line. HF runs on CUDA when there is one (else on the CPU), vLLM
wherever its env's build runs. Needs .venv-vllm (`make vllm`).
Usage: python bench/backend_throughput.py [--prompts 256] [--rounds 2] [--dtype float32]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from martingale.config.schema import Config
from martingale.model.backend import HFBackend, open_model
from martingale.world import traces
from martingale.world.synthetic import SyntheticWorld

REPO = Path(__file__).resolve().parents[1]


class _OnDevice:
    """A tokenizer whose encodings land on ``device`` (generate.sample encodes on the CPU)."""

    def __init__(self, tokenizer, device: torch.device):
        self._tok, self._device = tokenizer, device

    def __call__(self, *args, **kwargs):
        return self._tok(*args, **kwargs).to(self._device)

    def __getattr__(self, name):
        return getattr(self._tok, name)


def build(model_cfg: dict, world_cfg: dict, out: Path, pretrain_steps: int, full_cfg: dict) -> Path:
    """The embedded model at ``model_cfg``'s size in ``out`` (out/model): untrained, or pretrained
    for ``pretrain_steps`` steps by the pretrain stage."""
    if pretrain_steps > 0:
        from martingale.stages import pretrain
        pretrain.run({"world": world_cfg, "model": model_cfg,
                      "pretrain": {**full_cfg["pretrain"], "steps": pretrain_steps}}, out)
        return out
    from martingale.model.load import build_tiny, save
    from martingale.model.tokenizer import build_tokenizer
    tok = build_tokenizer(traces.vocabulary(int(world_cfg["n_clue_types"])))
    torch.manual_seed(0)
    save(build_tiny(model_cfg, tok), tok, out)
    return out


def timed(gen, prompts: list[str], max_new: int, seed: int) -> tuple[float, int]:
    """(seconds, completion tokens) of one ``sample`` call."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    batch = gen.sample(prompts, max_new, 1.0, seed)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    assert len(batch.texts) == len(prompts), (len(batch.texts), len(prompts))
    return dt, int(batch.completion_mask.sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=256, help="completions per timed call")
    ap.add_argument("--rounds", type=int, default=2, help="timed calls per backend (best kept)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                    help="model.dtype for both backends (default: the schema's)")
    ap.add_argument("--concurrency", type=int, default=None,
                    help="model.vllm.concurrency: requests in flight (default: the schema's)")
    ap.add_argument("--pretrain-steps", type=int, default=0, help="0 = untrained weights")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads for HF (0 = torch's default)")
    ap.add_argument("--vllm-python", type=Path, default=None,
                    help="vLLM's env python (default: model.vllm.python, .venv-vllm/bin/python)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    cfg = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)
    model_cfg = cfg["model"]
    if args.dtype:
        model_cfg["dtype"] = args.dtype
    python = args.vllm_python or Path(model_cfg["vllm"]["python"])
    python = python if python.is_absolute() else REPO / python
    if not python.is_file():
        print(f"backend_throughput: vLLM env missing ({python} not found): run `make vllm` first",
              file=sys.stderr)
        return 2
    model_cfg["vllm"].update(python=str(python), startup_timeout_s=max(600, model_cfg["vllm"]["startup_timeout_s"]))
    if args.concurrency:
        model_cfg["vllm"]["concurrency"] = args.concurrency

    world = SyntheticWorld(cfg["world"])
    _, heldout = world.splits()
    questions = (heldout * (args.prompts // len(heldout) + 1))[:args.prompts]
    prompts = [traces.prompt(q) + " think" for q in questions]
    max_new = 4 * world.n_clues + 6

    work = Path(tempfile.mkdtemp(prefix="backendbench-"))
    folder = build(model_cfg, cfg["world"], work / "model-stage", args.pretrain_steps, cfg)

    hf = open_model(folder, {**model_cfg, "backend": "hf"})
    hf_device = "cpu"
    if torch.cuda.is_available():
        device = torch.device("cuda")
        hf = HFBackend(hf.model.to(device), _OnDevice(hf.tokenizer, device))
        hf_device = torch.cuda.get_device_name(0)

    t0 = time.perf_counter()
    vl = open_model(folder, {**model_cfg, "backend": "vllm"})
    startup = time.perf_counter() - t0
    try:
        warm = prompts[:8]
        hf.sample(warm, max_new, 1.0, 0)
        vl.sample(warm, max_new, 1.0, 0)
        best = {"hf": (0.0, 0.0), "vllm": (0.0, 0.0)}   # (completions/s, tokens/s)
        for r in range(args.rounds):
            order = [("hf", hf), ("vllm", vl)] if r % 2 == 0 else [("vllm", vl), ("hf", hf)]
            for name, gen in order:
                dt, tokens = timed(gen, prompts, max_new, seed=1000 + r)
                rate = (len(prompts) / dt, tokens / dt)
                print(f"  round {r + 1} {name:4s}: {dt:7.2f} s  {rate[0]:8.1f} completions/s  "
                      f"{rate[1]:9.1f} tokens/s", flush=True)
                best[name] = max(best[name], rate)
    finally:
        vl.close()

    print(f"\nembedded model: hidden {model_cfg['hidden_size']}, {model_cfg['num_layers']} layers, "
          f"{model_cfg['num_heads']} heads, dtype {model_cfg['dtype']}; {len(prompts)} prompts, "
          f"max_new_tokens {max_new}, temperature 1.0, best of {args.rounds}; "
          f"vLLM concurrency {model_cfg['vllm']['concurrency']}; HF on {hf_device}; "
          f"{os.cpu_count()} CPUs")
    print(f"vLLM start-up (server ready + HF copy): {startup:.1f} s (not in the rates below)")
    print(f"{'backend':<10}{'completions/s':>15}{'tokens/s':>12}")
    print(f"{'hf':<10}{best['hf'][0]:>15.1f}{best['hf'][1]:>12.1f}")
    print(f"{'vllm':<10}{best['vllm'][0]:>15.1f}{best['vllm'][1]:>12.1f}")
    print(f"{'vllm/hf':<10}{best['vllm'][0] / best['hf'][0]:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
