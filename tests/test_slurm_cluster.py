"""The stages on a real SLURM cluster: cluster/slurm.sh brings up a single-node cluster with
accounting (munge, MariaDB, slurmdbd, slurmctld, slurmd) in a temp folder, and Snakemake launches
the stages through profiles/slurm with snakemake-executor-plugin-slurm. Nothing is mocked.

In a smoke-scale copy of the project (the frozen fixture campaign, tests/fixtures/conf; each stage
asks for 1 CPU, so the 2-core node runs two at once):

- A-on-D and a sibling arm bp-on-D (parent D, knob stages.s1.reward=BP) are built by one
  Snakemake call: pretrain and D are built once, and the two arms' s1 train stages are two SLURM
  jobs that run at the same time (from sacct);
- the same targets built with profiles/local in another copy give byte-identical records, metrics
  and weights (the executor does not change a result);
- a 2-rank arm (A-on-D on model.distributed.ranks=2): its D and its train stage are one SLURM job
  each, asking for both ranks' CPUs and memory, their ranks started by torchrun inside it, its
  steps A-on-D's within tests/test_ranks.py's tolerance;
- faults: two more arms, whose train jobs are scancel'd while they run: the profile's retry
  resubmits both; one is left to finish (its run completes), the other is cancelled again, which
  exhausts the retries: runs.json says "crashed", no partial stage folder is left, and a dry run
  of the same command plans only what is missing.

Skipped (with the reason) when the Debian packages are not installed or not run as root; if they
are there and the cluster does not come up, the tests fail.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from projcopy import REPO, make_project
from realparts import require

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.real("slurm")]

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SLURM_SH = REPO / "cluster" / "slurm.sh"
SMOKE = """
# --- slurm smoke scale (tests/test_slurm_cluster.py): 1 CPU per stage, two stages at once ---
world: {n_train: 16, n_heldout: 32, clues_per_question: 4}
model: {hidden_size: 48, num_layers: 2, num_heads: 2, intermediate_size: 96,
        resources: {cpus: 1, pretrain_cpus: null, mem_mb: 1500, runtime_min: 10}}
pretrain: {steps: 150, batch_size: 32}
distill: {steps: 20, batch_size: 16}
eval: {n_bootstrap: 100}
"""
ARMS = ("A-on-D", "bp-on-D")                  # share pretrain and D; s1 differs
FAULT_ARMS = {"retried": "b-on-D", "crashed": "c-on-D"}
RUN_FILES = {
    "bp-on-D.yaml": "parent: D\nknob: stages.s1.reward=BP\n",
    "b-on-D.yaml": "parent: D\nknob: stages.s1.reward=B\n",
    "c-on-D.yaml": "parent: D\nknob: stages.s1.reward=C\n",
    "A-on-D-2ranks.yaml": "parent: A-on-D\nknob: model.distributed.ranks=2\n",
}
# Fast status checks for a test whose jobs take ~30 s (the profile's 10 s suits real stages).
FAST = ("--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2")
TIMINGS: dict[str, float] = {}


@dataclass
class Cluster:
    state: Path
    env: dict
    up_seconds: float


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A fresh single-node cluster for this module; stopped by PID at the end."""
    require("slurm")   # the Debian packages and root (tests/realparts.py)
    state = tmp_path_factory.mktemp("slurm") / "state"
    t0 = time.monotonic()
    up = subprocess.run(["bash", str(SLURM_SH), "up", str(state)], capture_output=True, text=True,
                        timeout=300)
    pids: list[int] = []
    try:
        if up.returncode != 0:
            pytest.fail(f"cluster/slurm.sh up failed ({up.returncode}):\n{up.stderr[-4000:]}")
        status = subprocess.run(["bash", str(SLURM_SH), "status", str(state)], capture_output=True, text=True)
        assert status.returncode == 0, status.stdout
        pids = [int(line.split()[1]) for line in status.stdout.splitlines()]
        m = re.search(r"up_seconds=([\d.]+)", up.stdout)
        TIMINGS["cluster_up_s"] = float(m.group(1)) if m else time.monotonic() - t0
        env = {**os.environ, "SLURM_CONF": str(state / "etc" / "slurm.conf"),
               "SLURM_PARTITION": "debug", "SLURM_ACCOUNT": "martingale"}
        yield Cluster(state, env, TIMINGS["cluster_up_s"])
    finally:
        down = subprocess.run(["bash", str(SLURM_SH), "down", str(state)], capture_output=True, text=True,
                              timeout=120)
        alive = [p for p in pids if _alive(p)]
        print(f"\n[slurm] timings: {json.dumps(TIMINGS)}\n{down.stderr.strip()}")
        assert down.returncode == 0, down.stderr[-3000:]
        assert not alive, f"daemons still running after down: {alive}"
        left = _job_processes(state)
        assert not left, f"job processes still running after down: {left}"


