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
from martingale.model.backend import Backend, backend_class, backends, open_model
from martingale.model.hf import HFBackend

from projcopy import proj, write_run  # noqa: F401 (proj: fixture)


def test_the_backends_are_declared_found_in_their_modules_and_are_the_allowed_values():
    from martingale.model.api import ApiBackend
    from martingale.model.vllm import VLLMBackend
    assert set(backends()) == {"api", "hf", "vllm"} and choices()["model.backend"] == ("hf", "api", "vllm")
    classes = {name: backend_class({"backend": name}) for name in backends()}
    assert classes == {"api": ApiBackend, "hf": HFBackend, "vllm": VLLMBackend}


def test_reading_the_backends_declarations_imports_no_torch():
    """The schema reads the declarations at compose time: no backend's body is imported."""
    import subprocess
    import sys
    code = ("import sys; from martingale.model.backend import backends, backend_sections; backends(); "
            "backend_sections(); print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


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


def test_a_one_token_read_gives_generates_logits_to_the_bit_in_one_forward_pass(default_cfg, untrained_model):
    """A judge's one-token greedy read (greedy_next, max_new_tokens=1) is one forward pass, not
    generate: the last position's logits equal generate's bit for bit on left-padded prompts of
    mixed lengths, so the answers (and every stage's bytes) are the same."""
    import torch

    from martingale.model import generate
    from martingale.world import traces
    gen = open_model(untrained_model, default_cfg["model"])
    with torch.no_grad():   # sharpen the untrained model's attention, so positions change its logits
        for name, p in gen.model.named_parameters():
            if "q_proj" in name or "k_proj" in name:
                p.mul_(30)
    words = [w for w in traces.vocabulary(default_cfg["world"]["n_clue_types"]) if w.startswith("c")]
    rng = __import__("random").Random(0)
    prompts = [" ".join(["Q"] + rng.choices(words, k=rng.randint(1, 12)) + ["read", "P", "="]) for _ in range(48)]
    enc = gen.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = gen.model.generate(**enc, do_sample=False, max_new_tokens=1, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=gen.tokenizer.pad_token_id,
                                 eos_token_id=gen.tokenizer.eos_token_id)
        assert torch.equal(generate.next_logits(gen.model, enc["input_ids"], enc["attention_mask"]), out.logits[0])
        assert torch.equal(generate.greedy_token(gen.model, enc["input_ids"], enc["attention_mask"]),
                           out.sequences[:, -1:])
    answers = gen.greedy_next(prompts, max_new_tokens=1)
    assert answers == gen.tokenizer.batch_decode(out.sequences[:, -1:], skip_special_tokens=True)


def test_a_generation_config_that_changes_greedy_logits_sends_a_read_through_generate(default_cfg, untrained_model):
    """A model whose generation config sets a logits processor (a repetition penalty, say) is read
    by generate itself, which applies it; the one-pass read is for configs that change nothing."""
    from martingale.model import generate
    gen = open_model(untrained_model, default_cfg["model"])
    assert not generate._has_logits_processors(gen.model)
    gen.model.generation_config.repetition_penalty = 1.3
    try:
        assert generate._has_logits_processors(gen.model)
    finally:
        gen.model.generation_config.repetition_penalty = None


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
