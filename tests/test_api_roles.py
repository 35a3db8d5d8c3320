"""Two-agent episodes whose human and instructor are api roles (model/api_client.py through
stages/simulate.py), against local OpenAI-compatible chat servers (loopback only, each request
bounded) that misbehave on purpose: an empty reply is never cached, two servers offering the same
model name each get their own requests, a dead human stops the episodes in one line naming its
endpoint, every turn's P is held to the parse floor, a trickling reply is cut at timeout_s,
Retry-After is honoured, counters are per role, a redacted reply replays from the cache, and the
key is written nowhere."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from localhttp import JsonHandler, LocalServer
from typed import typed_slice

from martingale.config.compose import Composer
from martingale.core.errors import StageError
from martingale.model.api_client import ApiClient

from projcopy import FIXTURE, REPO

CANARY = "canary-roles-KEY-0123456789abcdef"
QUESTIONS = REPO / "data/questions/forecastbench-2024-07-21-sample.jsonl"
EPISODES, TURNS = 4, 2


def role_of(body: dict) -> str:
    """Which role a chat request plays, from its system prompt (conf/prompts/c2.yaml)."""
    system = body["messages"][0]["content"]
    return "human" if system.startswith("You are a member of the public") else "instructor"


def turn_of(body: dict) -> int:
    """The turn a request is for: the human's replies so far, or the instructor's requests so far."""
    said = [m for m in body["messages"] if m["role"] == ("assistant" if role_of(body) == "human" else "user")]
    return len(said) - (role_of(body) == "instructor")


def good_reply(body: dict) -> str:
    """A well-behaved role: the human states a P near its lean, moving a little each turn."""
    if role_of(body) == "instructor":
        return "Consider the base rate of such events before you decide."
    lean = int(re.search(r"about (\d+)%", body["messages"][0]["content"]).group(1)) / 100
    step = 0.02 * turn_of(body) * (1 if lean > 0.5 else -1)
    return f"I have thought about it.\nP = {lean + step:.2f}"


class ChatServer(LocalServer):
    """A /v1/chat/completions server on 127.0.0.1. ``behave(body, headers)`` returns what to do
    with one request: a reply text, or ("status", code, headers), ("trickle", seconds per byte),
    ("raw", bytes). Every request is kept with its arrival time (``seen``)."""

    def __init__(self, behave):
        self.behave, self.seen, self.lock = behave, [], threading.Lock()
        super().__init__(self._handler())

    def by(self, role: str) -> list[dict]:
        return [b for t, b in self.seen if role_of(b) == role]

    def _handler(self):
        server = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.seen.append((time.monotonic(), body))
                what = server.behave(body, dict(self.headers))
                if isinstance(what, str):
                    data = json.dumps({"choices": [{"message": {"role": "assistant", "content": what}}]}).encode()
                    return self.send_json(200, data)
                if what[0] == "status":
                    return self.send_json(what[1], b'{"error": "scheduled"}', what[2] if len(what) > 2 else {})
                if what[0] == "trickle":            # headers at once, then a byte every what[1] s, for 10 s at most
                    data = json.dumps({"choices": [{"message": {"content": "P = 0.5"}}]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    end = time.monotonic() + 10
                    try:
                        for byte in data:
                            if time.monotonic() > end:
                                break
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            time.sleep(what[1])
                    except OSError:
                        pass                        # the client hung up: that is the point
                    self.close_connection = True
                    return None
                return self.send_json(200, what[1])

        return Handler


@pytest.fixture
def serve():
    servers = []

    def make(behave=lambda body, headers: good_reply(body)) -> ChatServer:
        servers.append(ChatServer(behave))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder as the cwd (results/_api_cache lands in it), the key set to a canary;
    afterwards the canary is in no file written there."""
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.chdir(root)
    monkeypatch.setenv("MARTINGALE_API_KEY", CANARY)
    yield root
    leaked = [p for p in root.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert not leaked, f"the key was written to {leaked}"


def role(url: str, model: str = "chat-m", **over) -> str:
    cfg = {"model": model, "base_url": url, "retries": 3, "backoff_s": 0.01, "timeout_s": 5, **over}
    return "{backend: api, api: {" + ", ".join(f"{k}: '{v}'" if isinstance(v, str) else f"{k}: {v}"
                                               for k, v in cfg.items()) + "}}"


def stage_cfg(human_url: str, instructor_url: str, *overrides: str, **api) -> dict:
    """The simulate stage's slice of a small C2 run whose two roles are api models."""
    from martingale.plan import stage_slice
    from martingale.stages import kinds
    cfg = Composer(FIXTURE / "conf").compose([
        "setup=smollm2_c2", f"world.questions_file={QUESTIONS}", "elicit.read=verbal",
        f"simulate.episodes={EPISODES}", f"simulate.turns={TURNS}", "eval.n_bootstrap=20", "eval.min_parse_rate=0.5",
        f"simulate.human_model={role(human_url, **api)}", f"simulate.instructor_model={role(instructor_url, **api)}",
        *overrides])
    return stage_slice(kinds()["simulate"], cfg, seed=42)


def build(cfg: dict, out: Path) -> dict:
    """Run the simulate stage into ``out``; its backend.json."""
    from martingale.stages.body import simulate
    simulate.run(typed_slice("simulate", cfg), model=out.parent, human_model=out.parent, out_dir=out)
    return json.loads((out / "backend.json").read_text())


def cached_answers(root: Path) -> list[str]:
    return [json.loads(p.read_text())["answer"] for p in (root / "results/_api_cache").rglob("*.json")]


# ------------------------------------------------------------------ 1. an empty reply
def test_an_empty_reply_is_never_cached_and_a_healthy_server_afterwards_gets_its_requests(serve, project):
    healthy = {"now": False}
    server = serve(lambda body, h: good_reply(body) if healthy["now"] or role_of(body) == "human" else "")
    cfg = stage_cfg(server.url, server.url)
    with pytest.raises(StageError, match=r"the instructor said nothing"):
        build(cfg, project / "first")
    assert "" not in cached_answers(project), "an empty reply was cached"
    assert not (project / "first").exists()
    said = len(server.by("instructor"))
    healthy["now"] = True                       # the same endpoint, now answering
    backend = build(cfg, project / "second")
    assert len(server.by("instructor")) == said + EPISODES * TURNS
    assert backend["api"]["instructor"]["answered"] == EPISODES * TURNS


# ------------------------------------------------------------------ 2. the cache knows the endpoint
def test_two_servers_offering_the_same_model_name_each_get_their_own_requests(serve, project):
    good = serve()
    bad = serve(lambda body, h: "Hmm.\nP = 0..7" if role_of(body) == "human" else good_reply(body))
    build(stage_cfg(good.url, good.url), project / "good")
    with pytest.raises(StageError, match=r"parse"):
        build(stage_cfg(bad.url, bad.url), project / "bad")
    assert len(bad.by("human")) == EPISODES * (TURNS + 1), "the second server's answers were taken from the first's"


# ------------------------------------------------------------------ 3. a dead human
def test_a_dead_human_endpoint_fails_in_one_line_naming_it_and_the_instructor_is_never_called(serve, project):
    human = serve(lambda body, h: ("status", 500))
    instructor = serve()
    with pytest.raises(StageError) as info:
        build(stage_cfg(human.url, instructor.url), project / "out")
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith("simulate: the human's endpoint failed every retry at turn 0 in 4 of 4 episodes")
    assert f"simulate.human_model.api at {human.url}" in line and "HTTP 500 after 4 tries" in line, line
    assert instructor.seen == [], "the instructor was called after the human's endpoint died"
    assert len(human.seen) == EPISODES * 4
    assert not (project / "out").exists()


# ------------------------------------------------------------------ 4. the parse floor on every turn
def test_a_malformed_first_turn_p_fails_the_parse_floor_though_the_last_turn_parses(serve, project):
    server = serve(lambda body, h: "Hmm.\nP = 0..7" if role_of(body) == "human" and turn_of(body) == 0
                   else good_reply(body))
    with pytest.raises(StageError, match=r"^simulate chat: the human's P parsed in 0 of 4 episodes before the first "
                                         r"turn \(the prior\): rate 0\.000 < eval\.min_parse_rate 0\.5; e\.g\. .*0\.\.7"):
        build(stage_cfg(server.url, server.url), project / "out")
    assert not (project / "out").exists()


def test_a_run_whose_ms_is_undefined_for_lack_of_parsed_pairs_fails_though_every_turn_passes_the_floor(serve, project):
    def behave(body, headers):   # half the episodes state a first P, the other half a last one
        if role_of(body) == "human":
            high = "about 65%" in body["messages"][0]["content"]
            if (turn_of(body) == 0 and not high) or (turn_of(body) == TURNS and high):
                return "Hmm.\nP = seventy percent"
        return good_reply(body)
    server = serve(behave)
    with pytest.raises(StageError, match=r"^simulate chat: MS is undefined: 0 of 4 episodes have both a parsed"):
        build(stage_cfg(server.url, server.url), project / "out")


# ------------------------------------------------------------------ 5. a wall-clock deadline
def test_a_trickling_server_is_cut_at_the_requests_wall_clock_deadline(serve, project):
    server = serve(lambda body, h: ("trickle", 0.2))
    client = ApiClient({"base_url": server.url, "model": "m", "api_key_env": "MARTINGALE_API_KEY", "concurrency": 1,
                        "timeout_s": 1, "retries": 0, "backoff_s": 0.01, "cache_dir": "cache"}, "simulate.human_model.api")
    t0 = time.monotonic()
    assert client.request("/chat/completions", {"model": "m", "messages": []}, lambda p: p["choices"][0]["message"]["content"]) is None
    took = time.monotonic() - t0
    assert 1.0 <= took < 1.5, f"the request took {took:.2f} s under timeout_s 1"
    assert client.stats()["failure_examples"] == ["no whole reply within timeout_s 1 s after 1 tries"]


# ------------------------------------------------------------------ 6. Retry-After and jitter
def test_retry_after_is_honoured_as_the_server_sees_it(serve, project):
    asked = {"n": 0}

    def behave(body, headers):
        asked["n"] += 1
        return ("status", 429, {"Retry-After": "1"}) if asked["n"] == 1 else good_reply(body)
    server = serve(behave)
    client = ApiClient({"base_url": server.url, "model": "m", "api_key_env": "MARTINGALE_API_KEY", "concurrency": 1,
                        "timeout_s": 5, "retries": 2, "backoff_s": 0.01, "cache_dir": "cache"}, "judge")
    body = {"model": "m", "messages": [{"role": "system", "content": "You are talking"}]}
    assert client.request("/chat/completions", body, lambda p: p["choices"][0]["message"]["content"])
    (t1, _), (t2, _) = server.seen
    assert 1.0 <= t2 - t1 < 1.0 * 1.25 + 0.5, f"retried {t2 - t1:.2f} s after a Retry-After of 1 s"


def test_conversations_rate_limited_together_do_not_retry_in_step(serve, project):
    firsts: set[str] = set()

    def behave(body, headers):
        key = body["messages"][-1]["content"]
        if key not in firsts:
            firsts.add(key)
            return ("status", 429)
        return "ok"
    server = serve(behave)
    client = ApiClient({"base_url": server.url, "model": "m", "api_key_env": "MARTINGALE_API_KEY", "concurrency": 6,
                        "timeout_s": 5, "retries": 1, "backoff_s": 0.4, "cache_dir": "cache"}, "judge")
    bodies = [{"model": "m", "messages": [{"role": "user", "content": f"conversation {i}"}]} for i in range(6)]
    assert client.request_all("/chat/completions", bodies, lambda p: p["choices"][0]["message"]["content"]) == ["ok"] * 6
    by = {}
    for t, b in server.seen:
        by.setdefault(b["messages"][-1]["content"], []).append(t)
    waits = sorted(ts[1] - ts[0] for ts in by.values())
    assert all(w >= 0.4 for w in waits) and waits[-1] - waits[0] > 0.02, waits


# ------------------------------------------------------------------ 8. per-role counters, a redacted replay
def test_each_role_counts_its_own_calls_though_both_share_an_endpoint_and_model(serve, project):
    server = serve()
    backend = build(stage_cfg(server.url, server.url), project / "out")
    human, instructor = backend["api"]["human"], backend["api"]["instructor"]
    assert human["answered"] == EPISODES * (TURNS + 1) and instructor["answered"] == EPISODES * TURNS
    assert human["calls"] + instructor["calls"] == len(server.seen)


def test_a_reply_echoing_the_key_is_stored_redacted_and_a_rerun_replays_it_from_the_cache(serve, project):
    def echo(body, headers):   # a proxy that leaks the Authorization header into its replies
        if role_of(body) == "instructor":
            return f"Your request said {headers.get('Authorization')}. Think again."
        return good_reply(body)
    server = serve(echo)
    cfg = stage_cfg(server.url, server.url)
    build(cfg, project / "first")
    sent = len(server.seen)
    assert any(CANARY in json.dumps(b) for _, b in server.seen) is False, "the key went back into a conversation"
    build(cfg, project / "second")
    assert len(server.seen) == sent, f"a rerun sent {len(server.seen) - sent} requests again"
    assert (project / "first/records.jsonl").read_bytes() == (project / "second/records.jsonl").read_bytes()


# ------------------------------------------------------------------ 7. the one-line failure
def test_a_failed_stage_job_prints_one_line_and_keeps_the_traceback_in_its_log(tmp_path):
    """run_logged (every job's wrapper): the job's stderr holds one line naming the job and the
    cause; the traceback is in the stage's log; the exit status is 1."""
    log = tmp_path / "logs/simulate/abc.log"
    script = f"""
import types
from martingale.core.errors import StageError
from martingale.jobs.smk import run_logged
smk = types.SimpleNamespace(rule="simulate", wildcards=types.SimpleNamespace(sid="simulate-abc"), log=[{str(log)!r}])
smk.wildcards = ["simulate-abc"]
def body():
    raise StageError("simulate: the human's endpoint failed every retry at turn 0 in 4 of 4 episodes (HTTP 500 after 4 tries)")
run_logged(smk, body)
"""
    log.parent.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "martingale: simulate simulate-abc failed: simulate: the human's endpoint failed every retry at turn 0 in 4 "
        f"of 4 episodes (HTTP 500 after 4 tries) (traceback in {log})"], done.stderr
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "stage failed" in text
