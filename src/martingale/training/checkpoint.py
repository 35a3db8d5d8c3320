"""Resumable checkpoints of a policy-gradient stage: a rerun after a kill ends with the same bytes.

Where: beside the stage's output folder, ``<kind dir>/.<stage id>.ckpt/<step>/``. The dot name keeps
it out of the store listing (martingale.store.manifest.store_folders), so it is never taken for a stage;
the stage id in the name makes the rerun of the same stage, and only it, find it. Each checkpoint
is its own folder written with files.atomic_dir (a manifest, then one rename), and the previous one is
removed only after it: a SIGKILL at any moment leaves at least one whole checkpoint. The folder is
removed once the stage's output exists.

What: what an uninterrupted run holds at the top of step ``step`` — the LoRA adapter's weights, the
AdamW state, the torch RNG, the order RNG as it was before this epoch's permutation (the resumed
epoch redraws the same permutation and skips its finished batches), the history rows, and a
fingerprint of the stage's config. A checkpoint whose manifest does not verify, whose config
differs or that does not load is discarded with a log line, and training starts over.
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..core.jsonvalue import Json, JsonObject
from ..store import files
from ..store.manifest import problems
from . import ranks

if TYPE_CHECKING:
    from torch.optim.optimizer import StateDict

    from .policy import Policy

log = logging.getLogger("martingale")

ADAPTER, TRAINER, STATE = "adapter.safetensors", "trainer.pt", "state.json"
NOT_FINGERPRINTED = ("checkpoint_every",)   # how often to checkpoint does not change the run


@dataclass
class Progress:
    """Where training stands: the next step, its epoch, the history rows so far."""
    step: int = 0
    epoch: int = 0
    history: list[JsonObject] = field(default_factory=list)


def folder(out_dir: Path | str) -> Path:
    """The checkpoint folder of the stage whose output is ``out_dir``."""
    out_dir = Path(out_dir)
    return out_dir.parent / f".{out_dir.name}.ckpt"


def fingerprint(cfg: object) -> str:
    """sha256 of the stage's typed config, less the keys that do not change the run."""
    whole = json.loads(files.canonical_json(cfg))      # the typed sections as the mappings they hold
    whole["stage"] = {k: v for k, v in whole["stage"].items() if k not in NOT_FINGERPRINTED}
    return hashlib.sha256(files.canonical_json(whole).encode("utf-8")).hexdigest()


def adapter(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trainable (LoRA) parameters by name, in the model's order."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def save(ckpt: Path, policy, cfg: object, progress: Progress, epoch_rng: Mapping[str, Json]) -> None:
    """Write the checkpoint of ``progress`` (``epoch_rng``: the order RNG's state before this
    epoch's permutation), then remove the older ones. On ranks every rank calls it (the adapter and
    the optimizer state are gathered whole) and rank 0 writes."""
    r = ranks.current()
    weights, optimizer = trainer_state(policy)
    if r.writer:
        with files.atomic_dir(ckpt / f"{progress.step:08d}") as tmp:
            save_file(weights, str(tmp / ADAPTER))
            torch.save({"optimizer": optimizer, "torch_rng": torch.get_rng_state(),
                        **({"cuda_rng": torch.cuda.get_rng_state_all()} if torch.cuda.is_available() else {})},
                       tmp / TRAINER)
            files.write_json(tmp / STATE, {"step": progress.step, "epoch": progress.epoch,
                                        "order_rng": epoch_rng, "history": progress.history,
                                        "config": fingerprint(cfg)})
        for old in ckpt.iterdir():
            if old.name != f"{progress.step:08d}":
                shutil.rmtree(old, ignore_errors=True)   # older checkpoints, a killed write's temp folder
    ranks.barrier()


def trainer_state(policy: Policy) -> tuple[dict[str, torch.Tensor], StateDict]:
    """(the adapter's tensors, the optimizer's state) whole, on the CPU: on ranks gathered (every
    rank takes part), the optimizer's state keyed by parameter name."""
    if not ranks.current().many:
        return ({n: p.detach().cpu().clone().contiguous() for n, p in adapter(policy.model).items()},
                policy.opt.state_dict())
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return (ranks.full_tensors(adapter(policy.model).items()),
            get_optimizer_state_dict(policy.model, policy.opt, options=whole))


def resume(ckpt: Path, policy, cfg: object, order_rng) -> Progress:
    """Load the newest checkpoint that verifies into ``policy`` and ``order_rng``; Progress() (start
    over) when there is none. One that does not verify is discarded with a log line. On ranks each
    reads the same files, so all reach the same verdict; rank 0 removes the discarded ones after."""
    candidates = sorted((p for p in ckpt.iterdir() if not p.name.startswith(".")), reverse=True) \
        if ckpt.is_dir() else []
    discarded, progress = [], None
    for one in candidates:
        try:
            progress = _load(one, policy, cfg, order_rng)
            break
        except _Unusable as e:
            log.warning("checkpoint %s: %s; discarded", one, e)
            discarded.append(one)
    ranks.barrier()
    if ranks.current().writer:
        for one in discarded:
            shutil.rmtree(one, ignore_errors=True)
    if progress is None and candidates:
        log.warning("no usable checkpoint in %s: training starts over", ckpt)
    return progress or Progress()


class _Unusable(Exception):
    """A checkpoint that cannot be resumed from (the message says why)."""


def _load(one: Path, policy, cfg: object, order_rng) -> Progress:
    """One checkpoint folder into ``policy`` and ``order_rng``, or _Unusable; everything is read
    and checked (manifest, config, tensor names and shapes) before either is touched."""
    bad = problems(one)
    if bad:
        raise _Unusable(bad[0])
    try:
        state = files.read_json(one / STATE)
        weights = load_file(str(one / ADAPTER))
        trainer = torch.load(one / TRAINER, weights_only=True)
        progress = Progress(int(state["step"]), int(state["epoch"]), list(state["history"]))
        type(order_rng.bit_generator)().state = state["order_rng"]   # a state this RNG takes
    except Exception as e:   # a manifest that verifies over files this code did not write
        raise _Unusable(f"does not load ({type(e).__name__}: {e})") from None
    if state.get("config") != fingerprint(cfg):
        raise _Unusable("made under another stage config")
    params = adapter(policy.model)
    if {n: tuple(t.shape) for n, t in weights.items()} != {n: tuple(p.shape) for n, p in params.items()}:
        raise _Unusable("its adapter tensors differ from this policy's")
    _restore(policy, weights, trainer["optimizer"])
    torch.set_rng_state(trainer["torch_rng"])
    if "cuda_rng" in trainer and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(trainer["cuda_rng"])   # sampling on a GPU draws from its generator
    order_rng.bit_generator.state = state["order_rng"]
    log.info("resuming from checkpoint %s (step %d)", one, progress.step)
    return progress


def _restore(policy: Policy, weights: dict[str, torch.Tensor], optimizer: StateDict) -> None:
    """The adapter's tensors and the optimizer's state into the policy (on ranks: each its shard)."""
    if ranks.current().many:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        whole = StateDictOptions(full_state_dict=True, strict=False)
        set_model_state_dict(policy.model, {**weights}, options=whole)
        set_optimizer_state_dict(policy.model, policy.opt, optimizer, options=whole)
        return
    policy.opt.load_state_dict(optimizer)
    with torch.no_grad():
        for name, p in adapter(policy.model).items():
            p.copy_(weights[name])


def remove(ckpt: Path) -> None:
    """Remove the stage's checkpoints once its output exists (rank 0, on ranks)."""
    if ranks.current().writer:
        shutil.rmtree(ckpt, ignore_errors=True)
