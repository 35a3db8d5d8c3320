"""Adding a reward, a belief reader and a stage kind goes through the registries only: registered
at test time (no file of the project edited), a run that uses all three is checked, planned and
dry-run by Snakemake, with the new kind as its own rule."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from martingale import rewards, stages
from martingale.beliefs import readers
from martingale.plan import Plan

from projcopy import proj, write_run  # noqa: F401 (proj: fixture)


@pytest.fixture
def extensions():
    with rewards.REWARDS.temporarily(), readers.READERS.temporarily(), stages.kinds().temporarily():
        @rewards.reward("Rsharp", needs=("stated", "y"))
        def sharp(stated, y, **_):
            """Rsharp: −|y − stated P|."""
            return -np.abs(y - stated)

        @readers.reader("midway")
        def midway(ctx, questions, texts, k):
            return [0.5] * len(texts)

        @stages.stage_kind("anneal", "step", keys=("world", "model"), inputs=("start_model",), per_seed=True)
        def anneal(cfg, start_model, out_dir):
            raise AssertionError("a dry run runs no stage")

        yield


def chain(root):
    """r3 = base → elicit.judge=midway → stages.s1.reward=Rsharp → stages.s1.kind=anneal."""
    write_run(root, "r1.yaml", "parent: base\nknob: elicit.judge=midway\n")
    write_run(root, "r2.yaml", "parent: r1\nknob: stages.s1.reward=Rsharp\n")
    write_run(root, "r3.yaml", "parent: r2\nknob: stages.s1.kind=anneal\n")


def test_a_run_using_a_new_reward_reader_and_stage_kind_is_planned(proj, extensions):
    chain(proj)
    plan = Plan.load(proj)
    kinds = [plan.stages[s].kind for s in plan.run_chain("r3")]
    assert kinds.count("anneal") == 1 and "train" not in kinds
    anneal = next(plan.stages[s] for s in plan.run_chain("r3") if plan.stages[s].kind == "anneal")
    assert set(anneal.cfg) == {"world", "model", "stage", "seed"} and list(anneal.inputs) == ["start_model"]
    assert anneal.cfg["stage"]["reward"] == "Rsharp"
    evals = [plan.stages[s] for s in plan.run_chain("r3") if plan.stages[s].kind == "evaluate"]
    assert {e.cfg["elicit"]["judge"] for e in evals} == {"midway"}


def test_snakemake_dry_runs_the_new_kind_as_its_own_rule(proj, extensions, capfd, caplog, monkeypatch):
    from snakemake.cli import main
    chain(proj)
    monkeypatch.chdir(proj)             # in-process, so the registries are the test's; cwd restored after
    with pytest.raises(SystemExit) as done:
        main(["-n", "--quiet", "rules", "--cores", "1", "results/r3/eval.json"])
    out = capfd.readouterr()
    assert done.value.code == 0, out.err[-3000:]
    counts = dict(line.split() for line in (out.out + out.err + caplog.text).splitlines()
                  if len(line.split()) == 2 and line.split()[1].isdigit())
    # r3's s1 is the new kind; the parent r2's s1 (train) is built too: the aggregate pairs with it
    assert counts.get("anneal") == "1" and counts.get("train") == "1" and counts.get("evaluate") == "3"


def test_the_names_are_refused_once_unregistered(proj):
    from martingale.config.runs import RunError, RunTree
    write_run(proj, "r1.yaml", "parent: base\nknob: elicit.judge=midway\n")
    with pytest.raises(RunError, match="elicit.judge"):
        RunTree.load(proj / "conf")


def test_a_new_world_in_one_file_is_allowed_planned_and_opened_by_the_stages(proj):
    """A world registered where it is defined (``@world``): ``world.name`` allows it, a run on it is
    planned, and a stage opens it by name; unregistered, the knob is refused again."""
    from martingale.config.runs import RunError, RunTree
    from martingale.stages.body.common import make_world
    from martingale.world import WORLDS, world, worlds
    from martingale.world.synthetic import SyntheticWorld

    worlds()
    with WORLDS.temporarily():
        @world("inverted")
        class Inverted(SyntheticWorld):
            """The synthetic world with the held-out set's outcomes flipped."""

            def splits(self):
                train, heldout = super().splits()
                return train, [q.negation() for q in heldout]

        write_run(proj, "inv.yaml", "parent: base\nknob: world.name=inverted\n")
        plan = Plan.load(proj)
        evals = [plan.stages[s] for s in plan.run_chain("inv") if plan.stages[s].kind == "evaluate"]
        assert {e.cfg["world"]["name"] for e in evals} == {"inverted"}
        opened = make_world(evals[0].cfg["world"])
        assert isinstance(opened, Inverted)
        assert opened.splits()[1][0].y == 1 - SyntheticWorld(evals[0].cfg["world"]).splits()[1][0].y
    shutil.rmtree(proj / ".cache")            # the run configs cached while it was registered (keyed by code files)
    with pytest.raises(RunError, match="world.name"):
        RunTree.load(proj / "conf")
