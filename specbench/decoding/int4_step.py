"""Decode steps of an all-int4 Llama-family model in one C++ call (`csrc/int4_decode.cpp`).

On the lean path the 0.5B int4 draft's step is ~10 ms of int4 matmuls plus ~4.5 ms of small ops
dispatched from Python (norms, rotary, casts, attention, residuals); `Int4Step` runs the whole
layer loop in one call of specbench's extension, on the same row-kernel weights and the same
LeanCache. Activations stay fp32 between the matmuls, so logits differ from the Python path's
by its bf16 rounding; the draft's numerics only move acceptance (speculative sampling stays
exact). `LeanForward` uses it for decode widths when `int4_step_reason(lean)` is None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from ..kernels import CpuLinear
from ..quantize import Int4RowsLinear

if TYPE_CHECKING:
    from .lean import LeanCache, LeanForward

MAX_TOKENS = 16  # new tokens per call (decode and scoring widths)


def _rows(layer: nn.Module) -> Int4RowsLinear | None:
    """The Int4RowsLinear a (CpuLinear-wrapped) layer runs on, else None."""
    inner = layer.inner if isinstance(layer, CpuLinear) else layer
    return inner if isinstance(inner, Int4RowsLinear) else None


def int4_params(layer: nn.Module | None) -> list[torch.Tensor] | None:
    """[packed, scale, low] of a bias-free row-kernel int4 layer, else None."""
    rows = None if layer is None else _rows(layer)
    return None if rows is None or rows.bias is not None else [rows.weight, rows.scale, rows.low]


def int4_step_reason(lean: LeanForward) -> str | None:
    """Why `lean`'s model cannot decode through Int4Step (None: it can)."""
    model, core = lean.model, lean.core
    if getattr(model.config, "hidden_act", None) != "silu":
        return "an activation other than SiLU"
    if lean.head_dim % 8 or core.embed_tokens.weight.dtype != torch.bfloat16:
        return "head dim not a multiple of 8, or a cache not in bf16"
    if int4_params(model.get_output_embeddings()) is None:
        return "an lm_head that is not int4 on the row kernel"
    for i, layer in enumerate(core.layers):
        qkv, gate_up = lean.qkv[i], lean.gate_up[i]
        fused = [f for f in (qkv, gate_up) if f is not None and isinstance(f.inner, Int4RowsLinear)]
        if len(fused) < 2 or gate_up.bias is not None:
            return f"layer {i}: q/k/v or gate/up not fused int4 on the row kernel"
        if int4_params(layer.self_attn.o_proj) is None or int4_params(layer.mlp.down_proj) is None:
            return f"layer {i}: o_proj or down_proj not bias-free int4 on the row kernel"
    return None


class Int4Step:
    """One C++ call per decode step of `lean`'s model (`int4_step_reason(lean)` must be None)."""

    def __init__(self, lean: LeanForward) -> None:
        self.lean = lean
        f32 = lambda t: t.detach().float().contiguous()  # noqa: E731
        params: list[torch.Tensor] = []
        for i, layer in enumerate(lean.core.layers):
            qkv, gate_up = lean.qkv[i], lean.gate_up[i]
            qkv_bias = torch.empty(0) if qkv.bias is None else f32(qkv.bias)
            params += [f32(layer.input_layernorm.weight), *int4_params(qkv.inner), qkv_bias]
            params += int4_params(layer.self_attn.o_proj)
            params += [f32(layer.post_attention_layernorm.weight), *int4_params(gate_up.inner)]
            params += int4_params(layer.mlp.down_proj)
        self.layer_params = params
        self.final_norm = f32(lean.core.norm.weight)
        self.eps = float(lean.core.norm.variance_epsilon)

    def __call__(self, ids: torch.Tensor, cache: LeanCache, keep: int) -> torch.Tensor:
        """(1, T) new ids after cache.length cached positions -> (1, keep, V) logits."""
        lean, new, start = self.lean, ids.shape[1], cache.length
        cache.reserve(start + new)
        x = lean.core.embed_tokens(ids)[0].float()  # (T, hidden)
        positions = torch.arange(start, start + new)[None]  # (1, T)
        cos, sin = (t[0].contiguous() for t in lean.core.rotary_emb(x[None], positions))  # (T, D)
        head = int4_params(lean.model.get_output_embeddings())
        logits = torch.ops.specbench.int4_decode(
            x, cos, sin, [*self.layer_params, self.final_norm, *head], cache.keys,
            cache.values, start, lean.heads, lean.kv_heads, self.eps, lean.scaling, keep,
        )  # fmt: skip
        cache.length = start + new
        return logits[None].to(lean.core.embed_tokens.weight.dtype)  # (1, keep, V)
