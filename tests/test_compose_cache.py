"""Hydra-composed bases, the validated configs of the run tree and the plan are cached on disk by
content: a fresh process plans without composing or planning, and any change to what they follow
from (a conf/ file, a run's knob, an environment variable conf/ reads, the schema, the code)
composes or plans again."""
from __future__ import annotations

import pickle
import shutil

import pytest

from martingale.config import compose, runs
from martingale.config.runs import RunError, RunTree
from martingale.plan import PLAN_CACHE, PLANS_KEPT, Plan, plan_cache_path

from projcopy import REPO, proj, write_run  # noqa: F401 (proj: fixture)


@pytest.fixture
def fresh_process(monkeypatch):
    """As a new process: no base in memory; compose_cfg counted."""
    calls: list[list[str]] = []
    real = compose.compose_cfg

    def counted(overrides, conf_dir):
        calls.append(list(overrides))
        return real(overrides, conf_dir)
    monkeypatch.setattr(compose, "_BASES", {})
    monkeypatch.setattr(compose, "compose_cfg", counted)
    return calls


def test_a_second_process_plans_the_same_stages_without_composing(proj, fresh_process, monkeypatch):
    first = Plan.load(proj)
    assert fresh_process and list((proj / ".cache" / "compose").glob("*.pkl"))
    fresh_process.clear()
    monkeypatch.setattr(compose, "_BASES", {})
    second = Plan.load(proj)
    assert fresh_process == []
    assert {s: st.cfg for s, st in second.stages.items()} == {s: st.cfg for s, st in first.stages.items()}


def test_an_edited_group_file_is_composed_again_and_its_edit_is_seen(proj, fresh_process, monkeypatch):
    Plan.load(proj)
    fresh_process.clear()
    monkeypatch.setattr(compose, "_BASES", {})
    world = proj / "conf" / "world" / "synthetic.yaml"
    world.write_text(world.read_text().replace("base_rate: 0.3", "base_rate: 0.35"))
    plan = Plan.load(proj)
    assert fresh_process
    assert plan.resolved_config("base")["world"]["base_rate"] == 0.35


def test_a_schema_change_is_composed_again(proj, fresh_process, monkeypatch):
    Plan.load(proj)
    shutil.rmtree(proj / runs.RESOLVED_CACHE)   # the run configs' and the plan's caches: keyed by the code (below)
    shutil.rmtree(proj / PLAN_CACHE)
    fresh_process.clear()
    monkeypatch.setattr(compose, "_BASES", {})
    monkeypatch.setattr(compose, "_store_digest", lambda: "another schema")
    Plan.load(proj)
    assert fresh_process


def test_a_corrupt_cache_file_is_composed_again(proj, fresh_process, monkeypatch):
    Plan.load(proj)
    for f in (proj / ".cache" / "compose").glob("*.pkl"):
        f.write_bytes(b"not a pickle")
    shutil.rmtree(proj / runs.RESOLVED_CACHE)
    shutil.rmtree(proj / PLAN_CACHE)
    fresh_process.clear()
    monkeypatch.setattr(compose, "_BASES", {})
    assert Plan.load(proj).stages
    assert fresh_process


def test_a_second_process_reads_the_validated_run_configs_without_a_composer(proj):
    first = RunTree.load(proj / "conf")
    assert list((proj / runs.RESOLVED_CACHE).glob("*.pkl"))
    second = RunTree.load(proj / "conf")
    assert second._composer is None
    assert {r: second.resolved(r) for r in second.ids()} == {r: first.resolved(r) for r in first.ids()}


def test_a_changed_knob_is_composed_again_and_a_bad_one_is_refused(proj):
    RunTree.load(proj / "conf")
    write_run(proj, "bad.yaml", "parent: base\nknob: stages.s1.lr=-1\n")
    with pytest.raises(RunError, match=r"bad\.yaml: stages\.s1\.lr"):
        RunTree.load(proj / "conf")


def test_a_code_change_is_composed_again(proj, monkeypatch):
    from martingale.config import digest
    RunTree.load(proj / "conf")
    monkeypatch.setattr(digest, "code_digest", lambda: "another version of the code")
    assert RunTree.load(proj / "conf")._composer is not None


def test_a_corrupt_run_configs_cache_is_composed_again(proj):
    RunTree.load(proj / "conf")
    for f in (proj / runs.RESOLVED_CACHE).glob("*.pkl"):
        f.write_bytes(b"not a pickle")
    assert RunTree.load(proj / "conf")._composer is not None


