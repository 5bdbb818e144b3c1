"""A lean decode forward for Llama-family models, over the model's own modules (gpt-fast style).

transformers' forward spends a few milliseconds per call outside the matmuls (mask building,
cache bookkeeping, attention dispatch): on the 0.5B int4 draft that is ~15% of a CPU step.
`LeanForward` runs the same embedding, norms, projections, rotary embedding, MLP and head
modules in one plain loop with its own KV cache (one buffer per layer, grown by doubling, rolled
back by moving the length), and for weight-only int4 layers runs q/k/v and gate/up as one matmul
each (the same codes per row). Decode and scoring calls (up to SMALL_ATTENTION new tokens, a
token tree under its mask) attend with two small fp32 matmuls, prompts through SDPA. Logits
match transformers' to rounding (tests/test_lean.py). CachedLM takes this path on CPU for the
models `lean_reason` accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels import CpuLinear
from ..quantize import DENSE_TOKENS, WeightOnly
from .int4_step import MAX_TOKENS as INT4_STEP_TOKENS
from .int4_step import Int4Step, int4_step_reason

FAMILIES = ("llama", "qwen2")  # model_type values whose decoder layer this forward reproduces
SMALL_ATTENTION = 16  # calls of up to this many new tokens attend through `small_attention`
LEAN_ATTR = "_specbench_lean"  # where a model keeps its LeanForward (False: transformers' path)


def lean_reason(model: nn.Module) -> str | None:
    """Why `model` cannot take the lean path (None: it can)."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        return f"model_type {kind!r} is not one of {FAMILIES}"
    if getattr(config, "use_sliding_window", False) or getattr(config, "pretraining_tp", 1) != 1:
        return "sliding-window attention or pretraining_tp > 1"
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not layers or hasattr(layers[0].self_attn, "q_norm"):
        return "an attention layout other than Llama's"
    return None


class FusedWeightOnly(nn.Module):
    """Several weight-only layers on one input as one int matmul for decode-width calls; wider
    calls (prefill) go through the original layers and their float weights."""

    def __init__(self, parts: list[nn.Module], weights: list[WeightOnly]) -> None:
        super().__init__()
        self.parts = nn.ModuleList(parts)  # the model's layers (a CpuLinear routes prompts)
        out_features = sum(w.out_features for w in weights)
        stacked = nn.Linear(weights[0].in_features, out_features, bias=False)
        stacked.weight = nn.Parameter(torch.cat([w.dense for w in weights]), requires_grad=False)
        self.inner = weights[0].like(stacked)
        self.inner.dense = torch.empty(0)  # prefill uses the parts' own float weights
        has_bias = any(w.bias is not None for w in weights)
        biases = [w.dense.new_zeros(w.out_features) if w.bias is None else w.bias for w in weights]
        self.register_buffer("bias", torch.cat(biases) if has_bias else None)
        self.sizes = [w.out_features for w in weights]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """(..., in) -> one (..., out_i) per part."""
        flat = x.reshape(-1, x.shape[-1]).contiguous()  # (T, in)
        if flat.shape[0] > DENSE_TOKENS:
            return [part(x) for part in self.parts]
        out = self.inner._int_forward(flat)  # (T, sum out_i)
        out = out if self.bias is None else out + self.bias
        return list(out.reshape(*x.shape[:-1], -1).split(self.sizes, dim=-1))


def fused(parts: list[nn.Module]) -> FusedWeightOnly | None:
    """One fused layer when every part is (or wraps, as a CpuLinear) the same weight-only kind
    and still holds its float weight (packing moves it: `models.load_model` builds the lean
    forward first), else None."""
    weights = [p.inner if isinstance(p, CpuLinear) else p for p in parts]
    kinds = {type(w) for w in weights}
    if len(kinds) == 1 and issubclass(kinds.pop(), WeightOnly):
        return FusedWeightOnly(parts, weights) if all(w.dense.numel() for w in weights) else None
    return None


@dataclass
class LeanCache:
    """Keys and values per layer, (1, kv heads, capacity, head dim); positions < length valid."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    length: int = 0

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Store (1, H, T, D) k, v at length..length+T; -> this layer's (keys, values) so far."""
        end = self.length + k.shape[2]
        if layer == len(self.keys):  # first call: room for the prompt and some decoding
            shape = (*k.shape[:2], max(2 * end, 256), k.shape[3])
            self.keys.append(k.new_empty(shape))
            self.values.append(v.new_empty(shape))
        else:
            self._grow(layer, end)
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def reserve(self, end: int) -> None:
        """Room for positions < end in every layer written so far."""
        for layer in range(len(self.keys)):
            self._grow(layer, end)

    def _grow(self, layer: int, end: int) -> None:
        """Double a full layer's capacity until positions < end fit."""
        if end > self.keys[layer].shape[2]:
            for store in (self.keys, self.values):
                old = store[layer]
                grown = old.new_empty((*old.shape[:2], 2 * end, old.shape[3]))
                grown[:, :, : self.length] = old[:, :, : self.length]
                store[layer] = grown

    def keep_positions(self, start: int, offsets: list[int]) -> None:
        """Keep positions < start and start + offsets (ascending), moved down; drop the rest."""
        if offsets != list(range(len(offsets))):  # not already in place: move them down
            index = torch.tensor([start + o for o in offsets], dtype=torch.long)
            for store in (self.keys, self.values):
                for part in store:  # (1, H, capacity, D)
                    part[:, :, start : start + len(offsets)] = part.index_select(2, index)
        self.length = start + len(offsets)


