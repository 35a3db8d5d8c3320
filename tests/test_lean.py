"""The lean forward and sampler (model/lean.py) compute what transformers and peft compute, to the
bit: samples, logits and gradients, on left-padded prompts of mixed lengths, with a LoRA adapter on,
off (the KL reference) and absent. Where it does not cover a model, transformers runs."""
import random

import pytest
import torch

from martingale.model import generate
from martingale.model.backend import open_model
from martingale.model.lean import Lean
from martingale.world import traces


@pytest.fixture
def sharp(default_cfg, untrained_model, one_thread):
    """The untrained model with its attention sharpened (positions and padding change its logits)
    and a LoRA adapter whose B is not zero, so the adapter changes them too."""
    from peft import LoraConfig, get_peft_model
    gen = open_model(untrained_model, default_cfg["model"])
    with torch.no_grad():
        for name, p in gen.model.named_parameters():
            if "q_proj" in name or "k_proj" in name:
                p.mul_(30)
    policy = get_peft_model(gen.model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    return policy, gen.tokenizer


def _prompts(default_cfg, n: int, same_length: bool) -> list[str]:
    words = [w for w in traces.vocabulary(default_cfg["world"]["n_clue_types"]) if w.startswith("c")]
    rng = random.Random(n)
    return [" ".join(["Q"] + rng.choices(words, k=6 if same_length else rng.randint(1, 12)) + ["think"])
            for _ in range(n)]


def _generate(model, enc, tok, temperature: float, seed: int) -> torch.Tensor:
    kwargs = dict(do_sample=temperature > 0, max_new_tokens=12, pad_token_id=tok.pad_token_id,
                  eos_token_id=tok.eos_token_id)
    if temperature > 0:
        kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(**enc, **kwargs)


@pytest.mark.parametrize("same_length", [True, False])
@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_lean_sampling_draws_generates_tokens_to_the_bit(sharp, default_cfg, same_length, temperature):
    policy, tok = sharp
    enc = tok(_prompts(default_cfg, 24, same_length), return_tensors="pt", padding=True, add_special_tokens=False)
    for model in (policy, policy.get_base_model()):
        for seed in range(3):
            expect = _generate(model, enc, tok, temperature, seed)
            after_generate = torch.rand(4)
            torch.manual_seed(seed)
            got = Lean.of(model).sample(enc["input_ids"], enc["attention_mask"], 12, temperature,
                                        tok.pad_token_id, tok.eos_token_id)
            assert torch.equal(got, expect)
            assert torch.equal(torch.rand(4), after_generate)   # the generator left where generate leaves it


def test_lean_samples_are_ordinary_tensors_a_loss_can_take_in(sharp, default_cfg):
    """The sampler runs in inference mode, but hands back an ordinary tensor: the policy's forward
    with grad (which keeps its input ids for the backward pass) takes the sampled ids as they are."""
    policy, tok = sharp
    enc = tok(_prompts(default_cfg, 8, False), return_tensors="pt", padding=True, add_special_tokens=False)
    ids = Lean.of(policy).sample(enc["input_ids"], enc["attention_mask"], 6, 1.0, tok.pad_token_id, tok.eos_token_id)
    assert not ids.is_inference()
    attn = torch.ones_like(ids)
    generate.forward(policy, ids, attn, attn.cumsum(1) - 1).float().sum().backward()


def test_lean_sampling_with_the_adapter_disabled_draws_the_base_models_tokens(sharp, default_cfg):
    policy, tok = sharp
    enc = tok(_prompts(default_cfg, 16, False), return_tensors="pt", padding=True, add_special_tokens=False)
    with policy.disable_adapter():
        expect = _generate(policy, enc, tok, 1.0, 5)
        torch.manual_seed(5)
        got = Lean.of(policy).sample(enc["input_ids"], enc["attention_mask"], 12, 1.0, tok.pad_token_id, tok.eos_token_id)
    assert torch.equal(got, expect)
    assert not torch.equal(expect, _generate(policy, enc, tok, 1.0, 5))    # the adapter changes the draw


def test_the_loss_logprobs_and_their_gradients_equal_transformers_to_the_bit(sharp, default_cfg):
    """token_logprobs of the policy (train mode, with grad) and of the reference (adapter off):
    the same values as the transformers forward, and the same LoRA gradients."""
    policy, tok = sharp
    batch = generate.sample(policy, tok, _prompts(default_cfg, 16, False), 12, 1.0, seed=2)
    ids, attn = batch.input_ids, batch.attention_mask
    pos = (attn.cumsum(1) - 1).clamp(min=0)
    policy.train()
    lora = [p for n, p in policy.named_parameters() if "lora_" in n]

    def grads(logits):
        for p in lora:
            p.grad = None
        logits.float().log_softmax(-1).sum().backward()
        return [p.grad.clone() for p in lora]

    for keep in (0, 9):
        expect = policy(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=keep).logits
        got = generate.forward(policy, ids, attn, pos, logits_to_keep=keep)
        assert torch.equal(got, expect)
        assert all(torch.equal(a, b) for a, b in zip(grads(got), grads(expect)))
    with torch.no_grad(), policy.disable_adapter():
        expect = policy(input_ids=ids, attention_mask=attn, position_ids=pos).logits
        assert torch.equal(generate.forward(policy, ids, attn, pos), expect)
    assert torch.equal(generate.token_logprobs(policy, batch), generate.token_logprobs(policy, batch))
    policy.eval()


def test_a_forced_read_takes_the_same_top_tokens_as_the_transformers_forward(sharp, default_cfg):
    policy, tok = sharp
    texts = _prompts(default_cfg, 10, False)
    got = generate.next_token_logprobs(policy, tok, texts, top=5)
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    for i, text in enumerate(texts):
        one = tok([text], return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            logits = policy(**one).logits[0, -1]
        values, tokens = torch.log_softmax(logits.float(), -1).topk(5)
        assert list(got[i]) == tokens.tolist()
        assert torch.allclose(torch.tensor(list(got[i].values())), values, atol=1e-5)
    assert enc["input_ids"].shape[0] == len(texts)


def test_a_model_the_lean_path_does_not_cover_goes_through_transformers(sharp, default_cfg, untrained_model):
    """Grouped-query attention, LoRA dropout, a forward hook: Lean.of says None, and sampling and
    scoring run transformers (the same draws as generate)."""
    from peft import LoraConfig, get_peft_model
    policy, tok = sharp
    assert Lean.of(policy) is not None
    handle = policy.get_base_model().model.layers[0].mlp.register_forward_hook(lambda *a: None)
    try:
        assert Lean.of(policy) is None
    finally:
        handle.remove()
    cfg = dict(default_cfg["model"])
    dropped = get_peft_model(open_model(untrained_model, cfg).model, LoraConfig(r=4, lora_dropout=0.1,
                                                                                target_modules=["q_proj"]))
    assert Lean.of(dropped) is None
    from transformers import LlamaConfig, LlamaForCausalLM
    gqa = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2))
    assert Lean.of(gqa) is None
    prompts = _prompts(default_cfg, 6, False)
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    dropped.eval()
    batch = generate.sample(dropped, tok, prompts, 12, 1.0, seed=4)
    expect = _generate(dropped, enc, tok, 1.0, 4)[:, enc["input_ids"].shape[1]:]
    got = batch.input_ids[:, enc["input_ids"].shape[1]:]
    kept = batch.completion_mask[:, enc["input_ids"].shape[1]:] == 1
    assert torch.equal(got[kept], expect[:, :got.shape[1]][kept]) and kept.any()


