"""Hostile-but-fair input is refused in one line, ``conf/runs/<file>: <key>: <what is wrong>``, with
exit status 1 and nothing written: the malformed corpus, run-ids that are paths, interpolation,
values outside their domain. An id `check` accepts is one Snakemake plans."""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from martingale.cli import app
from martingale.config.compose import Composer
from martingale.config.runs import RUN_ID_MAX, RUN_ID_PATTERN, run_id_problem
from martingale.config.schema import Config, choices, domain_key, domains
from martingale.config.values import check_domains, flatten
from martingale.core.settings import InChoices

from projcopy import FIXTURE, REPO, snapshot

CORPUS = Path(__file__).parent / "fixtures" / "malformed"
CASES = sorted(CORPUS.glob("*.yaml"))
BASE_CONF = FIXTURE / "conf" if (FIXTURE / "conf" / "config.yaml").exists() else REPO / "conf"
CANARY = "canary-SECRET-value-0123456789"
REPO_ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def cli(root: Path, *args: str):
    return runner.invoke(app, ["--root", str(root), *args])


def one_error_line(res) -> str:
    """The single line a refusal prints (exit 1, one line, on stderr)."""
    lines = res.output.strip().splitlines()
    assert res.exit_code == 1, res.output
    assert len(lines) == 1, res.output
    return lines[0]


def header(case: Path) -> tuple[str, str]:
    """(expected key, file name under conf/runs) from the case's ``# expect:`` / ``# as:`` lines."""
    meta = {}
    for line in case.read_bytes().split(b"\n")[:3]:
        m = re.match(rb"#\s*(expect|as):\s*(.+?)\s*$", line)
        if m:
            meta[m.group(1).decode()] = m.group(2).decode("utf-8")
    return meta["expect"], meta.get("as", case.name)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """One project (the frozen conf/) for the whole corpus; each case adds its file, then removes it."""
    root = tmp_path_factory.mktemp("refusals") / "proj"
    shutil.copytree(BASE_CONF, root / "conf")
    return root


# ------------------------------------------------------------------ the malformed corpus

