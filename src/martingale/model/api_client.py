"""One client for OpenAI-compatible HTTP endpoints (DeepSeek, OpenAI, a vLLM server): the api
judge's (beliefs/api_judge.py) and the api backend's (model/api.py).

``concurrency`` requests in flight; ``timeout_s`` of wall clock per request (a server trickling
its reply is cut there); ``retries`` on 429, 5xx, timeouts, dropped connections and unreadable
bodies, waiting ``backoff_s``·2^k (at most 30 s) or the server's ``Retry-After`` (at most 60 s),
plus up to a quarter more at random so conversations do not retry in step; 401/403/404 fail the
stage at once (retrying cannot fix a key or a model name). An answer is cached on disk under the
sha256 of the endpoint's URL and the request body (model, messages, every parameter, the seed),
so a rerun never pays twice; an empty answer is never cached. Answers come back redacted, so
a conversation built on one replays from the cache. The key comes from the environment variable
``api_key_env`` names, goes only into the Authorization header, and is never written. Every
call is counted: ``stats()``.
"""
from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..core.errors import StageError
from ..core.jsonvalue import Json, JsonObject
from ..core.settings import COUNT, NONNEG, SERVED_NAME, Int, ProjectPath, SecretVar, Url, setting
from ..core.typed import typed
from ..store import files

if TYPE_CHECKING:
    import requests


@dataclass
class ApiModelConfig:
    """An OpenAI-compatible chat endpoint for ``backend: api`` (model/api.py; the backend's section,
    ``model.api``): a two-agent episode's role generating through DeepSeek, OpenAI or a vLLM server.
    Only ``model`` is what it computes; the rest is how to reach it (the client here)."""
    base_url: Optional[str] = setting(None, Url(), "e.g. https://api.deepseek.com/v1, or a vLLM server's http://host:port/v1")
    model: Optional[str] = setting(None, SERVED_NAME, "the served model name, e.g. deepseek-chat")
    api_key_env: str = setting("MARTINGALE_API_KEY", SecretVar(), "the variable holding the key; never written")
    concurrency: int = setting(8, COUNT, "requests in flight")
    timeout_s: int = setting(120, COUNT, "wall clock per request, the whole reply included")
    retries: int = setting(4, Int(0), "on 429, 5xx, timeouts, dropped connections, unreadable bodies")
    backoff_s: float = setting(1.0, NONNEG, "first retry's wait, doubled each retry (at most 30 s)")
    cache_dir: str = setting("results/_api_cache", ProjectPath(), "replies by (endpoint, model, messages, parameters, seed)")


FATAL = {401: "the key was refused", 403: "the key may not use this model", 404: "no such model or endpoint"}
MAX_BACKOFF_S = 30.0         # the longest exponential wait
MAX_RETRY_AFTER_S = 60.0     # the longest wait a server's Retry-After can ask for
JITTER = 0.25                # each wait is lengthened by up to this share, at random
READ_CHUNK = 65536


class ApiError(StageError):
    """The endpoint cannot be used at all (refused key, unknown model, no base_url)."""


class Retry(Exception):
    """One try failed in a way another try may not: ``reason`` for the failure line, ``wait_s``
    the server asked for (Retry-After), if any."""

    def __init__(self, reason: str, wait_s: Optional[float] = None):
        super().__init__(reason)
        self.reason, self.wait_s = reason, wait_s


def retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), None if unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def wait_before(attempt: int, backoff_s: float, asked_s: Optional[float]) -> float:
    """The wait before retry ``attempt`` (1, 2 …): the server's Retry-After (capped) where it sent
    one, else backoff_s·2^(attempt−1) (capped); then up to JITTER more at random."""
    base = min(asked_s, MAX_RETRY_AFTER_S) if asked_s is not None else min(backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S)
    return base * (1 + JITTER * random.random())


