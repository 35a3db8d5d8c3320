"""What a stage asks SLURM for, without a cluster.

1. Snakemake's own dry run with the SLURM profile (``snakemake -n --profile profiles/slurm``) on a
   copy of the project prints each job's resources: what the workflow (conf/model/<name>.yaml
   `resources:` → plan._resources → the stage rules) and the profile's default-resources hand the
   executor plugin.
2. Those resources go through snakemake-executor-plugin-slurm's own sbatch builders
   (``get_submit_command``, ``set_gres_string``, ``Executor.get_partition_arg``) to get the sbatch
   flags a real submission would use.

A stage on the embedded `tiny` model asks for CPUs, memory and a time limit only (no GPU resource
at all); a stage on llama31_8b / qwen3_32b asks for ``--gpus=h200:<n>`` too. Partition and account
come from $SLURM_PARTITION / $SLURM_ACCOUNT, and are absent when those are unset.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from martingale.plan import Plan, _resources

from projcopy import make_project

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SLOW = pytest.mark.slow   # each fixture: a snakemake dry run with the SLURM profile (~10 s)
TARGETS = ("results/base/eval.json", "results/llama-bp/eval.json", "results/qwen/eval.json")
RUNS = {
    "llama.yaml": "parent: base\nknob: model=llama31_8b\n",
    "llama-bp.yaml": "parent: llama\nknob: stages.s1.reward=BP\n",
    "qwen.yaml": "parent: base\nknob: model=qwen3_32b\n",
}


def _project(root: Path) -> Path:
    """The fixture conf/ (+ the llama and qwen runs), workflow/, profiles/ and the Snakefile."""
    return make_project(root, code=("workflow", "profiles"), runs=RUNS)


def _value(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def local_rules(root: Path) -> set[str]:
    """The workflow's local rules as Snakemake parses them (`localrule:`): they run on the host,
    never via sbatch. (Snakemake's workflow object: the version is pinned in pyproject.toml.)"""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        wf = api.workflow(resource_settings=ResourceSettings(), snakefile=root / "Snakefile", workdir=root)
        return set(wf._workflow._localrules)


def parse_dry_run(out: str, local: set[str]) -> dict[str, dict]:
    """Job blocks of a dry run → {stage id (or run): {rule, local, threads, resources}}."""
    jobs: dict[str, dict] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        head = re.match(r"(?:local)?rule (\w+):", block)
        wc = re.search(r"^\s+wildcards: (?:sid|run)=(\S+)", block, re.M)
        if not head or not wc:
            continue
        threads = re.search(r"^\s+threads: (\d+)", block, re.M)
        res = re.search(r"^\s+resources: (.*)$", block, re.M)
        resources = dict(item.split("=", 1) for item in res.group(1).split(", ")) if res else {}
        jobs[wc.group(1)] = {
            "rule": head.group(1), "local": head.group(1) in local,
            "threads": int(threads.group(1)) if threads else 1,
            "resources": {k: _value(v) for k, v in resources.items()},
        }
    return jobs


def dry_run(root: Path, env: dict) -> dict[str, dict]:
    # --cores only lifts the dry run's default of 1 core (which would cap threads at 1); a real
    # SLURM run has no --cores, so threads are not capped there either.
    res = subprocess.run([SNAKEMAKE, "-n", "--profile", "profiles/slurm", "--cores", "1024", *TARGETS],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    return parse_dry_run(res.stdout + res.stderr, local_rules(root))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return _project(tmp_path_factory.mktemp("slurm-res") / "proj")


@pytest.fixture(scope="module")
def jobs(project) -> dict[str, dict]:
    env = {**os.environ, "SLURM_PARTITION": "gpu-h200", "SLURM_ACCOUNT": "proj42"}
    return dry_run(project, env)


@pytest.fixture(scope="module")
def jobs_no_env(tmp_path_factory) -> dict[str, dict]:
    root = _project(tmp_path_factory.mktemp("slurm-res-noenv") / "proj")
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_PARTITION", "SLURM_ACCOUNT")}
    return dry_run(root, env)


def sbatch_flags(job: dict) -> str:
    """The sbatch call the plugin would build for this job (its own functions, no cluster)."""
    from snakemake.iocontainers import ResourceList
    from snakemake_executor_plugin_slurm import Executor
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    stage = SimpleNamespace(  # the attributes of a Snakemake job that the plugin's builders read
        name=job["rule"], threads=job["threads"], wildcards=[],
        resources=ResourceList(fromdict=job["resources"]), is_group=lambda: False)
    executor = SimpleNamespace(_partitions=None, _fallback_partition=None, logger=None)
    partition = Executor.get_partition_arg(executor, stage)   # -p from resources.slurm_partition
    params = {"run_uuid": "martingale_test", "slurm_logfile": "slurm_logs/%j.log",
              "comment_str": f"rule_{job['rule']}", "account": "", "partition": partition,
              "workdir": "/work"}
    settings = SimpleNamespace(requeue=False, no_requeue=False, qos=None, reservation=None)
    return get_submit_command(stage, params, settings=settings) + set_gres_string(stage)


# ------------------------------------------------------------------------------------ plan level
def test_a_cpu_model_has_no_gpu_resource_and_a_gpu_model_has_count_and_type():
    tiny = _resources({"resources": {"cpus": 2, "mem_mb": 4000, "gpus": 0, "gpu_model": None, "runtime_min": 30}})
    assert tiny == {"device": "auto", "threads": 2, "mem_mb": 4000, "runtime": 30}
    big = _resources({"resources": {"cpus": 8, "mem_mb": 160000, "gpus": 2, "gpu_model": "h200", "runtime_min": 480}})
    assert big == {"device": "auto", "threads": 8, "mem_mb": 160000, "runtime": 480, "gpu": 2, "gpu_model": "h200"}
    # a GPU type without GPUs asks for nothing GPU-shaped either
    assert "gpu_model" not in _resources({"resources": {"gpus": 0, "gpu_model": "h200"}})


def test_a_stage_serving_its_model_asks_for_the_servers_gpus_and_a_ranked_one_for_the_nodes():
    from martingale.stages import kinds
    seventy = {"backend": "vllm", "vllm": {"tensor_parallel_size": 4},
               "distributed": {"ranks": 8, "strategy": "fsdp", "nodes": 2},
               "resources": {"cpus": 8, "mem_mb": 64000, "gpus": 8, "gpu_model": "h200", "runtime_min": 1440}}
    assert _resources(seventy, kinds()["simulate"])["gpu"] == 4       # the vLLM server's tensor parallel
    assert _resources(seventy, kinds()["evaluate"])["gpu"] == 4
    ranked = _resources(seventy, kinds()["instructor"])
    assert (ranked["gpu"], ranked["nodes"], ranked["threads"]) == (8, 2, 32)   # 4 ranks + the server a node
    assert _resources({**seventy, "backend": "hf"}, kinds()["evaluate"])["gpu"] == 8


# ------------------------------------------------------------------- what Snakemake hands SLURM
@SLOW
def test_tiny_stages_ask_for_cpus_memory_and_time_only(jobs):
    tiny = [j for j in jobs.values() if not j["local"] and j["resources"].get("mem_mb") == 4000]
    assert {j["rule"] for j in tiny} == {"pretrain", "evaluate"}   # base: pretrain + eval of s0
    for job in tiny:
        res = job["resources"]
        cpus = 2 if job["rule"] == "pretrain" else 1     # tiny: resources.cpus 1, pretrain_cpus 2
        assert job["threads"] == cpus and res["runtime"] == 30
        assert not {"gpu", "gpu_model", "gres"} & res.keys(), res
        flags = sbatch_flags(job)
        for flag in (f"--cpus-per-task={cpus}", "--mem 4000", "-t 30", "--ntasks=1", "-p gpu-h200"):
            assert flag in flags, (flag, flags)
        assert "--gpus" not in flags and "--gres" not in flags, flags


@SLOW
def test_llama_stages_ask_for_one_h200_and_the_models_memory_and_time(jobs):
    llama = [j for j in jobs.values() if not j["local"] and j["resources"].get("mem_mb") == 64000]
    assert sorted(j["rule"] for j in llama) == ["evaluate", "evaluate", "train"]  # s0 eval, s1 train + eval
    for job in llama:
        res = job["resources"]
        assert job["threads"] == 8 and res["runtime"] == 240
        assert res["gpu"] == 1 and res["gpu_model"] == "h200"
        flags = sbatch_flags(job)
        for flag in ("--gpus=h200:1", "--cpus-per-task=8", "--mem 64000", "-t 240", "-p gpu-h200"):
            assert flag in flags, (flag, flags)
        assert "--ntasks=1" not in flags   # the plugin leaves task geometry alone for GPU jobs


@SLOW
def test_qwen_stages_ask_for_two_h200(jobs):
    qwen = [j for j in jobs.values() if not j["local"] and j["resources"].get("mem_mb") == 160000]
    assert [j["rule"] for j in qwen] == ["evaluate"]
    flags = sbatch_flags(qwen[0])
    for flag in ("--gpus=h200:2", "--cpus-per-task=8", "--mem 160000", "-t 480"):
        assert flag in flags, (flag, flags)


@SLOW
def test_local_weights_are_linked_on_the_host_not_submitted(project, jobs):
    plan = Plan.load(project)
    sources = {plan.run_chain(run)[0] for run in ("llama", "qwen")}   # their local-weights stages
    weights = [jobs[sid] for sid in sources]
    assert len(weights) == 2 and all(j["local"] for j in weights)
    # on the host: the weights link, the aggregates and the table; every other stage is a job
    assert local_rules(project) == {j["rule"] for j in weights} | {"aggregate", "runs_table"}


@SLOW
def test_partition_and_account_come_from_the_environment(jobs, jobs_no_env):
    remote = [j for j in jobs.values() if not j["local"]]
    assert remote and all(j["resources"]["slurm_partition"] == "gpu-h200" for j in remote)
    assert all(j["resources"]["slurm_account"] == "proj42" for j in remote)
    unset = [j for j in jobs_no_env.values() if not j["local"]]
    assert len(unset) == len(remote)
    for job in unset:
        # (the plugin then asks sinfo for the default partition and sacct for your last account)
        assert not {"slurm_partition", "slurm_account"} & job["resources"].keys(), job
