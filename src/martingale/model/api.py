"""``model.backend=api``: a chat model behind an OpenAI-compatible endpoint (DeepSeek, OpenAI, a
vLLM server) playing a role of a two-agent episode (``simulate.human_model`` /
``instructor_model``: the research log's DeepSeek-V3 and gpt-3.5 humans).

It answers chat conversations (``chat``) on model/api_client.py's client: ``model.api.concurrency``
requests in flight, retries with backoff, 401/403/404 failing at once, every reply cached on disk
by (endpoint, model, messages, max_tokens, temperature, seed), so a second build makes no call. An endpoint
returns text, not token ids: what needs ids or a next-token distribution (training, a stage's own
model, the forced-answer read) is refused at check (config/schema.py) and, if reached, here.
"""
from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from ..core.errors import StageError
from ..core.jsonvalue import JsonObject
from ..core.typed import section_of
from .api_client import ApiClient, choice_text
from .backend import implements
from .section import WHERE, ModelLike, model_section

NO_TOKENS = ("model.backend=api returns chat text, not token ids or log-probs: it plays an episode's role "
             "(simulate.human_model / instructor_model) with elicit.read=verbal; train, evaluate and the "
             "forced read need hf or vllm")


@implements("api")
class ApiBackend:
    """Chat replies from ``model.api.model`` at ``model.api.base_url`` (see the module doc)."""

    tokenizer = None     # no local tokenizer: conversations go as messages

    def __init__(self, model_cfg: ModelLike, where: str = "model.api"):
        self.cfg = model_section(model_cfg)
        self.client = ApiClient(self.cfg.api, where)

    @classmethod
    def load(cls, folder: Path | str, model_cfg: ModelLike) -> "ApiBackend":
        return cls(model_cfg, str(section_of(model_cfg, WHERE) or "model.api"))

    @property
    def model(self) -> None:
        return None

    def body(self, messages: list[dict[str, str]], max_new_tokens: int, temperature: float, seed: int) -> JsonObject:
        """One request: the conversation, its length cap, temperature and seed (all in the cache key)."""
        return {"model": str(self.cfg.api.model), "messages": messages, "max_tokens": int(max_new_tokens),
                "temperature": float(temperature), "seed": int(seed)}

    def chat(self, conversations: list[list[dict[str, str]]], max_new_tokens: int, temperature: float,
             seed: int) -> list[str | None]:
        """The assistant's next message in each conversation (conversation i seeded seed + i); None
        where every retry failed (counted in ``stats``)."""
        bodies = [self.body(c, max_new_tokens, temperature, seed + i) for i, c in enumerate(conversations)]
        return self.client.request_all("/chat/completions", bodies, lambda p: choice_text(p, True))

    def describe(self) -> JsonObject:
        """What played the role, for the stage's record (never the key or the address's secrets)."""
        return {"backend": "api", "api_model": str(self.cfg.api.model)}

    def stats(self) -> JsonObject:
        return self.client.stats()

    def failure(self) -> str:
        """Why its requests failed (the endpoint, the model, the first reasons)."""
        return self.client.failure()

    # -- what an endpoint cannot give -------------------------------------------------------------
    def sample(self, *args: object, **kwargs: object) -> NoReturn:
        raise StageError(NO_TOKENS)

    greedy_next = next_token_logprobs = token_logprobs = with_model = serve_adapter = sample

    def verify(self, probes: list[str]) -> JsonObject:
        return self.describe()

    def close(self) -> None:
        self.client.close()
