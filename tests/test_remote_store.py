"""The durable stage store (martingale.remote), stage by stage, on both backends: a folder on a
mounted filesystem and a real S3-compatible server (SeaweedFS, tests/s3server.py) that checks every
request's signature. Stage folders here are small hand-made ones with real manifests; the whole
chain between two projects is tests/test_remote_build.py."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from martingale.config.sections import StoreConfig
from martingale.remote.backend import FsspecBackend, StoreDenied, StoreUnreachable, open_store
from martingale.remote.pull import CorruptInStore, held_stages, sync_stages
from martingale.remote.push import note_lineage, push_stage
from martingale.remote.records import blob_key, manifest_digest, stage_key
from martingale.remote.settings import StoreError, check_url, resolve
from martingale.remote.transfer import read_record
from martingale.store import stage_dir
from martingale.store.files import atomic_dir

from realparts import require
from s3server import S3Server


def make_stage(root: Path, sid: str, files: dict[str, bytes]) -> Path:
    """A finished stage folder as a job leaves it (atomic_dir: the files, then MANIFEST.json)."""
    folder = root / stage_dir(sid)
    with atomic_dir(folder) as tmp:
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
    return folder


P, X = "pretrain-aaaaaaaaaaaa", "train-bbbbbbbbbbbb"
CHAIN = {P: {}, X: {"base_model": P}}


def build_chain(root: Path, weights: bytes = b"weights-1", adapter: bytes = b"adapter-1") -> None:
    """Two stages, X trained on P, noted as a job with a store notes them."""
    make_stage(root, P, {"model/weights.bin": weights, "config.json": b"{}"})
    make_stage(root, X, {"adapter.bin": adapter, "same.bin": b"{}"})
    note_lineage(root, X, {"base_model": root / stage_dir(P)})


def tree_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def store(tmp_path: Path):
    """A folder store (a mounted filesystem)."""
    (tmp_path / "store").mkdir()
    return open_store(str(tmp_path / "store"))


def push_chain(store, root: Path) -> list[str]:
    return [push_stage(store, root, sid, inputs).state for sid, inputs in CHAIN.items()]


def pull_chain(store, root: Path, stop: bool = False, lines: list | None = None):
    return sync_stages(store, root, list(CHAIN), CHAIN, stop, (lines if lines is not None else []).append)


# ------------------------------------------------------------------ settings
def test_no_store_is_the_default():
    assert resolve() is None and resolve(StoreConfig(url=None)) is None


def test_the_environment_names_the_store_over_the_config(monkeypatch):
    monkeypatch.setenv("MARTINGALE_STORE", "s3://bucket/from-env")
    assert resolve(StoreConfig(url="/mnt/shared/store")).url == "s3://bucket/from-env"


def test_a_configured_url_with_a_credential_is_refused():
    with pytest.raises(StoreError, match="a credential in the URL is refused"):
        resolve(StoreConfig(url="s3://AKIAEXAMPLE:verysecretvalue@bucket/prefix"))


def test_an_on_corrupt_outside_its_choices_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("MARTINGALE_STORE_ON_CORRUPT", "shrug")
    with pytest.raises(StoreError, match=r"^store.on_corrupt: 'shrug' is not one of rebuild, stop$"):
        resolve(StoreConfig(url="/mnt/shared/store"))


def test_a_credential_in_the_url_is_refused_without_echoing_it():
    with pytest.raises(StoreError) as e:
        check_url("s3://AKIAEXAMPLE:verysecretvalue@bucket/prefix")
    assert "verysecretvalue" not in str(e.value) and "credential" in str(e.value)


# ------------------------------------------------------------------ folder backend
def test_a_pushed_chain_is_pulled_byte_identical_on_another_machine(store, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    build_chain(a)
    assert push_chain(store, a) == ["pushed", "pushed"]
    synced = pull_chain(store, b)
    assert synced.pulled == [P, X]
    for sid in CHAIN:
        assert tree_bytes(b / stage_dir(sid)) == tree_bytes(a / stage_dir(sid))


def test_a_second_push_sends_nothing(store, tmp_path):
    build_chain(tmp_path / "a")
    push_chain(store, tmp_path / "a")
    again = push_stage(store, tmp_path / "a", P, {})
    assert (again.state, again.files) == ("already", 0)


def test_blobs_are_stored_once_by_their_digest(store, tmp_path):
    build_chain(tmp_path / "a")
    push_chain(store, tmp_path / "a")
    blobs = store.list_keys("cas")
    assert len(blobs) == len(set(blobs)) and all(k.rsplit("/", 1)[-1] in k for k in blobs)
    assert len(blobs) == 5   # weights, config.json == same.bin ("{}"), adapter, two MANIFEST.json


def test_the_record_is_the_only_sign_a_stage_exists(store, tmp_path):
    a = tmp_path / "a"
    build_chain(a)
    from martingale.remote.records import stage_record
    from martingale.remote.transfer import upload_blobs
    upload_blobs(store, a / stage_dir(P), stage_record(a / stage_dir(P), P, {}))   # killed before the record
    assert held_stages(store) == set()
    assert pull_chain(store, tmp_path / "b").pulled == []
    assert push_stage(store, a, P, {}).state == "pushed"                               # the next push completes it


def test_the_record_names_the_manifests_of_the_stages_it_read(store, tmp_path):
    a = tmp_path / "a"
    build_chain(a)
    push_chain(store, a)
    record = read_record(store, stage_key(X))
    assert record.inputs == {"base_model": {"stage": P, "manifest": manifest_digest(a / stage_dir(P))}}


def test_a_stage_whose_input_is_not_in_the_store_is_not_pushed(store, tmp_path):
    build_chain(tmp_path / "a")
    result = push_stage(store, tmp_path / "a", X, {"base_model": P})
    assert result.state == "refused" and P in result.line() and "martingale push" in result.line()


def test_the_first_manifest_committed_is_the_stores_and_other_bytes_are_replaced_by_it(store, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    build_chain(a, weights=b"weights-from-cpu-A")
    build_chain(b, weights=b"weights-from-cpu-B")
    push_stage(store, a, P, {})
    result = push_stage(store, b, P, {})
    assert result.state == "replaced" and "building on the store's copy" in result.line()
    assert tree_bytes(b / stage_dir(P)) == tree_bytes(a / stage_dir(P))


def test_a_stage_built_on_bytes_the_store_replaced_is_built_again(store, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    build_chain(a, weights=b"weights-from-cpu-A")
    push_stage(store, a, P, {})
    build_chain(b, weights=b"weights-from-cpu-B", adapter=b"adapter-on-B's-P")   # X built on B's own P
    lines: list[str] = []
    synced = pull_chain(store, b, lines=lines)
    assert synced.replaced == [P] and synced.set_aside == [X]
    assert not (b / stage_dir(X)).exists() and len(lines) == 2
    assert manifest_digest(b / stage_dir(P)) == manifest_digest(a / stage_dir(P))


def test_a_pulled_stage_is_used_only_on_the_inputs_its_record_names(store, tmp_path):
    a = tmp_path / "a"
    build_chain(a)
    push_chain(store, a)
    record = json.loads(store.read(stage_key(X)))
    record["inputs"]["base_model"]["manifest"] = "0" * 64                 # names bytes the store does not hold
    (store.root / stage_key(X)).write_text(json.dumps(record))
    synced = pull_chain(store, tmp_path / "b")
    assert synced.pulled == [P]


def corrupt(store, root: Path, sid: str, rel: str, data: bytes) -> str:
    digest = json.loads((root / stage_dir(sid) / "MANIFEST.json").read_text())["files"][rel]["sha256"]
    (store.root / blob_key(digest)).write_bytes(data)
    return digest


@pytest.mark.parametrize("damage", [b"weights-2", b"weig"], ids=["corrupted", "truncated"])
def test_a_damaged_blob_is_refused_in_one_line_and_nothing_is_written(store, tmp_path, damage):
    a, b = tmp_path / "a", tmp_path / "b"
    build_chain(a)
    push_chain(store, a)
    corrupt(store, a, P, "model/weights.bin", damage)
    lines: list[str] = []
    synced = pull_chain(store, b, lines=lines)
    assert synced.pulled == [] and len(lines) == 1
    assert P in lines[0] and "model/weights.bin" in lines[0] and "built here" in lines[0]
    assert not (b / "results" / "_store" / "pretrain").exists() or list((b / "results/_store/pretrain").iterdir()) == []


def test_a_damaged_blob_stops_the_build_when_the_user_chooses_stop(store, tmp_path):
    build_chain(tmp_path / "a")
    push_chain(store, tmp_path / "a")
    corrupt(store, tmp_path / "a", P, "config.json", b"{ broken")
    with pytest.raises(CorruptInStore, match="config.json"):
        pull_chain(store, tmp_path / "b", stop=True)


def test_a_damaged_blob_is_forgotten_so_the_next_push_heals_it(store, tmp_path):
    a = tmp_path / "a"
    build_chain(a)
    push_chain(store, a)
    digest = corrupt(store, a, P, "model/weights.bin", b"rot")
    pull_chain(store, tmp_path / "b")
    assert not (store.root / blob_key(digest)).exists()
    from martingale.remote.records import stage_record
    from martingale.remote.transfer import upload_blobs
    assert upload_blobs(store, a / stage_dir(P), stage_record(a / stage_dir(P), P, {}))[0] == 1
    assert pull_chain(store, tmp_path / "c").pulled == [P, X]


def test_a_folder_store_creates_a_record_once(store):
    assert store.create("stages/x/x-000000000000.json", b"first") is True
    assert store.create("stages/x/x-000000000000.json", b"second") is False
    assert store.read("stages/x/x-000000000000.json") == b"first"


def test_an_unreachable_folder_store_is_one_error():
    with pytest.raises(StoreUnreachable, match="no such folder"):
        open_store("/nonexistent/martingale-store")


# ------------------------------------------------------------------ a real S3 server
@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    require("s3")
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
def s3store(s3, monkeypatch, tmp_path):
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    return open_store(f"s3://{s3.url.split('/')[2]}/{tmp_path.name}")   # a prefix per test


def test_s3_push_then_pull_is_byte_identical(s3store, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    build_chain(a)
    assert push_chain(s3store, a) == ["pushed", "pushed"]
    assert pull_chain(s3store, b).pulled == [P, X]
    assert tree_bytes(b / stage_dir(X)) == tree_bytes(a / stage_dir(X))


def test_s3_record_is_created_once_even_when_two_pushes_race(s3store):
    assert s3store.create("stages/x/x-000000000000.json", b"first") is True
    assert s3store.create("stages/x/x-000000000000.json", b"second") is False
    assert s3store.read("stages/x/x-000000000000.json") == b"first"


def test_s3_wrong_secret_is_refused_in_one_line_naming_the_url_not_the_key(s3, monkeypatch, tmp_path):
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a-wrong-secret-0123456789")
    with pytest.raises(StoreDenied) as e:
        open_store(s3.url).list_keys("stages")
    assert s3.url in str(e.value) and "a-wrong-secret" not in str(e.value) and "\n" not in str(e.value)


def test_s3_unreachable_store_is_one_error(monkeypatch, s3):
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")   # nothing listens on the discard port
    with pytest.raises(StoreUnreachable):
        open_store("s3://martingale-store/unreachable").list_keys("stages")


def test_s3_which_of_1000_stages_are_held_takes_one_listing_request_a_thousand(s3store):
    keys = [stage_key(f"train-{i:012x}") for i in range(1000)]
    s3store._many("pipe_file", [(s3store._path(k), b"{}") for k in keys])
    calls: list[str] = []
    fs = s3store.fs
    real = fs._call_s3

    async def counted(method, *args, **kwargs):
        calls.append(method)
        return await real(method, *args, **kwargs)
    fs._call_s3 = counted
    try:
        assert len(held_stages(s3store)) == 1000
    finally:
        fs._call_s3 = real
    assert set(calls) == {"list_objects_v2"} and len(calls) <= 2


def test_fsspec_backend_never_caches_a_listing(s3store):
    assert isinstance(s3store, FsspecBackend)
    assert held_stages(s3store) == set()
    s3store.create(stage_key(P), b"{}")
    assert held_stages(s3store) == {P}


def test_nothing_of_the_store_is_written_when_no_store_is_set(tmp_path, monkeypatch):
    from martingale.remote.hooks import after_stage
    monkeypatch.delenv("MARTINGALE_STORE", raising=False)
    build_chain(tmp_path)
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert after_stage(tmp_path, X, {"base_model": tmp_path / stage_dir(P)}) is None
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


def test_an_unreachable_store_leaves_the_stage_built_and_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    from martingale.remote.hooks import after_stage
    monkeypatch.setenv("MARTINGALE_STORE", str(tmp_path / "not-mounted"))
    build_chain(tmp_path)
    result = after_stage(tmp_path, P, {})
    assert result.state == "refused" and (tmp_path / stage_dir(P) / "MANIFEST.json").is_file()
    assert os.path.basename(str(tmp_path / "not-mounted")) in result.line()