def test_the_corpus_has_at_least_40_cases_each_naming_its_key():
    assert len(CASES) >= 40
    for case in CASES:
        assert header(case)[0], case


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_a_malformed_run_file_is_refused_in_one_line_naming_file_and_key(project, case, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", CANARY)
    key, name = header(case)
    target = project / "conf" / "runs" / name
    made = target.parent if not target.parent.exists() else None
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(case, target)
    try:
        before = snapshot(project)
        res = cli(project, "check")
        after = snapshot(project)
    finally:
        target.unlink()
        if made is not None:
            made.rmdir()
    line = one_error_line(res)
    assert line.startswith(f"error: conf/runs/{name}: {key}: "), line
    assert CANARY not in res.output
    assert after == before


def test_the_base_tree_itself_passes_check(project):
    res = cli(project, "check")
    assert res.exit_code == 0, res.output


# ------------------------------------------------------------------ interpolation (the leak)

def test_an_env_interpolation_knob_is_refused_naming_the_knob(project, monkeypatch):
    """Before the fix this passed `check` and put the key into results, the index and runs.json."""
    monkeypatch.setenv("WANDB_API_KEY", CANARY)
    path = project / "conf" / "runs" / "leak.yaml"
    path.write_text("parent: base\nknob: wandb.project=${oc.env:WANDB_API_KEY}\n", encoding="utf-8")
    try:
        res = cli(project, "check")
    finally:
        path.unlink()
    line = one_error_line(res)
    assert line.startswith("error: conf/runs/leak.yaml: knob: "), line
    assert CANARY not in res.output


def test_new_refuses_an_interpolation_knob_and_writes_nothing(project, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", CANARY)
    before = snapshot(project)
    res = cli(project, "new", "leak", "--parent", "base", "--knob", "wandb.project=${oc.env:WANDB_API_KEY}")
    assert one_error_line(res).startswith("error: conf/runs/leak.yaml: knob: ")
    assert snapshot(project) == before


# ------------------------------------------------------------------ run-ids are names, not paths

@pytest.mark.parametrize("child", ["../x", "../../../../outside", "a/b", "/abs", "a..b", ".", ""])
def test_new_refuses_a_path_as_run_id_in_one_line_and_writes_nothing(tmp_path, child):
    root = tmp_path / "deep" / "er" / "proj"
    shutil.copytree(BASE_CONF, root / "conf")
    before = snapshot(tmp_path)
    res = cli(root, "new", child, "--parent", "base", "--knob", "stages.s1.lr=5e-4")
    assert "run-id: " in one_error_line(res)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("args", [["show", "../base"], ["show", "a/b"], ["diff", "base", "../D"],
                                  ["diff", "x" * 80, "base"]])
def test_show_and_diff_refuse_a_path_as_run_id(project, args):
    assert "run-id: " in one_error_line(cli(project, *args))


def test_new_refuses_a_parent_that_is_a_path(project):
    before = snapshot(project)
    res = cli(project, "new", "child", "--parent", "../base", "--knob", "stages.s1.lr=5e-4")
    assert one_error_line(res).startswith("error: conf/runs/child.yaml: parent: ")
    assert snapshot(project) == before


def test_the_run_id_rule_is_snakemakes_periodicity_rule_and_the_wildcard_pattern():
    """run_id_problem accepts exactly: the wildcard pattern, ≤ RUN_ID_MAX, no periodic tail as
    Snakemake's own detector sees it (snakemake.io.PeriodicityDetector, used by the DAG)."""
    from snakemake.io import PeriodicityDetector
    detector = PeriodicityDetector()
    ids = ["a.b_c-9", "base", "D", "x" * 19, "x" * 20, "run-" + "ab" * 19, "run-" + "ab" * 20,
           "r" + "abc" * 20, "q" + "abcd" * 15, "a" * RUN_ID_MAX, "a" * (RUN_ID_MAX + 1), "a..b", "a.",
           ".a", "a/b", "a b", "-a", "a-", "1.2.3", "x" + "ab" * 20 + "c"]
    for run_id in ids:
        shape = bool(re.fullmatch(RUN_ID_PATTERN, run_id)) and len(run_id) <= RUN_ID_MAX
        expected = shape and detector.is_periodic(run_id) is None
        assert (run_id_problem(run_id) is None) == expected, run_id


def test_the_snakefile_wildcard_constraint_is_the_run_id_rule():
    common = (REPO / "workflow" / "rules" / "common.smk").read_text(encoding="utf-8")
    assert re.search(r"^RUN_PATTERN = RUN_ID_PATTERN\b", common, re.M)


@pytest.mark.slow   # two snakemake subprocesses
def test_an_id_check_accepts_is_planned_by_snakemake_and_a_periodic_one_is_refused_by_check(tmp_path):
    from projcopy import make_project
    root = make_project(tmp_path / "proj", runs={"a.b_c-9.yaml": "parent: base\nknob: stages.s1.lr=5e-4\n"})
    assert cli(root, "check").exit_code == 0
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    res = subprocess.run([snakemake, "-n", "-c1", "results/a.b_c-9/eval.json"], cwd=root,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "a.b_c-9" in res.stdout + res.stderr
    periodic = "run-" + "a" * 20
    (root / "conf" / "runs" / f"{periodic}.yaml").write_text("parent: base\nknob: stages.s1.lr=4e-4\n")
    assert "periodic" in one_error_line(cli(root, "check"))
    res = subprocess.run([snakemake, "-n", "-c1", "all"], cwd=root, capture_output=True, text=True)
    assert res.returncode != 0 and "run-id" in res.stdout + res.stderr   # the Snakefile's parse says why


# ------------------------------------------------------------------ every leaf has a domain

def _leaves(cls, prefix: str = "") -> list[str]:
    """Dotted keys of every leaf field of a config dataclass (nested dataclasses walked; an
    optional one, null by default, is a leaf and its fields are leaves too)."""
    import typing
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        optional = [a for a in typing.get_args(hints[f.name]) if dataclasses.is_dataclass(a)]
        if dataclasses.is_dataclass(default):
            out += _leaves(type(default), key + ".")
        elif optional:
            out += [key, *_leaves(optional[0], key + ".")]
        else:
            out.append(key)
    return out


def test_every_leaf_of_the_schema_has_a_domain_and_every_domain_a_leaf():
    leaves = _leaves(Config)
    assert len(leaves) > 60
    missing = [k for k in leaves if domain_key(k) not in domains()]
    assert not missing, f"no domain (settings.setting) for: {missing}"
    named = {domain_key(k) for k in leaves}
    assert not set(domains()) - named, f"domains for keys the schema does not have: {set(domains()) - named}"


def test_every_key_left_to_choices_is_named_by_choices():
    allowed = choices()
    for key, domain in domains().items():
        if isinstance(domain, InChoices):
            assert key in allowed, key


def test_the_schema_defaults_and_every_shipped_group_option_are_in_their_domains():
    check_domains(OmegaConf.to_container(OmegaConf.structured(Config), resolve=True))
    composer = Composer(BASE_CONF)
    for group in ("model", "elicit", "world"):
        for option in sorted((BASE_CONF / group).glob("*.yaml")):
            # world=jsonl reads its questions file (relative to the project): the repository's
            extra = [f"world.questions_file={REPO_ROOT / 'data/questions/synthetic-world.jsonl'}"] \
                if (group, option.stem) == ("world", "jsonl") else []
            composer.compose([f"{group}={option.stem}", *extra])   # check_domains runs inside


def test_a_domain_error_names_the_key_and_the_range():
    resolved = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)
    resolved["stages"]["s2"]["generations"] = 1
    with pytest.raises(ValueError, match=r"stages\.s2\.generations: 1 is out of range: must be ≥ 2"):
        check_domains(resolved)
    assert "stages.s2.generations" in flatten(resolved)
