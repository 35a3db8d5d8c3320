"""provenance.json: what a stage ran with (versions, the vLLM server, the sha256 of the weights it
loaded), written into the stage folder under its manifest, the same bytes each time."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from martingale.stages import StageKind
from martingale.store import files, manifest, provenance
from martingale.store.manifest import MANIFEST
from martingale.store.provenance import FILE, collecting

from projcopy import proj, write_eval  # noqa: F401 (proj: fixture)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stage(out: Path, root: Path, body=lambda tmp: (tmp / "stage.json").write_text("{}\n")) -> dict:
    """Write a stage folder under a collector; its provenance.json."""
    with collecting(out, root):
        with files.atomic_dir(out) as tmp:
            body(tmp)
    return json.loads((out / FILE).read_text())


def _store_model(root: Path, src: Path, sid: str = "pretrain-000000000001") -> Path:
    """A model stage folder in root's store holding a copy of src as its model/."""
    folder = root / "results" / "_store" / sid.split("-")[0] / sid
    with files.atomic_dir(folder) as tmp:
        shutil.copytree(src, tmp / "model")
    return folder


class FakeHttp:
    """What Server.http offers provenance: get(url, timeout) -> a response (or an exception)."""

    def __init__(self, status=200, body=None, error: Exception | None = None):
        self.status, self.body, self.error, self.urls = status, body, error, []

    def get(self, url, timeout):
        self.urls.append(url)
        if self.error is not None:
            raise self.error
        return SimpleNamespace(status_code=self.status, json=lambda: self.body)


# --- the file in the stage folder -----------------------------------------------------------

def test_stage_folder_written_under_a_collector_holds_provenance_json_in_its_manifest(tmp_path):
    out = tmp_path / "results" / "_store" / "eval" / "eval-000000000001"
    _stage(out, tmp_path)
    assert FILE in files.read_json(out / MANIFEST)["files"]
    assert manifest.problems(out) == []


def test_provenance_records_the_versions_of_python_torch_transformers_peft_trl_accelerate(tmp_path):
    import platform
    doc = _stage(tmp_path / "s", tmp_path)
    assert doc["versions"]["python"] == platform.python_version()
    for name in ("torch", "transformers", "peft", "trl", "accelerate"):
        assert doc["versions"][name] == importlib.metadata.version(name)


def test_nothing_is_written_without_an_active_collector(tmp_path):
    with files.atomic_dir(tmp_path / "s") as tmp:
        (tmp / "stage.json").write_text("{}\n")
    assert not (tmp_path / "s" / FILE).exists()
    assert set(files.read_json(tmp_path / "s" / MANIFEST)["files"]) == {"stage.json"}


def test_recording_without_an_active_collector_hashes_nothing(tmp_path, monkeypatch):
    (tmp_path / "model.safetensors").write_bytes(b"w")
    monkeypatch.setattr(manifest, "sha256_file", lambda p: pytest.fail("hashed outside a stage"))
    provenance.record_weights(tmp_path)
    provenance.record_server({"version": "0.10.1"})
    assert provenance.active() is None


def test_only_the_collected_stage_folder_gets_provenance_not_a_checkpoint_it_writes(tmp_path):
    out = tmp_path / "stage"

    def body(tmp):
        with files.atomic_dir(tmp_path / "ckpt" / "00000001") as ck:
            (ck / "trainer.pt").write_bytes(b"t")
        (tmp / "stage.json").write_text("{}\n")
    _stage(out, tmp_path, body)
    assert not (tmp_path / "ckpt" / "00000001" / FILE).exists()
    assert (out / FILE).is_file()


def test_collector_is_gone_after_the_stage_body(tmp_path):
    with collecting(tmp_path / "s", tmp_path):
        assert provenance.active() is not None
    assert provenance.active() is None


# --- weights ---------------------------------------------------------------------------------

def test_recorded_sha256_of_a_loaded_model_equals_its_weight_files_sha256(tmp_path, untrained_model):
    from martingale.model.load import load
    root = untrained_model.parent

    def body(tmp):
        load(untrained_model)
        (tmp / "stage.json").write_text("{}\n")
    doc = _stage(tmp_path / "s", root, body)
    files = sorted((untrained_model / "model").glob("*.safetensors"))
    assert files and doc["weights"] == {
        f"{untrained_model.name}/model": {p.name: _sha(p) for p in files}}