class LeanForward:
    """The decode forward of a Llama-family model (`lean_reason(model) is None`)."""

    def __init__(self, model: nn.Module) -> None:
        reason = lean_reason(model)
        if reason is not None:
            raise ValueError(f"no lean forward for this model: {reason}")
        self.model, self.core = model, model.model  # the head is looked up per call: layers
        # may be swapped after this is built (kernels.pack_linears)
        config = model.config
        attn = self.core.layers[0].self_attn
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim, self.scaling = attn.head_dim, attn.scaling
        layers = self.core.layers
        self.qkv = [
            fused([la.self_attn.q_proj, la.self_attn.k_proj, la.self_attn.v_proj]) for la in layers
        ]
        self.gate_up = [fused([la.mlp.gate_proj, la.mlp.up_proj]) for la in layers]
        # an all-int4 model on the row kernel: decode steps in one C++ call
        self.step = Int4Step(self) if int4_step_reason(self) is None else None

    def __call__(
        self,
        ids: torch.Tensor,
        cache: LeanCache,
        keep: int,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(1, T) new ids after cache.length cached positions -> (1, keep, V) logits. A token
        tree passes its (1, T) position_ids and an additive (1, 1, T, length + T) mask."""
        new, start = ids.shape[1], cache.length
        plain = position_ids is None and attention_mask is None
        if self.step is not None and plain and start > 0 and new <= INT4_STEP_TOKENS:
            return self.step(ids, cache, keep)
        x = self.core.embed_tokens(ids)  # (1, T, hidden)
        positions = position_ids
        if positions is None:
            positions = torch.arange(start, start + new, device=ids.device)[None]  # (1, T)
        cos, sin = (t[:, None] for t in self.core.rotary_emb(x, positions))  # (1, 1, T, D)
        mask = attention_mask
        if mask is None and new > 1:  # query t sees cached positions and new ones up to itself
            mask = torch.ones(new, start + new, dtype=torch.bool, device=ids.device)
            mask = mask.tril(diagonal=start)
        for i, layer in enumerate(self.core.layers):
            x = x + self._attention(i, layer, layer.input_layernorm(x), cos, sin, cache, mask)
            x = x + self._mlp(i, layer.mlp, layer.post_attention_layernorm(x))
        cache.length = start + new
        return self.model.get_output_embeddings()(self.core.norm(x[:, -keep:]))

    def _attention(self, i, layer, h, cos, sin, cache: LeanCache, mask) -> torch.Tensor:
        """(1, T, hidden) normed input -> (1, T, hidden) attention output of layer i."""
        attn, new = layer.self_attn, h.shape[1]
        if self.qkv[i] is not None:
            q, k, v = self.qkv[i](h)
        else:
            q, k, v = attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)
        q = rotate(q.view(1, new, self.heads, self.head_dim).transpose(1, 2), cos, sin)
        k = rotate(k.view(1, new, self.kv_heads, self.head_dim).transpose(1, 2), cos, sin)
        v = v.view(1, new, self.kv_heads, self.head_dim).transpose(1, 2)  # (1, Hkv, T, D)
        keys, values = cache.write(i, k, v)  # (1, Hkv, L, D)
        if new <= SMALL_ATTENTION:  # decode and scoring widths: two small fp32 matmuls
            out = small_attention(q, keys, values, self.scaling, mask)  # (1, H, T, D)
        else:  # a prompt
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=self.scaling, enable_gqa=True
            )  # (1, H, T, D)
        out = out.transpose(1, 2).reshape(1, new, -1)
        return attn.o_proj(out)

    def _mlp(self, i: int, mlp: nn.Module, h: torch.Tensor) -> torch.Tensor:
        if self.gate_up[i] is None:
            return mlp(h)
        gate, up = self.gate_up[i](h)
        return mlp.down_proj(mlp.act_fn(gate) * up)


def lean_forward(model: nn.Module) -> LeanForward | None:
    """The model's lean forward, built once (fusing int4 projections) and kept on it; None where
    `lean_reason` refuses the model or `disable_lean` was called on it."""
    lean = getattr(model, LEAN_ATTR, None)
    if lean is None:
        lean = LeanForward(model) if lean_reason(model) is None else False
        setattr(model, LEAN_ATTR, lean)
    return lean or None


def disable_lean(model: nn.Module) -> nn.Module:
    """Keep `model` on transformers' forward in every CachedLM (backend.lean_decode=false)."""
    setattr(model, LEAN_ATTR, False)
    return model


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of (1, H, T, D) x with (1, 1, T, D) cos / sin (half-split rotation)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def small_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    scaling: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """(1, H, T, D) queries, (1, Hkv, L, D) keys and values, an optional (T, L) bool mask
    (True = attend) or (1, 1, T, L) additive one -> (1, H, T, D): each kv head's grouped query
    heads are the rows of one small matmul, in fp32. For a few queries this is faster than
    SDPA (12 heads of 128 dims, L = 500, T = 5: 160 vs 218 us; one token in bf16 matmuls without
    native bf16: 380 us, in fp32 60 us)."""
    _, heads, new, dim = q.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    grouped = q.float().reshape(1, kv_heads, -1, dim)  # (1, Hkv, G*T, D): row g*T + t
    scores = torch.matmul(grouped, keys.float().transpose(-1, -2)) * scaling  # (1, Hkv, G*T, L)
    if mask is not None:
        scores = scores.view(1, kv_heads, -1, new, length)  # (1, Hkv, G, T, L)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask[0, 0]
        scores = scores.view(1, kv_heads, -1, length)
    out = torch.matmul(torch.softmax(scores, dim=-1), values.float())  # (1, Hkv, G*T, D)
    return out.view(1, heads, new, dim).to(q.dtype)
