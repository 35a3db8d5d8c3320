"""The warm worker (martingale.jobs.warm): a job script handed to it runs in a forked child, in the
job's cwd, environment and stdio, with the job's exit status; a killed job kills its child; no
worker, the script runs its job in place; the worker follows the process that started it."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from martingale.jobs import warm

JOBS = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path

    def record(smk):
        """Write where and how the job ran; print to the job's stdout."""
        Path(smk["out"]).write_text(f"{os.getpid()} {os.getcwd()} {os.environ.get('JOB_VAR')}")
        print("job says hello", flush=True)

    def fail(smk):
        sys.exit(3)

    def crash(smk):
        raise RuntimeError("boom")

    def wandb_run(smk):
        """An offline wandb run, as a stage's mirror logs one; say which service it used."""
        import wandb
        token = os.environ.get("WANDB_SERVICE")
        run = wandb.init(project="t", mode="offline", dir=smk["dir"], name="r", id=f"r{os.getpid()}",
                         settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))
        run.log({"a": 1.0}, step=0)
        run.finish()
        Path(smk["out"]).write_text(str(token))

    def hang(smk):
        Path(smk["out"]).write_text(str(os.getpid()))
        time.sleep(120)
''')


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """A worker preloading nothing (a job's libraries are not what these tests are about), whose
    cwd has the jobs module; stopped after the test."""
    (tmp_path / "warmjobs.py").write_text(JOBS)
    monkeypatch.syspath_prepend(str(tmp_path))
    name = warm.start(str(tmp_path), preload=(), wait=True)
    assert name and os.environ[warm.ENV] == name
    yield name
    warm.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


SCRIPT = textwrap.dedent('''
    from martingale.jobs.warm import ran_in_worker

    if not ran_in_worker(snakemake, __file__):
        import warmjobs
        warmjobs.{job}(snakemake)
