"""What a run needs from the machine (weights, vLLM, an API key, a GPU): read off its stages, in the
table whatever the machine, and `snakemake all` builds only the runs whose needs it meets."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from martingale.plan import Plan
from martingale.plan.needs import Need, unmet
from martingale.table.rows import build_table

from projcopy import make_project, run_files, write_run

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
DEEPSEEK = "parent: null\nknob: setup=deepseek_c2\n"
LLAMA_C3 = "parent: null\nknob: setup=llama8b_c3\n"


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj", code=("workflow", "data"), runs={"deepseek.yaml": DEEPSEEK, "llama-c3.yaml": LLAMA_C3})


def tags(plan: Plan, run: str) -> list[str]:
    return [n.tag for n in plan.run_needs(run)]


def test_a_run_with_api_roles_off_this_machine_needs_their_key_variable_and_its_weights(proj):
    assert tags(Plan.load(proj), "deepseek") == ["api_key:DEEPSEEK_API_KEY", "weights:models/SmolLM2-135M-Instruct"]


def test_an_endpoint_on_this_machine_needs_no_key(proj):
    write_run(proj, "local-human.yaml", "parent: deepseek\nknob: 'simulate.human_model={backend: api, api: "
                                        "{base_url: \"http://127.0.0.1:8000/v1\", model: m, api_key_env: LOCAL_KEY}}'\n")
    assert "api_key:LOCAL_KEY" not in tags(Plan.load(proj), "local-human")


def test_a_gpu_model_served_by_vllm_needs_a_gpu_vllm_and_its_weights(proj):
    assert tags(Plan.load(proj), "llama-c3") == ["api_key:DEEPSEEK_API_KEY", "gpu", "vllm:.venv-vllm/bin/python",
                                                 "weights:models/Llama-3.1-8B-Instruct"]


def test_the_embedded_runs_need_nothing(proj):
    plan = Plan.load(proj)
    assert all(not plan.run_needs(run) for run in plan.run_ids() if run not in ("deepseek", "llama-c3")
               and not run.startswith(("smollm2", "base-vllm")))


def test_each_need_is_met_by_what_it_names(tmp_path, monkeypatch):
    (tmp_path / "models" / "M").mkdir(parents=True)
    weights, key, gpu = Need("weights", "models/M"), Need("api_key", "K"), Need("gpu")
    monkeypatch.setenv("PATH", str(tmp_path))                 # no nvidia-smi
    assert unmet([weights, key, gpu], tmp_path, env={}) == [key, gpu, weights]
    (tmp_path / "models" / "M" / "config.json").write_text("{}")
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    assert unmet([weights, key, gpu], tmp_path, env={"K": "secret"}) == []
    monkeypatch.setenv("PATH", "/nonexistent")
    assert unmet([gpu], tmp_path, env={}, cluster=True) == []   # the cluster's scheduler places it
    assert unmet([key], tmp_path, env={"K": ""}) == [key]       # an empty variable is no key


def test_the_table_lists_a_runs_needs_whatever_this_machine_has(proj, monkeypatch):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    without = {r["run_id"]: r for r in build_table(proj)}
    monkeypatch.setenv("DEEPSEEK_API_KEY", "canary-key-123")
    assert build_table(proj) == list(without.values())
    assert without["deepseek"]["needs"] == ["api_key:DEEPSEEK_API_KEY", "weights:models/SmolLM2-135M-Instruct"]
    assert without["deepseek"]["state"] == "queued" and without["base"]["needs"] == []


def _dry_run(root: Path, env: dict, *targets: str) -> subprocess.CompletedProcess:
    return subprocess.run([SNAKEMAKE, "-n", *targets, "--quiet", "rules"], cwd=root, capture_output=True,
                          text=True, env={**os.environ, **env, "DEEPSEEK_API_KEY": env.get("DEEPSEEK_API_KEY", "")})


def _aggregates(res: subprocess.CompletedProcess) -> int:
    import re
    m = re.search(r"^\s*aggregate\s+(\d+)\s*$", res.stdout + res.stderr, re.M)
    return int(m.group(1)) if m else 0


def _buildable(root: Path, env: dict) -> int:
    plan = Plan.load(root)
    return sum(not unmet(plan.run_needs(r), root, env=env) for r in plan.active_run_ids())


@pytest.mark.slow
def test_snakemake_all_skips_a_run_whose_needs_are_unmet_and_names_each_on_one_line(proj):
    res = _dry_run(proj, {})
    assert res.returncode == 0, res.stderr
    assert ("martingale: all skips deepseek: it needs an API key in $DEEPSEEK_API_KEY; weights "
            "models/SmolLM2-135M-Instruct (a local HF folder: config.json)") in res.stderr
    assert "martingale: all skips llama-c3: it needs an API key in $DEEPSEEK_API_KEY; a GPU" in res.stderr
    assert _aggregates(res) == _buildable(proj, {}) < len(run_files(proj)) - 1
    # the key set and the weights in place: `all` builds it
    (proj / "models" / "SmolLM2-135M-Instruct").mkdir(parents=True)
    (proj / "models" / "SmolLM2-135M-Instruct" / "config.json").write_text("{}")
    res = _dry_run(proj, {"DEEPSEEK_API_KEY": "canary-key-123"})
    assert res.returncode == 0, res.stderr
    assert "all skips deepseek" not in res.stderr and "all skips llama-c3" in res.stderr
    assert _aggregates(res) == _buildable(proj, {"DEEPSEEK_API_KEY": "k"}) > _buildable(proj, {})


@pytest.mark.slow
def test_a_target_named_on_the_command_line_is_planned_whatever_its_needs(proj):
    res = _dry_run(proj, {}, "results/deepseek/eval.json")
    assert res.returncode == 0, res.stderr
    assert _aggregates(res) == 1 and "all skips" not in res.stderr


def test_an_index_from_before_needs_is_computed_again_not_read_as_needing_nothing(proj):
    import json

    from martingale.plan import conf_hash, current_index
    from martingale.store import STORE
    index = Plan.load(proj).index().to_json()
    for r in index["runs"].values():
        del r["needs"]
    (proj / STORE).mkdir(parents=True)
    (proj / STORE / "index.json").write_text(json.dumps(index))
    assert index["conf_hash"] == conf_hash(proj / "conf")
    assert current_index(proj).runs["deepseek"].needs == ["api_key:DEEPSEEK_API_KEY",
                                                                "weights:models/SmolLM2-135M-Instruct"]
