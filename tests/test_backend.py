"""The generation backend protocol: ``model.backend`` names a registered backend (``api``, ``hf``,
``vllm``; any other name is refused at check time), the registry is light to import, and the HF backend is
the in-process transformers path the stages generate, read and score through."""
from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from martingale.cli import app
from martingale.config.runs import RunError, RunTree
from martingale.config.schema import choices
from martingale.model.backend import Backend, HFBackend, backend_class, backends, open_model

from projcopy import proj, write_run  # noqa: F401 (proj: fixture)


def test_the_backends_are_found_in_their_modules_and_are_the_allowed_values():
    from martingale.model.api import ApiBackend
    from martingale.model.vllm import VLLMBackend
    assert backends() == {"api": ApiBackend, "hf": HFBackend, "vllm": VLLMBackend}
    assert choices()["model.backend"] == ("hf", "api", "vllm")


def test_a_run_asking_for_an_unbuilt_backend_is_refused_in_one_line_naming_the_key(proj):
    write_run(proj, "v.yaml", "parent: base\nknob: model.backend=tgi\n")
    with pytest.raises(RunError) as info:
        RunTree.load(proj / "conf")
    msg = str(info.value)
    assert msg.startswith("conf/runs/v.yaml: model.backend: ") and "'tgi' is not one of: hf, api, vllm" in msg
    assert "\n" not in msg
    res = CliRunner().invoke(app, ["--root", str(proj), "check"])
    assert res.exit_code == 1
    assert res.output.strip().startswith("error: conf/runs/v.yaml: model.backend: ")
    assert len(res.output.strip().splitlines()) == 1


def test_an_unknown_backend_name_is_named_when_opening_a_model():
    with pytest.raises(ValueError, match="model.backend: unknown backend 'tgi' \\(known: hf, api, vllm\\)"):
        backend_class({"backend": "tgi"})


def test_the_registry_and_the_schema_choices_import_no_heavy_library():
    code = ("import sys; from martingale.config.schema import choices; choices(); "
            "import martingale.model.backend, martingale.rewards, martingale.beliefs.readers; "
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'trl', 'datasets') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_hf_backend_samples_reads_and_scores_through_the_protocol(default_cfg, untrained_model):
    import torch

    from martingale.model import generate
    gen = open_model(untrained_model, default_cfg["model"])
    assert isinstance(gen, HFBackend) and isinstance(gen, Backend)
    prompts = ["Q c1 c2 think", "Q c3 think"]
    a = gen.sample(prompts, 5, 1.0, seed=3)
    b = generate.sample(gen.model, gen.tokenizer, prompts, 5, 1.0, 3)
    assert a.texts == b.texts and torch.equal(a.input_ids, b.input_ids)      # the same seeded draw
    logp = gen.token_logprobs(a)
    assert logp.shape == a.input_ids.shape
    assert (logp[a.completion_mask == 0] == 0).all() and (logp[a.completion_mask == 1] < 0).all()
    assert len(gen.greedy_next(prompts, max_new_tokens=1)) == 2


def test_the_loss_scores_samples_under_the_temperature_they_were_drawn_at(default_cfg, untrained_model):
    """Samples drawn at temperature T are scored with log softmax(logits / T): the policy-gradient
    loss and its KL use the distribution that produced the samples (T = 1 is the plain softmax)."""
    import torch
    gen = open_model(untrained_model, default_cfg["model"])
    batch = gen.sample(["Q c1 c2 think"], 4, 0.7, seed=1)
    hot, plain = gen.token_logprobs(batch, 0.7), gen.token_logprobs(batch)
    mask = batch.completion_mask == 1
    with torch.no_grad():
        logits = gen.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           position_ids=(batch.attention_mask.cumsum(1) - 1).clamp(min=0)).logits[:, :-1]
        expect = torch.log_softmax(logits / 0.7, -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    expect = torch.nn.functional.pad(expect, (1, 0))
    assert torch.allclose(hot[mask], expect[mask], atol=1e-5)
    assert not torch.allclose(hot[mask], plain[mask])
