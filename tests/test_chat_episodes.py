"""Two-agent episodes between chat models (episodes/chat.py, the simulate stage's chat path):
lean × outcome balanced episodes, negations asking the other way round, what check refuses, a
real chat model (SmolLM2) in both roles with its transcript and per-turn reads, the silent-
instructor guard on chat, and an api human behind a real vLLM server started with --api-key."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typed import typed_slice

from martingale.config.compose import ComposeError, Composer
from martingale.episodes import chat
from martingale.world.synthetic import Question

from projcopy import FIXTURE, REPO

SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct"
CANARY = "canary-API-KEY-0123456789abcdef"


def _q(i: int, y: int) -> Question:
    return Question(f"q{i}", (), y, text="Some background.", question=f"Will event {i} happen?",
                    criteria="Official results.", option="")


def test_episodes_balance_the_lean_within_each_outcome():
    qs = [_q(i, y) for i, y in enumerate([1, 0, 0, 1, 0, 0, 1, 0])]
    pairs = chat.balanced(qs, 8)
    for y in (0, 1):
        leans = [lean for q, lean in pairs if q.y == y]
        assert leans == [(+1 if i % 2 == 0 else -1) for i in range(len(leans))]
    assert [q.y for q, _ in pairs[:4]] == [1, 0, 1, 0]          # the outcomes interleave
    assert len(chat.balanced(qs, 3)) == 3


def test_a_negated_episode_asks_the_other_way_round_holding_the_same_belief():
    (q, lean), = chat.negated([(_q(0, 1), +1)])
    assert q.negated and q.y == 0 and lean == -1
    assert chat.lean_pct(+1, 0.65) == 65 and chat.lean_pct(-1, 0.65) == 35


def test_the_persona_states_its_lean_and_the_instructor_gets_its_modes_prompt():
    from omegaconf import OmegaConf
    ep = OmegaConf.to_container(OmegaConf.load(REPO / "conf/prompts/c2.yaml"))["episode"]
    fields = lambda q: {"question": q.question, "background": q.text, "resolution_criteria": q.criteria, "opt": "Yes"}
    (e,) = chat.setup([(_q(0, 1), -1)], ep, fields, "truth", 0.65)
    assert "about 35%" in e.human[0]["content"] and "Will event 0 happen?" in e.human[1]["content"]
    assert e.instructor[0]["content"].startswith("You are talking with a person about the question \"Will event 0")
    assert "challenge the position they have stated" in e.instructor[0]["content"]
    (alone,) = chat.setup([(_q(0, 1), 1)], ep, fields, "none", 0.65)
    assert alone.instructor is None


# ------------------------------------------------------------------ check
QUESTIONS = REPO / "data/questions/forecastbench-2024-07-21-sample.jsonl"   # the fixture conf has no data/
C2 = ["setup=smollm2_c2", f"world.questions_file={QUESTIONS}"]


@pytest.mark.parametrize("overrides, key, why", [
    (["model.backend=api"], "model.backend", "plays a two-agent episode's role only"),
    (C2 + ["simulate.human_model={colour: red}"], "simulate.human_model.colour", "not a model key"),
    (C2 + ["simulate.human_model={backend: api, api: {model: m, base_url: 'http://127.0.0.1:9/v1'}}"],
     "elicit.read", "forced with an api human"),
    (C2 + ["simulate.human_model={backend: api, api: {model: m, api_key_env: DEEPSEEK}}"],
     "simulate.human_model.api.api_key_env", "redacts"),
    (C2 + ["simulate.instructor_model={backend: carrier-pigeon}"], "simulate.instructor_model.backend", "not one of"),
    (C2 + ["stages.s1.kind=instructor", "stages.s1.reward=episode_ms", "simulate.instructor_model={backend: api, "
           "api: {model: m}}"], "simulate.instructor_model", "trains a local model"),
    (["eval.kind=simulate", "simulate.mode=reask"], "simulate.mode", "chat episode's mode"),
    (["simulate.human_model={backend: hf}"], "simulate.human_model", "chat episodes only"),
    (["eval.kind=simulate", "simulate.pool=3"], "simulate.pool", "run out of evidence"),
])
def test_check_refuses_what_chat_episodes_cannot_run_naming_the_key(overrides, key, why):
    with pytest.raises(ComposeError) as info:
        Composer(FIXTURE / "conf").compose(overrides)
    assert info.value.key == key and why in str(info.value), (info.value.key, str(info.value))


def test_chat_episode_configs_compose_and_leave_every_embedded_stage_id_alone():
    cfg = Composer(FIXTURE / "conf").compose(C2 + ["simulate.mode=truth", "elicit.read=verbal",
                                                   "simulate.human_model={backend: api, api: {model: deepseek-chat}}"])
    assert cfg["prompts"]["episode"]["instructor"]["truth"] and cfg["simulate"]["human_model"]["backend"] == "api"
    from martingale.plan import stage_slice
    from martingale.stages import kinds
    base = Composer(FIXTURE / "conf").compose([])
    for kind in ("evaluate", "simulate"):
        sl = stage_slice(kinds()[kind], base, seed=42)
        assert "api" not in sl["model"] and "prompts" not in sl and "human_model" not in sl.get("simulate", {})


# ------------------------------------------------------------------ a real chat model in both roles
def _stage_cfg(*overrides: str) -> dict:
    from martingale.plan import stage_slice
    from martingale.stages import kinds
    cfg = Composer(FIXTURE / "conf").compose([*C2, "model.backend=hf", "simulate.episodes=3", "simulate.turns=1",
                                              "eval.n_bootstrap=20", "eval.min_parse_rate=0",
                                              "prompts.episode.reply_max_tokens=24",
                                              "prompts.episode.instructor_max_tokens=16",
                                              "prompts.max_new_tokens=24", "prompts.snap_max_tokens=16", *overrides])
    sl = stage_slice(kinds()["simulate"], cfg, seed=42)
    sl["model"] = {**sl["model"], "device": "cpu"}
    return sl


needs_smollm2 = [pytest.mark.slow, pytest.mark.real("smollm2")]


@pytest.mark.slow
@pytest.mark.real("smollm2")
def test_smollm2_plays_both_roles_and_every_message_and_read_is_in_the_transcript(tmp_path, one_thread):
    from martingale.stages.body import simulate
    out = tmp_path / "out"
    simulate.run(typed_slice("simulate", _stage_cfg()), model=SMOLLM2, human_model=SMOLLM2, out_dir=out)
    rows = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(rows) == 3 and {r["lean"] for r in rows} == {1, -1}
    for r in rows:
        assert [(m["turn"], m["role"]) for m in r["transcript"]] == [(0, "human"), (1, "instructor"), (1, "human")]
        humans = [m for m in r["transcript"] if m["role"] == "human"]
        assert [m["p"] for m in humans] == r["trajectory"] == r["trajectory_forced"]   # elicit.read=forced
        assert [m["p_verbal"] for m in humans] == r["trajectory_verbal"]
        assert all(isinstance(m["text"], str) and 0 <= (m["forced_mass"] or 0) <= 1 for m in humans)
        assert r["prior"] == r["trajectory"][0] and r["stated"] == r["trajectory"][-1] and r["bayes_turns"] is None
    assert metrics["episode_kind"] == "chat" and len(metrics["parse_rate_by_turn"]) == 2
    assert len(metrics["verbal_parse_rate_by_turn"]) == len(metrics["forced_parse_rate_by_turn"]) == 2
    assert "forced_ms" in metrics and "verbal_parse_rate" in metrics and "instructor_ms" in metrics
    assert 0 < metrics["forced_mass"] <= 1 and 0 < metrics["forced_prior_mass"] <= 1
    assert "real questions have no Bayes oracle" in metrics["undefined_episode"]["ms_bayes"]
    backend = json.loads((out / "backend.json").read_text())
    assert backend["human"] == backend["instructor"] == {"device": "cpu", "dtype": "float32"}


def _mute(tmp_path: Path) -> Path:
    """SmolLM2's weights (linked) with a generation config that suppresses every token but
    end-of-text (honoured by HF generate): an instructor that says nothing."""
    from transformers import AutoTokenizer
    mute = tmp_path / "mute"
    mute.mkdir()
    for f in SMOLLM2.iterdir():
        if f.name != "generation_config.json":
            (mute / f.name).symlink_to(f)
    gen = json.loads((SMOLLM2 / "generation_config.json").read_text())
    tok = AutoTokenizer.from_pretrained(SMOLLM2)
    gen["suppress_tokens"] = [i for i in range(len(tok)) if i != tok.eos_token_id]
    (mute / "generation_config.json").write_text(json.dumps(gen))
    return mute


@pytest.mark.slow
@pytest.mark.real("smollm2")
def test_a_silent_chat_instructor_fails_the_stage_and_writes_nothing(tmp_path, one_thread):
    from martingale.core.errors import StageError
    from martingale.stages.body import simulate
    mute = _mute(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(StageError, match=r"^simulate: the instructor said nothing \(empty utterance\) in 3 of 3 "
                                         r"episodes at turn 1 \(assert_spoke"):
        simulate.run(typed_slice("simulate", _stage_cfg()), model=mute, human_model=SMOLLM2, out_dir=out)
    assert not out.exists()


# ------------------------------------------------------------------ C3 on a chat model: the instructor stage
def _instructor_cfg(*overrides: str) -> dict:
    from martingale.plan import stage_slice
    from martingale.stages import kinds
    cfg = Composer(FIXTURE / "conf").compose([*C2, "model.backend=hf", "stages.s1.kind=instructor", "stages.s1.reward=B",
                                              "instructor.iterations=2", "instructor.train_episodes=2",
                                              "simulate.turns=1", "prompts.context_words=16",
                                              "prompts.episode.reply_max_tokens=16",
                                              "prompts.episode.instructor_max_tokens=12", *overrides])
    sl = stage_slice(kinds()["instructor"], cfg, step="s1", seed=42)
    sl["model"] = {**sl["model"], "device": "cpu"}
    return sl


@pytest.mark.slow
@pytest.mark.real("smollm2")
def test_a_smollm2_instructor_trains_two_iterations_against_a_smollm2_human(tmp_path):
    from martingale.stages.body import instructor
    out = tmp_path / "out"
    instructor.run(typed_slice("instructor", _instructor_cfg()), start_model=SMOLLM2, human_model=SMOLLM2, out_dir=out)
    history = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    assert [h["iteration"] for h in history] == [0, 1]
    assert all(h["adapter_gap"] > 1e-5 and h["reward"] is not None and h["silent_episodes"] == 0 for h in history)
    stage = json.loads((out / "stage.json").read_text())
    assert stage["kind"] == "instructor" and stage["iterations"] == 2 and (out / "model" / "config.json").is_file()


@pytest.mark.slow
@pytest.mark.real("smollm2", "vllm")
def test_a_vllm_served_smollm2_instructor_trains_with_its_adapter_served_in_place(tmp_path):
    """The instructor generates through a vLLM server: after every step its adapter is saved,
    loaded in the server and checked applied (model/vllm.py serve_adapter), as in the train stage."""
    from martingale.stages.body import instructor
    out = tmp_path / "out"
    cfg = _instructor_cfg("model.backend=vllm", f"model.vllm.python={REPO / '.venv-vllm' / 'bin' / 'python'}",
                          "simulate.human_model={backend: hf}")
    instructor.run(typed_slice("instructor", cfg), start_model=SMOLLM2, human_model=SMOLLM2, out_dir=out)
    history = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    assert [h["iteration"] for h in history] == [0, 1] and all(h["adapter_gap"] > 1e-5 for h in history)
    stage = json.loads((out / "stage.json").read_text())
    assert stage["backend"] == "vllm" and stage["parity_probes"] > 0   # the server was checked against HF
    assert not list(tmp_path.glob("*.adapter"))                          # the served adapter is not left behind


@pytest.mark.slow
@pytest.mark.real("smollm2")
@pytest.mark.parametrize("fault, match", [
    ("mute", r"^instructor stage \(B reward\): the instructor said nothing \(empty utterance\) in 2 of 2 episodes "
             r"at turn 1 \(assert_spoke"),
    ("no-op", r"^instructor stage \(test-constant reward\): after iteration 0 the adapter leaves every "
              r"utterance's log-prob as the start model's \(max \|Δ\| 0\.00e\+00"),
])
def test_a_chat_instructor_stage_fails_on_a_silent_instructor_or_a_no_op_adapter(tmp_path, fault, match):
    """Silent: the start model says nothing. No-op: a reward that scores every episode the same
    gives zero advantages, so the step leaves LoRA's B at zero and the adapter changes nothing the
    instructor says (what a LoRA that never served looks like from the utterances)."""
    from martingale import rewards
    from martingale.core.errors import StageError
    from martingale.stages.body import instructor

    with rewards.REWARDS.temporarily():
        @rewards.reward("test-constant", needs=("y",))
        def constant(y, **_):
            return y * 0.0
        start = _mute(tmp_path) if fault == "mute" else SMOLLM2
        cfg = _instructor_cfg(*(["stages.s1.reward=test-constant"] if fault == "no-op" else []))
        with pytest.raises(StageError, match=match):
            instructor.run(typed_slice("instructor", cfg), start_model=start, human_model=SMOLLM2, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ an api human behind a real vLLM server
@pytest.mark.slow
@pytest.mark.real("smollm2", "vllm")
def test_api_roles_behind_a_keyed_vllm_server_are_cached_and_the_key_written_nowhere(tmp_path, monkeypatch,
                                                                                    one_thread):
    """The human and the instructor are SmolLM2 behind vLLM's OpenAI-compatible server started
    with --api-key (as DeepSeek's endpoint would be): the log's two api agents. A second build
    makes no call; the key is in no file the tool writes; a wrong key fails the stage at once (HTTP
    401). (An api human with a local instructor: the same client, the same cache.)"""
    from omegaconf import OmegaConf

    from martingale.config.schema import ModelConfig
    from martingale.core.errors import StageError
    from martingale.model.vllm_server import Server
    from martingale.stages.body import simulate
    server_side, project = tmp_path / "endpoint", tmp_path / "project"
    server_side.mkdir()
    project.mkdir()
    mcfg = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(ModelConfig),
                                                  OmegaConf.load(REPO / "conf/model/smollm2_135m.yaml")), resolve=True)
    mcfg["vllm"]["python"] = str(REPO / ".venv-vllm/bin/python")
    mcfg["vllm"]["extra_args"] = [*mcfg["vllm"]["extra_args"], "--api-key", CANARY]
    monkeypatch.chdir(server_side)                      # the endpoint's own log is not the tool's
    server = Server.start(SMOLLM2, mcfg)
    try:
        monkeypatch.chdir(project)
        monkeypatch.setenv("MARTINGALE_API_KEY", CANARY)
        api = "{backend: api, api: {model: smollm2_135m, base_url: '" + server.url + "/v1', retries: 1, backoff_s: 0.1}}"
        human, instructor = f"simulate.human_model={api}", f"simulate.instructor_model={api}"
        cfg = _stage_cfg("elicit.read=verbal", human, instructor)
        simulate.run(typed_slice("simulate", cfg), model=SMOLLM2, human_model=SMOLLM2, out_dir=project / "first")
        simulate.run(typed_slice("simulate", cfg), model=SMOLLM2, human_model=SMOLLM2, out_dir=project / "second")
        first = json.loads((project / "first/backend.json").read_text())
        second = json.loads((project / "second/backend.json").read_text())
        assert first["human"] == first["instructor"] == {"backend": "api", "api_model": "smollm2_135m"}
        # each role its own client and counters: 3 episodes × 2 human turns, 3 × 1 instructor turn
        assert first["api"]["human"]["answered"] == 6 and first["api"]["instructor"]["answered"] == 3
        assert first["api"]["human"]["failures"] == first["api"]["instructor"]["failures"] == 0
        assert second["api"]["human"]["calls"] == second["api"]["instructor"]["calls"] == 0
        assert second["api"]["human"]["cache_hits"] == 6 and second["api"]["instructor"]["cache_hits"] == 3
        assert (project / "first/records.jsonl").read_bytes() == (project / "second/records.jsonl").read_bytes()
        written = [p for p in project.rglob("*") if p.is_file()]
        assert any("_api_cache" in str(p) for p in written)
        assert all(CANARY.encode() not in p.read_bytes() for p in written)
        monkeypatch.setenv("MARTINGALE_API_KEY", "not-the-key")
        fresh = _stage_cfg("elicit.read=verbal", human, instructor, "simulate.human_temperature=0.9")   # not cached
        with pytest.raises(StageError, match=r"^simulate\.human_model\.api at .*: HTTP 401 \(the key was refused"):
            simulate.run(typed_slice("simulate", fresh), model=SMOLLM2, human_model=SMOLLM2, out_dir=project / "third")
        assert not (project / "third").exists()
    finally:
        server.stop()


# ------------------------------------------------------------------ rparam: R = X on [−1, 1]
@pytest.mark.parametrize("text, p", [("I lean no. R = -0.5", 0.25), ("R: 0.3, well R = 1", 1.0), ("R = **0.4**", 0.7),
                                     ("R = 1.5", None), ("r = 0.3", None), ("VAR = 0.2", None), ("R = 0.3.5", None),
                                     ("", None)])
def test_the_r_scale_reads_the_last_r_statement_as_a_probability(text, p):
    from martingale.beliefs.parse import parse_r
    assert parse_r(text) == p


def test_the_rparam_prompts_ask_for_r_read_it_and_tell_the_instructor_r():
    cfg = Composer(FIXTURE / "conf").compose([*C2, "prompts=c2_rparam", "elicit.read=verbal"])
    ep = cfg["prompts"]["episode"]
    assert ep["scale"] == "r" and "R = X" in ep["human_first"] and "R = {p}" in ep["instructor_turn"]
    reader = chat.Reader("verbal", "P = 0.", 0.5, "r")
    (read,) = reader.reads(type("Api", (), {"tokenizer": None})(), [[]], ["Hmm. R = 0.4"])
    assert read["p"] == read["p_verbal"] == 0.7 and read["p_forced"] is None
    assert chat._fmt_p(0.7, "r") == "+0.40" and chat._fmt_p(0.7) == "0.70"


def test_the_forced_read_is_refused_on_the_r_scale():
    with pytest.raises(ComposeError) as info:
        Composer(FIXTURE / "conf").compose([*C2, "prompts=c2_rparam"])    # smollm2_c2 reads forced
    assert info.value.key == "elicit.read" and "R = X on [−1, 1]" in str(info.value)