def test_a_store_folder_linking_to_weights_outside_is_recorded_by_its_project_path(tmp_path, untrained_model):
    root = tmp_path / "proj"
    link = root / "results" / "_store" / "weights" / "weights-000000000001"
    link.mkdir(parents=True)
    (link / "model").symlink_to(untrained_model / "model", target_is_directory=True)
    doc = _stage(root / "out", root, lambda tmp: provenance.record_weights(link / "model"))
    assert doc["weights"] == {"results/_store/weights/weights-000000000001/model": {
        "model.safetensors": _sha(untrained_model / "model" / "model.safetensors")}}
    assert str(untrained_model.parent) not in (root / "out" / FILE).read_text()


def test_a_model_folder_outside_the_project_is_recorded_by_its_name_only(tmp_path):
    outside = tmp_path / "elsewhere" / "my-8b"
    outside.mkdir(parents=True)
    (outside / "model-00001-of-00002.safetensors").write_bytes(b"a")
    (outside / "model-00002-of-00002.safetensors").write_bytes(b"b")
    (outside / "config.json").write_text("{}")
    doc = _stage(tmp_path / "proj" / "out", tmp_path / "proj",
                 lambda tmp: provenance.record_weights(outside))
    assert doc["weights"] == {"<outside the project>/my-8b": {
        "model-00001-of-00002.safetensors": hashlib.sha256(b"a").hexdigest(),
        "model-00002-of-00002.safetensors": hashlib.sha256(b"b").hexdigest()}}
    assert str(tmp_path) not in (tmp_path / "proj" / "out" / FILE).read_text()


def test_weight_files_that_are_links_are_hashed_by_their_content(tmp_path):
    blob = tmp_path / "blobs" / "abc"
    blob.parent.mkdir()
    blob.write_bytes(b"weights")
    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(blob)
    doc = _stage(tmp_path / "out", tmp_path, lambda tmp: provenance.record_weights(folder))
    assert doc["weights"]["snapshot"] == {"model.safetensors": hashlib.sha256(b"weights").hexdigest()}


def test_a_folder_loaded_twice_is_hashed_once(tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"w")
    calls = []
    real = manifest.sha256_file
    monkeypatch.setattr(provenance, "sha256_file", lambda p: (calls.append(p), real(p))[1])
    monkeypatch.setattr(provenance, "_SHA_CACHE", {})
    with collecting(tmp_path / "a", tmp_path):
        provenance.record_weights(tmp_path / "m")
    with collecting(tmp_path / "b", tmp_path):
        provenance.record_weights(tmp_path / "m")
        provenance.record_weights(tmp_path / "m")
    assert len(calls) == 1


def test_a_rewritten_weight_file_is_hashed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "_SHA_CACHE", {})
    (tmp_path / "m").mkdir()
    weights = tmp_path / "m" / "model.safetensors"
    weights.write_bytes(b"old")
    with collecting(tmp_path / "a", tmp_path) as c:
        provenance.record_weights(tmp_path / "m")
        weights.write_bytes(b"newer")
        provenance.record_weights(tmp_path / "m")
    assert c.weights["m"] == {"model.safetensors": hashlib.sha256(b"newer").hexdigest()}


def test_two_runs_give_byte_identical_provenance_json(tmp_path, monkeypatch, untrained_model):
    from martingale.model.load import load
    blobs = []
    for name in ("first", "second"):
        monkeypatch.setattr(provenance, "_SHA_CACHE", {})   # hashed again: the bytes, not the cache
        _stage(tmp_path / name, untrained_model.parent, lambda tmp: load(untrained_model))
        blobs.append((tmp_path / name / FILE).read_bytes())
    assert blobs[0] == blobs[1]
    assert json.loads(blobs[0])["weights"]


def test_provenance_json_is_sorted_and_has_no_clock_or_host(tmp_path):
    import socket
    _stage(tmp_path / "s", tmp_path)
    text = (tmp_path / "s" / FILE).read_text()
    assert text == files.canonical_json(json.loads(text))
    assert socket.gethostname() not in text and str(tmp_path) not in text


# --- the vLLM server -------------------------------------------------------------------------

