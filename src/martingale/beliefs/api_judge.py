"""A judge behind an OpenAI-compatible HTTP API (``elicit.judge=api``): DeepSeek-V3 as the log read
its same-mode beliefs, or any vLLM server. Greedy (temperature 0), so an answer is a function of
(model, prompt, parameters) and is cached on disk under that key: a rerun never pays twice.

The key comes from the environment variable ``judge.api_key_env`` names; it is sent in the
Authorization header and never written (the variable's name is one every writer redacts). Client
side: ``concurrency`` requests in flight, a ``timeout_s`` per request, ``retries`` with exponential
backoff on 429, 5xx, timeouts, dropped connections and unreadable bodies; 401/403/404 fail the stage
at once (retrying cannot fix a key or a model name). Every call is counted: ``stats()``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from .. import io
from ..stages.common import StageError

FATAL = {401: "the key was refused", 403: "the key may not use this model", 404: "no such model or endpoint"}
_STATED = re.compile(r"\bP\s*(?:=|:|≈)\s*[-+]?(?:\d+(?:[.,]\d+)?|[.,]\d+)(?:[eE][-+]?\d+)?(?:\s*%)?")


class JudgeError(StageError):
    """The judge cannot be used at all (refused key, unknown model, no base_url)."""


def blind(text: str) -> str:
    """The text with every stated probability hidden (``P = 0.7`` → ``P = ?``): the judge reads the
    reasoning, not the number the model wrote, as the log blinded it."""
    return _STATED.sub("P = ?", text)


class ApiJudge:
    """A client for ``judge.base_url`` answering prompts with ``judge.model`` (see the module doc)."""

    def __init__(self, judge_cfg: dict[str, Any]):
        import requests
        if not judge_cfg.get("base_url") or not judge_cfg.get("model"):
            raise JudgeError("elicit.judge=api needs judge.base_url and judge.model (an "
                             "OpenAI-compatible server and the model it serves)")
        self.cfg = judge_cfg
        self.url = str(judge_cfg["base_url"]).rstrip("/")
        self.chat = bool(judge_cfg["chat"])
        self.cache_dir = Path(judge_cfg["cache_dir"])
        self.counts = {"calls": 0, "answered": 0, "cache_hits": 0, "retries": 0, "failures": 0}
        self.failure_examples: list[str] = []
        self._lock = threading.Lock()
        key = os.environ.get(str(judge_cfg["api_key_env"] or ""), "")
        self.http = requests.Session()
        for scheme in ("http://", "https://"):   # a connection per request in flight
            self.http.mount(scheme, requests.adapters.HTTPAdapter(pool_maxsize=max(10, int(judge_cfg["concurrency"]))))
        if key:
            self.http.headers["Authorization"] = f"Bearer {key}"

    # -- requests -------------------------------------------------------------------------------
    def body(self, prompt: str) -> dict[str, Any]:
        """The request for one prompt: greedy, ``max_tokens``, chat or plain completion."""
        common = {"model": str(self.cfg["model"]), "max_tokens": int(self.cfg["max_tokens"]), "temperature": 0.0}
        if self.chat:
            return {**common, "messages": [{"role": "user", "content": prompt}]}
        return {**common, "prompt": prompt}

    def cache_path(self, body: dict[str, Any]) -> Path:
        """Where the answer to ``body`` is kept: sha256 of (endpoint kind, request body)."""
        digest = hashlib.sha256(json.dumps({"chat": self.chat, **body}, sort_keys=True).encode()).hexdigest()
        return self.cache_dir / digest[:2] / f"{digest}.json"

    def _count(self, name: str, example: str | None = None) -> None:
        with self._lock:
            self.counts[name] += 1
            if example is not None and len(self.failure_examples) < 5:
                self.failure_examples.append(example)

    def _text(self, payload: Any) -> str:
        """The first choice's text of a response body; ValueError when it has none."""
        try:
            choice = payload["choices"][0]
            text = choice["message"]["content"] if self.chat else choice["text"]
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"no choices[0] text in the response: {str(payload)[:120]!r}") from None
        if not isinstance(text, str):
            raise ValueError(f"choices[0] text is {type(text).__name__}, not a string")
        return text

    def ask(self, prompt: str) -> str | None:
        """The judge's answer to one prompt (the cache first), or None after ``retries`` failures."""
        import requests
        body = self.body(prompt)
        path = self.cache_path(body)
        if path.is_file():
            try:
                answer = json.loads(path.read_text(encoding="utf-8"))["answer"]
                self._count("cache_hits")
                return answer
            except (ValueError, KeyError):
                pass   # a damaged entry is asked again and rewritten
        endpoint = self.url + ("/chat/completions" if self.chat else "/completions")
        retries, last = int(self.cfg["retries"]), ""
        for attempt in range(retries + 1):
            if attempt:
                self._count("retries")
                time.sleep(min(float(self.cfg["backoff_s"]) * 2 ** (attempt - 1), 30.0))
            self._count("calls")
            try:
                r = self.http.post(endpoint, json=body, timeout=float(self.cfg["timeout_s"]))
            except requests.RequestException as e:
                last = type(e).__name__
                continue
            if r.status_code in FATAL:
                raise JudgeError(f"judge at {self.url}: HTTP {r.status_code} ({FATAL[r.status_code]}; "
                                 f"judge.model={self.cfg['model']}, key from ${self.cfg['api_key_env']})")
            if r.status_code != 200:
                last = f"HTTP {r.status_code}"
                continue
            try:
                answer = self._text(r.json())
            except ValueError as e:
                last = f"unreadable response ({e})"
                continue
            self._count("answered")
            io.write_json(path, {"answer": answer, "model": body["model"]})
            return answer
        self._count("failures", f"{last} after {retries + 1} tries")
        return None

    def ask_all(self, prompts: list[str]) -> list[str | None]:
        """Answers in order, ``concurrency`` requests in flight."""
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=max(1, int(self.cfg["concurrency"]))) as pool:
            return list(pool.map(self.ask, prompts))

    def stats(self) -> dict[str, Any]:
        """What this judge did, for eval.json: calls sent (retries included), prompts answered by
        the server, answered from the cache, failed after every retry, and some failure reasons."""
        return {"model": str(self.cfg["model"]), **self.counts, "failure_examples": list(self.failure_examples)}

    def close(self) -> None:
        self.http.close()
