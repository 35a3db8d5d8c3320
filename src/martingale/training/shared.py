"""A server backend (vllm, api) shared by a stage's ranks: rank 0 holds the server and asks it; the
other ranks hold the same weights in torch (the log-probs the loss needs) and receive rank 0's
answers, so every rank trains on the same samples and the server is started and billed once.

The trained adapter is served by rank 0 (gathered first under FSDP, where each rank holds a shard of
it) and checked applied there; an error on rank 0 reaches every rank as the same one line.
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TypeVar, cast

import torch.distributed as dist
from torch import nn

from ..core.errors import StageError
from ..core.jsonvalue import JsonObject
from ..model.backend import open_model, open_models
from ..model.section import ModelLike, ModelSection, model_section
from . import checkpoint, ranks

R = TypeVar("R")

SERVED = ("vllm", "api")


def _from_writer(compute: Callable[[], R]) -> R:
    """``compute()`` on rank 0, its result (or its error, raised again) on every rank."""
    payload: list[tuple[str, object] | None] = [None]
    if ranks.current().writer:
        try:
            payload = [("ok", compute())]
        except StageError as e:
            payload = [("error", str(e))]
        except Exception as e:     # noqa: BLE001 - every rank stops with rank 0's line
            payload = [("error", f"rank 0: {type(e).__name__}: {e}")]
    dist.broadcast_object_list(payload, src=0)
    got = payload[0]
    assert got is not None, "rank 0 broadcasts its result"
    kind, value = got
    if kind == "error":
        raise StageError(str(value))
    return cast(R, value)


class Shared:
    """One backend across the ranks: generation from rank 0's ``served`` backend, log-probs from this
    rank's ``local`` torch model (None where nothing local is needed: an api role)."""

    def __init__(self, served: Any, local: Any, model_cfg: ModelLike):
        self.served, self.local, self.cfg = served, local, model_cfg
        self.tokenizer = getattr(served if served is not None else local, "tokenizer", None)

    @property
    def model(self) -> Any:
        return (self.served if self.served is not None else self.local).model

    def with_model(self, model: nn.Module) -> "Shared":
        served = self.served.with_model(model) if self.served is not None else None
        local = self.local.with_model(model) if self.local is not None else None
        return Shared(served, local, self.cfg)

    def sample(self, prompts: list[str], max_new_tokens: int, temperature: float, seed: int):
        return _from_writer(lambda: self.served.sample(prompts, max_new_tokens, temperature, seed))

    def greedy_next(self, texts: list[str], max_new_tokens: int = 1) -> list[str]:
        return _from_writer(lambda: self.served.greedy_next(texts, max_new_tokens))

    def next_token_logprobs(self, texts: list[str], top: int):
        return _from_writer(lambda: self.served.next_token_logprobs(texts, top))

    def chat(self, conversations, max_new_tokens: int, temperature: float, seed: int):
        return _from_writer(lambda: self.served.chat(conversations, max_new_tokens, temperature, seed))

    def token_logprobs(self, batch, temperature: float = 1.0, completion_only: bool = False):
        return (self.served if self.served is not None else self.local).token_logprobs(batch, temperature,
                                                                                       completion_only)

    def verify(self, probes: list[str]) -> JsonObject:
        return _from_writer(lambda: self.served.verify(probes))

    def serve_adapter(self, model: Any, folder: Optional[Path], probes: list[str], step: int | None = None) -> None:
        """Rank 0 serves the policy's adapter (whole: gathered under FSDP, every rank taking part)
        and checks it applied, as often as ``vllm.reload_every`` says."""
        every = model_section(self.cfg).vllm.reload_every
        if step is not None and (step + 1) % every != 0:
            return
        whole = ranks.full_tensors(checkpoint.adapter(model).items()) if ranks.current().strategy == "fsdp" else None

        def serve() -> None:
            if whole is None:
                self.served.serve_adapter(model, folder, probes, None)
                return
            model.save_pretrained(folder, state_dict=whole)
            self.served.load_adapter("policy", folder)
            self.served.check_adapter_applied("policy", probes)
        _from_writer(serve)

    def close(self) -> None:
        for b in (self.served, self.local):
            if b is not None:
                b.close()


def _local_cfg(model_cfg: ModelLike) -> ModelSection:
    """The model config a rank opens its torch copy with: the same model on the hf backend."""
    return dataclasses.replace(model_section(model_cfg), backend="hf")


@contextmanager
def ranked_models(model: Path | str, judge: Path | str, model_cfg: ModelLike,
                  judge_needed: bool) -> Iterator[tuple[Any, Any]]:
    """open_models for a stage's ranks: as it is on one rank or in-process (hf); with a server
    backend, rank 0 opens it (one server) and every rank the same weights in torch."""
    if not ranks.current().many or model_section(model_cfg).backend not in SERVED:
        with open_models(model, judge, model_cfg, judge_needed) as pair:
            yield pair
        return
    writer = ranks.current().writer
    with open_models(model, judge, model_cfg if writer else _local_cfg(model_cfg), judge_needed) as (gen, judge_gen):
        yield (Shared(gen if writer else None, None if writer else gen, model_cfg),
               None if judge_gen is None else Shared(judge_gen if writer else None, None if writer else judge_gen,
                                                     model_cfg))


def ranked_model(folder: Path | str, model_cfg: ModelLike) -> Any:
    """open_model for a role a stage's ranks share (an episode's human): a server or an api role
    is opened by rank 0 alone and answers for every rank."""
    backend = model_section(model_cfg).backend
    if not ranks.current().many or backend not in SERVED:
        return open_model(folder, model_cfg)
    if ranks.current().writer:
        return Shared(open_model(folder, model_cfg), None, model_cfg)
    return Shared(None, open_model(folder, _local_cfg(model_cfg)) if backend == "vllm" else None, model_cfg)
