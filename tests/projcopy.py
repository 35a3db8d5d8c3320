"""Helpers for the orchestrator tests: the frozen fixture campaign, a throw-away project per test,
and snapshots.

Every plan, CLI, table, page, workflow, SLURM and end-to-end test reads the frozen campaign in
tests/fixtures/conf (a snapshot of conf/: config.yaml, the groups, claims.yaml, runs/*.yaml), never
the repository's conf/: a user adding or removing a run file in conf/runs changes no test. The
live conf/ is only checked for validity (tests/test_cli.py). Counts of runs and stages are derived
from the fixture (run_files, the plan), not typed in.

(Kept out of conftest.py so the stage tests' fixtures stay there; import what you need.)
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# A read-only project root holding only the frozen conf/: for tests that plan, load or show without
# writing (Plan.load, RunTree.load, `martingale check/show/diff/plan`). Tests that write use `proj`.
FIXTURE = REPO / "tests" / "fixtures"


def run_files(root: Path) -> list[Path]:
    """The run files of a project's conf/runs, by name."""
    runs = root / "conf" / "runs"
    return sorted([*runs.glob("*.yaml"), *runs.glob("*.yml")])


def make_project(root: Path, code: tuple[str, ...] = ("workflow",), config: str = "",
                 runs: dict[str, str] | None = None) -> Path:
    """A project at root: the fixture's conf/, the repository's Snakefile and its code folders
    (workflow/, and profiles/ if asked), `config` appended to conf/config.yaml (e.g. a smoke
    scale), and extra run files {name: text}."""
    root.mkdir(parents=True)
    shutil.copytree(FIXTURE / "conf", root / "conf")
    for d in code:
        shutil.copytree(REPO / d, root / d)
    shutil.copy(REPO / "Snakefile", root / "Snakefile")
    if config:
        with open(root / "conf" / "config.yaml", "a", encoding="utf-8") as f:
            f.write(config)
    for name, text in (runs or {}).items():
        write_run(root, name, text)
    return root


# The smoke scale of the end-to-end chains (tests/test_end_to_end.py, tests/test_simulate.py): config.yaml's tail.
SMOKE = """
# --- smoke scale (tests/projcopy.py) ---
world: {n_train: 24, n_heldout: 48, clues_per_question: 4}
model: {hidden_size: 48, num_layers: 2, num_heads: 2, intermediate_size: 96}
pretrain: {steps: 400, batch_size: 32}
distill: {steps: 30, batch_size: 16}
eval: {n_bootstrap: 100}
"""


def base_pretrain_sid(root: Path) -> str:
    """The id of the pretrain stage a project's base run starts from."""
    from martingale.plan import Plan
    plan = Plan.load(root)
    return next(s for s in plan.run_chain("base") if plan.stages[s].kind == "pretrain")


def build_smoke_pretrain(shared: Path) -> Path:
    """The smoke scale's pretrain stage, built once in a project under ``shared`` (a folder every
    pytest-xdist worker of the session sees; the first to come builds, under a lock, the others
    wait for it): the project's root."""
    root = shared / "smoke-pretrain"
    with open(shared / "smoke-pretrain.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "built").is_file():
            shutil.rmtree(root, ignore_errors=True)
            make_project(root, config=SMOKE)
            sid = base_pretrain_sid(root)
            snakemake = str(Path(sys.executable).with_name("snakemake"))
            res = subprocess.run([snakemake, "--cores", "2", f"results/_store/pretrain/{sid}/MANIFEST.json"],
                                 cwd=root, capture_output=True, text=True,
                                 env={**os.environ, "WANDB_MODE": "disabled"})
            assert res.returncode == 0, res.stderr[-4000:]
            (root / "built").write_text(sid, encoding="utf-8")
    return root


def copy_pretrain(built: Path, root: Path) -> None:
    """Put the pretrain stage of ``built`` (build_smoke_pretrain) into ``root``'s store with its job
    log and benchmark, as if built there: Snakemake finds the output and builds what follows. The
    two projects must plan the same pretrain (the same world, model and pretrain sections)."""
    sid = (built / "built").read_text(encoding="utf-8")
    assert base_pretrain_sid(root) == sid, "the project's pretrain is not the shared smoke one"
    folder = Path("results") / "_store" / "pretrain" / sid
    shutil.copytree(built / folder, root / folder)
    (root / "logs" / "pretrain").mkdir(parents=True, exist_ok=True)
    for log in (built / "logs" / "pretrain").glob(f"{sid}.*"):
        shutil.copy2(log, root / "logs" / "pretrain" / log.name)


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    """A copy of the fixture conf/ + Snakefile + workflow/ under tmp_path; tests may write there."""
    return make_project(tmp_path / "proj")


def write_run(root: Path, name: str, text: str) -> Path:
    path = root / "conf" / "runs" / name
    path.write_text(text, encoding="utf-8")
    return path


def _one_seed_effect(block: dict, seed: int = 42) -> dict:
    """One seed's paired-effect block in eval.json's shape (the aggregate's compare)."""
    from martingale.stats.effects import replicate_summary
    from martingale.stats.seeds import with_seed_blocks
    if "seeds" in block:
        return block
    one = {"same_eval_stage": False, **block}
    return with_seed_blocks({seed: one}, stage=one["stage"], parent_stage=one["parent_stage"], same_eval_stage=False,
                            **replicate_summary({seed: one}))


def write_eval(root: Path, run_id: str, stages: dict, **extra) -> Path:
    """results/<run>/eval.json as the aggregate leaves it for the run as configured now (its knob
    and config hash, so the table calls it done, not stale) with these per-stage metrics: a stage
    without ``seeds`` is one seed's (42) metrics, and an effect given as one seed's block that
    seed's, written in eval.json's shape (stats/seeds.py). ``extra`` sets top-level keys; those not
    given are a run's without provenance or a parent's effect."""
    from martingale.config.runs import RunTree
    from martingale.plan import config_hash
    from martingale.stats.seeds import combine_seeds
    from martingale.store import files
    blocks = ("counts", "crossed", "effect")
    stages = {name: m if "seeds" in m else {**combine_seeds({42: {k: v for k, v in m.items() if k not in blocks}}),
                                             **{k: v for k, v in m.items() if k in blocks}}
              for name, m in stages.items()}
    for m in stages.values():
        if "effect" in m:
            m["effect"] = _one_seed_effect(m["effect"])
    tree = RunTree.load(root / "conf")
    spec = tree.specs[run_id]
    doc = {"run_id": run_id, "parent": spec.parent, "knob": spec.knob,
           "config_hash": config_hash(tree.resolved_config(run_id)),
           "seeds": sorted({s for m in stages.values() for s in m["seeds"]}), "stage_order": list(stages),
           "stages": stages, "provenance": {}, "stage_provenance": {}, "effect": None, **extra}
    if doc["effect"] is not None and doc["effect"].get("final") is not None:
        final = doc["effect"]["final"] = _one_seed_effect(doc["effect"]["final"])
        doc["effect"] = {"parent": spec.parent, "knob": spec.knob, "headline": None,
                         "compares": f"{final['stage']} vs parent {final['parent_stage']}", **doc["effect"]}
    path = root / "results" / run_id / "eval.json"
    files.write_json(path, doc)          # NaN as null, as the aggregate writes it
    return path


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root with its size and mtime: compare to prove nothing was written. The
    compose cache (.cache/: Hydra's composed bases, keyed by content) is not output: left out."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        if Path(dirpath) == root and ".cache" in dirs:
            dirs.remove(".cache")
        for f in files:
            p = Path(dirpath) / f
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out
