"""One client for OpenAI-compatible HTTP endpoints (DeepSeek, OpenAI, a vLLM server): the api
judge's (beliefs/api_judge.py) and the api backend's (model/api.py).

``concurrency`` requests in flight, a ``timeout_s`` per request, ``retries`` with exponential
backoff (``backoff_s``·2^k, at most 30 s) on 429, 5xx, timeouts, dropped connections and unreadable
bodies; 401/403/404 fail the stage at once (retrying cannot fix a key or a model name). Every answer
is cached on disk under the sha256 of (endpoint, request body): the model, the messages, every
parameter, the seed. A rerun never pays twice. The key comes from the environment variable
``api_key_env`` names, goes only into the Authorization header, and is never written (the
variable's name is one every writer redacts). Every call is counted: ``stats()``.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .. import io
from ..domains import COUNT, NONNEG, SERVED_NAME, Int, ProjectPath, SecretVar, Url, setting
from ..errors import StageError


@dataclass
class ApiModelConfig:
    """An OpenAI-compatible chat endpoint for ``backend: api`` (model/api.py; the backend's section,
    ``model.api``): a two-agent episode's role generating through DeepSeek, OpenAI or a vLLM server.
    Only ``model`` is what it computes; the rest is how to reach it (the client here)."""
    base_url: Optional[str] = setting(None, Url(), "e.g. https://api.deepseek.com/v1, or a vLLM server's http://host:port/v1")
    model: Optional[str] = setting(None, SERVED_NAME, "the served model name, e.g. deepseek-chat")
    api_key_env: str = setting("MARTINGALE_API_KEY", SecretVar(), "the variable holding the key; never written")
    concurrency: int = setting(8, COUNT, "requests in flight")
    timeout_s: int = setting(120, COUNT, "per request")
    retries: int = setting(4, Int(0), "on 429, 5xx, timeouts, dropped connections, unreadable bodies")
    backoff_s: float = setting(1.0, NONNEG, "first retry's wait, doubled each retry (at most 30 s)")
    cache_dir: str = setting("results/_api_cache", ProjectPath(), "replies by (model, messages, parameters, seed)")


FATAL = {401: "the key was refused", 403: "the key may not use this model", 404: "no such model or endpoint"}
MAX_BACKOFF_S = 30.0


class ApiError(StageError):
    """The endpoint cannot be used at all (refused key, unknown model, no base_url)."""


class ApiClient:
    """POSTs JSON bodies to ``cfg['base_url']`` + a path; ``where`` names the config block in
    messages (``judge``, ``simulate.human_model.api``)."""

    def __init__(self, cfg: dict[str, Any], where: str, error: type[StageError] = ApiError):
        import requests
        self.where, self.error = where, error
        if not cfg.get("base_url") or not cfg.get("model"):
            raise error(f"{where} needs {where}.base_url and {where}.model (an OpenAI-compatible server and "
                        "the model it serves)")
        self.cfg = cfg
        self.url = str(cfg["base_url"]).rstrip("/")
        self.cache_dir = Path(cfg["cache_dir"])
        self.counts = {"calls": 0, "answered": 0, "cache_hits": 0, "retries": 0, "failures": 0}
        self.failure_examples: list[str] = []
        self._lock = threading.Lock()
        key = os.environ.get(str(cfg["api_key_env"] or ""), "")
        self.http = requests.Session()
        for scheme in ("http://", "https://"):   # a connection per request in flight
            self.http.mount(scheme, requests.adapters.HTTPAdapter(pool_maxsize=max(10, int(cfg["concurrency"]))))
        if key:
            self.http.headers["Authorization"] = f"Bearer {key}"

    def cache_path(self, kind: Any, body: dict[str, Any]) -> Path:
        """Where the answer to ``body`` at endpoint ``kind`` is kept: sha256 of both."""
        digest = hashlib.sha256(json.dumps({"chat": kind, **body}, sort_keys=True).encode()).hexdigest()
        return self.cache_dir / digest[:2] / f"{digest}.json"

    def _count(self, name: str, example: Optional[str] = None) -> None:
        with self._lock:
            self.counts[name] += 1
            if example is not None and len(self.failure_examples) < 5:
                self.failure_examples.append(example)

    def request(self, path: str, body: dict[str, Any], read: Callable[[Any], Any], kind: Any) -> Any:
        """``read(response JSON)`` for one body (the cache first), or None after every retry failed.
        ``read`` raises ValueError on a body it cannot use (retried like a server error)."""
        import requests
        cached = self.cache_path(kind, body)
        if cached.is_file():
            try:
                answer = json.loads(cached.read_text(encoding="utf-8"))["answer"]
                self._count("cache_hits")
                return answer
            except (ValueError, KeyError):
                pass   # a damaged entry is asked again and rewritten
        retries, last = int(self.cfg["retries"]), ""
        for attempt in range(retries + 1):
            if attempt:
                self._count("retries")
                time.sleep(min(float(self.cfg["backoff_s"]) * 2 ** (attempt - 1), MAX_BACKOFF_S))
            self._count("calls")
            try:
                r = self.http.post(self.url + path, json=body, timeout=float(self.cfg["timeout_s"]))
            except requests.RequestException as e:
                last = type(e).__name__
                continue
            if r.status_code in FATAL:
                raise self.error(f"{self.where} at {self.url}: HTTP {r.status_code} ({FATAL[r.status_code]}; "
                                 f"{self.where}.model={self.cfg['model']}, key from ${self.cfg['api_key_env']})")
            if r.status_code != 200:
                last = f"HTTP {r.status_code}"
                continue
            try:
                answer = read(r.json())
            except ValueError as e:
                last = f"unreadable response ({e})"
                continue
            self._count("answered")
            io.write_json(cached, {"answer": answer, "model": body["model"]})
            return answer
        self._count("failures", f"{last} after {retries + 1} tries")
        return None

    def request_all(self, path: str, bodies: list[dict[str, Any]], read: Callable[[Any], Any], kind: Any) -> list:
        """Answers in order, ``concurrency`` requests in flight."""
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=max(1, int(self.cfg["concurrency"]))) as pool:
            return list(pool.map(lambda b: self.request(path, b, read, kind), bodies))

    def stats(self) -> dict[str, Any]:
        """Calls sent (retries included), answered by the server, from the cache, failed after every
        retry, and some failure reasons."""
        return {"model": str(self.cfg["model"]), **self.counts, "failure_examples": list(self.failure_examples)}

    def close(self) -> None:
        self.http.close()


def choice_text(payload: Any, chat: bool) -> str:
    """The first choice's text of a completions or chat completions body; ValueError when none."""
    try:
        choice = payload["choices"][0]
        text = choice["message"]["content"] if chat else choice["text"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"no choices[0] text in the response: {str(payload)[:120]!r}") from None
    if not isinstance(text, str):
        raise ValueError(f"choices[0] text is {type(text).__name__}, not a string")
    return text
