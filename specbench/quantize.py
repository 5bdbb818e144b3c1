"""Weight-only int8 / int4 linear layers on torch's CPU kernels (gpt-fast's scheme).

A latency lever for the *draft*: speculative sampling stays exact whatever the draft is, so a
cheaper draft only moves acceptance and speed. Decode steps (<= DENSE_TOKENS tokens) use the
int kernels; a prompt's prefill uses the float weights, kept beside them (memory for latency),
or with `ModelConfig.prompt_int8` int8 weights and activations (`Int8Prompt`).
`ModelConfig.quantize` picks the mode; every `nn.Linear` (the lm_head included, untied from the
embedding) is swapped for one of these. int4 runs on specbench's own row kernel
(`Int4RowsLinear`) where it can (`int4_rows`): torch's is compute-bound on AVX2, and an all-int4
model's decode steps then run in one C++ call (specbench.decoding.int4_step).
"""

from __future__ import annotations

import torch
from torch import nn

from .config import QUANTIZE, BackendConfig, SpecBenchConfig
from .cpu_gemm import build_error, int4_linear, load_kernel, pack_nibbles

INT4_GROUP = 32  # default weights per (scale, zero) pair: the GGUF Q4_K grid's block size
# Calls with more tokens than this (a prompt's prefill) run on the float weights: the int kernels
# are batch-1 kernels, 2.5x slower than a bf16 GEMM at 1024 tokens (4.7x faster at one token).
DENSE_TOKENS = 8


