"""Shared fixtures: default configs and an untrained tiny model saved the way stages save one; under
pytest-xdist, one CPU thread a worker."""
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from martingale.config.schema import Config

from realparts import require


def pytest_configure(config):
    """A pytest-xdist worker (`make test` runs two, `-n 2`) computes on one thread, as a Snakemake job
    given one does: two workers each starting a thread per core fight over the cores (OpenMP threads
    spin while they wait). The suite on 2 cores: 32.4 min in one process, 28.6 with two workers of
    2 threads, 23.8 and 28.5 with two of one. Jobs and servers the tests start set their own counts.

    With two workers, their jobs' OpenMP threads wait passively (OMP_WAIT_POLICY, inherited by every
    job, rank and server): a job on 2 threads (the tiny pretrain, SmolLM2's stages) shares the cores
    with the other worker, and a spinning thread burns a core its descheduled twin needs. Alone,
    passive is the slower, so the project's own jobs keep OpenMP's default.

    The vLLM servers the tests start run the model in their engine core's process
    (VLLM_ENABLE_V1_MULTIPROCESSING=0): on a CPU vLLM otherwise gives it a worker process of its own,
    one more import of vLLM and torch a start. The API server still starts its engine core apart.
    test_vllm.py starts one in vLLM's own layout, as users run it, and checks what it leaves behind."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from martingale.core.threads import use_threads
        use_threads(1)


# The modules that take a minute or more, longest first (`make test --durations`): with
# `--no-loadscope-reorder`, xdist hands a worker the next module in this order, so the long ones
# start first and the two workers end together on the short ones.
LONGEST_FIRST = ("test_slurm_cluster.py", "test_chat_episodes.py", "test_ranks.py", "test_vllm_end_to_end.py",
                 "test_decide.py", "test_smollm2_ranks.py", "test_end_to_end.py", "test_remote_build.py", "test_smollm2_train.py",
                 "test_smollm2_vllm.py", "test_vllm.py", "test_simulate.py", "test_crossed.py", "test_cost.py",
                 "test_extension_build.py")


def pytest_collection_modifyitems(config, items):
    """Modules in LONGEST_FIRST's order, then the rest with the most tests first (xdist's own
    order); each module's tests in their own order."""
    def module(item) -> str:
        return item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]

    counts: dict[str, int] = {}
    for item in items:
        counts[module(item)] = counts.get(module(item), 0) + 1

    def rank(name: str) -> tuple[int, int]:
        return (0, LONGEST_FIRST.index(name)) if name in LONGEST_FIRST else (1, -counts[name])
    items.sort(key=lambda item: rank(module(item)))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """``@pytest.mark.real("vllm", ...)``: each part checked before the test's fixtures start
    anything (tests/realparts.py: a skip naming it, a one-line failure in CI)."""
    for mark in item.iter_markers("real"):
        for part in mark.args:
            require(part)


@pytest.fixture
def one_thread():
    """One torch thread: a tiny model's steps run ~20x faster than with threads on shared cores."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def smoke_pretrain(tmp_path_factory) -> Path:
    """The smoke scale's pretrain (tests/projcopy.py: SMOKE), built once for the session's workers:
    the end-to-end modules that only build on it copy it (projcopy.copy_pretrain). test_end_to_end
    builds its own: it checks the pretrain job itself."""
    from projcopy import build_smoke_pretrain
    base = tmp_path_factory.getbasetemp()
    return build_smoke_pretrain(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@pytest.fixture(scope="session")
def default_cfg() -> dict:
    cfg = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)
    cfg["world"].update(n_train=32, n_heldout=32)
    cfg["model"].update(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    return cfg


@pytest.fixture(scope="session")
def untrained_model(tmp_path_factory, default_cfg) -> Path:
    from martingale.model.load import build_tiny, save
    from martingale.model.tokenizer import build_tokenizer
    from martingale.world import traces
    tok = build_tokenizer(traces.vocabulary(default_cfg["world"]["n_clue_types"]))
    import torch
    torch.manual_seed(0)
    model = build_tiny(default_cfg["model"], tok)
    out = tmp_path_factory.mktemp("untrained")
    save(model, tok, out)
    return out


@pytest.fixture(scope="session")
def vllm_served(tmp_path_factory):
    """One real vLLM server for the session (an untrained embedded Llama behind the vllm backend):
    the backend's tests and the api judge's end-to-end test share it; a start costs ~1 min here."""
    from martingale.model.backend import open_model

    from vllmserver import build, model_cfg
    folder = build(tmp_path_factory.mktemp("served"), seed=0)
    gen = open_model(folder, model_cfg())
    yield gen, folder
    gen.close()
