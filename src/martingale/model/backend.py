"""Generation backends: the one protocol every stage generates and scores through, by name.

A backend samples traces, greedy-completes prefixes (a judge's read) and scores completion token
log-probs. ``model.backend`` names one of ``BACKENDS``; a backend registers itself with
``@backend(name, section=...)`` in its own module of this package (``backends()`` imports each
once, like the stage kinds), its settings, if it has any, a section of its own under ``model``. Light to import (the schema's ``choices()`` reads the registry at compose time): torch
and transformers are imported inside the methods.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, runtime_checkable

from ..domains import Section
from ..registry import Registry

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

    def next_token_logprobs(self, texts: list[str], top: int) -> list[dict[int, float]]:
        """The ``top`` most likely next tokens after each text, {token id: log π} (the forced read)."""

    def token_logprobs(self, batch: "Batch", temperature: float = 1.0, completion_only: bool = False) -> "torch.Tensor":
        """log π(token | prefix) at each position of the batch, 0 off its completion tokens, [B, T];
        π at ``temperature`` (logits / T), the distribution the samples were drawn from
        (``completion_only``: vocabulary logits computed at the completion positions only)."""

    def with_model(self, model: Any) -> "Backend":
        """The same backend generating with ``model`` (a peft policy on these weights)."""

    def verify(self, probes: list[str]) -> dict[str, Any]:
        """Check the backend serves these weights (probe prompts); what was checked, for stage.json."""

    def serve_adapter(self, model: Any, folder: Path, probes: list[str], step: int | None = None) -> None:
        """Make later samples come from the LoRA policy ``model`` after optimizer step ``step`` (None:
        now, whatever its cadence; a server backend saves its adapter to ``folder`` and reloads it
        as often as its own settings say; in-process backends already sample from it)."""

    def chat(self, conversations: list[list[dict[str, str]]], max_new_tokens: int, temperature: float,
             seed: int) -> list[str | None]:
        """The assistant's next message in each conversation ([{role, content}, …]): a chat
        episode's turn (episodes/chat.py); None where a remote call failed."""

    def close(self) -> None:
        """Release what ``load`` started (a server)."""


BACKENDS: Registry = Registry("backend")
HELPERS = ("api_client", "backend", "generate", "lean", "load", "tokenizer")   # modules here that register no backend
def backends() -> dict[str, type]:
    """Every registered backend, after importing each backend module of this package (once)."""
    return BACKENDS.discover(__package__, [str(Path(__file__).parent)], HELPERS)


def backend(name: str, section: Section | None = None) -> Callable[[type], type]:
    """Register the decorated class as backend ``name`` (the value of ``model.backend``); its own
    settings, if any, are ``section`` (under ``model``: ``model.<section.key>``), its ``config_section``."""
    def register(cls: type) -> type:
        cls.config_section = section
        return BACKENDS.add(name, cls)
    return register


def backend_sections() -> dict[str, Section]:
    """Backend name → its section (``model.<key>``), for every backend that declares one."""
    return {name: cls.config_section for name, cls in backends().items()
            if getattr(cls, "config_section", None) is not None}


def backend_class(model_cfg: dict[str, Any]) -> type:
    """The backend ``model.backend`` names."""
    name = model_cfg["backend"]
    if name not in backends():
        raise ValueError(f"model.backend: unknown backend {name!r} (known: {', '.join(BACKENDS)})")
    return BACKENDS[name]


def open_model(folder: Path | str, model_cfg: dict[str, Any]) -> Backend:
    """The model in a stage folder (or a local HF folder), behind the configured backend."""
    return backend_class(model_cfg).load(folder, model_cfg)


@contextmanager
def open_models(model: Path | str, judge: Path | str, model_cfg: dict[str, Any],
                judge_needed: bool) -> Iterator[tuple[Backend, Backend | None]]:
    """A stage's model and its judge (None when its reader needs none) behind the configured
    backend, closed when the stage is done; a judge in the model's own folder is the same backend
    (one server, not two)."""
    opened: list[Backend] = []
    try:
        opened.append(open_model(model, model_cfg))
        gen = opened[0]
        if judge_needed and Path(judge).resolve() != Path(model).resolve():
            opened.append(open_model(judge, model_cfg))
        yield gen, (opened[-1] if judge_needed else None)
    finally:
        for b in opened:
            b.close()


def render_chat(tokenizer: Any, messages: list[dict[str, str]], prefix: str = "") -> str:
    """A conversation as the model reads it (its tokenizer's chat template, the assistant's turn
    opened), then ``prefix`` as the start of its answer (the forced read's "P = 0.")."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("a chat episode needs a chat model: this tokenizer has no chat template")
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + prefix


def chat_by_template(gen: Any, conversations: list[list[dict[str, str]]], max_new_tokens: int,
                     temperature: float, seed: int) -> list[str | None]:
    """``chat`` for a backend with a local tokenizer: render, then sample."""
    texts = [render_chat(gen.tokenizer, c) for c in conversations]
    return list(gen.sample(texts, max_new_tokens, temperature, seed).texts)


@backend("hf")
class HFBackend:
    """transformers in-process: wraps a causal LM (a peft model too) and its tokenizer."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 0) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size    # model.generate_batch: prompts a generate call at most, by length (0 = all)

    @classmethod
    def load(cls, folder: Path | str, model_cfg: dict[str, Any]) -> "HFBackend":
        from .load import load
        return cls(*load(folder, model_cfg), batch_size=int(model_cfg.get("generate_batch") or 0))

    def sample(self, prompts: list[str], max_new_tokens: int, temperature: float, seed: int) -> "Batch":
        from .generate import sample
        return sample(self.model, self.tokenizer, prompts, max_new_tokens, temperature, seed, self.batch_size)

    def greedy_next(self, texts: list[str], max_new_tokens: int = 1) -> list[str]:
        from .generate import greedy_next
        return greedy_next(self.model, self.tokenizer, texts, max_new_tokens, self.batch_size)

    def next_token_logprobs(self, texts: list[str], top: int) -> list[dict[int, float]]:
        from .generate import next_token_logprobs
        return next_token_logprobs(self.model, self.tokenizer, texts, top)

    def token_logprobs(self, batch: "Batch", temperature: float = 1.0, completion_only: bool = False) -> "torch.Tensor":
        from .generate import token_logprobs
        return token_logprobs(self.model, batch, temperature, completion_only)

    def with_model(self, model: Any) -> "HFBackend":
        return type(self)(model, self.tokenizer, self.batch_size)

    def verify(self, probes: list[str]) -> dict[str, Any]:
        return {}   # the reference every other backend is compared with

    def serve_adapter(self, model: Any, folder: Path, probes: list[str], step: int | None = None) -> None:
        pass        # samples already come from the in-process policy

    def chat(self, conversations: list[list[dict[str, str]]], max_new_tokens: int, temperature: float,
             seed: int) -> list[str | None]:
        return chat_by_template(self, conversations, max_new_tokens, temperature, seed)

    def close(self) -> None:
        pass
