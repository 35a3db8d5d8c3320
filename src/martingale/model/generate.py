"""Sampling completions, greedy one-token reads, and completion log-probs for a batch of prompts,
with transformers in-process: the ``hf`` backend's implementation (model.backend.HFBackend)."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .lean import Cache, Lean

log = logging.getLogger("martingale")


@dataclass
class Batch:
    """Prompt + completion token ids, left-padded prompts, right-padded completions."""
    input_ids: torch.Tensor       # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    completion_mask: torch.Tensor # [B, T] 1 on completion tokens (incl. the eos), 0 elsewhere
    texts: list[str]              # decoded completions


def length_chunks(tokenizer, texts: list[str], batch_size: int) -> list[list[int]]:
    """Indices of ``texts`` in batches of ``batch_size`` by token length (0 = one batch, in order):
    left-padding every prompt to the longest one costs more than the model on a CPU."""
    if batch_size <= 0 or len(texts) <= batch_size:
        return [list(range(len(texts)))]
    lengths = [len(x) for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: (lengths[i], i))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def sample(model, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float,
           seed: int, batch_size: int = 0) -> Batch:
    """Sample one completion per prompt (temperature 0 = greedy), seeded for determinism; with
    ``batch_size`` (model.generate_batch) in batches of similar length, batch j seeded seed·100003 + j."""
    chunks = length_chunks(tokenizer, prompts, batch_size)
    if len(chunks) == 1:
        return _sample(model, tokenizer, prompts, max_new_tokens, temperature, seed)
    parts, t0 = [], time.perf_counter()
    for j, idx in enumerate(chunks):     # a long eval says how far it is, a line a batch
        parts.append(_sample(model, tokenizer, [prompts[i] for i in idx], max_new_tokens, temperature,
                             seed * 100_003 + j))
        spent = time.perf_counter() - t0
        log.info("sampling: batch %d/%d (%d prompts) %.0fs, eta %.0fs", j + 1, len(chunks), len(idx), spent,
                 spent / (j + 1) * (len(chunks) - j - 1))
    prompt_ids: list[list[int]] = [[] for _ in prompts]       # every row filled below, from its batch
    completion_ids: list[list[int]] = [[] for _ in prompts]
    for idx, part in zip(chunks, parts):
        for row, i in enumerate(idx):
            prompt_ids[i] = part.input_ids[row][(part.attention_mask[row] == 1) & (part.completion_mask[row] == 0)].tolist()
            completion_ids[i] = part.input_ids[row][part.completion_mask[row] == 1].tolist()
    return batch_from_ids(tokenizer, prompt_ids, completion_ids)


@torch.no_grad()
def _sample(model, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float,
            seed: int) -> Batch:
    """Sample one completion per prompt (temperature 0 = greedy), seeded for determinism."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    torch.manual_seed(seed)
    lean = Lean.of(model) if not _has_logits_processors(model, sampling=temperature > 0) else None
    if lean is not None:    # generate's own loop and ops, without its per-step machinery (model/lean.py)
        out = lean.sample(enc["input_ids"], enc["attention_mask"], max_new_tokens, float(temperature),
                          tokenizer.pad_token_id, tokenizer.eos_token_id)
    else:
        kwargs = dict(do_sample=temperature > 0, max_new_tokens=max_new_tokens,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        if temperature > 0:
            kwargs.update(temperature=float(temperature), top_k=0, top_p=1.0)
        out = model.generate(**enc, **kwargs)
    prompt_len = enc["input_ids"].shape[1]
    completion = out[:, prompt_len:]
    # Everything after the first eos is padding.
    is_eos = completion == tokenizer.eos_token_id
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    comp_mask = (~after_eos) & ((completion != tokenizer.pad_token_id) | is_eos)   # the eos even where pad = eos
    completion = completion.masked_fill(~comp_mask, tokenizer.pad_token_id)
    input_ids = torch.cat([enc["input_ids"], completion], dim=1)
    attention = torch.cat([enc["attention_mask"], comp_mask.long()], dim=1)
    cmask = torch.cat([torch.zeros_like(enc["attention_mask"]), comp_mask.long()], dim=1)
    texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
    return Batch(input_ids, attention, cmask, texts)


def token_logprobs(model, batch: Batch, temperature: float = 1.0, completion_only: bool = False) -> torch.Tensor:
    """log π_T(token | prefix) at every position (0 where not a completion token), shape [B, T];
    π_T = softmax(logits / T), the distribution sampling at temperature T draws from.
    ``completion_only``: the vocabulary logits of the completion positions only (a real model's
    [B, T, 49k] logits over a long prompt do not fit in memory; the same values)."""
    ids, attn = batch.input_ids.to(model.device), batch.attention_mask.to(model.device)
    position_ids = (attn.cumsum(dim=1) - 1).clamp(min=0)
    start = 1
    if completion_only:
        cols = batch.completion_mask.any(dim=0).nonzero()
        start = max(1, int(cols[0])) if len(cols) else ids.shape[1] - 1
        logits = forward(model, ids, attn, position_ids, logits_to_keep=ids.shape[1] - start + 1)[:, :-1]
    else:
        logits = forward(model, ids, attn, position_ids)[:, :-1]
    logits = logits.float() if temperature == 1.0 else logits.float() / float(temperature)
    logp = torch.log_softmax(logits, dim=-1)
    tok = logp.gather(-1, ids[:, start:, None]).squeeze(-1)
    tok = F.pad(tok, (start, 0))
    return tok * batch.completion_mask.to(model.device)


def forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
            logits_to_keep: int = 0, use_cache: bool | None = None) -> torch.Tensor:
    """``model(input_ids, attention_mask, position_ids, logits_to_keep, use_cache).logits``, through
    the lean forward where it covers the model (model/lean.py: the same logits to the bit)."""
    lean = Lean.of(model)
    if lean is None:
        return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     logits_to_keep=logits_to_keep, use_cache=use_cache).logits
    use_cache = model.config.use_cache if use_cache is None else use_cache   # the forward's default
    return lean.forward(input_ids, attention_mask, position_ids, Cache() if use_cache else None, logits_to_keep)