@pytest.mark.parametrize("chunk_tokens", [64, 200])
def test_a_forward_a_few_rows_at_a_time_gives_the_same_logits_and_samples_to_the_bit(sharp, default_cfg,
                                                                                     monkeypatch, chunk_tokens):
    """Without autograd the layers run ROW_CHUNK_TOKENS rows × positions at a time (a core's cache):
    the prompts' logits, a prefill's cache and the sampled tokens equal all rows at once."""
    from martingale.model import lean as lean_module
    policy, tok = sharp
    enc = tok(_prompts(default_cfg, 40, False), return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    position_ids = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        lean = Lean.of(policy)
        with torch.no_grad():
            logits = lean.forward(ids, mask, position_ids)
        torch.manual_seed(3)
        return logits, lean.sample(ids, mask, 12, 1.0, tok.pad_token_id, tok.eos_token_id)
    monkeypatch.setattr(lean_module, "ROW_CHUNK_TOKENS", 10**9)
    whole = run()
    monkeypatch.setattr(lean_module, "ROW_CHUNK_TOKENS", chunk_tokens)
    assert lean_module.row_chunks(ids.shape[0], ids.shape[1], grad=False) is not None
    chunked = run()
    assert torch.equal(whole[0], chunked[0]) and torch.equal(whole[1], chunked[1])
