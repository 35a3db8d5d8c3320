"""A real chat model's train stage on 2 ranks: SmolLM2-135M-Instruct at smoke scale (the setup of
tests/test_smollm2_train.py), built by Snakemake on one rank, on 2 under DDP and on 2 under FSDP2
(torchrun, gloo), each a run one knob from the last. The 2-rank stages take the 1-rank steps: the
logged losses within 1e-4 relative, the change training made to the weights within 1e-3 of the
1-rank change, in norm (the tolerance of tests/test_ranks.py, where it is measured and justified)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_ranks import LOSS_RTOL, assert_same_weights, weights
from test_smollm2_train import MODEL, build_train_stage, smoke_setup

from projcopy import make_project

RUNS = {"smol.yaml": "parent: null\nknob: setup=smoke\n",
        "smol-B.yaml": "parent: smol\nknob: stages.s1.reward=B\n",
        "smol-B-ddp.yaml": "parent: smol-B\nknob: model.distributed.ranks=2\n",
        "smol-B-fsdp.yaml": "parent: smol-B-ddp\nknob: model.distributed.strategy=fsdp\n"}

pytestmark = [pytest.mark.slow, pytest.mark.real("smollm2")]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = make_project(tmp_path_factory.mktemp("smollm2-ranks") / "proj", runs=RUNS)
    smoke_setup(root)
    smoke = root / "conf/setup/smoke.yaml"      # one thread a rank: 2 ranks on the 2 cores, not 4 threads
    setup = yaml.safe_load(smoke.read_text())
    setup["model"]["resources"] = {"cpus": 1}
    smoke.write_text("# @package _global_\n" + yaml.safe_dump(setup, sort_keys=False))
    return root


def train_folder(root: Path, run: str) -> Path:
    from martingale.plan import Plan
    from martingale.store import stage_dir
    return root / stage_dir(next(r.model_stage for r in Plan.load(root).run_stages(run) if r.stage == "s1"))


@pytest.fixture(scope="module")
def one_rank(project) -> Path:
    build_train_stage(project, "smol-B")
    return train_folder(project, "smol-B")


@pytest.mark.parametrize("run,strategy", [("smol-B-ddp", "ddp"), ("smol-B-fsdp", "fsdp")])
def test_a_real_chat_models_train_stage_on_two_ranks_takes_the_one_rank_steps(project, one_rank, run, strategy):
    stage = build_train_stage(project, run)
    assert (stage["ranks"], stage["strategy"], stage["steps"]) == (2, strategy, 2)
    many = train_folder(project, run)
    assert many != one_rank                                   # its own stage: the ranks are in its id
    rows = [[json.loads(x) for x in (f / "train.jsonl").read_text().splitlines()] for f in (one_rank, many)]
    for a, b in zip(*rows):
        assert b["loss"] == pytest.approx(a["loss"], rel=LOSS_RTOL) and b["parse_rate"] == a["parse_rate"]
    assert_same_weights(weights(MODEL), weights(one_rank), weights(many))
