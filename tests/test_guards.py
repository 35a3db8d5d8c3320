"""The stage guards that need no server (the vLLM ones are in tests/test_vllm.py), each with its
fault injected: a training stage that did not move the model, an eval under its parse-rate floor
(the helper, then the real evaluate and simulate stage bodies), a trained instructor identical to
its start and a silent instructor (the real simulate stage), and model.path refusals. Each fails
the stage with one line and writes nothing."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typed import typed_slice

from martingale import rewards
from martingale.core.errors import StageError
from martingale.stages.body import evaluate, train


@pytest.fixture
def constant_reward():
    """A reward that gives every sample the same score, parsed or not: zero advantages, no gradient."""
    with rewards.REWARDS.temporarily():
        @rewards.reward("test-constant", needs=("y",))
        def constant(y, **_):
            return y * 0.0
        yield "test-constant"


@pytest.mark.slow   # steps a model (~15 s)
def test_a_training_stage_that_left_the_weights_unchanged_fails(tmp_path, default_cfg, untrained_model,
                                                                constant_reward):
    torch.set_num_threads(1)
    world = {**default_cfg["world"], "n_train": 8, "n_heldout": 8}
    stage = {**default_cfg["stages"]["s1"], "reward": constant_reward, "batch_questions": 4,
             "generations": 2, "epochs": 1, "kl_beta": 0.0}
    cfg = {"world": world, "model": default_cfg["model"], "seed": 0, "stage": stage,
           "elicit": {"mode": "samemode", "judge": "trace", "cut": 0.5}}
    with pytest.raises(StageError, match=r"^train stage \(test-constant reward\): training did not move "
                                         r"the model \(\d+ steps") as info:
        train.run(typed_slice("train", cfg), start_model=untrained_model, judge_model=untrained_model, out_dir=tmp_path / "out")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()


def test_an_eval_under_its_parse_rate_floor_fails_quoting_unparsed_answers():
    records = [{"stated": 0.4, "completion": "think c1 +1 P = 0.40"},
               {"stated": None, "completion": "think c1 +1 c2 c2 c2"},
               {"stated": None, "completion": "snap snap"}]
    with pytest.raises(StageError, match=r"^eval: parse rate 0\.333 < eval\.min_parse_rate 0\.5 "
                                         r"\(2 of 3 answers state no P; e\.g\. 'think c1 \+1 c2 c2 c2'") as info:
        evaluate.check_parse_rate(records, 0.5)
    assert "\n" not in str(info.value)
    evaluate.check_parse_rate(records, 0.3)      # at or over the floor: the stage goes on


def test_the_parse_rate_floor_is_a_fraction_checked_at_check_time():
    from martingale.config.schema import domains
    assert domains()["eval.min_parse_rate"].problem(1.5) is not None
    assert domains()["eval.min_parse_rate"].problem(0.5) is None


# The parse-rate floor inside the stage bodies themselves: an untrained model states no P, so a
# floor of 0.5 fails the real evaluate and simulate stages (one line, no output folder); the same
# call with the floor at 0 builds the folder, so it is the floor that failed them.
PARSE_FLOOR = r"^eval: parse rate 0\.\d{3} < eval\.min_parse_rate 0\.5 \(\d+ of \d+ answers state no P; e\.g\. '"


def _measure_cfg(default_cfg, floor: float, **extra) -> dict:
    return {**default_cfg, "seed": 0, "eval": {**default_cfg["eval"], "n_bootstrap": 10, "min_parse_rate": floor},
            **extra}


def test_the_evaluate_stage_under_its_parse_rate_floor_fails_and_writes_nothing(tmp_path, default_cfg,
                                                                               untrained_model):
    out = tmp_path / "out"
    with pytest.raises(StageError, match=PARSE_FLOOR) as info:
        evaluate.run(typed_slice("evaluate", _measure_cfg(default_cfg, 0.5)), model=untrained_model, judge_model=untrained_model,
                     out_dir=out)
    assert "\n" not in str(info.value) and not out.exists()
    evaluate.run(typed_slice("evaluate", _measure_cfg(default_cfg, 0.0)), model=untrained_model, judge_model=untrained_model, out_dir=out)
    assert (out / "records.jsonl").exists()


def test_the_simulate_stage_under_its_parse_rate_floor_fails_and_writes_nothing(tmp_path, default_cfg,
                                                                               untrained_model):
    from martingale.stages.body import simulate
    sim = {**default_cfg["simulate"], "episodes": 8, "turns": 2}
    out = tmp_path / "out"
    with pytest.raises(StageError, match=PARSE_FLOOR) as info:
        simulate.run(typed_slice("simulate", _measure_cfg(default_cfg, 0.5, simulate=sim)), model=untrained_model,
                     human_model=untrained_model, out_dir=out)
    assert "\n" not in str(info.value) and not out.exists()
    simulate.run(typed_slice("simulate", _measure_cfg(default_cfg, 0.0, simulate=sim)), model=untrained_model,
                 human_model=untrained_model, out_dir=out)
    assert (out / "records.jsonl").exists()


@pytest.mark.parametrize("make, why", [
    (lambda tmp: tmp, r"has no config\.json: not a model folder"),
    (lambda tmp: Path.home(), r"a system (or home )?folder"),
    (lambda tmp: (tmp / "etc-link").symlink_to("/etc") or tmp / "etc-link", r"resolves to '/etc', a system or home folder"),
    (lambda tmp: tmp / "missing", r"is not a folder \(no such path\) \(.*`make smollm2`\)"),
])
def test_a_model_path_that_is_not_a_model_folder_is_refused_before_anything_is_linked(tmp_path, make, why):
    from martingale.core.errors import StageError
    from martingale.stages.body import weights
    path = make(tmp_path)
    with pytest.raises(StageError, match=r"^model\.path: .*" + why) as e:
        weights.run(typed_slice("weights", {"model": {"path": str(path)}}), tmp_path / "out")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


# The instructor guards inside the real simulate stage: a "trained" instructor that is its start
# model byte for byte (an adapter that never applied), and an instructor that says nothing.
def _simulate_cfg(default_cfg) -> dict:
    sim = {**default_cfg["simulate"], "episodes": 8, "turns": 2, "mode": "neutral", "negations": False}
    return _measure_cfg(default_cfg, 0.0, simulate=sim)


def _other_model(tmp_path: Path, default_cfg, seed: int):
    """An embedded model with other weights than untrained_model (another init seed), and its tokenizer."""
    from martingale.model.load import build_tiny, save
    from martingale.model.tokenizer import build_tokenizer
    from martingale.world import traces
    tok = build_tokenizer(traces.vocabulary(default_cfg["world"]["n_clue_types"]))
    torch.manual_seed(seed)
    out = tmp_path / f"model-{seed}"
    save(build_tiny(default_cfg["model"], tok), tok, out)
    return out, tok


def test_a_trained_instructor_identical_to_its_start_fails_the_simulate_stage(tmp_path, default_cfg,
                                                                             untrained_model):
    import shutil

    from martingale.stages.body import simulate
    same = tmp_path / "trained-but-not"
    shutil.copytree(untrained_model, same)
    out = tmp_path / "out"
    with pytest.raises(StageError, match=r"^simulate: the trained instructor speaks exactly as its start model "
                                         r"\(max \|Δ log-prob\| 0\.00e\+00 ≤ model\.vllm\.adapter_floor") as info:
        simulate.run(typed_slice("simulate", _simulate_cfg(default_cfg)), model=same, human_model=untrained_model, out_dir=out)
    assert "\n" not in str(info.value) and not out.exists()


def test_an_instructor_that_says_nothing_fails_the_simulate_stage(tmp_path, default_cfg, untrained_model):
    """The instructor's generation config (honoured by HF generate) suppresses every token but
    end-of-text: each utterance is empty, and the stage fails at turn 1 rather than reading the
    human's drift as influence. The same weights without the suppression build the folder."""
    import json

    from martingale.stages.body import simulate
    mute, tok = _other_model(tmp_path, default_cfg, seed=1)
    gen = mute / "model" / "generation_config.json"     # where load.save put it (a stage folder's model/)
    cfg = json.loads(gen.read_text())
    out = tmp_path / "out"
    simulate.run(typed_slice("simulate", _simulate_cfg(default_cfg)), model=mute, human_model=untrained_model, out_dir=out)
    assert (out / "records.jsonl").exists()
    cfg["suppress_tokens"] = [i for i in range(len(tok)) if i != tok.eos_token_id]
    gen.write_text(json.dumps(cfg))
    out = tmp_path / "out-mute"
    with pytest.raises(StageError, match=r"^simulate: the instructor said nothing \(empty utterance\) in 8 of 8 "
                                         r"episodes at turn 1 \(assert_spoke; e\.g\. episode 0\)$"):
        simulate.run(typed_slice("simulate", _simulate_cfg(default_cfg)), model=mute, human_model=untrained_model, out_dir=out)
    assert not out.exists()
