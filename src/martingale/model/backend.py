"""Generation backends: the one protocol every stage generates and scores through, by name.

A backend samples traces, greedy-completes prefixes (a judge's read) and scores completion token
log-probs. ``model.backend`` names one of ``BACKENDS``. A backend is declared (its name, its
settings' section under ``model``, the module that implements it: ``declare_backend``), and its
class is imported only when a model is opened (``backend_class``): the schema reads the
declarations at compose time without torch. A backend in one new file registers its class with
``@backend(name, section=...)`` (``backends()`` imports such files of this package once).
"""
from __future__ import annotations

import importlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Protocol, cast, runtime_checkable

from ..core.jsonvalue import JsonObject
from ..core.registry import Registry
from ..core.settings import Section
from ..core.typed import section_of
from .api_client import ApiModelConfig
from .serving import VLLMConfig

if TYPE_CHECKING:
    import torch
    from peft import PeftModel
    from torch import nn
    from transformers import PreTrainedTokenizerBase

    from .generate import Batch
    from .section import ModelLike


@runtime_checkable
class Backend(Protocol):
    """What the stages need from a model; ``load`` (a classmethod) opens a stage's model folder."""

    @property
    def tokenizer(self) -> Optional[PreTrainedTokenizerBase]:
        """The local tokenizer (None: an api model, conversations go as messages)."""


    @property
    def model(self) -> Optional[nn.Module]:
        """The torch model it generates with (None: a remote one)."""

    @classmethod
    def load(cls, folder: Path | str, model_cfg: ModelLike) -> "Backend": ...

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

    def with_model(self, model: nn.Module) -> "Backend":
        """The same backend generating with ``model`` (a peft policy on these weights)."""

    def verify(self, probes: list[str]) -> JsonObject:
        """Check the backend serves these weights (probe prompts); what was checked, for stage.json."""

    def serve_adapter(self, model: PeftModel, folder: Optional[Path], probes: list[str], step: int | None = None) -> None:
        """Make later samples come from the LoRA policy ``model`` after optimizer step ``step`` (None:
        now, whatever its cadence; a server backend saves its adapter to ``folder`` and reloads it
        as often as its own settings say; in-process backends already sample from it)."""

    def chat(self, conversations: list[list[dict[str, str]]], max_new_tokens: int, temperature: float,
             seed: int) -> list[str | None]:
        """The assistant's next message in each conversation ([{role, content}, …]): a chat
        episode's turn (episodes/chat.py); None where a remote call failed."""

    def close(self) -> None:
        """Release what ``load`` started (a server)."""


@dataclass
class BackendKind:
    """A declared backend: its name (``model.backend``), its settings' section (``model.<key>``),
    and its body: the class, or the module whose ``@implements(name)`` class it is."""
    name: str
    section: Optional[Section]
    body: str | type


BACKENDS: Registry = Registry("backend")
BUILT_IN = ("hf", "api", "vllm")                  # their modules are bodies: imported by backend_class
# the modules of this package that declare no backend (tests/test_imports.py checks)
HELPERS = ("api_client", "generate", "lean", "load", "tokenizer", "section", "serving", "vllm_server", *BUILT_IN)


def declare_backend(name: str, body: str | type, section: Section | None = None) -> BackendKind:
    """Declare backend ``name``: ``body`` is its class or the module that implements it."""
    return BACKENDS.add(name, BackendKind(name, section, body))


def backend(name: str, section: Section | None = None) -> Callable[[type], type]:
    """A backend in one file: register the decorated class as backend ``name``, its settings (if
    any) ``section`` under ``model``."""
    def register(cls: type) -> type:
        declare_backend(name, cls, section)
        return cls
    return register


def implements(name: str) -> Callable[[type], type]:
    """The class of a declared backend, in its body module: ``backend_class`` finds it here."""
    def register(cls: type) -> type:
        kind = BACKENDS[name]
        kind.body = cls
        return cls
    return register


declare_backend("hf", f"{__package__}.hf")
declare_backend("api", f"{__package__}.api", Section("api", ApiModelConfig))
declare_backend("vllm", f"{__package__}.vllm", Section("vllm", VLLMConfig, in_every_run=True))


def backends() -> dict[str, BackendKind]:
    """Every declared backend, after importing each one-file backend module of this package (once)."""
    return BACKENDS.discover(__package__, [str(Path(__file__).parent)], HELPERS)


def backend_sections() -> dict[str, Section]:
    """Backend name → its section (``model.<key>``), for every backend that declares one."""
    return {name: kind.section for name, kind in backends().items() if kind.section is not None}


def backend_class(model_cfg: ModelLike) -> type[Backend]:
    """The class of the backend ``model.backend`` names (its module imported now)."""
    name = section_of(model_cfg, "backend")
    if name not in backends():
        raise ValueError(f"model.backend: unknown backend {name!r} (known: {', '.join(BACKENDS)})")
    kind = BACKENDS[name]
    if isinstance(kind.body, str):
        importlib.import_module(kind.body)          # its @implements sets kind.body to the class
    assert isinstance(kind.body, type), name
    return kind.body


def open_model(folder: Path | str, model_cfg: ModelLike) -> Backend:
    """The model in a stage folder (or a local HF folder), behind the configured backend."""
    return backend_class(model_cfg).load(folder, model_cfg)


@contextmanager
def open_models(model: Path | str, judge: Path | str, model_cfg: ModelLike,
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


def render_chat(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], prefix: str = "") -> str:
    """A conversation as the model reads it (its tokenizer's chat template, the assistant's turn
    opened), then ``prefix`` as the start of its answer (the forced read's "P = 0.")."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("a chat episode needs a chat model: this tokenizer has no chat template")
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return cast(str, text) + prefix       # tokenize=False: the rendered text


def chat_by_template(gen: Backend, conversations: list[list[dict[str, str]]], max_new_tokens: int,
                     temperature: float, seed: int) -> list[str | None]:
    """``chat`` for a backend with a local tokenizer: render, then sample."""
    tokenizer = gen.tokenizer
    if tokenizer is None:
        raise ValueError("chat by the chat template needs the model's own tokenizer: this backend has none")
    texts = [render_chat(tokenizer, c) for c in conversations]
    return list(gen.sample(texts, max_new_tokens, temperature, seed).texts)


