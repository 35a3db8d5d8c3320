"""A lean forward and sampler for a Llama-architecture causal LM (a peft LoRA policy on it too).

On the embedded model (3 layers of 96) transformers' ``forward`` and ``generate`` spend ~5 ms of
Python per decode step on masks, caches, hooks and wrappers, several times the arithmetic. This
module runs the same torch ops on the same shapes, in the same order, as transformers' Llama with
sdpa attention, peft's LoRA ``Linear`` and ``generate``'s sampling loop, without that machinery:
the same logits, samples and gradients to the bit (tests/test_lean.py holds it to that against
transformers). ``Lean.of(model)`` is None for a model it does not cover (another architecture,
grouped-query attention, a LoRA variant, dropout, scaled rope, hooks), and the caller goes through
transformers as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

Linear = Callable[[torch.Tensor], torch.Tensor]


def _plain(mod: nn.Module) -> Linear | None:
    """``mod(x)`` of an ``nn.Linear`` as F.linear (what its forward calls)."""
    if type(mod) is not nn.Linear or mod._forward_hooks or mod._forward_pre_hooks:
        return None
    weight, bias = mod.weight, mod.bias
    return lambda x: F.linear(x, weight, bias)


def _linear(mod: nn.Module) -> Linear | None:
    """``mod(x)`` for a linear layer: plain, or peft's LoRA ``Linear`` as its forward computes it —
    base(x), then + lora_B(lora_A(x)) · scaling for each active adapter (no dropout, no variant)."""
    plain = _plain(mod)
    if plain is not None:
        return plain
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:                                  # pragma: no cover - peft is a dependency
        return None
    if type(mod) is not LoraLinear or mod._forward_hooks or mod._forward_pre_hooks:
        return None
    base_layer = mod.base_layer
    base = _plain(base_layer)
    if base is None or mod.merged or type(base_layer) is not nn.Linear:
        return None
    if mod.disable_adapters:
        return base
    adapters = []
    for name in mod.active_adapters:
        if name not in mod.lora_A.keys():
            continue
        a, b = _plain(mod.lora_A[name]), _plain(mod.lora_B[name])
        if (a is None or b is None or name in mod.lora_variant or type(mod.lora_dropout[name]) is not nn.Identity
                or mod.lora_A[name].weight.dtype != base_layer.weight.dtype):
            return None
        adapters.append((a, b, _constant(mod.scaling[name], base_layer.weight.dtype, base_layer.weight.device)))
    if not adapters:
        return base

    def lora(x: torch.Tensor) -> torch.Tensor:
        result = base(x)
        for a, b, scaling in adapters:
            result = result + b(a(x)) * scaling
        return result
    return lora


def _constant(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A Python float as the 0-dim tensor that ``x * value`` or ``x + value`` (x of ``dtype``) casts
    it to: the same values, without a cast in every op of every decode step."""
    return torch.tensor(value, dtype=dtype, device=device)


@dataclass
class _Layer:
    norm1: tuple[torch.Tensor, torch.Tensor]
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    norm2: tuple[torch.Tensor, torch.Tensor]
    gate: Linear
    up: Linear
    down: Linear


