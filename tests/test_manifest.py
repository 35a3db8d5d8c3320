"""Stage manifests: every finished stage records the sha256 of its files, and a stage refuses an
input whose files do not match (a corrupted cached artifact is never used)."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from martingale.jobs.smk import run_stage
from martingale.store import files
from martingale.store.manifest import MANIFEST, CorruptArtifact, problems, require, store_folders


def stage(tmp_path: Path, name: str = "train-0123456789ab") -> Path:
    out = tmp_path / "results/_store/train" / name
    with files.atomic_dir(out) as tmp:
        (tmp / "model").mkdir()
        (tmp / "model/model.safetensors").write_bytes(bytes(range(256)) * 64)
        files.write_json(tmp / "stage.json", {"kind": "train"})
    return out


def test_a_finished_stage_carries_a_manifest_of_every_file(tmp_path):
    out = stage(tmp_path)
    assert (out / MANIFEST).is_file() and problems(out) == []
    assert set(files.read_json(out / MANIFEST)["files"]) == {"model/model.safetensors", "stage.json"}


def test_same_size_garbage_in_the_weights_is_found_and_named(tmp_path):
    out = stage(tmp_path)
    weights = out / "model/model.safetensors"
    data = bytearray(weights.read_bytes())
    data[100:140] = b"\0" * 40
    weights.write_bytes(bytes(data))
    assert problems(out) == [f"{weights}: sha256 differs from the manifest (corrupted)"]
    with pytest.raises(CorruptArtifact, match="model.safetensors: sha256 differs"):
        require(out)


def test_a_truncated_or_missing_file_or_a_missing_manifest_is_named(tmp_path):
    out = stage(tmp_path)
    weights = out / "model/model.safetensors"
    weights.write_bytes(weights.read_bytes()[:10])
    assert "10 bytes, the manifest says 16384" in problems(out)[0]
    weights.unlink()
    assert problems(out) == [f"{weights}: missing"]
    (out / MANIFEST).unlink()
    assert "did not finish" in problems(out)[0]


def test_a_stage_refuses_a_corrupted_input_before_running(tmp_path):
    start = stage(tmp_path)
    (start / "model/model.safetensors").write_bytes(b"\1" * 16384)
    out = tmp_path / "results/_store/evaluate/evaluate-0123456789ab"
    job = SimpleNamespace(rule="evaluate", threads=1, input={"model": str(start / MANIFEST), "judge_model": str(start / MANIFEST)},
                          output=[str(out / MANIFEST)], params=SimpleNamespace(cfg={}),
                          wildcards=SimpleNamespace(sid=out.name))
    with pytest.raises(CorruptArtifact, match="model/model.safetensors: sha256 differs"):
        run_stage(job)
    assert not out.exists()


def test_the_store_listing_skips_temp_folders(tmp_path):
    out = stage(tmp_path)
    (out.parent / ".train-x.tmp").mkdir()
    assert store_folders(tmp_path / "results/_store") == [out]


def test_martingale_verify_names_a_corrupted_stage_and_removes_it_on_request(tmp_path):
    from typer.testing import CliRunner

    from martingale.cli import app
    good, bad = stage(tmp_path, "train-aaaaaaaaaaaa"), stage(tmp_path, "train-bbbbbbbbbbbb")
    (bad / "stage.json").write_text('{"kind": "tampered"}\n')
    res = CliRunner().invoke(app, ["--root", str(tmp_path), "verify", "--all"])
    assert res.exit_code == 1 and "train-bbbbbbbbbbbb/stage.json" in res.output
    assert "2 stage folders checked, 1 bad" in res.output
    res = CliRunner().invoke(app, ["--root", str(tmp_path), "verify", "--all", "--remove"])
    assert res.exit_code == 0 and not bad.exists() and good.exists()
    assert CliRunner().invoke(app, ["--root", str(tmp_path), "verify", "--all"]).exit_code == 0


def test_a_stage_killed_after_its_body_finished_leaves_no_folder_behind(tmp_path, monkeypatch):
    # Snakemake deletes a failed job's output (the manifest): the folder must go with it, or the
    # store holds a finished-looking stage with no manifest (a kill while mirroring to wandb).
    import martingale.jobs.smk as smk
    weights = tmp_path / "llama"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    out = tmp_path / "results/_store/weights/weights-0123456789ab"
    job = SimpleNamespace(rule="weights", threads=1, input={}, output=[str(out / MANIFEST)],
                          params=SimpleNamespace(cfg={"model": {"path": str(weights)}}),
                          resources=SimpleNamespace(device="cpu"), wildcards=SimpleNamespace(sid=out.name))

    def killed(_job):
        assert (out / MANIFEST).is_file()     # the body had put the stage in place
        raise smk.Killed("killed by signal SIGTERM")

    monkeypatch.setattr(smk, "track_stage", killed)
    with pytest.raises(smk.Killed):
        run_stage(job)
    assert not out.exists()


@pytest.mark.parametrize("which", ["evals", "parent_evals", "natural_evals"])
def test_the_aggregate_refuses_a_corrupted_eval_folder_before_reading_any(tmp_path, monkeypatch, capsys, which):
    """workflow/scripts/aggregate.py, as Snakemake runs it: a run's, its parent's or the natural
    model's eval folder whose files differ from its manifest fails the aggregate, naming the file,
    and no results/<run>/ file is written."""
    import runpy

    from projcopy import REPO
    monkeypatch.chdir(tmp_path)
    good, bad = (stage(tmp_path, f"evaluate-{c * 12}") for c in "ab")
    (bad / "stage.json").write_text('{"kind": "tampered"}\n')
    folders = {"evals": [good], "parent_evals": [good], "natural_evals": []}
    folders[which] = [bad]
    run = tmp_path / "results/child"
    job = SimpleNamespace(
        params=SimpleNamespace(cfg={}, lineage=[], **{k: [{"dir": str(d), "stage": "s0", "seed": 0} for d in v]
                                                      for k, v in folders.items()}),
        output=SimpleNamespace(evals=str(run / "eval.json"), landed=str(run / "landed.json")),
        log=[str(tmp_path / "logs/aggregate/child.log")], wildcards=SimpleNamespace(run="child"))
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(REPO / "workflow/scripts/aggregate.py"), init_globals={"snakemake": job})
    assert info.value.code == 1 and not run.exists()
    (line,) = capsys.readouterr().err.splitlines()
    assert re.search(r"^martingale: job child failed: CorruptArtifact: .*evaluate-b{12}/stage\.json: .*the manifest"
                     r".*then rebuild \(traceback in .*logs/aggregate/child\.log\)$", line), line
    assert "CorruptArtifact" in (tmp_path / "logs/aggregate/child.log").read_text()
