"""Generation backends: the one protocol every stage generates and scores through, by name.

A backend samples traces, greedy-completes prefixes (a judge's read) and scores completion token
log-probs. ``model.backend`` names one of ``BACKENDS``; a backend registers itself with
``@backend(name)``. Light to import (the schema's ``choices()`` reads the registry at compose
time): torch and transformers are imported inside the methods.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from .generate import Batch


@runtime_checkable
class Backend(Protocol):
    """What the stages need from a model; ``load`` (a classmethod) opens a stage's model folder."""

    @classmethod
    def load(cls, folder: Path | str, model_cfg: dict[str, Any]) -> "Backend": ...

    def sample(self, prompts: list[str], max_new_tokens: int, temperature: float, seed: int) -> "Batch":
        """One completion per prompt (temperature 0 = greedy), seeded for determinism."""

    def greedy_next(self, texts: list[str], max_new_tokens: int = 1) -> list[str]:
        """The greedy continuation of each text, decoded."""

    def token_logprobs(self, batch: "Batch") -> "torch.Tensor":
        """log π(token | prefix) at each position of the batch, 0 off its completion tokens, [B, T]."""


BACKENDS: dict[str, type] = {}


def backend(name: str) -> Callable[[type], type]:
    """Register the decorated class as backend ``name`` (the value of ``model.backend``)."""
    def register(cls: type) -> type:
        if name in BACKENDS:
            raise ValueError(f"backend {name}: already registered ({BACKENDS[name].__qualname__})")
        BACKENDS[name] = cls
        return cls
    return register


def backend_class(model_cfg: dict[str, Any]) -> type:
    """The backend ``model.backend`` names."""
    name = model_cfg["backend"]
    if name not in BACKENDS:
        raise ValueError(f"model.backend: unknown backend {name!r} (known: {', '.join(BACKENDS)})")
    return BACKENDS[name]


def open_model(folder: Path | str, model_cfg: dict[str, Any]) -> Backend:
    """The model in a stage folder (or a local HF folder), behind the configured backend."""
    return backend_class(model_cfg).load(folder, model_cfg)


@backend("hf")
class HFBackend:
    """transformers in-process: wraps a causal LM (a peft model too) and its tokenizer."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, folder: Path | str, model_cfg: dict[str, Any]) -> "HFBackend":
        from .load import load
        return cls(*load(folder, model_cfg))

    def sample(self, prompts: list[str], max_new_tokens: int, temperature: float, seed: int) -> "Batch":
        from .generate import sample
        return sample(self.model, self.tokenizer, prompts, max_new_tokens, temperature, seed)

    def greedy_next(self, texts: list[str], max_new_tokens: int = 1) -> list[str]:
        from .generate import greedy_next
        return greedy_next(self.model, self.tokenizer, texts, max_new_tokens)

    def token_logprobs(self, batch: "Batch") -> "torch.Tensor":
        from .generate import token_logprobs
        return token_logprobs(self.model, batch)
