"""A judge behind an OpenAI-compatible HTTP API (``elicit.judge=api``): DeepSeek-V3 as the research log read
its same-mode beliefs, or any vLLM server. Greedy (temperature 0), so an answer is a function of
(endpoint, model, prompt, parameters) and is cached on disk under that key: a rerun never pays twice.

The key comes from the environment variable ``judge.api_key_env`` names; it is sent in the
Authorization header and never written (the variable's name is one every writer redacts). The
client (concurrency, timeouts, retries with backoff, 401/403/404 failing at once, the disk cache,
the counts) is model/api_client.py's, shared with the api backend.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..core.jsonvalue import JsonObject
from ..core.settings import COUNT, NONNEG, SERVED_NAME, Flag, Int, ProjectPath, SecretVar, Url, setting
from ..core.typed import typed
from ..model.api_client import FATAL, ApiClient, ApiError, choice_text  # noqa: F401 (FATAL: the judge's refusals)

_STATED = re.compile(r"\bP\s*(?:=|:|≈)\s*[-+]?(?:\d+(?:[.,]\d+)?|[.,]\d+)(?:[eE][-+]?\d+)?(?:\s*%)?")


@dataclass
class JudgeConfig:
    """An OpenAI-compatible judge for ``elicit.judge=api`` (the api reader's section, ``judge``):
    greedy, cached. Only model, chat and max_tokens are what it computes; the rest is how to reach it."""
    base_url: Optional[str] = setting(None, Url(), "e.g. https://api.deepseek.com/v1 or a vLLM server's http://host:port/v1")
    model: Optional[str] = setting(None, SERVED_NAME, "the served model name, e.g. deepseek-chat")
    chat: bool = setting(False, Flag(), "/chat/completions (a chat model) instead of /completions")
    max_tokens: int = setting(8, COUNT)
    api_key_env: str = setting("MARTINGALE_JUDGE_API_KEY", SecretVar(), "the variable holding the key; never written")
    concurrency: int = setting(8, COUNT, "requests in flight")
    timeout_s: int = setting(60, COUNT, "per request")
    retries: int = setting(4, Int(0), "on 429, 5xx, timeouts, dropped connections, unreadable bodies")
    backoff_s: float = setting(1.0, NONNEG, "first retry's wait, doubled each retry (at most 30 s)")
    cache_dir: str = setting("results/_judge_cache", ProjectPath(),
        "answers by (model, prompt, parameters): a rerun never pays twice")


class JudgeError(ApiError):
    """The judge cannot be used at all (refused key, unknown model, no base_url)."""


def blind(text: str) -> str:
    """The text with every stated probability hidden (``P = 0.7`` → ``P = ?``): the judge reads the
    reasoning, not the number the model wrote, as the research log blinded it."""
    return _STATED.sub("P = ?", text)


class ApiJudge:
    """A client for ``judge.base_url`` answering prompts with ``judge.model`` (see the module doc)."""

    def __init__(self, judge_cfg: object):
        self.cfg = cfg = typed(JudgeConfig, judge_cfg, "judge")
        self.chat = bool(cfg.chat)
        self.client = ApiClient(cfg, "judge", JudgeError)
        self.url = self.client.url

    def body(self, prompt: str) -> JsonObject:
        """The request for one prompt: greedy, ``max_tokens``, chat or plain completion."""
        common = {"model": str(self.cfg.model), "max_tokens": int(self.cfg.max_tokens), "temperature": 0.0}
        if self.chat:
            return {**common, "messages": [{"role": "user", "content": prompt}]}
        return {**common, "prompt": prompt}

    def cache_path(self, body: JsonObject):
        """Where the answer to ``body`` is kept: sha256 of (endpoint, request body)."""
        return self.client.cache_path(self._path(), body)

    def _path(self) -> str:
        return "/chat/completions" if self.chat else "/completions"

    def ask(self, prompt: str) -> str | None:
        """The judge's answer to one prompt (the cache first), or None after ``retries`` failures."""
        return self.client.request(self._path(), self.body(prompt), lambda p: choice_text(p, self.chat))

    def ask_all(self, prompts: list[str]) -> list[str | None]:
        """Answers in order, ``concurrency`` requests in flight."""
        return self.client.request_all(self._path(), [self.body(p) for p in prompts],
                                       lambda p: choice_text(p, self.chat))

    def stats(self) -> JsonObject:
        """What this judge did, for eval.json: calls sent (retries included), prompts answered by
        the server, answered from the cache, failed after every retry, and some failure reasons."""
        return self.client.stats()

    def close(self) -> None:
        self.client.close()
