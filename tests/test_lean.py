"""The lean decode path (specbench.decoding.lean): parity with transformers' forward."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from specbench.config import BackendConfig, ModelConfig, TinySpec
from specbench.cpu_gemm import unavailable
from specbench.decoding.common import CachedLM
from specbench.decoding.lean import (
    FusedWeightOnly,
    LeanCache,
    disable_lean,
    lean_forward,
    lean_reason,
    small_attention,
)
from specbench.decoding.lean import fused as fused_layer
from specbench.kernels import cpu_linears
from specbench.models import load_model
from specbench.quantize import DENSE_TOKENS, quantize_linears
from specbench.tiny import byte_tokenizer, tiny_model

IDS = byte_tokenizer()("def add(a, b):\n    return", return_tensors="pt").input_ids


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_lean_logits_match_transformers_through_steps_and_rollbacks(family):
    """Prefill, one-token steps, a multi-token call and a rollback: every call's logits are
    transformers' logits of the whole sequence at those positions (float32, to rounding)."""
    model = tiny_model(family, seed=3, layers=3)
    lm = CachedLM(model)
    assert lm.lean is not None and isinstance(lm.cache, LeanCache)
    seq = IDS[0].tolist()
    cached: list[int] = []  # what the cache holds, mirrored
    calls = [(seq[:9], 2), (seq[9:10], 1), (seq[10:14], 4), (3, 0), (seq[14:18], 2)]
    with torch.inference_mode():
        for new, keep in calls:
            if isinstance(new, int):  # a rollback of `new` positions
                lm.rollback(new)
                cached = cached[:-new]
                continue
            got = lm.forward(torch.tensor([new]), keep=keep)
            cached += new
            want = model(torch.tensor([cached])).logits[:, -keep:]
            assert lm.length == len(cached)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_lean_cache_grows_and_keeps_what_it_held():
    """Past its capacity the cache doubles; cached positions survive the move."""
    cache = LeanCache()
    first = torch.randn(1, 2, 10, 4)
    cache.write(0, first, first)
    cache.length = 10
    more = torch.randn(1, 2, 300, 4)
    keys, values = cache.write(0, more, -more)
    assert cache.keys[0].shape[2] >= 310 and keys.shape == (1, 2, 310, 4)
    assert torch.equal(keys[:, :, :10], first) and torch.equal(values[:, :, 10:], -more)


@pytest.mark.parametrize("rows_kernel", [False, True])
def test_fused_int4_projections_match_the_separate_layers(rows_kernel):
    """q/k/v as one int4 matmul: the same outputs as the three int4 layers at decode widths;
    a prompt-width call goes through the separate layers' float weights. Layers wrapped in a
    CpuLinear (backend cpu_avx2: the int4 row kernel, fp32 prompts) fuse the same way."""
    if rows_kernel and unavailable() is not None:
        pytest.skip(str(unavailable()))
    model = quantize_linears(tiny_model("qwen2", seed=1, hidden=64), "int4", rows_kernel)
    model = cpu_linears(model, prompt_fp32=rows_kernel, rows_kernel=rows_kernel)
    attn = model.model.layers[0].self_attn
    fused = fused_layer([attn.q_proj, attn.k_proj, attn.v_proj])
    assert isinstance(fused, FusedWeightOnly)
    for tokens in (1, 3, DENSE_TOKENS + 1):
        x = torch.randn(1, tokens, 64)
        for got, layer in zip(fused(x), (attn.q_proj, attn.k_proj, attn.v_proj), strict=True):
            torch.testing.assert_close(got, layer(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask", [None, "causal", "additive"])
def test_small_attention_is_sdpa(mask):
    """Decode widths: grouped query heads against their kv head, as SDPA computes it, for one
    token, a causal block of new tokens and a token tree's additive mask."""
    gen = torch.Generator().manual_seed(0)
    new, length = (1, 11) if mask is None else (4, 11)
    q = torch.randn(1, 6, new, 8, generator=gen).bfloat16()
    keys, values = (torch.randn(1, 2, length, 8, generator=gen).bfloat16() for _ in range(2))
    attend = torch.ones(new, length, dtype=torch.bool).tril(diagonal=length - new)
    if mask == "additive":
        attend[2, 8] = False  # a tree: query 2 does not see new token 1
    masks = {None: None, "causal": attend, "additive": torch.zeros(1, 1, new, length)}
    if mask == "additive":
        masks["additive"].masked_fill_(~attend, float("-inf"))
    got = small_attention(q, keys, values, 0.3, masks[mask])
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float(), keys.float(), values.float(), masks[mask], scale=0.3, enable_gqa=True
    )
    torch.testing.assert_close(got, want.bfloat16())


def test_int4_draft_greedy_decode_equals_transformers_path():
    """An int4 tiny model (fused projections) decodes greedily the same tokens on both paths."""
    model = quantize_linears(tiny_model("llama", seed=2, hidden=64), "int4")
    outs = []
    with torch.inference_mode():
        for lean in (True, False):
            lm, ids, tokens = CachedLM(model, lean=lean), IDS, []
            for _ in range(16):
                ids = lm.forward(ids, keep=1)[:, -1].argmax(-1, keepdim=True)
                tokens.append(int(ids))
            outs.append(tokens)
    assert outs[0] == outs[1]


def test_lean_is_off_where_it_cannot_or_must_not_run():
    """Other architectures, a static cache and backend.lean_decode=false keep transformers'."""
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=259)).eval()
    assert "model_type 'gpt2'" in lean_reason(gpt2)
    assert lean_forward(gpt2) is None and CachedLM(gpt2).lean is None
    model = tiny_model("qwen2", seed=0)
    assert CachedLM(model, max_len=64).lean is None
    assert CachedLM(disable_lean(model)).lean is None
    cfg = ModelConfig(name="t", loader="tiny", tiny=TinySpec(family="qwen2", seed=0))
    off = load_model(cfg, BackendConfig(lean_decode=False))
    on = load_model(cfg, BackendConfig())
    assert CachedLM(off).lean is None and CachedLM(on).lean is not None