def rows_of(batch: Batch, rows: list[int]) -> Batch:
    """The batch's rows ``rows``, without the columns that are padding in all of them."""
    ids, attn = batch.input_ids[rows], batch.attention_mask[rows]
    used = attn.any(dim=0).nonzero()
    lo, hi = (int(used[0]), int(used[-1]) + 1) if len(used) else (0, ids.shape[1])
    return Batch(ids[:, lo:hi], attn[:, lo:hi], batch.completion_mask[rows][:, lo:hi],
                 [batch.texts[i] for i in rows])


@torch.no_grad()
def greedy_next(model, tokenizer, texts: list[str], max_new_tokens: int = 1, batch_size: int = 0) -> list[str]:
    """Greedy continuation of each text (a judge's read), decoded; in batches of similar length
    with ``batch_size`` (greedy: the same answers either way)."""
    out: list[str] = [""] * len(texts)
    for idx in length_chunks(tokenizer, texts, batch_size):
        enc = tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True,
                        add_special_tokens=False).to(model.device)
        if max_new_tokens == 1 and not _has_logits_processors(model):
            new = greedy_token(model, enc["input_ids"], enc["attention_mask"])
        else:
            gen = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            new = gen[:, enc["input_ids"].shape[1]:]
        for i, text in zip(idx, tokenizer.batch_decode(new, skip_special_tokens=True)):
            out[i] = text
    return out


