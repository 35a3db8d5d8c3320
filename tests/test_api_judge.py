"""The api client (model/api_client.py: the api judge's and the api backend's) through the judge, against a local HTTP server that misbehaves on a schedule (500s, a hang,
garbage, 429, a refused key): retries with backoff, clean failures, every call counted, answers
cached on disk so a rerun makes no call, and the key never written. The same client against a
real vLLM server is in tests/test_vllm.py."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from localhttp import JsonHandler, LocalServer

from martingale.beliefs.api_judge import ApiJudge, JudgeError, blind

CANARY = "canary-judge-KEY-0123456789abcdef"
SLEEP = time.sleep   # the server's own clock (a test may replace time.sleep for the client)


class Flaky(LocalServer):
    """A /v1/completions server: ``script`` is the behaviour of each successive request
    ("ok", "500", "429", "hang", "garbage", "401", "403", "404", "empty", "drop": the connection
    closed with no response); after the script, "ok". ``delay`` seconds per request; ``peak`` is
    the most requests it had in flight at once."""

    def __init__(self, script: list[str], delay: float = 0.0):
        self.script, self.seen, self.auth = list(script), [], []
        self.delay, self.in_flight, self.peak, self.lock = delay, 0, 0, threading.Lock()
        super().__init__(self._handler())

    def _handler(self):
        server = self

        class Handler(JsonHandler):

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.seen.append(body)
                server.auth.append(self.headers.get("Authorization"))
                with server.lock:
                    what = server.script.pop(0) if server.script else "ok"
                    server.in_flight += 1
                    server.peak = max(server.peak, server.in_flight)
                try:
                    self._answer(body, what)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _answer(self, body, what):
                SLEEP(server.delay)
                if what == "drop":      # the server goes away mid-request: no status line at all
                    self.close_connection = True
                    return self.connection.shutdown(2)
                if what == "hang":
                    SLEEP(3)
                    what = "ok"
                if what in ("500", "429", "401", "403", "404"):
                    return self.send_json(int(what), b'{"error": "scheduled"}')
                if what == "garbage":
                    return self.send_json(200, b"<html>not json")
                if what == "empty":
                    return self.send_json(200, b'{"choices": []}')
                text = "0.25 end" if "prompt" in body else "0.4"
                choice = {"text": text} if "prompt" in body else {"message": {"content": text}}
                self.send_json(200, json.dumps({"choices": [choice]}).encode())

        return Handler


@pytest.fixture
def flaky():
    servers = []

    def make(*script: str, delay: float = 0.0) -> Flaky:
        servers.append(Flaky(list(script), delay))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


def judge_cfg(url: str, cache: Path, **over) -> dict:
    cfg = {"base_url": url, "model": "judge-model", "chat": False, "max_tokens": 4,
           "api_key_env": "MARTINGALE_JUDGE_API_KEY", "concurrency": 2, "timeout_s": 1, "retries": 3,
           "backoff_s": 0.01, "cache_dir": str(cache)}
    return {**cfg, **over}


def test_a_server_error_is_retried_and_the_answer_still_comes_back(flaky, tmp_path):
    server = flaky("500", "500")
    judge = ApiJudge(judge_cfg(server.url, tmp_path))
    assert judge.ask("Q c1 judge read P =") == "0.25 end"
    assert judge.stats()["calls"] == 3 and judge.stats()["retries"] == 2 and judge.stats()["failures"] == 0


def test_rate_limits_hangs_and_garbage_are_retried(flaky, tmp_path):
    server = flaky("429", "hang", "garbage", "empty")
    judge = ApiJudge(judge_cfg(server.url, tmp_path, retries=4))
    assert judge.ask("one prompt") == "0.25 end"
    assert judge.stats()["calls"] == 5 and judge.stats()["answered"] == 1


def test_a_prompt_that_fails_every_retry_is_a_counted_failure_not_a_number(flaky, tmp_path):
    server = flaky(*["500"] * 4)
    judge = ApiJudge(judge_cfg(server.url, tmp_path, retries=3))
    assert judge.ask("doomed") is None
    stats = judge.stats()
    assert stats["failures"] == 1 and stats["calls"] == 4
    assert stats["failure_examples"] == ["HTTP 500 after 4 tries"]
    assert not list(tmp_path.rglob("*.json")), "a failure is never cached"


@pytest.mark.parametrize("status, why", [("401", "the key was refused"),
                                         ("403", "the key may not use this model"),
                                         ("404", "no such model or endpoint")])
def test_a_refused_key_a_forbidden_or_unknown_model_fails_at_once_without_retrying(flaky, tmp_path, status, why):
    server = flaky(status)
    judge = ApiJudge(judge_cfg(server.url, tmp_path))
    with pytest.raises(JudgeError, match=rf"^judge at .*: HTTP {status} \({why}; judge\.model=judge-model, "
                                         r"key from \$MARTINGALE_JUDGE_API_KEY\)$"):
        judge.ask("x")
    assert len(server.seen) == 1 and judge.stats()["retries"] == 0
    assert not list(tmp_path.rglob("*.json")), "nothing is cached"


def test_a_dropped_connection_is_retried_and_counted(flaky, tmp_path):
    server = flaky("drop", "drop")
    judge = ApiJudge(judge_cfg(server.url, tmp_path))
    assert judge.ask("through a flaky network") == "0.25 end"
    assert len(server.seen) == 3
    assert judge.stats()["calls"] == 3 and judge.stats()["retries"] == 2 and judge.stats()["failures"] == 0


def test_a_connection_dropped_every_time_is_a_failure_naming_the_error(flaky, tmp_path):
    server = flaky(*["drop"] * 3)
    judge = ApiJudge(judge_cfg(server.url, tmp_path, retries=2))
    assert judge.ask("never answered") is None
    (example,) = judge.stats()["failure_examples"]
    assert example.endswith("after 3 tries") and "Error" in example, example


@pytest.mark.parametrize("backoff_s, retries, waits", [(0.5, 4, [0.5, 1.0, 2.0, 4.0]),
                                                       (20.0, 3, [20.0, 30.0, 30.0])])
def test_retries_back_off_exponentially_from_backoff_s_capped_at_30_seconds_plus_jitter(
        flaky, tmp_path, monkeypatch, backoff_s, retries, waits):
    from martingale.model import api_client
    slept: list[float] = []
    monkeypatch.setattr(api_client.time, "sleep", slept.append)   # the schedule, not the wall clock
    server = flaky(*["500"] * retries)
    judge = ApiJudge(judge_cfg(server.url, tmp_path, retries=retries, backoff_s=backoff_s))
    assert judge.ask("patience") == "0.25 end"
    assert len(slept) == len(waits) and len(server.seen) == retries + 1
    assert all(w <= s <= w * (1 + api_client.JITTER) for s, w in zip(slept, waits)), (slept, waits)
    assert len(set(s / w for s, w in zip(slept, waits))) == len(waits), "each wait is jittered on its own"


@pytest.mark.parametrize("concurrency", [1, 3])
def test_at_most_concurrency_requests_are_in_flight_and_answers_keep_their_order(flaky, tmp_path, concurrency):
    server = flaky(delay=0.3)
    prompts = [f"Q{i} read P =" for i in range(3 * concurrency)]
    judge = ApiJudge(judge_cfg(server.url, tmp_path, concurrency=concurrency))
    assert judge.ask_all(prompts) == ["0.25 end"] * len(prompts)
    assert server.peak == concurrency            # never more, and all of them used (3 rounds of 0.3 s)
    assert sorted(b["prompt"] for b in server.seen) == sorted(prompts)


def test_a_second_ask_reads_the_cache_and_makes_no_call(flaky, tmp_path):
    server = flaky()
    prompts = [f"Q c{i} judge read P =" for i in range(5)]
    first = ApiJudge(judge_cfg(server.url, tmp_path)).ask_all(prompts)
    again = ApiJudge(judge_cfg(server.url, tmp_path))
    assert again.ask_all(prompts) == first
    assert len(server.seen) == 5
    assert again.stats()["calls"] == 0 and again.stats()["cache_hits"] == 5


def test_the_cache_key_is_model_prompt_and_parameters(flaky, tmp_path):
    server = flaky()
    ApiJudge(judge_cfg(server.url, tmp_path)).ask("same prompt")
    ApiJudge(judge_cfg(server.url, tmp_path, model="other-model")).ask("same prompt")
    ApiJudge(judge_cfg(server.url, tmp_path, max_tokens=9)).ask("same prompt")
    assert len(server.seen) == 3
    assert len(list(tmp_path.rglob("*.json"))) == 3


def test_requests_are_greedy_and_name_the_model(flaky, tmp_path):
    server = flaky()
    ApiJudge(judge_cfg(server.url, tmp_path, chat=True)).ask("Output ONLY a number")
    (body,) = server.seen
    assert body["model"] == "judge-model" and body["temperature"] == 0.0 and body["max_tokens"] == 4
    assert body["messages"] == [{"role": "user", "content": "Output ONLY a number"}]


def test_the_key_is_sent_from_the_environment_and_never_written(flaky, tmp_path, monkeypatch):
    monkeypatch.setenv("MARTINGALE_JUDGE_API_KEY", CANARY)
    server = flaky()
    judge = ApiJudge(judge_cfg(server.url, tmp_path))
    judge.ask("keyed")
    assert server.auth == [f"Bearer {CANARY}"]
    assert CANARY not in json.dumps(judge.stats())
    assert all(CANARY.encode() not in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_stated_probabilities_are_hidden_from_the_judge():
    assert blind("steps c1 +2 -> +2 so P = 0.62 end") == "steps c1 +2 -> +2 so P = ? end"
    assert blind("I said P: 35% earlier, P ≈ 0,4 now") == "I said P = ? earlier, P = ? now"


def test_a_key_variable_the_writers_would_not_redact_is_refused_at_check():
    from martingale.config.schema import domains
    assert domains()["judge.api_key_env"].problem("JUDGE_PASSPHRASE") is None
    assert "redacts" in domains()["judge.api_key_env"].problem("DEEPSEEK")


def test_a_cache_folder_outside_the_project_is_refused():
    from martingale.config.schema import domains
    assert domains()["judge.cache_dir"].problem("results/_judge_cache") is None
    assert "leaves the project" in domains()["judge.cache_dir"].problem("../elsewhere")
    assert "leaves the project" in domains()["judge.cache_dir"].problem("/tmp/cache")


def test_an_api_judge_without_an_address_fails_in_one_line(tmp_path):
    with pytest.raises(JudgeError, match="needs judge.base_url and judge.model"):
        ApiJudge(judge_cfg(None, tmp_path))


def test_the_api_reader_sends_the_judge_the_trace_with_its_stated_probabilities_hidden(flaky, tmp_path):
    """Inside read_api, not only in blind(): what reaches the server holds no probability the
    reasoner stated, at the cut and at the end."""
    from omegaconf import OmegaConf

    from martingale.beliefs.readers import READERS, ReadContext
    from martingale.world.synthetic import Question

    from projcopy import REPO
    server = flaky()
    prompts = OmegaConf.to_container(OmegaConf.load(REPO / "conf/prompts/log.yaml"))
    q = Question("q1", (), 1, text="Polls tighten.", question="Will A win?", criteria="Results.", option="")
    trace = "First I lean yes, P = 0.83 so far. Then more evidence: P: 91% now. Final P = 0.87"
    ctx = ReadContext(world=None, config={"judge": judge_cfg(server.url, tmp_path, chat=True), "prompts": prompts})
    ctx.world = type("W", (), {"n_clues": 2})()
    try:
        out = READERS["api"](ctx, [q], [trace], 2)
    finally:
        ctx.close()
    assert out == [0.4]
    (body,) = server.seen
    sent = body["messages"][0]["content"]
    assert "Will A win?" in sent and "P = ?" in sent
    assert all(s not in sent for s in ("0.83", "91%", "0.87"))
