"""A train stage on the fixture's untrained tiny model, on one rank (in this process) or on N
through the real launcher (training/launch.py: torchrun): what tests/test_ranks.py runs in a
child process, so a rank it kills, or a launch that hangs, cannot take the test process with it.

    python tests/rankdriver.py MODEL_DIR OUT_DIR RANKS STRATEGY EPOCHS [BACKEND]

STRATEGY ``none``: in this process, no launcher (the 1-rank reference); else ddp | fsdp on RANKS
ranks through the launcher (1 too: a world of one, as on a machine with one GPU). BACKEND ``vllm``:
the model of tests/vllmserver.py served by a real vLLM server (rank 0's), the adapter reloaded every
2 steps. ``$RANKDRIVER_STAGE``: JSON of stage keys to change (``{"kl_beta": NaN}``).
"""
from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

from omegaconf import OmegaConf
from typed import typed_slice

from martingale.config.schema import Config
from martingale.core.errors import StageError
from martingale.core.threads import use_threads
from martingale.model.section import model_section
from martingale.stages.body import train
from martingale.training.launch import launch


def tiny_cfg(epochs: int, backend: str = "hf") -> dict:
    """The tiny model of tests/conftest.py (of tests/vllmserver.py for vllm), 16 questions an epoch
    (8 and their negations), 4 steps."""
    base = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)
    if backend == "vllm":
        from vllmserver import model_cfg
        model = {k: v for k, v in model_cfg().items() if k != "distributed"}
        model["vllm"]["reload_every"] = 2
    else:
        model = {k: v for k, v in base["model"].items() if k != "distributed"}
        model.update(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    stage = {**base["stages"]["s1"], "reward": "B", "batch_questions": 4, "generations": 2,
             "epochs": epochs, "checkpoint_every": 2, **json.loads(os.environ.get("RANKDRIVER_STAGE", "{}"))}
    return {"world": {**base["world"], "n_train": 8, "n_heldout": 8}, "model": model, "seed": 0,
            "stage": stage, "elicit": {**base["elicit"], "mode": "snap"}}


def build_untrained(folder: Path, backend: str = "hf") -> None:
    """The untrained tiny model of tests/conftest.py (tests/vllmserver.py's for vllm), saved the
    way a stage saves one."""
    import torch

    if backend == "vllm":
        from vllmserver import build
        build(folder, seed=0)
        return

    from martingale.model.load import build_tiny, save
    from martingale.model.tokenizer import build_tokenizer
    from martingale.world import traces

    cfg = tiny_cfg(1)
    tok = build_tokenizer(traces.vocabulary(cfg["world"]["n_clue_types"]))
    torch.manual_seed(0)
    save(build_tiny(cfg["model"], tok), tok, folder)


def main(model_dir: str, out_dir: str, n: str, strategy: str, epochs: str, backend: str = "hf") -> int:
    cfg = tiny_cfg(int(epochs), backend)
    use_threads(1)
    if strategy == "none":
        train.run(typed_slice("train", cfg), Path(model_dir), Path(model_dir), Path(out_dir))
        return 0
    cfg = copy.deepcopy(cfg)
    cfg["model"]["distributed"] = {"ranks": int(n), "strategy": strategy, "nodes": 1}
    try:
        launch("train", cfg, {"start_model": Path(model_dir), "judge_model": Path(model_dir)},
               Path(out_dir), 1, model_section(cfg["model"]))
    except StageError as e:
        print(f"martingale: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
