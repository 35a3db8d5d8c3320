"""The two-agent episode stage (simulate, claim C2) and in-loop instructor training (instructor,
claim C3), for real at smoke scale: snakemake builds c2-syc, c2-truth and a C3 run that trains its
instructor for 3 iterations against the fixed human (base here, for time; the
campaign's C3 runs use D); then the silent-instructor guards, injected
into the stages themselves on the smoke project's pretrained model."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import oneseed
import pytest
from typed import typed_slice

from martingale.metrics import entrenched, episode_metrics

from projcopy import SMOKE, copy_pretrain, make_project

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

SMOKE_EPISODES = SMOKE + """simulate: {episodes: 24, turns: 2}
instructor: {train_episodes: 16, iterations: 3}
"""

RUNS = {
    "c2-syc.yaml": "parent: base\nknob: eval.kind=simulate\nquestion: syc\nclaims: [C2]\n",
    "c2-truth.yaml": "parent: c2-syc\nknob: simulate.mode=truth\nquestion: truth\nclaims: [C2]\n",
    "c3-q3-neutral.yaml": "parent: c2-syc\nknob: simulate.mode=neutral\nquestion: prompt-only\nclaims: [C3]\n",
    "c3-instructor.yaml": "parent: c3-q3-neutral\nknob: stages.s1.kind=instructor\nquestion: declares\nclaims: [C3]\n",
    "c3-episode-ms.yaml": "parent: c3-instructor\nknob: stages.s1.reward=episode_ms\nquestion: trains\nclaims: [C3]\n",
}


def records(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "records.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------- metrics, by hand
def test_an_episode_is_entrenched_when_the_human_moves_further_the_way_it_leaned():
    assert entrenched([0.6, 0.6, 0.4, 0.4], [0.7, 0.5, 0.3, 0.45]).tolist() == [True, False, True, False]


def test_episode_metrics_give_delta_brier_last_minus_first_and_the_bayes_humans_ms():
    rows = [{"prior": p, "posterior": q, "y": y, "lean": 1 if p > 0.5 else -1, "trajectory": [p, q],
             "bayes_turns": [b0, b1]}
            for p, q, y, b0, b1 in ((0.6, 0.8, 1, 0.6, 0.7), (0.4, 0.2, 0, 0.4, 0.3), (0.6, 0.9, 0, 0.65, 0.8),
                                    (0.35, 0.3, 1, 0.3, 0.2))]
    m = episode_metrics(rows, n_bootstrap=50, seed=0)
    first, last, y = np.array([0.6, 0.4, 0.6, 0.35]), np.array([0.8, 0.2, 0.9, 0.3]), np.array([1, 0, 0, 1])
    assert m["delta_brier"] == pytest.approx(np.mean((y - last) ** 2) - np.mean((y - first) ** 2))
    assert m["n_entrenched"] == 4 and m["entrenched_share"] == 1.0
    b0, b1 = np.array([0.6, 0.4, 0.65, 0.3]), np.array([0.7, 0.3, 0.8, 0.2])
    assert m["ms_bayes"] == pytest.approx(np.polyfit(b0 - 0.5, b1 - b0, 1)[0])
    assert m["p_by_turn"]["lean_yes"] == pytest.approx([0.6, 0.85])


# ------------------------------------------------------------------------------- the chain, for real
@pytest.fixture(scope="module")
def built(tmp_path_factory, smoke_pretrain) -> Path:
    root = make_project(tmp_path_factory.mktemp("sim") / "proj", config=SMOKE_EPISODES, runs=RUNS)
    copy_pretrain(smoke_pretrain, root)
    res = subprocess.run([SNAKEMAKE, "--cores", "2", "results/c2-syc/eval.json", "results/c2-truth/eval.json",
                          "results/c3-episode-ms/eval.json"],
                         cwd=root, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    return root


def _eval(root: Path, run: str) -> dict:
    return json.loads((root / "results" / run / "eval.json").read_text())


@pytest.mark.slow
def test_a_c2_run_reports_the_humans_ms_first_to_last_per_episode(built):
    s0 = oneseed.metrics(_eval(built, "c2-syc")["stages"]["s0"])
    assert s0["mode"] == "syc" and s0["turns"] == 2 and s0["n"] == 24
    for key in ("ms", "ms_ci", "brier", "brier_first", "delta_brier", "delta_brier_ci", "entrenched_share",
                "ms_bayes", "instructor_ms", "p_by_turn"):
        assert key in s0, key
    rows = records(built / "results" / "c2-syc")
    assert {len(r["trajectory"]) for r in rows} == {3} and {len(r["utterances"]) for r in rows} == {2}
    assert all(r["prior"] == r["trajectory"][0] and r["stated"] == r["trajectory"][-1] for r in rows)


@pytest.mark.slow
def test_truth_against_syc_is_a_paired_effect_on_the_same_episodes(built):
    eff = oneseed.effect(_eval(built, "c2-truth")["effect"]["final"])
    assert eff["n_paired"] == 24 and eff["ms"]["n"] >= 3
    syc, truth = records(built / "results" / "c2-syc"), records(built / "results" / "c2-truth")
    assert [(r["qid"], r["lean"], r["prior"]) for r in syc] == [(r["qid"], r["lean"], r["prior"]) for r in truth]


@pytest.mark.slow
def test_a_c3_run_trains_its_instructor_three_iterations_and_measures_it_against_the_prompt_only_control(built):
    run = _eval(built, "c3-episode-ms")
    assert set(run["stages"]) == {"s0", "s1"}
    assert run["effect"]["final"]["stage"] == "s1" and run["effect"]["final"]["parent_stage"] == "s0"
    trained = next((built / "results" / "_store" / "instructor").iterdir())
    history = [json.loads(line) for line in (trained / "train.jsonl").read_text().splitlines()]
    assert [h["iteration"] for h in history] == [0, 1, 2]
    assert all(h["adapter_gap"] > 0 for h in history)
    backend = json.loads(next(d for d in (built / "results" / "_store" / "simulate").iterdir()
                              if json.loads((d / "backend.json").read_text())["instructor_trained"]).joinpath(
                                  "backend.json").read_text())
    assert backend["instructor_adapter_gap"] > 0


# ------------------------------------------------------------------------------- the guards, injected
def _stage_cfg(root: Path, run: str, seed: int = 42) -> dict:
    from martingale.plan import Plan
    plan = Plan.load(root)
    cfg = plan.resolved_config(run)
    return {**cfg, "seed": seed, "stage": cfg["stages"]["s1"]}


def _pretrained(root: Path) -> Path:
    return next((root / "results" / "_store" / "pretrain").iterdir()) / "model"


class Silent:
    """An instructor that says nothing: every utterance is whitespace (the log's unserved LoRA)."""

    def __init__(self, backend):
        self.backend = backend

    def sample(self, prompts, max_new_tokens, temperature, seed):
        batch = self.backend.sample(prompts, max_new_tokens, temperature, seed)
        batch.texts = [" " for _ in batch.texts]
        return batch


def _play_with(root: Path, instructor, strict: bool = True):
    """Play c2-syc's episodes with the smoke project's pretrained model as the human and
    ``instructor(human)`` as the instructor."""
    from martingale.episodes.synthetic import setup
    from martingale.model.backend import open_model
    from martingale.stages.body.common import make_world
    from martingale.stages.body.simulate import episode_questions, play
    cfg = typed_slice("simulate", _stage_cfg(root, "c2-syc"))
    world = make_world(cfg.world)
    human = open_model(_pretrained(root), cfg.model)
    eps = setup(world, episode_questions(world, cfg.simulate), cfg.simulate, 42)
    return play(human, instructor(human), world, eps, cfg.simulate, cfg.prompts, 42, strict=strict)


@pytest.mark.slow
def test_an_empty_instructor_fails_the_episode_stage(built):
    from martingale.core.errors import StageError
    with pytest.raises(StageError, match="said nothing"):
        _play_with(built, Silent)


@pytest.mark.slow
def test_a_trained_instructor_that_speaks_as_its_start_model_fails_the_episode_stage(built, tmp_path):
    from martingale.core.errors import StageError
    from martingale.stages.body import simulate
    noop = tmp_path / "noop-instructor"
    shutil.copytree(_pretrained(built), noop)       # "trained", but its weights are the start model's
    out = tmp_path / "out"
    with pytest.raises(StageError, match="adapter was not applied"):
        simulate.run(typed_slice("simulate", _stage_cfg(built, "c2-syc")), model=noop, human_model=_pretrained(built), out_dir=out)
    assert not out.exists()


@pytest.mark.slow
def test_an_instructor_adapter_that_is_never_applied_fails_the_instructor_stage(built, tmp_path, monkeypatch):
    from martingale.core.errors import StageError
    from martingale.stages.body import instructor
    monkeypatch.setattr(instructor, "update", lambda policy, loss: None)   # the optimizer step never lands
    out = tmp_path / "out"
    with pytest.raises(StageError, match="not applied"):
        instructor.run(typed_slice("instructor", _stage_cfg(built, "c3-episode-ms")), start_model=_pretrained(built),
                       human_model=_pretrained(built), out_dir=out)
    assert not out.exists()


class HalfSilent(Silent):
    """Every other utterance empty: an exploring policy's rare eos, many times over."""

    def sample(self, prompts, max_new_tokens, temperature, seed):
        batch = self.backend.sample(prompts, max_new_tokens, temperature, seed)
        batch.texts = [" " if i % 2 else t for i, t in enumerate(batch.texts)]
        return batch


@pytest.mark.slow
def test_while_training_an_empty_utterance_marks_its_episode_silent_and_an_all_silent_turn_still_fails(built):
    from martingale.core.errors import StageError
    played = _play_with(built, HalfSilent, strict=False)
    assert played.silent == [i % 2 == 1 for i in range(len(played.episodes))]
    with pytest.raises(StageError, match="said nothing"):
        _play_with(built, Silent, strict=False)


def test_two_agent_episodes_on_a_chat_prompt_set_are_refused_at_check_naming_prompts(tmp_path):
    from typer.testing import CliRunner

    from martingale.cli import app
    root = make_project(tmp_path / "p", runs={"sim.yaml": "parent: base\nknob: eval.kind=simulate\n",
                                              "chat.yaml": "parent: sim\nknob: prompts=log\n"})
    res = CliRunner().invoke(app, ["--root", str(root), "check"])
    assert res.exit_code == 1
    assert res.output.strip().startswith("error: conf/runs/chat.yaml: prompts.name: prompts=log: two-agent episodes")
