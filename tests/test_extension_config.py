"""Each extension owns its config: a reward with a parameter of its own, a reader with a setting, a
backend with its own section and a stage kind with its own section — each one file of
tests/extensions_built/ (the files test_extension_build drops into a project copy), registered
at test time here (no file of the project edited) — are planned and
dry-run in one run; each key is in the stage ids of the stages that use it and nowhere else; a bad
value of each is refused at check in one line naming the file and the key."""
from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

import pytest

from martingale import rewards, stages
from martingale.beliefs import readers
from martingale.config.runs import RunError, RunTree
from martingale.model import backend
from martingale.plan import Plan, config_hash

from projcopy import proj, write_run  # noqa: F401 (proj: fixture)

BUILT = Path(__file__).parent / "extensions_built"
EXTENSIONS = [BUILT / "beliefs/midway.py", BUILT / "model/echo.py", BUILT / "rewards/rpower.py", BUILT / "stages/anneal.py"]
CHAIN = ["elicit.judge=midway", "midway.value=0.3", "model.backend=echo", "model.echo.delay_ms=5",
         "stages.s1.reward=Rpower", "stages.s1.power=3", "stages.s1.kind=anneal", "anneal.cooling=0.5"]


@contextlib.contextmanager
def installed():
    """The four extension files imported under temporary registries (gone after the block)."""
    with rewards.REWARDS.temporarily(), readers.READERS.temporarily(), backend.backends().temporarily(), \
            stages.kinds().temporarily():
        for path in EXTENSIONS:
            name = f"test_extension_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        try:
            yield
        finally:
            for path in EXTENSIONS:
                sys.modules.pop(f"test_extension_{path.stem}", None)


@pytest.fixture
def extensions():
    with installed():
        yield


def chain(root: Path) -> str:
    """e1 … e8, one knob each from base: every extension in use, each setting changed."""
    parent = "base"
    for i, knob in enumerate(CHAIN, 1):
        write_run(root, f"e{i}.yaml", f"parent: {parent}\nknob: {knob}\n")
        parent = f"e{i}"
    return parent


def test_a_run_using_four_new_extensions_sees_each_ones_settings_where_it_is_used(proj, extensions):
    run = chain(proj)
    plan = Plan.load(proj)
    by_kind = {}
    for sid in plan.run_chain(run):
        by_kind.setdefault(plan.stages[sid].kind, []).append(plan.stages[sid].cfg)
    (anneal,) = by_kind["anneal"]
    assert anneal["anneal"] == {"cooling": 0.5}                       # the kind's section
    assert anneal["stage"]["reward"] == "Rpower" and anneal["stage"]["power"] == 3.0   # the reward's key
    assert "echo" not in anneal["model"]          # a kind that does not generate sees no backend section
    assert "midway" not in anneal                 # nor a reader's: it reads no beliefs
    for ev in by_kind["evaluate"]:
        assert ev["midway"] == {"value": 0.3}                         # the reader's section
        assert ev["model"]["backend"] == "echo" and ev["model"]["echo"] == {"delay_ms": 5}
        assert "anneal" not in ev


def test_registering_the_extensions_changes_no_other_run(proj):
    """Their keys are in no stage id and no config hash of a run that does not use them."""
    def ids_and_hashes():
        plan = Plan.load(proj)
        return ({r: plan.run_chain(r) for r in plan.run_ids()},
                {r: config_hash(plan.resolved_config(r)) for r in plan.run_ids()})
    before = ids_and_hashes()
    with installed():
        assert "Rpower" in rewards.REWARDS and "anneal" in stages.kinds()
        assert ids_and_hashes() == before


def test_snakemake_dry_runs_the_run_with_the_new_kind_as_its_own_rule(proj, extensions, capfd, caplog, monkeypatch):
    from snakemake.cli import main
    run = chain(proj)
    monkeypatch.chdir(proj)             # in-process, so the registries are the test's; cwd restored after
    with pytest.raises(SystemExit) as done:
        main(["-n", "--quiet", "rules", "--cores", "1", f"results/{run}/eval.json"])
    out = capfd.readouterr()
    assert done.value.code == 0, out.err[-3000:]
    counts = dict(line.split() for line in (out.out + out.err + caplog.text).splitlines()
                  if len(line.split()) == 2 and line.split()[1].isdigit())
    # e8's anneal stage and its parent e7's (the aggregate pairs them): anneal.cooling differs, two stages
    assert counts.get("anneal") == "2"


@pytest.mark.parametrize("knob, key", [
    ("midway.value=1.5", "midway.value"),              # the reader's setting
    ("model.echo.delay_ms=5000", "model.echo.delay_ms"),   # the backend's
    ("stages.s1.power=9", "stages.s1.power"),          # the reward's parameter
    ("anneal.cooling=0", "anneal.cooling"),            # the stage kind's
])
def test_a_bad_value_of_each_extension_setting_is_refused_in_one_line(proj, extensions, knob, key):
    write_run(proj, "bad.yaml", f"parent: base\nknob: {knob}\n")
    with pytest.raises(RunError) as refused:
        RunTree.load(proj / "conf")
    message = str(refused.value)
    assert "\n" not in message and "bad.yaml" in message and key in message, message
