"""oneDNN-packed bf16 weights (specbench.kernels.PackedLinear): the same products, chosen only
where oneDNN has native bf16 and no other CPU kernel is asked for."""

import pandas as pd
import pytest
import torch
from torch import nn

from specbench import SamplingParams, autoregressive_generate
from specbench.config import BackendConfig, ModelConfig, TinySpec
from specbench.kernels import PackedLinear, can_pack
from specbench.models import load_model
from specbench.tiny import byte_tokenizer

NATIVE_BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
needs_bf16 = pytest.mark.skipif(not NATIVE_BF16, reason="oneDNN has no native bf16 on this CPU")
TINY = ModelConfig(name="t", loader="tiny", tiny=TinySpec(family="qwen2", seed=0))
BF16 = BackendConfig(name="cpu_bf16", dtype="bfloat16")


@needs_bf16
@pytest.mark.parametrize("rows", [1, 5, 40])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_gives_f_linear_products(rows, bias):
    """Every width, with and without a bias: the packed layer's output is F.linear's."""
    torch.manual_seed(0)
    linear = nn.Linear(96, 160, bias=bias).to(torch.bfloat16)
    x = torch.randn(1, rows, 96, dtype=torch.bfloat16)  # (1, T, in)
    packed = PackedLinear(linear.weight, linear.bias)
    assert (packed.in_features, packed.out_features) == (96, 160)
    torch.testing.assert_close(packed(x), linear(x), rtol=0, atol=0)


@needs_bf16
@pytest.mark.parametrize("bias", [True, False])
def test_padded_one_row_call_is_a_row_of_a_wider_call(bias):
    """pad_one_row: a one-row call gives bitwise row 0 of F.linear on PAD_ROWS rows, and every
    other width runs unchanged."""
    from specbench.kernels import PAD_ROWS

    torch.manual_seed(0)
    linear = nn.Linear(96, 160, bias=bias).to(torch.bfloat16)
    packed = PackedLinear(linear.weight, linear.bias, pad_one_row=True)
    x = torch.randn(1, 1, 96, dtype=torch.bfloat16)  # (1, 1, in)
    wide = torch.cat([x[0], torch.zeros(PAD_ROWS - 1, 96, dtype=torch.bfloat16)])
    out = packed(x)
    assert out.shape == (1, 1, 160)
    torch.testing.assert_close(out[0], linear(wide)[:1], rtol=0, atol=0)
    x5 = torch.randn(1, 5, 96, dtype=torch.bfloat16)
    torch.testing.assert_close(packed(x5), linear(x5), rtol=0, atol=0)


@needs_bf16
def test_packed_model_decodes_the_same_greedy_tokens():
    """A bf16 model loaded with packed weights: every linear packed (a tied embedding kept),
    greedy tokens identical to the plain load."""
    ids = byte_tokenizer()("def add(a, b):\n    return", return_tensors="pt").input_ids
    plain = load_model(TINY, BackendConfig(name="cpu_bf16", dtype="bfloat16", pack_weights=False))
    packed = load_model(TINY, BF16)
    assert not any(isinstance(m, PackedLinear) for m in plain.modules())
    assert all(m.pad_one_row for m in packed.modules() if isinstance(m, PackedLinear))
    assert not any(type(m) is nn.Linear for m in packed.modules())
    assert packed.get_input_embeddings().weight.dtype == torch.bfloat16
    seen = []  # the lean forward, built before packing, runs the packed head
    packed.get_output_embeddings().register_forward_hook(lambda *args: seen.append(1))
    outs = []
    for model in (plain, packed):
        gen = torch.Generator().manual_seed(0)
        greedy = SamplingParams(temperature=0.0)
        res = autoregressive_generate(model, ids, max_new_tokens=24, sampling=greedy, generator=gen)
        outs.append(res.tokens)
    assert outs[0] == outs[1] and len(seen) == 24


@needs_bf16
def test_int4_model_prefills_on_packed_float_weights():
    """An int4 bf16 model loaded packed: every weight-only layer's prompt weight is packed (its
    plain copy dropped), q/k/v and gate/up still fused for decode, and prompt logits and greedy
    tokens equal to the plain load's."""
    from specbench.decoding.common import CachedLM
    from specbench.decoding.lean import lean_forward
    from specbench.quantize import WeightOnly

    int4 = ModelConfig(name="q", loader="tiny", quantize="int4",
                       tiny=TinySpec(family="qwen2", hidden=64, seed=0))  # fmt: skip
    ids = byte_tokenizer()("def add(a, b):\n    return a", return_tensors="pt").input_ids
    plain = load_model(int4, BackendConfig(name="cpu_bf16", dtype="bfloat16", pack_weights=False))
    packed = load_model(int4, BF16)
    layers = [m for m in packed.modules() if isinstance(m, WeightOnly) and m.prompt is not None]
    assert layers and all(m.dense.numel() == 0 for m in layers)
    assert all(part is not None for part in lean_forward(packed).qkv)
    prompt = [CachedLM(model).forward(ids, keep=ids.shape[1]) for model in (plain, packed)]
    torch.testing.assert_close(prompt[1], prompt[0], rtol=0, atol=0)
    outs = []
    for model in (plain, packed):
        greedy, gen = SamplingParams(temperature=0.0), torch.Generator().manual_seed(0)
        res = autoregressive_generate(model, ids, max_new_tokens=16, sampling=greedy, generator=gen)
        outs.append(res.tokens)
    assert outs[0] == outs[1]


def test_packing_only_where_asked_and_nothing_else_chosen():
    """Not in float32, not beside the row kernel, fp32 prompts or compile, not when off."""
    assert can_pack(BF16) == NATIVE_BF16
    assert not can_pack(BackendConfig(name="cpu"))
    assert not can_pack(BackendConfig(name="cpu_bf16", dtype="bfloat16", pack_weights=False))
    assert not can_pack(BackendConfig(name="cpu_bf16", dtype="bfloat16", prompt_fp32=True))
    avx2 = BackendConfig(name="cpu_avx2", dtype="bfloat16", rows_kernel=True, prompt_fp32=True)
    assert not can_pack(avx2)


def test_packed_rows_never_pair_with_unpacked_ones():
    """A speculative row with packed weights has no baseline among unpacked rows (older rows
    read as unpacked): pairing keys on `pack_weights`."""
    from specbench import stats

    common = {"job": "j", "prompt_id": "p", "repeat": 0, "seed": 1, "task": "t", "sampling": "s"}
    rows = [
        {**common, "method": "autoregressive", "paired_with": "", "k": 0, "pack_weights": False,
         "ms_per_token": 100.0},
        {**common, "method": "speculative", "paired_with": "autoregressive", "k": 4,
         "pack_weights": True, "ms_per_token": 50.0},
    ]  # fmt: skip
    assert stats.paired_runs(pd.DataFrame(rows)).empty
    rows[0]["pack_weights"] = True
    assert len(stats.paired_runs(pd.DataFrame(rows))) == 1
