"""Two machines, one stage store, for real: project A builds filter-s2only at smoke scale with a
store on a real S3 server (SeaweedFS, tests/s3server.py); project B, with an empty results/ and the
same store, builds the same target by pulling, running no stage job, and gets the same bytes.
Two more projects building one chain at once leave one lineage. The store's secret is in every
Snakemake call's environment and must be written nowhere."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from martingale.plan import Plan
from martingale.remote.backend import open_store
from martingale.remote.pull import held_stages
from martingale.remote.records import manifest_digest, stage_key
from martingale.remote.transfer import read_records
from martingale.store import stage_dir

from projcopy import SMOKE, copy_pretrain, make_project
from s3server import SECRET_KEY, S3Server

pytestmark = [pytest.mark.slow, pytest.mark.real("s3")]

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
MARTINGALE = str(Path(sys.executable).with_name("martingale"))
TARGET = "results/filter-s2only/eval.json"
STAGE_RULES = ("pretrain", "distill", "train", "evaluate", "instructor", "simulate", "weights")
SAME = ("results/filter-s2only/eval.json", "results/filter-s2only/records.jsonl", "runs.json", "FINDINGS.md")


def env_for(server: S3Server, prefix: str) -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", **server.env,
            "MARTINGALE_STORE": f"s3://{server.url.split('/')[2]}/{prefix}"}


def smk(root: Path, env: dict[str, str], *targets: str) -> subprocess.CompletedProcess:
    return subprocess.run([SNAKEMAKE, "--cores", "2", *targets], cwd=root, capture_output=True, text=True, env=env)


def jobs_run(res: subprocess.CompletedProcess) -> set[str]:
    """The rules Snakemake ran jobs of (its job-stats table)."""
    rules = set()
    for line in res.stderr.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job"):
            rules.add(parts[0])
    return rules


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with S3Server(tmp_path_factory.mktemp("s3")) as s:
        yield s


@pytest.fixture(scope="module")
def two_machines(server, tmp_path_factory, smoke_pretrain):
    """A built filter-s2only (pushing as it went), then B pulling it: (A, B, B's Snakemake call)."""
    base = tmp_path_factory.mktemp("two")
    a = make_project(base / "a", code=("workflow", "profiles"), config=SMOKE)
    copy_pretrain(smoke_pretrain, a)
    env = env_for(server, "two")
    pushed = subprocess.run([MARTINGALE, "push"], cwd=a, capture_output=True, text=True, env=env)
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    res = smk(a, env, TARGET, "runs.json")
    assert res.returncode == 0, res.stderr[-4000:]
    b = make_project(base / "b", code=("workflow", "profiles"), config=SMOKE)
    pulled = smk(b, env, TARGET, "runs.json")
    assert pulled.returncode == 0, pulled.stderr[-4000:]
    return a, b, pulled


def test_a_second_machine_runs_no_stage_job_and_gets_the_same_bytes(two_machines):
    a, b, pulled = two_machines
    assert jobs_run(pulled) & set(STAGE_RULES) == set(), pulled.stderr[-3000:]
    assert "pulled" in pulled.stderr
    assert [p for p in SAME if (a / p).read_bytes() != (b / p).read_bytes()] == []


def test_a_second_machine_holds_every_stage_of_the_chain_with_the_stores_bytes(two_machines, server):
    a, b, _ = two_machines
    plan = Plan.load(b)
    chain = {s for run in ("filter-s2only",) for s in plan.run_chain(run)}
    for sid in chain:
        assert manifest_digest(b / stage_dir(sid)) == manifest_digest(a / stage_dir(sid)), sid


def test_a_pushed_stage_names_the_manifests_of_the_inputs_it_was_built_from(two_machines, server, monkeypatch):
    a, _, _ = two_machines
    for k, v in env_for(server, "two").items():
        monkeypatch.setenv(k, v)
    store = open_store(os.environ["MARTINGALE_STORE"])
    plan = Plan.load(a)
    records = {r.name: r for r in read_records(store, [stage_key(s) for s in held_stages(store)]).values()}
    assert records
    for sid, record in records.items():
        assert {role: ref["stage"] for role, ref in record.inputs.items()} == dict(plan.stages[sid].inputs)
        for ref in record.inputs.values():
            assert records[ref["stage"]].digest == ref["manifest"]


def test_the_store_secret_is_written_nowhere(two_machines):
    leaks = []
    for root in two_machines[:2]:
        for top in ("results", "logs", ".snakemake", "wandb"):
            leaks += [p for p in (root / top).rglob("*") if p.is_file() and not p.is_symlink()
                      and SECRET_KEY.encode() in p.read_bytes()]
        leaks += [root / n for n in ("runs.json", "RUNS.md", "runs.html", "FINDINGS.md")
                  if (root / n).exists() and SECRET_KEY.encode() in (root / n).read_bytes()]
    assert leaks == []


def test_pulled_results_regenerate_the_table_alone(two_machines, server, tmp_path):
    a, _, _ = two_machines
    c = make_project(tmp_path / "c", config=SMOKE)
    env = env_for(server, "two")
    res = subprocess.run([MARTINGALE, "pull", "filter-s2only"], cwd=c, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert not (c / "results" / "_store" / "train").exists()   # results only: no weights unless asked
    table = subprocess.run([MARTINGALE, "table"], cwd=c, capture_output=True, text=True, env=env)
    assert table.returncode == 0, table.stderr
    row = next(r for r in json.loads((c / "runs.json").read_text()) if r["run_id"] == "filter-s2only")
    assert row["state"] == "done"
    assert (c / "results/filter-s2only/eval.json").read_bytes() == (a / "results/filter-s2only/eval.json").read_bytes()


def test_two_machines_building_one_chain_at_once_leave_one_lineage(server, tmp_path, smoke_pretrain, monkeypatch):
    env = env_for(server, "race")
    for k, v in server.env.items():
        monkeypatch.setenv(k, v)
    roots = [make_project(tmp_path / name, config=SMOKE) for name in ("c", "d")]
    for root in roots:
        copy_pretrain(smoke_pretrain, root)
    pushed = subprocess.run([MARTINGALE, "push"], cwd=roots[0], capture_output=True, text=True, env=env)
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    results: list[subprocess.CompletedProcess] = []
    plan = Plan.load(roots[0])
    s1 = next(r.model_stage for r in plan.run_stages("filter-twostage") if r.stage == "s1")
    target = f"{stage_dir(s1)}/MANIFEST.json"       # distill D, then train s1 on it: one seed's chain
    threads = [threading.Thread(target=lambda r=r: results.append(smk(r, env, target))) for r in roots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    store = open_store(env["MARTINGALE_STORE"])
    records = {r.name: r for r in read_records(store, [stage_key(s) for s in held_stages(store)]).values()}
    chain = {s1, *plan.stages[s1].inputs.values()}
    assert chain <= set(records)
    for record in records.values():
        for ref in record.inputs.values():
            assert records[ref["stage"]].digest == ref["manifest"]
    for root in roots:
        for sid, record in records.items():
            if (root / stage_dir(sid)).is_dir():
                assert manifest_digest(root / stage_dir(sid)) == record.digest, (root.name, sid)


def test_an_unreachable_store_builds_locally_saying_which_stage_is_not_pushed(server, tmp_path, smoke_pretrain):
    root = make_project(tmp_path / "e", config=SMOKE)
    copy_pretrain(smoke_pretrain, root)
    plan = Plan.load(root)
    distill = next(s for s in plan.stages if plan.stages[s].kind == "distill")
    env = {**env_for(server, "unreachable"), "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}   # nothing listens there
    res = smk(root, env, f"{stage_dir(distill)}/MANIFEST.json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (root / stage_dir(distill) / "MANIFEST.json").is_file()
    lines = [line for line in res.stderr.splitlines() if line.startswith("martingale: store")]
    assert any("unreachable" in line and "building locally" in line for line in lines), res.stderr[-3000:]
    assert any(f"{distill} not pushed" in line and "martingale push" in line for line in lines), lines