def test_a_vllm_server_version_from_its_version_endpoint_is_recorded(tmp_path):
    http = FakeHttp(body={"version": "0.10.1"})
    doc = _stage(tmp_path / "s", tmp_path,
                 lambda tmp: provenance.record_server_at(http, "http://127.0.0.1:8000/"))
    assert doc["versions"]["vllm_server"] == "0.10.1"
    assert http.urls == ["http://127.0.0.1:8000/version"]


@pytest.mark.parametrize("http", [FakeHttp(status=404, body={"detail": "Not Found"}),
                                  FakeHttp(error=ConnectionError("refused")),
                                  FakeHttp(body="not an object")], ids=["404", "refused", "not-json-object"])
def test_a_server_without_a_version_endpoint_is_recorded_as_null_and_the_stage_goes_on(tmp_path, http):
    doc = _stage(tmp_path / "s", tmp_path, lambda tmp: provenance.record_server_at(http, "http://h:1"))
    assert "vllm_server" in doc["versions"] and doc["versions"]["vllm_server"] is None


def test_a_stage_served_by_no_vllm_server_records_no_server_version(tmp_path):
    assert "vllm_server" not in _stage(tmp_path / "s", tmp_path)["versions"]


def test_servers_of_different_versions_are_all_recorded(tmp_path):
    def body(tmp):
        provenance.record_server({"version": "0.10.1"})
        provenance.record_server({"version": "0.9.2"})
        provenance.record_server(None)
    assert _stage(tmp_path / "s", tmp_path, body)["versions"]["vllm_server"] == ["0.10.1", "0.9.2", None]


def test_server_ready_records_its_version_through_the_vllm_backend(tmp_path):
    from martingale.model.vllm_server import Server
    server = Server.__new__(Server)
    server.url, server.proc, server.log_path = "http://127.0.0.1:9", None, None
    server.http = SimpleNamespace(get=lambda url, timeout: SimpleNamespace(
        status_code=200, json=lambda: {"version": "0.32.0"} if url.endswith("/version") else {}))
    doc = _stage(tmp_path / "s", tmp_path, lambda tmp: server.wait_ready(5))
    assert doc["versions"]["vllm_server"] == "0.32.0"


@pytest.mark.slow
@pytest.mark.real("vllm")
def test_the_served_vllm_server_version_is_recorded(tmp_path, vllm_served):
    from vllmserver import VLLM_PYTHON
    gen, _ = vllm_served
    doc = _stage(tmp_path / "s", tmp_path, lambda tmp: gen.server.wait_ready(30))
    dist = next(VLLM_PYTHON.parents[1].glob("lib/python*/site-packages/vllm*.dist-info"))
    assert doc["versions"]["vllm_server"] == dist.name.removesuffix(".dist-info").split("-")[1]


# --- the stage job, the aggregate, the runs table --------------------------------------------

def test_run_stage_writes_provenance_with_the_input_models_sha256(tmp_path, monkeypatch, untrained_model):
    from martingale.jobs import smk
    from martingale.model.load import load
    monkeypatch.chdir(tmp_path)
    model = _store_model(tmp_path, untrained_model / "model").relative_to(tmp_path)

    def run(cfg, out_dir, model):
        load(model)
        with files.atomic_dir(out_dir) as tmp:
            (tmp / "stage.json").write_text("{}\n")
    fake = StageKind("fake", "source", keys=(), inputs=("model",), body=run)
    monkeypatch.setattr(smk, "kinds", lambda: {"fake": fake})
    monkeypatch.setattr(smk, "track_stage", lambda snakemake: None)
    out = Path("results/_store/fake/fake-000000000002")
    job = SimpleNamespace(rule="fake", threads=1, input={"model": str(model / MANIFEST)}, output=[str(out / MANIFEST)],
                          params=SimpleNamespace(cfg={}), wildcards=SimpleNamespace(sid=out.name),
                          resources=SimpleNamespace())
    smk.run_stage(job)
    doc = files.read_json(out / FILE)
    assert doc["weights"] == {f"{model.as_posix()}/model": {
        "model.safetensors": _sha(untrained_model / "model" / "model.safetensors")}}
    assert manifest.problems(out) == [] and provenance.active() is None


