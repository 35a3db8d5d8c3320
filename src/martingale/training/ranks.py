"""A training stage on N ranks, inside each rank (training/launch.py starts them): what each rank
checks, and the few collective steps the training loop takes where it runs on more than one
(``model.distributed``).

Every rank rolls out the whole batch (the same seed gives each the same samples, so advantages,
group means and the batch sd need no gather) and takes its contiguous block of the batch's rows
for the loss; ``ddp`` (DistributedDataParallel) averages the adapter's gradients, ``fsdp`` (FSDP2,
``fully_shard`` per decoder layer, then the model) also shards the weights. Each rank scales its
loss by the world size, so the averaged gradient is the whole batch's, as on one rank. Rank 0 alone
writes the stage's files and checkpoints; the guards run once, on the gathered weights. gloo on a
CPU, NCCL on GPUs. A launch that degrades to N independent copies (``accelerate launch --cpu``, a
plain ``python``) fails in one line: every rank checks the world size it was started in.
"""
from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Iterable, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..core.errors import StageError

M = TypeVar("M", bound=nn.Module)

COLLECTIVE_TIMEOUT_S = 600    # a collective that waits longer (a peer hung, not dead) fails the rank


@dataclass(frozen=True)
class Ranks:
    """This process's place among the ranks of its stage (one rank: world 1, rank 0)."""
    world: int = 1
    rank: int = 0
    strategy: str = "ddp"

    @property
    def many(self) -> bool:
        return self.world > 1

    @property
    def writer(self) -> bool:
        """Rank 0: the one that writes the stage's files, checkpoints and log lines."""
        return self.rank == 0


_CURRENT = Ranks()


def current() -> Ranks:
    """The ranks of the stage this process runs (Ranks() outside a ranked launch)."""
    return _CURRENT


# --------------------------------------------------------------------------- inside a rank
def join(expected: int, strategy: str, kind: str) -> Ranks:
    """Join the process group this rank was launched in, after checking it is the ``expected``
    ranks: a launcher that started independent copies (each its own world of 1) fails here."""
    global _CURRENT
    import datetime

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != expected or "RANK" not in os.environ:
        raise StageError(f"{kind} stage: started as a world of {world} where model.distributed.ranks is "
                         f"{expected}: launch it with torchrun (a launcher that starts independent "
                         f"copies, such as `accelerate launch --cpu`, trains {expected} separate models)")
    gpu = torch.cuda.is_available() and os.environ.get("MARTINGALE_DEVICE", "auto") != "cpu"
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if gpu else "gloo", timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    if dist.get_world_size() != expected:
        raise StageError(f"{kind} stage: the process group holds {dist.get_world_size()} ranks where "
                         f"model.distributed.ranks is {expected}")
    _CURRENT = Ranks(dist.get_world_size(), dist.get_rank(), strategy)
    return _CURRENT


def leave() -> None:
    """Wait for every rank, then leave the process group."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def distribute(model: M) -> tuple[M, nn.Module]:
    """Wrap a LoRA policy's model for its ranks: (the model sampling and reference forwards use,
    the module the loss's forward goes through). One rank: the model twice. ``ddp``: the model and
    its DistributedDataParallel wrapper. ``fsdp``: the model sharded in place (fully_shard on each
    decoder layer, then on the causal LM), twice."""
    r = current()
    if not r.many:
        return model, model
    if r.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        return model, DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    get_base = getattr(model, "get_base_model", None)     # a peft model: its causal LM
    base = get_base() if get_base is not None else model
    layers = set(getattr(base, "_no_split_modules", None) or ())
    for module in base.modules():
        if type(module).__name__ in layers:
            fully_shard(module)
    fully_shard(base)      # the causal LM, not peft's wrapper: generate calls its forward directly
    return model, model


def my_rows(n: int, per_chunk: int) -> list[list[int]]:
    """This rank's rows of an n-row batch (a contiguous block), in chunks of at most ``per_chunk``
    (0: one chunk); every rank gets the same number of chunks, since under FSDP each forward is a
    collective. A chunk a rank has no row for is empty (the caller runs it at weight 0)."""
    r = current()
    block = np.array_split(np.arange(n), r.world)
    longest = max(len(b) for b in block)
    chunks = max(1, -(-longest // per_chunk)) if per_chunk else 1
    return [part.tolist() for part in np.array_split(block[r.rank], chunks)]


def no_sync(loss_model: nn.Module | None, last: bool) -> AbstractContextManager[object]:
    """DDP reduces gradients in a backward; a step's chunks but its last accumulate locally."""
    sync_off = getattr(loss_model, "no_sync", None)
    return sync_off() if sync_off is not None and not last else nullcontext()


def reduce(value: torch.Tensor | float, op: str = "sum") -> torch.Tensor:
    """``value`` summed (or maxed) over the ranks; itself on one rank."""
    t = torch.as_tensor(value, dtype=torch.float64).detach().cpu().clone()
    if current().many:
        dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else t.device
        t = t.to(dev)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        t = t.cpu()
    return t


def barrier() -> None:
    """Wait for every rank (nothing on one)."""
    if current().many:
        dist.barrier()


def full_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Named tensors whole on every rank (an FSDP shard gathered: a collective), on the CPU."""
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu().clone().contiguous()
            for n, p in named}
