"""``model.backend=hf``: transformers in-process (the lean forward where it covers the model)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch
from torch import nn

from ..core.jsonvalue import JsonObject
from .backend import chat_by_template, implements
from .generate import Batch, greedy_next, next_token_logprobs, sample, token_logprobs
from .load import load
from .section import ModelLike, model_section

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@implements("hf")
class HFBackend:
    """transformers in-process: wraps a causal LM (a peft model too) and its tokenizer."""

    def __init__(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, batch_size: int = 0) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size    # model.generate_batch: prompts a generate call at most, by length (0 = all)

    @classmethod
    def load(cls, folder: Path | str, model_cfg: ModelLike) -> "HFBackend":
        model, tokenizer = load(folder, model_cfg)
        return cls(model, tokenizer, batch_size=model_section(model_cfg).generate_batch)

    def sample(self, prompts: list[str], max_new_tokens: int, temperature: float, seed: int) -> "Batch":
        return sample(self.model, self.tokenizer, prompts, max_new_tokens, temperature, seed, self.batch_size)

    def greedy_next(self, texts: list[str], max_new_tokens: int = 1) -> list[str]:
        return greedy_next(self.model, self.tokenizer, texts, max_new_tokens, self.batch_size)

    def next_token_logprobs(self, texts: list[str], top: int) -> list[dict[int, float]]:
        return next_token_logprobs(self.model, self.tokenizer, texts, top)

    def token_logprobs(self, batch: "Batch", temperature: float = 1.0, completion_only: bool = False) -> "torch.Tensor":
        return token_logprobs(self.model, batch, temperature, completion_only)

    def with_model(self, model: nn.Module) -> "HFBackend":
        return type(self)(model, self.tokenizer, self.batch_size)

    def verify(self, probes: list[str]) -> JsonObject:
        return {}   # the reference every other backend is compared with

    def serve_adapter(self, model: nn.Module, folder: Optional[Path], probes: list[str], step: int | None = None) -> None:
        pass        # samples already come from the in-process policy

    def chat(self, conversations: list[list[dict[str, str]]], max_new_tokens: int, temperature: float,
             seed: int) -> list[str | None]:
        return chat_by_template(self, conversations, max_new_tokens, temperature, seed)

    def close(self) -> None:
        pass
