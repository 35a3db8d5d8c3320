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

``--smollm2``: the same on a real chat model, SmolLM2-135M-Instruct (`make smollm2`), with the run
smollm2's model section (conf/model/smollm2_135m.yaml: HF in batches of model.generate_batch by
length, vLLM with its flags, chunked prefill off) through the project's backends
(model.backend.HFBackend, model.vllm.VLLMBackend). The prompts are the log's snap prompt
(conf/prompts/log.yaml) through the chat template on the 36 shipped ForecastBench questions, each
background cut by words to fit 256 tokens (~250 a prompt, as tests/test_smollm2_vllm.py builds
them), cycled to ``--prompts`` (default 36); both sample them with the same seeds, temperature 0.7
(the run's eval.temperature), ``--max-tokens`` (default 48) new tokens. Each round also times a
forced read (beliefs.forced.forced_reads: the answer prefilled with "P = 0.", P from the next
token's top 20) of the same prompts through each backend; the line under the table says how far
the two backends' forced reads are apart (the same weights: they should agree).
Usage: python bench/backend_throughput.py --smollm2 [--prompts 36] [--rounds 2] [--max-tokens 48]
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
from martingale.model.backend import open_model
from martingale.model.hf import HFBackend
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
        from martingale.config.slices import stage_config
        from martingale.stages import kinds
        from martingale.stages.body import pretrain
        pretrain.run(stage_config(kinds()["pretrain"], {"world": world_cfg, "model": model_cfg,
                                                        "pretrain": {**full_cfg["pretrain"], "steps": pretrain_steps}}), out)
        return out
    from martingale.model.load import build_tiny, save
    from martingale.model.tokenizer import build_tokenizer
    tok = build_tokenizer(traces.vocabulary(int(world_cfg["n_clue_types"])))
    torch.manual_seed(0)
    save(build_tiny(model_cfg, tok), tok, out)
    return out


def timed(gen, prompts: list[str], max_new: int, seed: int, temperature: float = 1.0) -> tuple[float, int]:
    """(seconds, completion tokens) of one ``sample`` call."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    batch = gen.sample(prompts, max_new, temperature, seed)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    assert len(batch.texts) == len(prompts), (len(batch.texts), len(prompts))
    return dt, int(batch.completion_mask.sum())


def with_vllm_env(model_cfg: dict, args) -> bool:
    """Point model_cfg's vLLM section at the vLLM environment (--vllm-python, else the config's,
    relative to the repo) with a start-up timeout of at least 600 s and --concurrency; False (and
    one line on stderr) when that environment is missing."""
    python = args.vllm_python or Path(model_cfg["vllm"]["python"])
    python = python if python.is_absolute() else REPO / python
    if not python.is_file():
        print(f"backend_throughput: vLLM env missing ({python} not found): run `make vllm` first",
              file=sys.stderr)
        return False
    model_cfg["vllm"].update(python=str(python), startup_timeout_s=max(600, model_cfg["vllm"]["startup_timeout_s"]))
    if args.concurrency:
        model_cfg["vllm"]["concurrency"] = args.concurrency
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=None, help="completions per timed call (default 256; --smollm2: 36)")
    ap.add_argument("--rounds", type=int, default=2, help="timed calls per backend (best kept)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                    help="model.dtype for both backends (default: the schema's)")
    ap.add_argument("--concurrency", type=int, default=None,
                    help="model.vllm.concurrency: requests in flight (default: the schema's)")
    ap.add_argument("--pretrain-steps", type=int, default=0, help="0 = untrained weights")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads for HF (0 = torch's default)")
    ap.add_argument("--vllm-python", type=Path, default=None,
                    help="vLLM's env python (default: model.vllm.python, .venv-vllm/bin/python)")
    ap.add_argument("--smollm2", action="store_true",
                    help="SmolLM2-135M-Instruct on the log's snap prompts (see the docstring)")
    ap.add_argument("--max-tokens", type=int, default=48, help="--smollm2: new tokens a completion at most")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.smollm2:
        return smollm2(args)
    args.prompts = 256 if args.prompts is None else args.prompts

    cfg = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)
    model_cfg = cfg["model"]
    if args.dtype:
        model_cfg["dtype"] = args.dtype
    if not with_vllm_env(model_cfg, args):
        return 2

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


SMOL_PROMPT_TOKENS = 256   # each background cut (by words) to fit: ~250 tokens a prompt


def smollm2_prompts(tokenizer, questions_file: Path) -> list[str]:
    """The log's snap prompt on each question of the file, through the chat template; a background
    longer than fits SMOL_PROMPT_TOKENS is cut to its first words (as tests/test_smollm2_vllm.py)."""
    from martingale.beliefs.prompts import Prompts
    from martingale.world.jsonl import as_question
    from martingale.world.questions import load_questions
    prompts = Prompts(OmegaConf.to_container(OmegaConf.load(REPO / "conf/prompts/log.yaml"), resolve=True), tokenizer)

    return [prompts.snap_within(as_question(fq), SMOL_PROMPT_TOKENS) for fq in load_questions(questions_file)]


def timed_forced(gen, prompts: list[str], prefix: str, floor: float):
    """(seconds, reads) of one forced read of every prompt (beliefs.forced.forced_reads)."""
    from martingale.beliefs.forced import forced_reads
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    reads = forced_reads(gen, prompts, prefix, floor)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    assert len(reads) == len(prompts), (len(reads), len(prompts))
    return time.perf_counter() - t0, reads


def smollm2(args) -> int:
    from transformers.utils import logging as hf_logging

    from martingale.config.runs import RunTree
    from martingale.model.vllm import VLLMBackend
    hf_logging.disable_progress_bar()
    cfg = RunTree.load(REPO / "conf").resolved_config("smollm2")
    model_cfg = {**cfg["model"], "vllm": dict(cfg["model"]["vllm"])}
    if args.dtype:
        model_cfg["dtype"] = args.dtype
    folder = REPO / model_cfg["path"]
    if not (folder / "config.json").is_file():
        print(f"backend_throughput: no {folder} (`make smollm2` fetches it)", file=sys.stderr)
        return 2
    if not with_vllm_env(model_cfg, args):
        return 2
    prefix = str(cfg["prompts"]["forced_prefix"])
    floor = float(cfg["prompts"].get("forced_min_mass", 0.5))
    max_new, n = int(args.max_tokens), 36 if args.prompts is None else args.prompts
    temperature = float(cfg["eval"]["temperature"])            # 0.7

    hf = HFBackend.load(folder, {**model_cfg, "backend": "hf"})
    hf_device = torch.cuda.get_device_name(0) if next(hf.model.parameters()).is_cuda else "cpu"
    shipped = smollm2_prompts(hf.tokenizer, REPO / cfg["world"]["questions_file"])
    prompts = (shipped * (n // len(shipped) + 1))[:n]
    lengths = [len(x) for x in hf.tokenizer(prompts, add_special_tokens=False)["input_ids"]]

    t0 = time.perf_counter()
    vl = VLLMBackend.load(folder, {**model_cfg, "backend": "vllm"})
    startup = time.perf_counter() - t0
    best = {"hf": (0.0, 0.0, 0.0), "vllm": (0.0, 0.0, 0.0)}   # (completions/s, tokens/s, forced reads/s)
    reads = {}
    try:
        warm = prompts[:2]
        for gen in (hf, vl):
            gen.sample(warm, 8, temperature, 0)
            timed_forced(gen, warm, prefix, floor)
        for r in range(args.rounds):
            order = [("hf", hf), ("vllm", vl)] if r % 2 == 0 else [("vllm", vl), ("hf", hf)]
            for name, gen in order:
                dt, tokens = timed(gen, prompts, max_new, seed=1000 + r, temperature=temperature)
                ft, reads[name] = timed_forced(gen, prompts, prefix, floor)
                rate = (len(prompts) / dt, tokens / dt, len(prompts) / ft)
                print(f"  round {r + 1} {name:4s}: sample {dt:7.2f} s  {rate[0]:8.2f} completions/s  "
                      f"{rate[1]:8.1f} tokens/s; forced read {ft:6.2f} s  {rate[2]:8.2f} reads/s", flush=True)
                best[name] = tuple(max(a, b) for a, b in zip(best[name], rate))
    finally:
        vl.close()

    gaps = [abs(a - b) for (a, _), (b, _) in zip(reads["hf"], reads["vllm"]) if a is not None and b is not None]
    parsed = {k: sum(p is not None for p, _ in v) for k, v in reads.items()}
    print(f"\nSmolLM2-135M-Instruct ({folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder}), "
          f"dtype {model_cfg['dtype']}: {len(prompts)} snap prompts ({min(lengths)}–{max(lengths)} tokens, "
          f"mean {sum(lengths) / len(lengths):.0f}), max_new_tokens {max_new}, temperature {temperature}, "
          f"seeds 1000 + round, best of {args.rounds}; HF generate_batch {model_cfg['generate_batch']} on "
          f"{hf_device}; vLLM concurrency {model_cfg['vllm']['concurrency']}; {os.cpu_count()} CPUs")
    print(f"vLLM start-up (server ready + HF copy): {startup:.1f} s (not in the rates below)")
    print(f"{'backend':<10}{'completions/s':>15}{'tokens/s':>12}{'forced reads/s':>16}")
    for name in ("hf", "vllm"):
        print(f"{name:<10}{best[name][0]:>15.2f}{best[name][1]:>12.1f}{best[name][2]:>16.2f}")
    print(f"{'vllm/hf':<10}{best['vllm'][0] / best['hf'][0]:>15.2f}{best['vllm'][1] / best['hf'][1]:>12.2f}"
          f"{best['vllm'][2] / best['hf'][2]:>16.2f}")
    print(f"forced read (prefix {prefix!r}, top 20, mass >= {floor}): parsed hf {parsed['hf']}/{len(prompts)}, "
          f"vllm {parsed['vllm']}/{len(prompts)}; max |P_hf - P_vllm| {max(gaps) if gaps else float('nan'):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
