"""Rewards and readers declare themselves (one decorator each): the schema's allowed names, a
reward's NaN masking and its parameters, and whether a reader loads a judge come from there."""
from __future__ import annotations

import numpy as np
import pytest
from reward_batch import compute
from typed import typed_slice

from martingale import rewards
from martingale.beliefs import readers
from martingale.beliefs.elicit import judge_needed
from martingale.config.runs import RunTree
from martingale.config.schema import StageConfig, choices
from martingale.stages.instructor import InstructorConfig

from projcopy import proj, write_run  # noqa: F401 (proj: fixture)

EPISODE = ("episode_ms", "product", "symabs", "hinge")   # the instructor stage's rewards


@pytest.fixture
def scaled_brier():
    """A reward registered for one test: −scale·(y − stated P)², scale = the stage's ``lam``."""
    with rewards.REWARDS.temporarily():
        @rewards.reward("Rtest", needs=("stated", "y"), params=("lam",))
        def scaled(stated, y, *, lam):
            """−lam·(y − stated P)²."""
            return -lam * (y - stated) ** 2
        yield "Rtest"


@pytest.fixture
def halfway_reader():
    """A reader registered for one test, declaring that it needs a judge."""
    with readers.READERS.temporarily():
        @readers.reader("halfway", needs_judge=True)
        def halfway(ctx, questions, texts, k):
            return [0.5] * len(texts)
        yield "halfway"


def test_a_registered_reward_is_an_allowed_stage_reward(scaled_brier):
    assert scaled_brier in choices()["stages.*.reward"]


def test_an_unregistered_reward_is_no_longer_allowed():
    assert "Rtest" not in choices()["stages.*.reward"]
    assert set(choices()["stages.*.reward"]) == {None, "A", "A_slope", "B", "C", "BP", "episode_ms", "product", "symabs", "hinge"}


def test_a_run_may_name_a_registered_reward(proj, scaled_brier):
    write_run(proj, "r.yaml", f"parent: base\nknob: stages.s1.reward={scaled_brier}\n")
    assert RunTree.load(proj / "conf").resolved_config("r")["stages"]["s1"]["reward"] == scaled_brier


def test_a_reward_gets_its_declared_params_from_the_stage_config(scaled_brier):
    stage = {"lam": 2.0, "info_coef": 99.0}
    score = rewards.bind(scaled_brier, stage)
    r = score(prior=[np.nan, 0.1, 0.2], posterior=[0.5, np.nan, 0.3], stated=[0.9, 0.5, np.nan], y=[1, 0, 1])
    # −2·(y − stated)²; NaN only where an input it declares (stated, y) is NaN, never prior/posterior
    assert r[:2] == pytest.approx([-2 * 0.01, -2 * 0.25])
    assert np.isnan(r[2])


def test_a_param_missing_from_the_stage_config_is_named(scaled_brier):
    with pytest.raises(ValueError, match="reward Rtest: stage config has no lam"):
        rewards.bind(scaled_brier, {"info_coef": 1.0})


def test_a_reward_needing_an_unknown_input_is_refused():
    with pytest.raises(ValueError, match="needs must be some of prior, posterior, stated, y"):
        rewards.reward("bad", needs=("logits",))


def test_a_reward_name_registers_once(scaled_brier):
    with pytest.raises(ValueError, match="already registered"):
        rewards.reward(scaled_brier, needs=("y",))(lambda y: y)


def test_builtin_rewards_declare_what_they_read_and_their_stage_keys():
    needs = {n: r.needs for n, r in rewards.REWARDS.items()}
    assert needs == {"A": ("prior", "posterior", "stated"), "A_slope": ("prior", "posterior", "stated"), "B": ("stated", "y"),
                     "C": ("prior", "posterior", "stated", "y"), "BP": ("prior", "posterior", "stated", "y"),
                     "episode_ms": ("prior", "posterior"), "product": ("prior", "posterior"),
                     "symabs": ("trajectory",), "hinge": ("trajectory", "y")}
    # a train stage binds the stage's keys; an instructor stage the stage's and instructor.*
    fields = set(StageConfig.__dataclass_fields__)
    for r in rewards.REWARDS.values():
        assert set(r.params) <= fields | (set(InstructorConfig.__dataclass_fields__) if r.name in EPISODE else set()), r.name


