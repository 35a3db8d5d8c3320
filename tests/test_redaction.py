"""No key-like environment value is ever written: every writer in martingale.store.files replaces it (and
its JSON/YAML-escaped forms) with "[redacted:<VARNAME>]"; the redactor follows os.environ."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from martingale.store import files

CANARY = "canary-SECRET-value-0123456789"
MARK = "[redacted:WANDB_API_KEY]"


@pytest.fixture
def canary(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", CANARY)
    return CANARY


WRITERS = {
    "write_bytes": lambda p, s: files.write_bytes(p, f"key={s}\n".encode("utf-8")),
    "write_text": lambda p, s: files.write_text(p, f"key={s}\n"),
    "write_text_if_changed": lambda p, s: files.write_text_if_changed(p, f"key={s}\n"),
    "write_json": lambda p, s: files.write_json(p, {"wandb": {"project": s}, s: [s, 1.5]}),
    "write_jsonl": lambda p, s: files.write_jsonl(p, [{"a": s}, {"b": f"x{s}y"}]),
    "write_yaml": lambda p, s: files.write_yaml(p, {"project": s, "note": f"uses {s} " * 12}),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_redacts_a_key_in_the_environment(tmp_path, canary, writer):
    path = tmp_path / f"out.{writer}"
    WRITERS[writer](path, canary)
    data = path.read_bytes()
    assert canary.encode() not in data
    assert MARK.encode() in data


def test_a_file_holding_a_key_is_written_once_then_left_as_it_is(tmp_path, canary):
    # written redacted, so only a comparison of the redacted bytes sees it unchanged (its mtime kept)
    for write, data in ((files.write_bytes_if_changed, f"key {canary}".encode()),
                        (files.write_text_if_changed, f"key {canary}")):
        path = tmp_path / write.__name__
        assert write(path, data) is True
        assert write(path, data) is False
        assert canary not in path.read_text()


def test_redacted_json_and_yaml_still_parse_with_the_marker_as_a_string(tmp_path, canary):
    files.write_json(tmp_path / "a.json", {"project": canary})
    files.write_yaml(tmp_path / "a.yaml", {"project": canary})
    files.write_jsonl(tmp_path / "a.jsonl", [{"project": canary}])
    assert json.loads((tmp_path / "a.json").read_text())["project"] == MARK
    assert yaml.safe_load((tmp_path / "a.yaml").read_text())["project"] == MARK
    assert files.read_jsonl(tmp_path / "a.jsonl") == [{"project": MARK}]


def test_escaped_forms_of_a_secret_are_redacted_too(tmp_path, monkeypatch):
    secret = 'p"a\\ss\'wörd-123'
    monkeypatch.setenv("DB_PASSWORD", secret)
    files.write_json(tmp_path / "a.json", {"x": secret})
    files.write_yaml(tmp_path / "a.yaml", {"x": secret, "long": ("word " * 20) + secret})
    for name in ("a.json", "a.yaml"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert "[redacted:DB_PASSWORD]" in text
        assert "wörd" not in text and "w\\u00f6rd" not in text


@pytest.mark.parametrize("name", ["HF_TOKEN", "MY_SECRET", "DB_PASSWORD", "SMTP_PASS", "GCP_CREDENTIALS",
                                  "AUTH_HEADER", "openai_api_key"])
def test_every_key_like_name_counts(tmp_path, monkeypatch, name):
    monkeypatch.setenv(name, CANARY)
    files.write_text(tmp_path / "a.txt", CANARY)
    assert (tmp_path / "a.txt").read_text() == f"[redacted:{name}]"


def test_short_values_and_other_names_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("API_KEY", "short")          # under 8 characters
    monkeypatch.setenv("MARTINGALE_WEIGHTS", "/models/weights-folder")   # not a key-like name
    files.write_text(tmp_path / "a.txt", "short /models/weights-folder")
    assert (tmp_path / "a.txt").read_text() == "short /models/weights-folder"


def test_the_redactor_follows_changes_to_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "first-secret-value")
    files.write_text(tmp_path / "a.txt", "first-secret-value")
    monkeypatch.setenv("WANDB_API_KEY", "second-secret-value")
    files.write_text(tmp_path / "b.txt", "first-secret-value second-secret-value")
    monkeypatch.delenv("WANDB_API_KEY")
    files.write_text(tmp_path / "c.txt", "second-secret-value")
    assert (tmp_path / "a.txt").read_text() == MARK
    assert (tmp_path / "b.txt").read_text() == f"first-secret-value {MARK}"
    assert (tmp_path / "c.txt").read_text() == "second-secret-value"


def test_write_text_if_changed_compares_the_redacted_text(tmp_path, canary):
    path = tmp_path / "runs.json"
    assert files.write_text_if_changed(path, f"[{canary}]")
    assert not files.write_text_if_changed(path, f"[{canary}]")   # unchanged: not rewritten


def test_the_redactor_is_compiled_once_per_environment(canary):
    assert files.redactor() is files.redactor()


def test_new_never_writes_a_key_pasted_into_a_run_file(tmp_path, canary):
    """`martingale new` redacts what it writes; the redacted question is what gets checked."""
    import shutil

    from typer.testing import CliRunner

    from martingale.cli import app

    from projcopy import FIXTURE
    shutil.copytree(FIXTURE / "conf", tmp_path / "conf")
    res = CliRunner().invoke(app, ["--root", str(tmp_path), "new", "q", "--parent", "base",
                                   "--knob", "stages.s1.lr=5e-4", "--question", f"is {canary} safe?"])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "conf/runs/q.yaml").read_text()
    assert canary not in text and MARK in text


def test_a_job_log_opened_with_open_log_is_redacted(tmp_path, canary):
    import logging
    path = tmp_path / "logs" / "train" / "x.log"
    with files.open_log(path) as log:
        print("key is", canary, file=log)
        handler = logging.StreamHandler(log)
        logger = logging.getLogger("martingale.test_redaction")
        logger.addHandler(handler)
        try:
            logger.warning("config %s", {"project": canary})
        finally:
            logger.removeHandler(handler)
    text = path.read_text()
    assert canary not in text and text.count(MARK) == 2


def test_only_io_writes_files_in_the_package():
    """Every text/bytes file the tool writes goes through martingale.store.files (and so the redaction).
    Known exceptions, each named: the stage manifest (sha256 hashes and file names only), the
    weights/tokenizer that transformers save (binary tensors, the model's own config), a training
    checkpoint's optimizer and RNG state (torch.save, binary tensors), the LoRA adapter a training
    stage saves for a vLLM server (binary tensors), and the vLLM server's own stdout (its argv and
    progress; the server is given no secret). Job logs are appended through files.open_log, which
    redacts each write."""
    src = Path(__file__).resolve().parents[1] / "src" / "martingale"
    allowed = {("store/manifest.py", "write_text("), ("model/load.py", "save_pretrained("),
               ("training/checkpoint.py", "torch.save("), ("model/vllm.py", "model.save_pretrained(str(folder))"),
               ("training/shared.py", "model.save_pretrained(folder, state_dict=whole)"),
               ("model/vllm_server.py", 'open(log_path, "w"')}
    pattern = re.compile(r"open\([^)]*['\"][wax]b?\+?['\"]|\.write_text\(|\.write_bytes\(|json\.dump\(|"
                         r"yaml\.(?:safe_)?dump\([^)]*,\s*\w|save_pretrained\(|torch\.save\(")
    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel == "store/files.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = pattern.search(line)
            if m and not any(rel == f and tok in line for f, tok in allowed):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "files written outside martingale.store.files:\n" + "\n".join(found)