def test_a_questions_file_gone_after_caching_is_still_refused(proj):
    """What the key does not cover, a file outside conf/, is checked on every load."""
    questions = proj / "data" / "questions" / "synthetic-world.jsonl"
    questions.parent.mkdir(parents=True)
    shutil.copy(REPO / "data" / "questions" / "synthetic-world.jsonl", questions)
    write_run(proj, "asked.yaml", "parent: base\nknob: world=jsonl\n")
    RunTree.load(proj / "conf")
    questions.unlink()
    with pytest.raises(RunError, match=r"asked\.yaml: world\.questions_file: .*not found"):
        RunTree.load(proj / "conf")


# ------------------------------------------------------------------ the plan itself (plan.PLAN_CACHE)
def test_a_second_process_loads_the_plan_without_planning_a_run(proj, monkeypatch):
    first = Plan.load(proj)
    assert list((proj / PLAN_CACHE).glob("*.pkl"))

    def planned(self, run_id):
        raise AssertionError(f"planned {run_id} again")
    monkeypatch.setattr(Plan, "_plan_run", planned)
    second = Plan.load(proj)
    assert second.tree._composer is None
    assert {s: (st.kind, st.cfg, st.inputs) for s, st in second.stages.items()} == \
           {s: (st.kind, st.cfg, st.inputs) for s, st in first.stages.items()}
    assert [second.run_stages(r) for r in second.tree.ids()] == [first.run_stages(r) for r in first.tree.ids()]


def test_a_new_run_file_is_planned(proj):
    before = Plan.load(proj)
    write_run(proj, "A-on-D-lr.yaml", "parent: A-on-D\nknob: stages.s1.lr=2.0e-4\n")
    after = Plan.load(proj)
    assert "A-on-D-lr" in after.tree and "A-on-D-lr" not in before.tree
    assert set(after.stages) > set(before.stages)


@pytest.mark.parametrize("content", [b"not a pickle", pickle.dumps({"not": "a plan"})], ids=["garbage", "not-a-plan"])
def test_a_corrupt_plan_cache_is_planned_again(proj, content):
    first = Plan.load(proj)
    for f in (proj / PLAN_CACHE).glob("*.pkl"):
        f.write_bytes(content)
    assert set(Plan.load(proj).stages) == set(first.stages)


def test_a_questions_file_gone_after_the_plan_was_cached_is_still_refused(proj):
    """The cached plan skips composing, not the check of what lies outside its key."""
    questions = proj / "data" / "questions" / "synthetic-world.jsonl"
    questions.parent.mkdir(parents=True)
    shutil.copy(REPO / "data" / "questions" / "synthetic-world.jsonl", questions)
    write_run(proj, "asked.yaml", "parent: base\nknob: world=jsonl\n")
    Plan.load(proj)
    assert list((proj / PLAN_CACHE).glob("*.pkl"))
    questions.unlink()
    with pytest.raises(RunError, match=r"asked\.yaml: world\.questions_file: .*not found"):
        Plan.load(proj)


def test_a_plan_that_does_not_pickle_is_planned_each_time(proj, monkeypatch):
    def refuse(obj, *args, **kwargs):
        raise TypeError(f"cannot pickle {type(obj).__name__}")
    monkeypatch.setattr(pickle, "dumps", refuse)
    assert Plan.load(proj).stages and Plan.load(proj).stages
    assert not list(proj.glob(".cache/*/*.pkl"))


def test_a_cache_folder_that_cannot_be_written_plans_without_it(proj):
    (proj / ".cache").write_text("a file where the cache folder would be")
    first = Plan.load(proj)
    assert set(Plan.load(proj).stages) == set(first.stages)
    assert (proj / ".cache").is_file()


def test_a_changed_environment_variable_a_config_reads_resolves_again(proj, monkeypatch):
    """conf/model/llama31_8b.yaml's path is ${oc.env:MARTINGALE_WEIGHTS,models}/...: neither the
    cached run configs nor the cached plan may keep the path of the value they were made under."""
    write_run(proj, "big.yaml", "parent: base\nknob: model=llama31_8b\n")
    monkeypatch.setenv("MARTINGALE_WEIGHTS", "/weights/a")
    assert Plan.load(proj).tree.resolved("big").model.path == "/weights/a/Llama-3.1-8B-Instruct"
    monkeypatch.setenv("MARTINGALE_WEIGHTS", "/weights/b")
    assert RunTree.load(proj / "conf").resolved("big").model.path == "/weights/b/Llama-3.1-8B-Instruct"
    assert Plan.load(proj).tree.resolved("big").model.path == "/weights/b/Llama-3.1-8B-Instruct"