def greedy_token(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The greedy next token after each left-padded row, [B, 1]: the argmax of ``next_logits``."""
    return next_logits(model, input_ids, attention_mask).argmax(dim=-1, keepdim=True)


def next_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The next-token logits after each left-padded row, [B, V] in float32: ``generate``'s first
    step (its prefill's last-position logits, position ids from the mask as generate builds them)
    as one forward pass, the same logits to the bit (a one-token judge read pays generate's set-up
    per call otherwise)."""
    position_ids = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    return forward(model, input_ids, attention_mask, position_ids, logits_to_keep=1, use_cache=False)[:, -1].float()


# Generation-config fields under which greedy ``generate`` changes the logits before its argmax.
_GREEDY_PROCESSORS = ("repetition_penalty", "encoder_repetition_penalty", "no_repeat_ngram_size", "bad_words_ids",
                      "forced_bos_token_id", "forced_eos_token_id", "suppress_tokens", "begin_suppress_tokens",
                      "min_length", "min_new_tokens", "sequence_bias", "exponential_decay_length_penalty",
                      "watermarking_config")


# ... and those that change sampling's distribution besides (temperature, top_k and top_p are set by the call).
_SAMPLING_PROCESSORS = ("top_h", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "guidance_scale",
                        "renormalize_logits")


def _has_logits_processors(model, sampling: bool = False) -> bool:
    """Whether the model's generation config sets any of ``_GREEDY_PROCESSORS`` (a real model's
    generation_config.json may; ``sampling``: or of ``_SAMPLING_PROCESSORS``): then a one-token read
    or a sample goes through ``generate`` itself."""
    cfg = getattr(model, "generation_config", None)
    names = _GREEDY_PROCESSORS + (_SAMPLING_PROCESSORS if sampling else ())
    return cfg is not None and any(getattr(cfg, name, None) not in (None, 0, 1.0, [], {}, False)
                                   for name in names)


@torch.no_grad()
def next_token_logprobs(model, tokenizer, texts: list[str], top: int, batch_size: int = 8) -> list[dict[int, float]]:
    """The top ``top`` next tokens after each text, {token id: log-prob} (a forced-answer read:
    beliefs/forced.py). Texts go through in batches of similar length (left-padding to the longest
    costs more than the model), only the last position's logits are computed, and the result does
    not depend on the batching."""
    ids = [list(x) for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
    out: list[dict[int, float]] = [{} for _ in ids]
    pad = tokenizer.pad_token_id
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(ids[i]) for i in idx)
        input_ids = torch.full((len(idx), width), pad, dtype=torch.long)
        attn = torch.zeros_like(input_ids)
        for row, i in enumerate(idx):
            input_ids[row, width - len(ids[i]):] = torch.tensor(ids[i], dtype=torch.long)
            attn[row, width - len(ids[i]):] = 1
        position_ids = (attn.cumsum(dim=1) - 1).clamp(min=0)
        logits = forward(model, input_ids.to(model.device), attn.to(model.device), position_ids.to(model.device),
                         logits_to_keep=1)[:, -1]
        logp = torch.log_softmax(logits.float(), dim=-1)
        values, tokens = logp.topk(top, dim=-1)
        for row, i in enumerate(idx):
            out[i] = {int(t): float(v) for t, v in zip(tokens[row].tolist(), values[row].tolist())}
    return out


def batch_from_ids(tokenizer, prompts: list[list[int]], completions: list[list[int]]) -> Batch:
    """A Batch from token ids generated elsewhere (a server): prompts left-padded, completions
    right-padded, the same layout ``sample`` returns."""
    pad = tokenizer.pad_token_id
    width_p = max(len(p) for p in prompts)
    width_c = max(1, max(len(c) for c in completions))
    ids = torch.full((len(prompts), width_p + width_c), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    cmask = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, width_p - len(p):width_p] = torch.tensor(p, dtype=torch.long)
        attn[i, width_p - len(p):width_p] = 1
        if c:
            ids[i, width_p:width_p + len(c)] = torch.tensor(c, dtype=torch.long)
            attn[i, width_p:width_p + len(c)] = 1
            cmask[i, width_p:width_p + len(c)] = 1
    texts = tokenizer.batch_decode(ids[:, width_p:].masked_fill(cmask[:, width_p:] == 0, pad),
                                   skip_special_tokens=True)
    return Batch(ids, attn, cmask, texts)