class WeightOnly(nn.Module):
    """Base of the weight-only layers: decode steps on the int kernel (`_int_forward`), prefill
    on the original float weight (kept as `dense`), bias added after either."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.register_buffer("dense", linear.weight.detach())
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # A faster layer over the same float weight and bias for prompts, set by
        # kernels.pack_linears (which then drops `dense`); None: F.linear on `dense`.
        self.prompt: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).contiguous()  # [tokens, in]
        if flat.shape[0] > DENSE_TOKENS:
            if self.prompt is not None:
                return self.prompt(x)
            return nn.functional.linear(x, self.dense, self.bias)
        out = self._int_forward(flat).reshape(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias

    def _int_forward(self, flat: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def like(self, linear: nn.Linear) -> WeightOnly:
        """`linear` quantized the way this layer is (same class and settings)."""
        return type(self)(linear)


class Int8Linear(WeightOnly):
    """y = x @ (int8 weight * per-output-channel scale)^T + bias (aten._weight_int8pack_mm)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear)
        weight = linear.weight.detach().float()  # [out, in]
        scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127  # [out]
        quantized = torch.round(weight / scales[:, None]).clamp(-128, 127).to(torch.int8)
        self.register_buffer("weight", quantized)
        self.register_buffer("scales", scales.to(linear.weight.dtype))

    def _int_forward(self, flat: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(flat, self.weight, self.scales)  # [tokens, out]


class Int8Prompt(nn.Module):
    """A prompt-width linear on int8 weights and activations (W8A8: one scale per output
    channel, one per token; torch._int_mm, VNNI on x86): the GEMM 1.4-2.0x faster than packed
    bf16 at 109-600 rows on Zen 4, the draft's whole prefill 0.85-0.99x the time
    (results/draft_prompt_int8_zen4). Rounds the draft's activations, so drafts only
    (`ModelConfig.prompt_int8`): speculative output stays the target's law."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        w = weight.detach().float()  # (out, in)
        scales = w.abs().amax(dim=1).clamp(min=1e-8) / 127  # (out,)
        codes = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
        self.register_buffer("weight_t", codes.t().contiguous())  # (in, out) int8
        self.register_buffer("scales", scales)  # (out,) fp32
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1]).float()  # (T, in)
        x_scale = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127  # (T, 1)
        x_codes = torch.round(flat / x_scale).to(torch.int8)  # (T, in), |code| <= 127
        acc = torch._int_mm(x_codes, self.weight_t)  # (T, out) int32
        out = (acc.float() * x_scale * self.scales).to(x.dtype)  # (T, out)
        out = out.reshape(*x.shape[:-1], -1)
        return out if self.bias is None else out + self.bias


def int8_prompts(model: nn.Module) -> nn.Module:
    """Move every weight-only layer's float copy for prompts into an Int8Prompt (in place;
    before kernels.pack_linears, after the lean forward fused its projections)."""
    for module in model.modules():
        if isinstance(module, WeightOnly) and module.dense.numel():
            module.prompt = Int8Prompt(module.dense, module.bias)
            module.dense = module.dense.new_empty(0)
    return model


def int4_grid(weight: torch.Tensor, group: int = INT4_GROUP) -> tuple[torch.Tensor, ...]:
    """Group-wise asymmetric 4-bit codes of an (out, in) weight: w ~= (q - 8) * scale + zero
    -> codes (out, in) int32 in 0..15, scale and zero (out, in / group) in weight's dtype."""
    out_f, in_f = weight.shape
    grouped = weight.detach().float().reshape(out_f, in_f // group, group)
    low, high = grouped.amin(-1, keepdim=True), grouped.amax(-1, keepdim=True)
    scale = (high - low).clamp(min=1e-8) / 15  # [out, in/group, 1]
    codes = torch.round((grouped - low) / scale).clamp(0, 15).reshape(out_f, in_f)
    zero = low + 8 * scale
    return codes.to(torch.int32), scale[..., 0].to(weight.dtype), zero[..., 0].to(weight.dtype)


class Int4Linear(WeightOnly):
    """Group-wise asymmetric 4-bit weights, groups of `group` inputs (32, 64, 128 or 256;
    aten._weight_int4pack_mm_for_cpu); w ~= (q - 8) * scale + zero per group."""

    def __init__(self, linear: nn.Linear, group: int = INT4_GROUP) -> None:
        super().__init__(linear)
        self.group = group
        self.pack(*int4_grid(linear.weight, group))

    def like(self, linear: nn.Linear) -> Int4Linear:
        return type(self)(linear, self.group)

    def pack(self, codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> None:
        """Store the codes and their (scale, zero) pairs in the kernel's layout."""
        pairs = torch.stack([scale, zero], dim=-1).transpose(0, 1)  # [in/group, out, 2]
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        self.register_buffer("weight", packed)
        self.register_buffer("scales_and_zeros", pairs.contiguous())

    def _int_forward(self, flat: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(
            flat, self.weight, self.group, self.scales_and_zeros
        )  # [tokens, out]


class Int4RowsLinear(Int4Linear):
    """Int4Linear on specbench's AVX2 row kernel (`cpu_gemm.int4_linear`, backends with
    rows_kernel): the same codes, scales and zeros; activations rounded to int8 per group."""

    def pack(self, codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> None:
        load_kernel()
        scale32 = scale.float().contiguous()  # (out, in/group): w = q * scale + (zero - 8 scale)
        self.register_buffer("weight", pack_nibbles(codes))
        self.register_buffer("scale", scale32)
        self.register_buffer("low", (zero.float() - 8 * scale32).contiguous())

    def _int_forward(self, flat: torch.Tensor) -> torch.Tensor:
        return int4_linear(flat.float(), self.weight, self.scale, self.low).to(flat.dtype)


def int4_rows(backend: BackendConfig, group: int = INT4_GROUP) -> bool:
    """Whether int4 layers of `group` inputs per scale run on specbench's row kernel
    (`Int4RowsLinear`): backend.int4_kernel, "auto" meaning where that kernel runs and takes
    the group; rows_kernel implies it."""
    choice = "rows" if backend.rows_kernel else backend.int4_kernel
    if choice == "auto":
        return backend.device == "cpu" and group == INT4_GROUP and build_error() is None
    return choice == "rows"


def int4_kernel(job: SpecBenchConfig, uses_draft: bool = True) -> str:
    """The kernel a job's int4 layers run on ("rows" or "torch"); "" without int4 layers."""
    models = [job.target, job.draft] if uses_draft else [job.target]
    groups = [m.quantize_group for m in models if m.quantize == "int4"]
    if not groups:
        return ""
    return "rows" if int4_rows(job.backend, groups[0]) else "torch"


def quantizable(linear: nn.Linear, mode: str, group: int = INT4_GROUP) -> bool:
    """Whether the kernel takes this layer's shape (int4: whole input groups, outputs by 16)."""
    return mode == "int8" or (linear.in_features % group == 0 and linear.out_features % 16 == 0)


def quantize_linears(
    model: nn.Module, mode: str, rows_kernel: bool = False, group: int = INT4_GROUP
) -> nn.Module:
    """Swap every nn.Linear of a CPU model for its weight-only `mode` version, in place
    (a layer whose shape the int4 kernel does not take stays as it is); rows_kernel: int4 on
    specbench's AVX2 row kernel instead of torch's (groups of 32 only); group: int4 inputs per
    (scale, zero) pair."""
    if mode == "none":
        return model
    if mode not in QUANTIZE:
        raise ValueError(f"quantize must be one of {QUANTIZE}, got {mode!r}")
    if rows_kernel and mode == "int4" and group != INT4_GROUP:
        raise ValueError(f"the int4 row kernel takes groups of {INT4_GROUP}, got {group}")
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and quantizable(module, mode, group)
    ]
    for name, module in targets:
        if mode == "int8":
            model.set_submodule(name, Int8Linear(module))
        else:
            layer = Int4RowsLinear if rows_kernel else Int4Linear
            model.set_submodule(name, layer(module, group))
    return model
