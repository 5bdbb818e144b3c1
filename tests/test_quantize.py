"""Weight-only int8 / int4 linears: close to the float layer, and a quantized draft keeps
speculative sampling exact (the draft only moves acceptance)."""

import numpy as np
import pytest
import torch
from stats_helpers import chi2_pvalue
from test_exactness import PROMPT, M, V, exact_joint

from specbench import SamplingParams, autoregressive_generate, speculative_generate
from specbench.config import BackendConfig, ConfigError, ModelConfig, SpecBenchConfig, TinySpec
from specbench.decoding.lean import LeanForward
from specbench.models import load_model
from specbench.quantize import (
    DENSE_TOKENS,
    Int4Linear,
    Int8Linear,
    Int8Prompt,
    int4_grid,
    quantizable,
    quantize_linears,
)
from specbench.tiny import perturbed_copy, tiny_model


@pytest.mark.parametrize("layer", [Int8Linear, Int4Linear])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantized_linear_is_close_to_the_float_layer(layer, dtype):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 96, bias=True).to(dtype)
    x = torch.randn(2, 3, 64, dtype=dtype)  # [batch, seq, in]
    out = layer(linear)(x)
    ref = linear(x)
    assert out.shape == ref.shape == (2, 3, 96) and out.dtype == dtype
    relative = (out.float() - ref.float()).norm() / ref.float().norm()
    assert relative < (0.02 if layer is Int8Linear else 0.15)


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_quantize_linears_swaps_every_linear_and_keeps_the_logits(mode):
    model = tiny_model("qwen2", seed=3, hidden=64, std=0.1)
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.no_grad():
        ref = model(ids).logits
        quantize_linears(model, mode)
        out = model(ids).logits
    left = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert not any(quantizable(m, mode) for m in left)
    assert len(left) <= 1  # int4 keeps only the 259-way lm_head (outputs not a multiple of 16)
    correlation = torch.corrcoef(torch.stack([out.ravel(), ref.ravel()]))[0, 1]
    assert correlation > (0.99 if mode == "int8" else 0.95)


def joint_counts(target: torch.nn.Module, draft: torch.nn.Module, seed: int) -> np.ndarray:
    """(V**M,) counts of 1200 speculative continuations (T = 1, K = 2) of PROMPT."""
    params, gen = SamplingParams(1.0), torch.Generator().manual_seed(seed)
    counts = np.zeros(V**M)
    for _ in range(1200):
        res = speculative_generate(
            target, draft, PROMPT, k=2, max_new_tokens=M, sampling=params, generator=gen
        )
        counts[np.ravel_multi_index(res.tokens[:M], [V] * M)] += 1
    return counts


def test_int8_draft_keeps_the_target_law():
    target = tiny_model("qwen2", vocab=V, seed=1, std=0.2)
    draft = quantize_linears(perturbed_copy(target, noise=0.2, seed=2), "int8")
    counts = joint_counts(target, draft, seed=99)
    assert chi2_pvalue(counts, exact_joint(target, SamplingParams(1.0))) > 0.01


def greedy_parity(target: torch.nn.Module, draft: torch.nn.Module) -> bool:
    """Greedy speculative (K = 4) emits the target's greedy tokens, 24 of them (float32)."""
    prompt, greedy = torch.tensor([[10, 20, 30, 40]]), SamplingParams(0.0)
    spec = speculative_generate(
        target, draft, prompt, k=4, max_new_tokens=24, sampling=greedy, generator=None
    )
    plain = autoregressive_generate(
        target, prompt, max_new_tokens=24, sampling=greedy, generator=None
    )
    return spec.tokens == plain.tokens


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_quantized_draft_greedy_equals_target_greedy(mode):
    target = tiny_model("qwen2", seed=4)
    assert greedy_parity(target, quantize_linears(perturbed_copy(target, noise=0.3, seed=5), mode))


def test_quantize_is_a_model_config_knob():
    cfg = ModelConfig(name="d", loader="tiny", tiny=TinySpec(hidden=32), quantize="int4")
    model = load_model(cfg, BackendConfig())
    assert any(isinstance(m, Int4Linear) for m in model.modules())
    with pytest.raises(ConfigError, match="quantize must be one of"):
        ModelConfig(name="d", loader="tiny", quantize="int3")