def _rms(x: torch.Tensor, norm: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """LlamaRMSNorm: w · x / sqrt(mean(x²) + ε), in float32 (ε a float32 0-dim tensor)."""
    weight, eps = norm
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(dtype)


def _norm(mod: LlamaRMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """An RMSNorm's weight and ε, ε as the float32 0-dim tensor its forward adds."""
    return mod.weight, _constant(mod.variance_epsilon, torch.float32, mod.weight.device)


def _rope_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin with its first half negated: x · cos + rotate_half(x) · sin, rotate_half(x) = [−x₂, x₁],
    is x · cos + roll(x, half) · [−sin₁, sin₂] to the bit ((−a)·b = a·(−b) in IEEE arithmetic),
    one roll per query and key instead of two slices, a negation and a cat."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def _plain_module(mod: nn.Module, cls: type) -> bool:
    return type(mod) is cls and not mod._forward_hooks and not mod._forward_pre_hooks


class Cache:
    """Keys and values per layer in buffers of ``capacity`` positions, handed to attention as views
    of the filled part: what DynamicCache's torch.cat gives, without copying the whole cache at
    every decode step (the same attention to the bit: tests/test_lean.py). ``capacity`` 0: grow by
    concatenation, as DynamicCache does (a forward whose cache is dropped after it)."""

    def __init__(self, capacity: int = 0) -> None:
        self.capacity, self.length = capacity, 0
        self.layers: list[list[torch.Tensor]] = []

    def rows(self, first: int, end: int, batch: int) -> "_CacheRows":
        """The cache of rows [first, end) of a ``batch``-row forward run a few rows at a time."""
        return _CacheRows(self, first, end, batch)

    def update(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append a layer's new keys and values at position ``start``; all of its keys and values."""
        if len(self.layers) <= layer:
            if self.capacity:
                shape = (k.shape[0], k.shape[1], self.capacity, k.shape[3])
                self.layers.append([k.new_empty(shape), v.new_empty((*shape[:3], v.shape[3]))])
            else:
                self.layers.append([k.new_empty(0), v.new_empty(0)])
        kv = self.layers[layer]
        end = start + k.shape[2]
        if not self.capacity:
            kv[0], kv[1] = torch.cat([kv[0], k], dim=-2), torch.cat([kv[1], v], dim=-2)
            return kv[0], kv[1]
        kv[0][:, :, start:end].copy_(k)
        kv[1][:, :, start:end].copy_(v)
        return kv[0][:, :, :end], kv[1][:, :, :end]


class _CacheRows:
    """Rows [first, end) of a Cache: keys and values go into (and are read from) those rows of its
    buffers, made for the whole batch on first use. A growing cache (capacity 0) gets one buffer
    per layer of the batch's full size once its first row chunk arrives."""

    def __init__(self, cache: Cache, first: int, end: int, batch: int) -> None:
        self.cache, self.first, self.end, self.batch = cache, first, end, batch

    def update(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.cache
        if len(c.layers) <= layer:
            positions = c.capacity or start + k.shape[2]
            shape = (self.batch, k.shape[1], positions, k.shape[3])
            c.layers.append([k.new_empty(shape), v.new_empty((*shape[:3], v.shape[3]))])
            if not c.capacity and start:
                raise ValueError("a growing cache cannot be filled a few rows at a time after its first forward")
        kv, end = c.layers[layer], start + k.shape[2]
        kv[0][self.first:self.end, :, start:end].copy_(k)
        kv[1][self.first:self.end, :, start:end].copy_(v)
        return kv[0][self.first:self.end, :, :end], kv[1][self.first:self.end, :, :end]


ROW_CHUNK_TOKENS = 1024   # rows × positions a forward runs at once without autograd


def row_chunks(batch: int, q_len: int, grad: bool) -> list[tuple[int, int]] | None:
    """Row ranges of at most ROW_CHUNK_TOKENS rows × positions, or None to run all rows at once.

    A forward's activations over 32 rows of ~60 positions (hidden 96, MLP 256) spill a core's L2
    (1 MiB here) and a linear layer takes ~2× per row; a few rows at a time stay in it. Each row's
    numbers are computed by the same kernels either way (row-blocked GEMMs, per-row attention), so
    the logits are the same to the bit (tests/test_lean.py). Not under autograd: there the weight
    gradients would be summed over the chunks in another order."""
    rows = max(1, ROW_CHUNK_TOKENS // max(1, q_len))
    if grad or batch <= rows:
        return None
    return [(a, min(a + rows, batch)) for a in range(0, batch, rows)]


class Lean:
    """One model's layers as plain callables, read off the modules as they are now (an adapter
    disabled by ``disable_adapter()`` is read as off): build one per call, it is cheap."""

    row_chunked = True        # without autograd, a few rows at a time (row_chunks)
    rms = staticmethod(_rms)  # the RMSNorm, the embedding (``embedded``) and row_chunked: what a
                              # forward over several models' stacked weights changes (bench/seed_batching.py)

    def __init__(self, embed: nn.Embedding, layers: list[_Layer], norm: tuple[torch.Tensor, torch.Tensor],
                 lm_head: Linear, inv_freq: torch.Tensor, rope_scale: float, heads: int, head_dim: int) -> None:
        self.embed, self.layers, self.norm, self.lm_head = embed, layers, norm, lm_head
        self.inv_freq, self.rope_scale = inv_freq, rope_scale
        self.heads, self.head_dim, self.scaling = heads, head_dim, head_dim ** -0.5

    @classmethod
    def of(cls, model: Any) -> "Lean | None":
        """The lean form of ``model`` (a LlamaForCausalLM or a peft model around one), or None where
        it would not compute what transformers computes."""
        from transformers import LlamaForCausalLM
        from transformers.activations import SiLUActivation
        from transformers.models.llama import modeling_llama as ml
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        if type(base) is not LlamaForCausalLM or base.device.type == "mps":
            return None
        cfg = base.config
        inner = base.model
        if (cfg._attn_implementation != "sdpa" or getattr(cfg, "attention_dropout", 0.0) != 0.0
                or cfg.hidden_act != "silu" or cfg.num_key_value_heads != cfg.num_attention_heads
                or inner.rotary_emb.rope_type != "default" or inner.gradient_checkpointing
                or len(inner.layers) != cfg.num_hidden_layers or not _plain_module(inner.embed_tokens, nn.Embedding)
                or getattr(cfg, "is_causal", True) is not True):
            return None
        for mod in (base, inner, inner.rotary_emb, inner.norm):
            if mod._forward_hooks or mod._forward_pre_hooks:
                return None
        layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            subs = (layer, att, mlp, layer.input_layernorm, layer.post_attention_layernorm, mlp.act_fn)
            if any(m._forward_hooks or m._forward_pre_hooks for m in subs) or type(mlp.act_fn) is not SiLUActivation:
                return None
            if not (_plain_module(layer.input_layernorm, ml.LlamaRMSNorm)
                    and _plain_module(layer.post_attention_layernorm, ml.LlamaRMSNorm)):
                return None
            fns = [_linear(m) for m in (att.q_proj, att.k_proj, att.v_proj, att.o_proj,
                                        mlp.gate_proj, mlp.up_proj, mlp.down_proj)]
            linears = [f for f in fns if f is not None]
            if len(linears) != len(fns):
                return None
            q, k, v, o, gate, up, down = linears
            layers.append(_Layer(_norm(layer.input_layernorm), q, k, v, o, _norm(layer.post_attention_layernorm),
                                 gate, up, down))
        head = _linear(base.lm_head)
        if head is None or not _plain_module(inner.norm, ml.LlamaRMSNorm):
            return None
        return cls(inner.embed_tokens, layers, _norm(inner.norm), head,
                   inner.rotary_emb.inv_freq, inner.rotary_emb.attention_scaling,
                   cfg.num_attention_heads, inner.layers[0].self_attn.head_dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor,
                cache: "Cache | None" = None, logits_to_keep: int = 0) -> torch.Tensor:
        """The logits of ``LlamaForCausalLM.forward(input_ids, attention_mask, position_ids,
        logits_to_keep=...)``. ``cache``: None (use_cache=False), or a list of [keys, values] per
        layer ([] when empty) that this call extends, as a DynamicCache does. Without autograd,
        the layers run a few rows at a time (row_chunks): the same logits to the bit, faster."""
        hidden = self.embedded(input_ids)
        batch, q_len = input_ids.shape
        past = cache.length if cache is not None else 0
        mask = self._mask(attention_mask, batch, q_len, past + q_len, past)
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=hidden.device, dtype=torch.float)
        both = torch.cat((freqs, freqs), dim=-1)
        cos, sin = both.cos(), both.sin()
        if self.rope_scale != 1.0:          # x · 1.0 is x, to the bit: the op is skipped, not approximated
            cos, sin = cos * self.rope_scale, sin * self.rope_scale
        cos, sin = cos.to(dtype=hidden.dtype).unsqueeze(1), sin.to(dtype=hidden.dtype).unsqueeze(1)
        sin = _rope_sin(sin)
        chunks = row_chunks(batch, q_len, grad=torch.is_grad_enabled()) if self.row_chunked else None
        if chunks is None:
            out = self._layers(hidden, mask, cos, sin, cache, past, logits_to_keep)
        else:
            def rows(t: torch.Tensor, a: int, b: int) -> torch.Tensor:
                return t if t.shape[0] == 1 else t[a:b]     # a batch of one broadcasts
            out = torch.cat([self._layers(hidden[a:b], None if mask is None else rows(mask, a, b),
                                          rows(cos, a, b), rows(sin, a, b),
                                          cache.rows(a, b, batch) if cache is not None else None, past,
                                          logits_to_keep) for a, b in chunks])
        if cache is not None:
            cache.length = past + q_len
        return out

    def embedded(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The token embeddings of ``input_ids`` (the embedding module's own F.embedding call)."""
        emb = self.embed
        return F.embedding(input_ids, emb.weight, emb.padding_idx, emb.max_norm, emb.norm_type,
                           emb.scale_grad_by_freq, emb.sparse)

    def _layers(self, hidden: torch.Tensor, mask: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                cache: "Cache | _CacheRows | None", past: int, logits_to_keep: int) -> torch.Tensor:
        """The decoder layers, the final norm and the head over ``hidden`` [rows, q, d]."""
        batch, q_len = hidden.shape[:2]
        half = self.head_dim // 2
        shape = (batch, q_len, -1, self.head_dim)
        for i, layer in enumerate(self.layers):
            residual = hidden
            h = self.rms(hidden, layer.norm1)
            q = layer.q(h).view(shape).transpose(1, 2)
            k = layer.k(h).view(shape).transpose(1, 2)
            v = layer.v(h).view(shape).transpose(1, 2)
            q = (q * cos) + (q.roll(half, -1) * sin)
            k = (k * cos) + (k.roll(half, -1) * sin)
            if cache is not None:
                k, v = cache.update(i, past, k, v)
            is_causal = q_len > 1 and mask is None
            if is_causal and k.shape[2] > q_len:
                k, v = k[:, :, :q_len, :], v[:, :, :q_len, :]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=self.scaling,
                                                 is_causal=is_causal)
            out = out.reshape(out.shape[0], -1, q_len, v.shape[-1]).transpose(1, 2).contiguous()
            hidden = residual + layer.o(out.reshape(batch, q_len, -1).contiguous())
            residual = hidden
            h = self.rms(hidden, layer.norm2)
            hidden = residual + layer.down(F.silu(layer.gate(h)) * layer.up(h))
        hidden = self.rms(hidden, self.norm)
        return self.lm_head(hidden[:, slice(-logits_to_keep, None), :])

    @staticmethod
    def _mask(attention_mask: torch.Tensor | None, batch: int, q_len: int, kv_len: int, past: int) -> torch.Tensor | None:
        """transformers' sdpa mask: None where sdpa's own causal flag does (no padding, and one query
        or as many queries as keys), else bool [B, 1, q, kv]: causal and not padding."""
        padding = None
        if attention_mask is not None:
            padding = attention_mask.to(dtype=torch.bool)
            if (extra := kv_len - padding.shape[-1]) > 0:
                padding = F.pad(padding, (0, extra))
        if (q_len == 1 or kv_len == q_len) and (padding is None or bool(padding.all())):
            return None
        if q_len == 1 and padding is not None:      # a decode step: its query sees every key before it, so causal & padding is padding
            return padding[:, None, None, :]
        if past == 0 and (padding is None or (bool(padding[:, :q_len].all()) and bool((~padding[:, q_len:]).all()))):
            return None
        device = padding.device if padding is not None else None
        q_idx = torch.arange(q_len, device=device) + past
        kv_idx = torch.arange(kv_len, device=device)
        mask = torch.ones((), dtype=torch.bool, device=device) & (kv_idx[None, None, None, :] <= q_idx[None, None, :, None])
        if padding is not None:
            mask = mask & padding[torch.arange(batch, device=device)[:, None, None, None], kv_idx[None, None, None, :]]
        return mask.expand(batch, -1, q_len, kv_len)

    def sample(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
               temperature: float, pad_token_id: int, eos_token_id: int) -> torch.Tensor:
        """``generate(input_ids, attention_mask, do_sample=temperature > 0, temperature, top_k=0,
        top_p=1, max_new_tokens, pad/eos)``: prompt and completion ids, [B, P + new]; rows that
        ended are padded, the loop stops when every row has. Draws from torch's global generator
        exactly as generate does (one multinomial over the batch per step). Runs in inference mode
        (no autograd bookkeeping in each of a decode step's ~300 small ops: ~8% of its time) and
        returns a normal tensor, which a loss may take in."""
        with torch.inference_mode():
            ids = self._sample(input_ids, attention_mask, max_new_tokens, temperature, pad_token_id, eos_token_id)
        return ids.clone()

    def _sample(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                temperature: float, pad_token_id: int, eos_token_id: int) -> torch.Tensor:
        position_ids = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        batch, width = input_ids.shape
        padded = None                                                # generate drops an all-ones mask
        if not bool(attention_mask.all()):                           # the prompts' mask, then ones: sliced per step
            padded = F.pad(attention_mask.to(dtype=torch.bool), (0, max_new_tokens), value=True)
        cache = Cache(width + max_new_tokens)
        logits = self.forward(input_ids, attention_mask if padded is not None else None, position_ids, cache,
                              logits_to_keep=1)
        finished = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
        temperature_t = _constant(temperature, torch.float32, input_ids.device)
        out = [input_ids]
        last = position_ids[..., -1:]
        for step in range(max_new_tokens):
            if step:
                last = last + 1
                mask = padded[:, :width + step] if padded is not None else None
                logits = self.forward(out[-1], mask, last, cache, logits_to_keep=1)
            scores = logits[:, -1].to(dtype=torch.float32)
            if temperature > 0:
                if temperature != 1.0:
                    scores = scores / temperature_t
                tokens = torch.multinomial(F.softmax(scores, dim=-1), num_samples=1).squeeze(1)
            else:
                tokens = torch.argmax(scores, dim=-1)
            tokens = tokens.masked_fill(finished, pad_token_id)     # a row that ended is padded
            out.append(tokens[:, None])
            finished = finished | (tokens == eos_token_id)
            if bool(finished.all()):
                break
        return torch.cat(out, dim=-1)