def test_masking_follows_the_declared_needs():
    cfg = {"info_coef": 1.0, "info_eps": 0.02, "lam": 0.5}
    nan_prior = ([np.nan, 0.2, 0.4, 0.6], [0.5, 0.3, 0.5, 0.7], [0.5, 0.3, 0.5, 0.7], [1, 0, 1, 1])
    assert np.isfinite(compute("B", *nan_prior, cfg)).all()       # B reads no prior
    for name in ("A", "C", "BP"):
        r = compute(name, *nan_prior, cfg)
        assert np.isnan(r[0]) and np.isfinite(r[1:]).all(), name
    nan_stated = ([0.1, 0.2, 0.4, 0.6], [0.5, 0.3, 0.5, 0.7], [np.nan, 0.3, 0.5, 0.7], [1, 0, 1, 1])
    for name in set(rewards.REWARDS) - set(EPISODE):                     # every train reward reads stated P
        r = compute(name, *nan_stated, cfg)
        assert np.isnan(r[0]) and np.isfinite(r[1:]).all(), name


def test_a_registered_reader_is_an_allowed_judge(halfway_reader):
    assert halfway_reader in choices()["elicit.judge"]


def test_an_unregistered_reader_is_no_longer_allowed():
    assert choices()["elicit.judge"] == ("self", "trace", "oracle", "api")


def test_a_judge_is_loaded_only_for_a_reader_that_declares_it(halfway_reader):
    assert judge_needed({"mode": "samemode", "judge": halfway_reader})
    assert judge_needed({"mode": "samemode", "judge": "self"})
    assert not judge_needed({"mode": "samemode", "judge": "trace"})
    assert not judge_needed({"mode": "samemode", "judge": "oracle"})
    assert not judge_needed({"mode": "samemode", "judge": "api"})             # its own client, no model
    assert not judge_needed({"mode": "snap", "judge": "self"})            # snap reads no judge


def test_a_reader_that_needs_a_judge_refuses_to_read_without_one(halfway_reader, default_cfg):
    from martingale.world.synthetic import SyntheticWorld
    ctx = readers.ReadContext(world=SyntheticWorld(default_cfg["world"]))
    with pytest.raises(ValueError, match="elicit.judge=halfway: this reader needs a judge model"):
        readers.READERS[halfway_reader](ctx, [], [], 1)


def test_an_unknown_reader_is_named():
    with pytest.raises(ValueError, match="elicit.judge: unknown reader 'nope'"):
        judge_needed({"mode": "samemode", "judge": "nope"})


@pytest.mark.slow   # evaluations of a model (~8 s each with the fixture)
@pytest.mark.parametrize("judge,judge_elsewhere,opened", [("trace", True, 1), ("self", True, 2), ("self", False, 1)])
def test_evaluate_opens_the_judge_model_only_when_the_reader_needs_it(
        tmp_path, monkeypatch, default_cfg, untrained_model, judge, judge_elsewhere, opened):
    """A judge is opened only for a reader that needs one, and only once when it is the evaluated
    model's own folder (one backend, one server with vllm)."""
    import shutil

    from martingale.model import backend
    from martingale.stages.body import evaluate
    calls = []
    real = backend.open_model
    monkeypatch.setattr(backend, "open_model", lambda folder, cfg: calls.append(folder) or real(folder, cfg))
    cfg = {"world": default_cfg["world"], "model": default_cfg["model"], "seed": 0,
           "elicit": {"mode": "samemode", "judge": judge, "cut": 0.5},
           "eval": {**default_cfg["eval"], "n_bootstrap": 10}}
    judge_folder = untrained_model
    if judge_elsewhere:
        judge_folder = tmp_path / "judge"
        shutil.copytree(untrained_model, judge_folder)
    evaluate.run(typed_slice("evaluate", cfg), untrained_model, judge_folder, tmp_path / "out")
    assert len(calls) == opened and (tmp_path / "out" / "records.jsonl").exists()


def test_a_registry_takes_each_name_once_and_forgets_a_tests_extension():
    from martingale.core.registry import Registry
    table = Registry("widget", {"a": 1})
    with table.temporarily():
        table.add("b", 2)
        with pytest.raises(ValueError, match="widget b: already registered"):
            table.add("b", 3)
    assert dict(table) == {"a": 1}