def _eval_folder(root: Path, sid: str, doc: dict | None) -> Path:
    d = root / "results" / "_store" / sid.split("-")[0] / sid
    d.mkdir(parents=True)
    files.write_json(d / "metrics.json", {"n": 1, "brier": 0.2, "ms": 0.0})
    files.write_jsonl(d / "records.jsonl", [{"qid": "q0", "y": 1, "prior": 0.5, "posterior": 0.6}])
    if doc is not None:
        files.write_json(d / FILE, doc)
    return d


DOC = {"versions": {"python": "3.11.7", "torch": "2.8.0", "trl": "0.23.0"},
       "weights": {"results/_store/pretrain/pretrain-000000000001/model": {"model.safetensors": "a" * 64}}}


def test_eval_json_carries_the_provenance_of_each_eval_and_model_stage(tmp_path):
    from martingale.records.aggregate import write_run_results
    train_doc = {**DOC, "versions": {**DOC["versions"], "vllm_server": "0.10.1"}}
    _eval_folder(tmp_path, "train-000000000003", train_doc)
    d = _eval_folder(tmp_path, "eval-000000000004", DOC)
    result = write_run_results("r", {}, [{"run_id": "r", "parent": None, "knob": None}],
                               [{"stage": "s1", "seed": 0, "dir": d, "model_stage": "train-000000000003",
                                 "eval_stage": "eval-000000000004"}], tmp_path / "results" / "r", plots=False)
    assert result["stage_provenance"] == {"eval-000000000004": DOC, "train-000000000003": train_doc}
    assert files.read_json(tmp_path / "results" / "r" / "eval.json")["stage_provenance"] == result["stage_provenance"]


def test_eval_json_of_stages_without_provenance_has_none(tmp_path):
    from martingale.records.aggregate import write_run_results
    d = _eval_folder(tmp_path, "eval-000000000004", None)
    result = write_run_results("r", {}, [], [{"stage": "s0", "seed": 0, "dir": d, "model_stage": "m-1",
                                              "eval_stage": "eval-000000000004"}], tmp_path / "out", plots=False)
    assert result["stage_provenance"] == {}


def test_summary_gives_one_version_per_package_and_stage_ids_for_store_models():
    other = {"versions": {"python": "3.11.7", "torch": "2.8.0", "trl": "0.23.0", "vllm_server": "0.10.1"},
             "weights": {"results/_store/train/train-000000000003/model": {"model.safetensors": "b" * 64}}}
    got = provenance.summary({"eval-1": DOC, "train-3": other})
    assert got == {"versions": {"python": "3.11.7", "torch": "2.8.0", "trl": "0.23.0", "vllm_server": "0.10.1"},
                   "weights_sha256": {"pretrain-000000000001": {"model.safetensors": "a" * 64},
                                      "train-000000000003": {"model.safetensors": "b" * 64}}}


def test_summary_lists_the_distinct_values_where_stages_disagree():
    newer = {"versions": {**DOC["versions"], "trl": "0.24.0"},
             "weights": {k: {"model.safetensors": "c" * 64} for k in DOC["weights"]}}
    got = provenance.summary({"a": DOC, "b": newer})
    assert got["versions"]["trl"] == ["0.23.0", "0.24.0"]
    assert got["weights_sha256"]["pretrain-000000000001"]["model.safetensors"] == ["a" * 64, "c" * 64]


def test_summary_of_no_provenance_is_none():
    assert provenance.summary({}) is None and provenance.summary({"a": None}) is None


def test_runs_row_carries_the_stages_versions_and_weights_and_validates(proj):
    from martingale.table import build_table, schema_errors, write_table
    write_eval(proj, "A-on-D", {"s0": {"brier": 0.2}}, stage_provenance={"eval-000000000004": DOC})
    path = write_table(proj)
    first = path.read_bytes()
    row = {r["run_id"]: r for r in json.loads(first)}["A-on-D"]
    assert row["provenance"] == {"versions": DOC["versions"],
                                 "weights_sha256": {"pretrain-000000000001": {"model.safetensors": "a" * 64}}}
    assert all(r["provenance"] is None for r in json.loads(first) if r["run_id"] != "A-on-D")
    assert schema_errors(build_table(proj)) == []
    write_table(proj)
    assert path.read_bytes() == first