def _job_processes(state: Path) -> list[str]:
    """Processes of the cluster's jobs (its SLURM_CONF and a SLURM_JOB_ID in their environment)."""
    conf, found = f"SLURM_CONF={state / 'etc' / 'slurm.conf'}".encode(), []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            env = environ.read_bytes().split(b"\0")
            cmd = (environ.parent / "cmdline").read_bytes().replace(b"\0", b" ")[:120].decode(errors="replace")
        except OSError:   # gone, or not ours to read
            continue
        if conf in env and any(v.startswith(b"SLURM_JOB_ID=") for v in env):
            found.append(f"{environ.parent.name} {cmd}")
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def slurm_project(root: Path) -> Path:
    """The fixture conf/ + workflow/ + Snakefile + profiles/ at smoke scale, with the extra arms' run files."""
    return make_project(root, code=("workflow", "profiles"), config=SMOKE, runs=RUN_FILES)


def smk(root: Path, env: dict, *args: str, timeout: int = 420) -> subprocess.CompletedProcess:
    return subprocess.run([SNAKEMAKE, *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout)


def train_sid(root: Path, run: str) -> str:
    from martingale.plan import Plan
    return next(r.model_stage for r in Plan.load(root).run_stages(run) if r.stage == "s1")


def store(sid: str) -> str:
    from martingale.store import stage_dir
    return stage_dir(sid)


def finished(sid: str) -> str:
    """The file Snakemake builds for a stage: its manifest, written last inside the stage folder."""
    from martingale.store.manifest import MANIFEST
    return f"{store(sid)}/{MANIFEST}"


def run_uuid(output: str) -> str:
    m = re.search(r"SLURM run ID: (\S+)", output)
    assert m, output[-3000:]
    return m.group(1)


def sacct_jobs(env: dict, name: str, expect: int, timeout: float = 60) -> list[dict]:
    """The SLURM jobs of one Snakemake call (job name = the plugin's run id), once all have ended."""
    since = (datetime.now() - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(["sacct", "-X", "-P", "-n", "-S", since, "--name", name,
                              "-o", "JobID,JobName,Comment,Start,End,State,ReqTRES"],
                             env=env, capture_output=True, text=True, check=True).stdout
        rows = [dict(zip(("id", "name", "comment", "start", "end", "state", "tres"), line.split("|")))
                for line in out.splitlines() if line.strip()]
        for r in rows:
            r["state"] = r["state"].split()[0]           # "CANCELLED by 0" -> CANCELLED
        if len(rows) >= expect and all(r["end"] not in ("Unknown", "") for r in rows):
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"sacct: expected {expect} ended jobs named {name}, got {rows}")
        time.sleep(1)


def _t(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S")


# ------------------------------------------------------------------------ the build on SLURM
@pytest.fixture(scope="module")
def slurm_build(cluster, tmp_path_factory):
    root = slurm_project(tmp_path_factory.mktemp("on-slurm") / "proj")
    trains = {arm: train_sid(root, arm) for arm in ARMS}
    # Two jobs at a time (the node's CPUs), the two arms' train stages first: without the hint,
    # the s0 eval (ready at the same moment) may take the second CPU and the trains run in turn.
    # (--prioritize takes every value after it: it goes last)
    args = ["--profile", "profiles/slurm", *FAST, "--jobs", "2", *(f"results/{arm}/eval.json" for arm in ARMS),
            "--prioritize", *(finished(sid) for sid in trains.values())]
    t0 = time.monotonic()
    res = smk(root, cluster.env, *args)
    TIMINGS["slurm_build_s"] = round(time.monotonic() - t0, 1)
    assert res.returncode == 0, res.stderr[-5000:]
    return root, trains, res.stdout + res.stderr


def test_shared_stages_run_once_and_the_two_arms_train_at_the_same_time(cluster, slurm_build):
    root, trains, out = slurm_build
    from martingale.plan import Plan
    plan = Plan.load(root)
    stages = plan.stages_for(list(ARMS))           # every stage both arms need, each once
    remote = [s for s in stages if plan.stages[s].kind != "weights"]
    jobs = sacct_jobs(cluster.env, run_uuid(out), expect=len(remote))
    first = min(_t(j["start"]) for j in jobs)
    TIMINGS["slurm_jobs"] = [f"{j['comment'].rsplit('_', 1)[-1]} {(_t(j['start']) - first).seconds}-"
                             f"{(_t(j['end']) - first).seconds}s" for j in sorted(jobs, key=lambda j: j["start"])]
    by_comment: dict[str, list[dict]] = {}
    for j in jobs:
        by_comment.setdefault(j["comment"], []).append(j)
    # one SLURM job per stage: pretrain, D (distill), s0 eval, two trains, two s1 evals
    # (one rule per stage kind, named for the kind)
    assert sorted(by_comment) == sorted(f"rule_{plan.stages[s].kind}_wildcards_{s}" for s in remote), by_comment
    assert all(len(v) == 1 and v[0]["state"] == "COMPLETED" for v in by_comment.values()), by_comment
    distill = [c for c in by_comment if c.startswith("rule_distill_")]
    assert len(distill) == 1
    # each job asked for what the model config says (1 CPU, 1500 MB), and no GPU
    for j in jobs:
        tres = dict(kv.split("=", 1) for kv in j["tres"].split(","))
        assert tres["cpu"] == "1" and tres["mem"] == "1500M" and not any("gpu" in k for k in tres), j
    a, b = (by_comment[f"rule_train_wildcards_{trains[arm]}"][0] for arm in ARMS)
    assert _t(a["start"]) < _t(b["end"]) and _t(b["start"]) < _t(a["end"]), (a, b)
    overlap = (min(_t(a["end"]), _t(b["end"])) - max(_t(a["start"]), _t(b["start"]))).total_seconds()
    TIMINGS["train_overlap_s"] = overlap
    TIMINGS["train_durations_s"] = [(_t(j["end"]) - _t(j["start"])).total_seconds() for j in (a, b)]
    assert overlap > 0
    for arm in ARMS:
        assert (root / "results" / arm / "eval.json").exists()


# ------------------------------------------------------------ the same build, local profile
@dataclass
class LocalBuild:
    root: Path
    proc: subprocess.Popen
    log: Path
    t0: float


@pytest.fixture(scope="module")
def local_build(slurm_build, tmp_path_factory):
    """The same targets with profiles/local in another copy, started in the background once the
    SLURM build is done: it runs while the fault scenario below mostly waits on SLURM."""
    root = slurm_project(tmp_path_factory.mktemp("local") / "proj")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    log = root / "local.out"
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen([SNAKEMAKE, "--profile", "profiles/local",
                                 *(f"results/{arm}/eval.json" for arm in ARMS)],
                                cwd=root, env=env, stdout=f, stderr=subprocess.STDOUT)
    build = LocalBuild(root, proc, log, time.monotonic())
    yield build
    if proc.poll() is None:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------------- faults
def _wait(what: str, predicate, timeout: float, proc: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(f"snakemake exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)


def _stage_started(root: Path, sid: str, since: float) -> bool:
    """The stage's job log was written at or after ``since`` (this attempt is in its script)."""
    log = root / "logs" / "train" / f"{sid}.log"
    try:
        st = log.stat()
    except OSError:
        return False
    return st.st_size > 0 and st.st_mtime >= since - 1.0


def _running(env: dict, sid: str, exclude: set[str]) -> str | None:
    """The id of a RUNNING job of the stage (comment rule_train_wildcards_<sid>) not in exclude."""
    out = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i|%k"], env=env, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        jid, comment = line.split("|", 1)
        if comment.strip() == f"rule_train_wildcards_{sid}" and jid not in exclude:
            return jid
    return None


@pytest.fixture(scope="module")
def faults(cluster, slurm_build, local_build):
    """b-on-D and c-on-D (both on the built D): scancel both train jobs while they run; the
    profile's `retries: 1` resubmits both; cancel c-on-D's second attempt too (retries spent)."""
    root = slurm_build[0]
    sids = {role: train_sid(root, run) for role, run in FAULT_ARMS.items()}
    args = ["--profile", "profiles/slurm", *FAST, *(f"results/{run}/eval.json" for run in FAULT_ARMS.values())]
    log = open(root / "faults.out", "w+", encoding="utf-8")
    proc = subprocess.Popen([SNAKEMAKE, *args], cwd=root, env=cluster.env, stdout=log, stderr=subprocess.STDOUT,
                            text=True)
    env, cancelled = cluster.env, {role: [] for role in sids}
    t0 = time.monotonic()
    try:
        for attempt in (1, 2):
            for role, sid in sids.items():
                if attempt == 2 and role == "retried":
                    continue                      # let the retry finish
                seen = set(cancelled[role])
                jid = _wait(f"{role} train job (attempt {attempt}) running",
                            lambda sid=sid, seen=seen: _running(env, sid, seen), 180, proc)
                since = time.time()
                # into the stage script (its log written by this attempt), then cancel at once: a
                # smoke-scale train job lasts 6-9 s, so a fixed wait can outlast it
                _wait(f"{role} train job (attempt {attempt}) in its stage script",
                      lambda sid=sid, since=since: _stage_started(root, sid, since), 60, proc)
                subprocess.run(["scancel", jid], env=env, check=True)
                cancelled[role].append(jid)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    TIMINGS["fault_build_s"] = round(time.monotonic() - t0, 1)
    log.seek(0)
    out = log.read()
    log.close()
    return root, sids, cancelled, proc.returncode, out


def test_a_cancelled_stage_is_resubmitted_by_the_profiles_retry(cluster, faults):
    root, sids, cancelled, rc, out = faults
    assert out.count("Trying to restart job") == 2, out[-4000:]      # both first cancels retried
    jobs = sacct_jobs(cluster.env, run_uuid(out), expect=5)
    trains = {role: sorted((j for j in jobs if j["comment"] == f"rule_train_wildcards_{sid}"),
                           key=lambda j: int(j["id"]))
              for role, sid in sids.items()}
    assert [j["state"] for j in trains["retried"]] == ["CANCELLED", "COMPLETED"], trains
    assert [j["state"] for j in trains["crashed"]] == ["CANCELLED", "CANCELLED"], trains
    assert (root / store(sids["retried"])).is_dir()
    assert (root / "results" / FAULT_ARMS["retried"] / "eval.json").exists()
    # SLURM's job log of a cancelled attempt is kept, the successful attempt's deleted
    first = root / ".snakemake/slurm_logs/rule_train" / sids["retried"] / f"{cancelled['retried'][0]}.log"
    assert "CANCELLED AT" in first.read_text(errors="replace")
    assert not (first.parent / f"{trains['retried'][1]['id']}.log").exists()


def test_exhausted_retries_leave_no_partial_output_and_the_run_is_crashed(cluster, faults):
    root, sids, cancelled, rc, out = faults
    assert rc != 0
    sid = sids["crashed"]
    folder = root / store(sid)
    assert not folder.exists()
    assert not list(folder.parent.glob(f".{sid}.*")), "a partial (temp) stage folder was left behind"
    assert not (root / "results" / FAULT_ARMS["crashed"]).exists()
    # the stage's own log: the stage saw the SIGTERM (martingale.jobs.smk turns it into an error)
    stage_log = (root / "logs/train" / f"{sid}.log").read_text(errors="replace")
    slurm_logs = sorted((root / ".snakemake/slurm_logs/rule_train" / sid).glob("*.log"))
    assert [p.stem for p in slurm_logs] == sorted(cancelled["crashed"])
    for p in slurm_logs:
        assert f"JOB {p.stem} ON localhost CANCELLED AT" in p.read_text(errors="replace"), p
    res = smk(root, cluster.env, "--cores", "1", "runs.json")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {r["run_id"]: r for r in json.loads((root / "runs.json").read_text())}
    assert rows[FAULT_ARMS["crashed"]]["state"] == "crashed", rows[FAULT_ARMS["crashed"]]
    assert rows[FAULT_ARMS["retried"]]["state"] == "done"
    assert all(rows[arm]["state"] == "done" for arm in ARMS)
    # the row names the failed job's log: SLURM's log of the last cancelled attempt
    assert rows[FAULT_ARMS["crashed"]]["log"] == \
        f".snakemake/slurm_logs/rule_train/{sid}/{max(cancelled['crashed'], key=int)}.log"
    print(f"\n[slurm] crashed row log: {rows[FAULT_ARMS['crashed']].get('log')}; stage log tail:\n"
          + "\n".join(stage_log.splitlines()[-3:]))


def test_rerunning_builds_only_what_is_missing(cluster, faults):
    root = faults[0]
    args = ["-n", "--profile", "profiles/slurm", *(f"results/{run}/eval.json" for run in FAULT_ARMS.values()),
            *(f"results/{a}/eval.json" for a in ARMS), "--quiet", "rules"]
    res = smk(root, cluster.env, *args)
    assert res.returncode == 0, res.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout + res.stderr, re.M))
    # only the crashed arm's s1: its train, its eval, its aggregate
    assert counts == {"train": "1", "evaluate": "1", "aggregate": "1", "total": "3"}, res.stdout


def test_the_local_profile_gives_byte_identical_results(slurm_build, local_build):
    slurm_root, trains, _ = slurm_build
    root = local_build.root
    rc = local_build.proc.wait(timeout=420)
    TIMINGS["local_build_s"] = round(time.monotonic() - local_build.t0, 1)
    assert rc == 0, local_build.log.read_text(errors="replace")[-5000:]
    from martingale.plan import Plan
    plan = Plan.load(root)
    compared = 0
    for arm in ARMS:
        for name in ("records.jsonl", "eval.json"):
            rel = Path("results") / arm / name
            assert (root / rel).read_bytes() == (slurm_root / rel).read_bytes(), rel
            compared += 1
        for row in plan.run_stages(arm):
            ev = Path(store(row.eval_stage))
            for name in ("records.jsonl", "metrics.json"):
                assert (root / ev / name).read_bytes() == (slurm_root / ev / name).read_bytes(), ev / name
                compared += 1
        weights = Path(store(trains[arm])) / "model" / "model.safetensors"
        assert (root / weights).read_bytes() == (slurm_root / weights).read_bytes(), weights
    assert compared == 12


def test_a_two_rank_train_stage_is_one_slurm_job_holding_both_ranks(cluster, slurm_build):
    from test_ranks import LOSS_RTOL
    root, trains, _ = slurm_build
    sid = train_sid(root, "A-on-D-2ranks")
    assert sid != trains["A-on-D"]                # the ranks are in its id
    res = smk(root, cluster.env, "--profile", "profiles/slurm", *FAST, "--jobs", "1", finished(sid))
    assert res.returncode == 0, res.stderr[-5000:]
    jobs = sacct_jobs(cluster.env, run_uuid(res.stdout + res.stderr), expect=2)   # its D is distilled on 2 ranks too
    assert sorted(j["comment"].split("_")[1] for j in jobs) == ["distill", "train"], jobs
    for job in jobs:
        tres = dict(kv.split("=", 1) for kv in job["tres"].split(","))
        assert job["state"] == "COMPLETED" and tres["cpu"] == "2" and tres["mem"] == "3000M", job
    stage = json.loads((root / store(sid) / "stage.json").read_text())
    assert (stage["ranks"], stage["strategy"]) == (2, "ddp")
    log = (root / "logs" / "train" / f"{sid}.log").read_text()
    assert "rank 0 martingale: train stage" in log
    rows = [[json.loads(x) for x in (root / store(s) / "train.jsonl").read_text().splitlines()]
            for s in (trains["A-on-D"], sid)]
    assert len(rows[0]) == len(rows[1]) > 0
    for a, b in zip(*rows):
        assert b["loss"] == pytest.approx(a["loss"], rel=LOSS_RTOL)