''')


def _client(tmp_path: Path, job: str, out: Path, env: dict | None = None) -> subprocess.Popen:
    """A job script's process, as Snakemake starts one: the script (workflow/scripts' shape, calling
    warmjobs.<job>) run with a plain dict standing in for its snakemake object."""
    script = tmp_path / f"job_{job}.py"
    script.write_text(SCRIPT.format(job=job))
    smk = {"out": str(out), "dir": str(tmp_path)}
    code = f"import runpy; runpy.run_path({str(script)!r}, init_globals={{'snakemake': {smk!r}}})"
    return subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_job_runs_in_a_child_of_the_worker_with_its_cwd_environment_and_stdout(worker, tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    out = tmp_path / "ran.txt"
    proc = _client(job_dir, "record", out, env={"JOB_VAR": "from-the-job"})
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    pid, cwd, var = out.read_text().split()
    assert int(pid) != proc.pid                       # not the script's own process
    assert (cwd, var) == (str(job_dir), "from-the-job")
    assert "job says hello" in stdout                 # the child wrote to the script's stdout


def test_a_job_exit_status_and_a_crash_become_the_scripts(worker, tmp_path):
    failed = _client(tmp_path, "fail", tmp_path / "x")
    failed.communicate(timeout=60)
    crashed = _client(tmp_path, "crash", tmp_path / "x")
    _, stderr = crashed.communicate(timeout=60)
    assert failed.returncode == 3
    assert crashed.returncode == 1 and "RuntimeError: boom" in stderr


def test_a_killed_job_kills_its_child(worker, tmp_path):
    out = tmp_path / "child.pid"
    proc = _client(tmp_path, "hang", out)
    deadline = time.time() + 60
    while not (out.exists() and out.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    child = int(out.read_text())
    assert _alive(child)
    proc.send_signal(signal.SIGTERM)                  # what Snakemake does to a job it cancels
    proc.wait(timeout=30)
    deadline = time.time() + 10
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def test_without_a_worker_the_job_runs_in_the_scripts_own_process(tmp_path, monkeypatch):
    (tmp_path / "warmjobs.py").write_text(JOBS)
    monkeypatch.delenv(warm.ENV, raising=False)
    out = tmp_path / "ran.txt"
    proc = _client(tmp_path, "record", out, env={"PYTHONPATH": str(tmp_path)})
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert int(out.read_text().split()[0]) == proc.pid


def test_a_worker_that_is_gone_leaves_the_job_to_its_own_process(tmp_path, monkeypatch):
    (tmp_path / "warmjobs.py").write_text(JOBS)
    out = tmp_path / "ran.txt"
    proc = _client(tmp_path, "record", out,
                   env={warm.ENV: "martingale-warm-nobody-listens", "PYTHONPATH": str(tmp_path)})
    proc.communicate(timeout=60)
    assert proc.returncode == 0 and int(out.read_text().split()[0]) == proc.pid


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
def test_a_job_from_another_user_is_refused(worker, tmp_path):
    code = ("import os; from martingale.jobs import warm; os.setgid(65534); os.setuid(65534); "
            "warm.ran_in_worker({'out': '/nonexistent'}, '/nonexistent/job.py')")
    proc = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "without a status" in proc.stderr


def test_the_worker_exits_when_the_process_that_started_it_is_gone(tmp_path):
    code = ("import sys; from martingale.jobs import warm; warm.start(sys.argv[1], preload=(), wait=True); "
            "print(warm._WORKER.pid, flush=True)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    pid = int(proc.stdout.split()[0])
    deadline = time.time() + 15
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(pid)


def test_a_build_that_inherits_a_listening_worker_uses_it_instead_of_starting_another(tmp_path):
    """decide's worker serves the Snakemake calls it makes, however many jobs each has."""
    name = warm.start(str(tmp_path), preload=(), wait=True)
    try:
        code = "import sys; from martingale.jobs import warm; print(warm.start(sys.argv[1], preload=()), warm._WORKER)"
        proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                              timeout=60, env={**os.environ, warm.ENV: name})
        assert proc.stdout.split() == ["None", "None"], proc.stdout + proc.stderr
    finally:
        warm.stop()


def test_the_jobs_of_a_worker_that_preloads_wandb_log_through_its_one_wandb_service(tmp_path, monkeypatch):
    """The worker starts wandb's service once; every job's run connects to it (the token in the
    job's environment) instead of starting its own, and logs and finishes offline as before."""
    (tmp_path / "warmjobs.py").write_text(JOBS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert warm.start(str(tmp_path), preload=("wandb",), wait=True)
    try:
        tokens = []
        for i in range(2):
            out = tmp_path / f"token{i}.txt"
            proc = _client(tmp_path, "wandb_run", out)
            proc.communicate(timeout=120)
            assert proc.returncode == 0
            tokens.append(out.read_text())
    finally:
        warm.stop()
    assert tokens[0] == tokens[1] != "None"           # one service, the worker's
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 2


@pytest.mark.parametrize("importing", [False, True], ids=["serving", "importing"])
def test_a_stopped_worker_exits_normally_and_leaves_no_temporary_folders(tmp_path, monkeypatch, importing):
    """wandb makes two temporary folders when imported (media, artifacts) and removes them as its
    process exits: stop() ends the worker, serving or still importing, as a normal exit (status 0,
    not killed by the signal), so nothing is left in TMPDIR."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    preload = ("wandb", "torch") if importing else ("wandb",)
    assert warm.start(str(tmp_path), preload=preload, wait=not importing)
    if importing:
        deadline = time.time() + 60        # until wandb's folders exist: the worker imports torch next
        while len(list(temp.iterdir())) < 2 and time.time() < deadline:
            time.sleep(0.01)
    assert sorted(p.name.endswith(("wandb-media", "wandb-artifacts")) for p in temp.iterdir()) == [True, True]
    proc = warm._WORKER
    warm.stop()
    assert proc.returncode == 0
    assert list(temp.iterdir()) == []