@pytest.mark.parametrize("layer", [Int8Linear, Int4Linear])
def test_prefill_runs_on_the_float_weights_and_decode_on_the_int_kernel(layer):
    torch.manual_seed(1)
    linear = torch.nn.Linear(64, 96).to(torch.bfloat16)
    quantized = layer(linear)
    prefill = torch.randn(1, DENSE_TOKENS + 1, 64, dtype=torch.bfloat16)
    assert torch.equal(quantized(prefill), linear(prefill))  # the float path, bit for bit
    step = prefill[:, :DENSE_TOKENS]
    assert not torch.equal(quantized(step), linear(step))  # the int kernel: close, not equal


@pytest.mark.parametrize("group", [32, 64, 128])
def test_int4_group_size_matches_a_dequantized_reference(group):
    torch.manual_seed(2)
    linear = torch.nn.Linear(256, 64, bias=False).to(torch.bfloat16)
    layer = Int4Linear(linear, group)
    codes, scale, zero = int4_grid(linear.weight, group)  # scale, zero: (64, 256 / group)
    weight = (codes.float() - 8) * scale.float().repeat_interleave(group, 1)
    weight += zero.float().repeat_interleave(group, 1)  # the weight the kernel multiplies by
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    ref = x.float() @ weight.T
    assert layer.scales_and_zeros.shape == (256 // group, 64, 2)
    assert torch.allclose(layer(x).float(), ref, rtol=0.02, atol=0.05)


def test_fused_projections_keep_the_group_size():
    model = tiny_model("qwen2", seed=6, hidden=128, std=0.1).to(torch.bfloat16)
    quantize_linears(model, "int4", group=128)
    lean = LeanForward(model)
    fused = [f.inner for f in lean.qkv + lean.gate_up]
    assert fused and all(isinstance(f, Int4Linear) and f.group == 128 for f in fused)


def test_quantize_group_is_a_model_config_knob():
    cfg = ModelConfig(
        name="d", loader="tiny", tiny=TinySpec(hidden=128), quantize="int4", quantize_group=128
    )
    model = load_model(cfg, BackendConfig())
    assert {m.group for m in model.modules() if isinstance(m, Int4Linear)} == {128}
    with pytest.raises(ConfigError, match="quantize_group must be one of"):
        ModelConfig(name="d", loader="tiny", quantize="int4", quantize_group=48)
    with pytest.raises(ValueError, match="row kernel takes groups of 32"):
        quantize_linears(tiny_model("qwen2", hidden=128), "int4", rows_kernel=True, group=128)


def test_int8_prompt_layer_is_close_to_the_float_layer():
    torch.manual_seed(3)
    linear = torch.nn.Linear(64, 96, bias=True).to(torch.bfloat16)
    x = torch.randn(1, 40, 64, dtype=torch.bfloat16)  # (batch, prompt tokens, in)
    out, ref = Int8Prompt(linear.weight, linear.bias)(x), linear(x)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16
    assert (out.float() - ref.float()).norm() / ref.float().norm() < 0.02


def test_prompt_int8_moves_prefill_to_int8_and_leaves_decode_and_the_law():
    tiny = TinySpec(family="qwen2", hidden=64, seed=7)
    backend = BackendConfig(dtype="float32")
    target = load_model(ModelConfig(name="t", loader="tiny", tiny=tiny), backend)
    cfg = ModelConfig(name="d", loader="tiny", tiny=tiny, quantize="int8", prompt_int8=True)
    draft = load_model(cfg, backend)
    layers = [m for m in draft.modules() if isinstance(m, Int8Linear)]
    assert layers and all(isinstance(m.prompt, Int8Prompt) and not m.dense.numel() for m in layers)
    ids = torch.randint(0, 200, (1, DENSE_TOKENS + 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = torch.stack([draft(ids).logits.ravel(), target(ids).logits.ravel()])
    assert torch.corrcoef(logits)[0, 1] > 0.99  # the same weights, int8-rounded
    assert greedy_parity(target, draft)  # the draft only moves acceptance


def test_prompt_int8_is_refused_on_the_target_and_without_quantize():
    with pytest.raises(ConfigError, match="set quantize=int4"):
        ModelConfig(name="d", loader="tiny", prompt_int8=True)
    with pytest.raises(ConfigError, match="target.prompt_int8"):
        SpecBenchConfig(
            target=ModelConfig(name="t", loader="tiny", quantize="int4", prompt_int8=True),
            draft=ModelConfig(name="d", loader="tiny"),
        )