def test_a_code_change_plans_again(proj, monkeypatch):
    from martingale.config import digest
    Plan.load(proj)
    monkeypatch.setattr(digest, "code_digest", lambda: "another version of the code")
    monkeypatch.setattr(Plan, "_plan_run", lambda self, run_id: (_ for _ in ()).throw(RuntimeError("planned")))
    with pytest.raises(RuntimeError, match="planned"):
        Plan.load(proj)


def test_the_plan_and_run_config_caches_keep_only_their_newest_files(proj):
    """A cache file per edit of conf/: only the newest few stay, the current one among them."""
    for i in range(runs.RESOLVED_KEPT + 2):
        write_run(proj, "edited.yaml", f"parent: base\nknob: stages.s1.lr={2e-3 + i * 1e-5}\n")
        Plan.load(proj)
    assert len(list((proj / PLAN_CACHE).glob("*.pkl"))) == PLANS_KEPT
    assert len(list((proj / runs.RESOLVED_CACHE).glob("*.pkl"))) == runs.RESOLVED_KEPT
    assert plan_cache_path(proj).is_file()


def test_the_compose_cache_keeps_the_bases_of_its_newest_conf_trees_only(proj, fresh_process, monkeypatch):
    """Each edit of conf/ composes a tree of bases (a file per group-choice combination): only the
    newest few trees stay, every base of the current one among them."""
    world = proj / "conf" / "world" / "synthetic.yaml"
    text = world.read_text()
    for i in range(compose.TREES_KEPT + 2):
        world.write_text(f"{text}\n# edit {i}\n")
        monkeypatch.setattr(compose, "_BASES", {})
        Plan.load(proj)
    trees = {f.name.split("-")[0] for f in (proj / compose.CACHE_DIR).glob("*.pkl")}
    assert len(trees) == compose.TREES_KEPT
    shutil.rmtree(proj / runs.RESOLVED_CACHE)
    shutil.rmtree(proj / PLAN_CACHE)
    fresh_process.clear()
    monkeypatch.setattr(compose, "_BASES", {})
    Plan.load(proj)
    assert fresh_process == []


# ------------------------------------------------------------------ conf/ edited while planning
def test_a_conf_edit_made_while_planning_is_cached_under_no_key(proj, fresh_process, monkeypatch):
    """Each cache's key is read before what it caches is made: an edit in between (here, while
    Hydra composes) must not leave the edited configs under the key of the tree before it, or
    undoing the edit would plan from the edited file."""
    world = proj / "conf" / "world" / "synthetic.yaml"
    before = world.read_text()
    real = compose.compose_cfg

    def edit_then_compose(overrides, conf_dir):
        world.write_text(before.replace("base_rate: 0.3", "base_rate: 0.35"))
        return real(overrides, conf_dir)
    monkeypatch.setattr(compose, "compose_cfg", edit_then_compose)
    assert Plan.load(proj).resolved_config("base")["world"]["base_rate"] == 0.35
    monkeypatch.setattr(compose, "compose_cfg", real)
    monkeypatch.setattr(compose, "_BASES", {})            # a new process
    world.write_text(before)
    assert Plan.load(proj).resolved_config("base")["world"]["base_rate"] == 0.3


def test_the_index_names_the_conf_tree_its_plan_was_made_from(proj):
    """An edit between planning and writing the index (Snakemake's onstart) leaves an index that
    readers see is stale, not one that claims the edited tree."""
    from martingale.plan import conf_hash, current_index
    plan = Plan.load(proj)
    world = proj / "conf" / "world" / "synthetic.yaml"
    world.write_text(world.read_text().replace("base_rate: 0.3", "base_rate: 0.35"))
    index = plan.write_index()
    assert index.conf_hash != conf_hash(proj / "conf")
    assert current_index(proj).runs["base"].config_hash == Plan.load(proj).index().runs["base"].config_hash \
        != index.runs["base"].config_hash