class ApiClient:
    """POSTs JSON bodies to ``cfg.base_url`` + a path; ``where`` names the config block in
    messages (``judge``, ``simulate.human_model.api``)."""

    def __init__(self, cfg: Any, where: str, error: type[StageError] = ApiError):
        self.where, self.error = where, error
        if not dataclasses.is_dataclass(cfg):   # an endpoint's keys: typed as model.api's (a judge's section is typed already)
            cfg = typed(ApiModelConfig, {k: v for k, v in cfg.items() if k in ApiModelConfig.__dataclass_fields__}, where)
        if not cfg.base_url or not cfg.model:
            raise error(f"{where} needs {where}.base_url and {where}.model (an OpenAI-compatible server and "
                        "the model it serves)")
        self.cfg = cfg
        self.url = str(cfg.base_url).rstrip("/")
        self.cache_dir = Path(cfg.cache_dir)
        self.counts = {"calls": 0, "answered": 0, "cache_hits": 0, "retries": 0, "failures": 0, "empty": 0}
        self.failure_examples: list[str] = []
        self._lock = threading.Lock()
        key = os.environ.get(str(cfg.api_key_env or ""), "")
        import requests  # here, not at the top: the schema imports this module at every plan
        self.http = requests.Session()
        for scheme in ("http://", "https://"):   # a connection per request in flight
            self.http.mount(scheme, requests.adapters.HTTPAdapter(pool_maxsize=max(10, cfg.concurrency)))
        if key:
            self.http.headers["Authorization"] = f"Bearer {key}"

    def cache_path(self, path: str, body: JsonObject) -> Path:
        """Where the answer to ``body`` at this endpoint (base URL + ``path``) is kept: the sha256 of both."""
        key = json.dumps({"endpoint": self.url + path, "request": body}, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.cache_dir / digest[:2] / f"{digest}.json"

    def _count(self, name: str, example: Optional[str] = None) -> None:
        with self._lock:
            self.counts[name] += 1
            if example is not None and len(self.failure_examples) < 5:
                self.failure_examples.append(example)

    def _cached(self, path: Path) -> Optional[str]:
        try:
            answer = json.loads(path.read_text(encoding="utf-8"))["answer"]
        except (OSError, ValueError, KeyError, TypeError):
            return None   # none, or a damaged entry: asked again and rewritten
        return answer if isinstance(answer, str) and answer.strip() else None

    def request(self, path: str, body: JsonObject, read: Callable[[Json], str]) -> Optional[str]:
        """``read(response JSON)`` for one body, redacted (the cache first), or None after every
        retry failed. ``read`` raises ValueError on a body it cannot use (retried like a server
        error). An empty answer is returned, counted and never cached."""
        cached = self.cache_path(path, body)
        answer = self._cached(cached)
        if answer is not None:
            self._count("cache_hits")
            return answer
        retries, last = self.cfg.retries, Retry("no try")
        for attempt in range(retries + 1):
            if attempt:
                self._count("retries")
                time.sleep(wait_before(attempt, self.cfg.backoff_s, last.wait_s))
            self._count("calls")
            try:
                answer = files.redact(read(self._post(path, body)))
            except Retry as e:
                last = e
                continue
            except ValueError as e:
                last = Retry(f"unreadable response ({e})")
                continue
            if not answer.strip():
                self._count("empty")
                return answer
            self._count("answered")
            files.write_json(cached, {"answer": answer, "endpoint": self.url + path, "model": body.get("model")})
            return answer
        self._count("failures", f"{last.reason} after {retries + 1} tries")
        return None

    def _post(self, path: str, body: JsonObject) -> Json:
        """One POST, its JSON body read within ``timeout_s`` of wall clock; Retry on what a retry
        may fix, ``self.error`` on what it cannot."""
        import requests
        limit = float(self.cfg.timeout_s)
        deadline = time.monotonic() + limit
        try:
            r = self.http.post(self.url + path, json=body, timeout=limit, stream=True)
        except requests.RequestException as e:
            raise Retry(type(e).__name__) from None
        with r:
            if r.status_code in FATAL:
                raise self.error(f"{self.where} at {self.url}: HTTP {r.status_code} ({FATAL[r.status_code]}; "
                                 f"{self.where}.model={self.cfg.model}, key from ${self.cfg.api_key_env})")
            if r.status_code != 200:
                raise Retry(f"HTTP {r.status_code}", retry_after(r.headers.get("Retry-After")))
            data = _read_by(r, deadline, limit)
        return json.loads(data)

    def request_all(self, path: str, bodies: list[JsonObject], read: Callable[[Json], str]) -> list[Optional[str]]:
        """Answers in order, ``concurrency`` requests in flight."""
        with ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency)) as pool:
            return list(pool.map(lambda b: self.request(path, b, read), bodies))

    def failure(self) -> str:
        """Why requests failed, for a failure line: the endpoint and the first reasons."""
        reasons = "; ".join(dict.fromkeys(self.failure_examples)) or "no failure"
        return f"{self.where} at {self.url}, model {self.cfg.model}: {reasons}"

    def stats(self) -> JsonObject:
        """Calls sent (retries included), answered by the server, empty answers (not cached), from
        the cache, failed after every retry, and some failure reasons."""
        return {"model": str(self.cfg.model), **self.counts, "failure_examples": list(self.failure_examples)}

    def close(self) -> None:
        self.http.close()


def _read_by(r: requests.Response, deadline: float, limit: float) -> bytes:
    """The response's body, read as it arrives until ``deadline`` (time.monotonic): each socket
    read may wait only for the time left, so a reply trickled a byte at a time is cut there."""
    sock = getattr(getattr(r.raw, "connection", None), "sock", None)
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Retry(f"no whole reply within timeout_s {limit:g} s")
        try:
            if sock is not None:
                sock.settimeout(left)
            chunk = r.raw.read1(READ_CHUNK, decode_content=True)
        except Exception as e:   # a socket timeout, a dropped connection, urllib3's protocol errors
            if time.monotonic() >= deadline:
                raise Retry(f"no whole reply within timeout_s {limit:g} s") from None
            raise Retry(type(e).__name__) from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def choice_text(payload: Json, chat: bool) -> str:
    """The first choice's text of a completions or chat completions body; ValueError when none."""
    try:
        choice = payload["choices"][0]
        text = choice["message"]["content"] if chat else choice["text"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"no choices[0] text in the response: {str(payload)[:120]!r}") from None
    if not isinstance(text, str):
        raise ValueError(f"choices[0] text is {type(text).__name__}, not a string")
    return text
