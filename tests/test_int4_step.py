"""An all-int4 model's decode steps in one C++ call (specbench.decoding.int4_step)."""

import pytest
import torch

from specbench import SamplingParams, autoregressive_generate, speculative_generate
from specbench.config import BackendConfig, ConfigError
from specbench.cpu_gemm import build_error, int4_linear, load_kernel, unavailable
from specbench.decoding.common import CachedLM
from specbench.decoding.int4_step import int4_params
from specbench.decoding.lean import lean_forward
from specbench.quantize import int4_rows, quantize_linears
from specbench.tiny import byte_tokenizer, perturbed_copy, tiny_model

needs_kernel = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
VOCAB = 272  # a multiple of 16: the lm_head is int4 too


def int4_model(seed: int = 0, rows: bool = True, std: float = 0.02) -> torch.nn.Module:
    """A tiny qwen2 with every linear int4; a small init std keeps it far from chaotic, so
    rounding differences stay rounding-sized."""
    model = tiny_model("qwen2", vocab=VOCAB, hidden=64, seed=seed, std=std).to(torch.bfloat16)
    return quantize_linears(model, "int4", rows_kernel=rows)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def reference_step(lean, ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
    """The C++ step in torch ops: fp32 activations, keys and values cached in bf16."""
    core, new, start = lean.core, ids.shape[1], cache.length
    heads, kv_heads, dim = lean.heads, lean.kv_heads, lean.head_dim
    x = core.embed_tokens(ids)[0].float()  # (T, hidden)
    cos, sin = (
        t[0, :, None] for t in core.rotary_emb(x[None], torch.arange(start, start + new)[None])
    )

    def norm(v, module):
        return (
            v
            * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
            * module.weight.float()
        )

    def linear(v, layer):
        return int4_linear(v.contiguous(), *int4_params(layer))

    def rotate(t):  # (T, heads, D)
        half = dim // 2
        return t * cos + torch.cat((-t[..., half:], t[..., :half]), -1) * sin

    cache.reserve(start + new)
    for i, layer in enumerate(core.layers):
        qkv = (
            int4_linear(norm(x, layer.input_layernorm), *int4_params(lean.qkv[i].inner))
            + lean.qkv[i].bias.float()
        )
        q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
        q, k = rotate(q.view(new, heads, dim)), rotate(k.view(new, kv_heads, dim))
        cache.keys[i][0, :, start : start + new] = k.transpose(0, 1).to(torch.bfloat16)
        cache.values[i][0, :, start : start + new] = (
            v.view(new, kv_heads, dim).transpose(0, 1).to(torch.bfloat16)
        )
        keys, values = (c[i][0, :, : start + new].float() for c in (cache.keys, cache.values))
        out = torch.empty(new, heads, dim)
        for t in range(new):
            for h in range(heads):
                g, seen = h // (heads // kv_heads), start + t + 1
                scores = keys[g, :seen] @ q[t, h] * lean.scaling
                out[t, h] = torch.softmax(scores, -1) @ values[g, :seen]
        x = x + linear(out.reshape(new, -1), layer.self_attn.o_proj)
        gate, up = int4_linear(
            norm(x, layer.post_attention_layernorm), *int4_params(lean.gate_up[i].inner)
        ).chunk(2, -1)
        x = x + linear(torch.nn.functional.silu(gate) * up, layer.mlp.down_proj)
    cache.length = start + new
    return linear(norm(x[-keep:], core.norm), lean.model.get_output_embeddings())[None]


@needs_kernel
def test_step_matches_a_reference_and_the_python_lean_path():
    """Widths 1, 2 and 5 after a prompt: logits and the cached keys agree with the same math in
    torch ops (to the returned logits' bf16 rounding), and with the lean path to its bf16
    rounding of every activation; the cache length moves alike."""
    load_kernel()
    model = int4_model()
    lean = lean_forward(model)
    assert lean.step is not None
    step = lean.step
    ids = torch.randint(0, 256, (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        lm = CachedLM(model, None)
        lm.forward(ids[:, :12], keep=1)
        for width in (1, 2, 5):
            new = ids[:, 12 : 12 + width]
            reference = reference_step(lean, new, lm.cache, width)
            reference_keys = [k[:, :, : lm.cache.length].clone() for k in lm.cache.keys]
            lm.cache.length -= width
            lean.step = None
            python = lm.forward(new, keep=width)
            lm.rollback(width)
            lean.step = step
            fused = lm.forward(new, keep=width)
            assert fused.shape == python.shape == (1, width, VOCAB) and lm.length == 12 + width
            assert relative_error(fused, reference) < 0.005, width
            assert relative_error(fused, python) < 0.05, width
            for ours, theirs in zip(lm.cache.keys, reference_keys, strict=True):
                assert relative_error(ours[:, :, : lm.length], theirs) < 1e-3
            lm.rollback(width)


@needs_kernel
def test_greedy_speculative_with_an_int4_step_draft_is_the_targets_greedy():
    load_kernel()
    target = tiny_model("qwen2", vocab=VOCAB, hidden=64, seed=1).to(torch.bfloat16)
    draft = perturbed_copy(target, noise=0.1, seed=2).to(torch.bfloat16)
    draft = quantize_linears(draft, "int4", rows_kernel=True)
    assert lean_forward(draft).step is not None
    ids = byte_tokenizer()("def add(a, b):\n", return_tensors="pt").input_ids
    common = dict(max_new_tokens=24, sampling=SamplingParams(0.0), generator=None)
    ar = autoregressive_generate(target, ids, **common)
    sps = speculative_generate(target, draft, ids, k=4, **common)
    assert sps.tokens == ar.tokens and 0 < sum(sps.accepted) < sum(sps.proposed)


@needs_kernel
def test_models_the_step_cannot_run_keep_the_python_path():
    load_kernel()
    assert lean_forward(int4_model(rows=False)).step is None  # torch's int4 layout
    float_head = tiny_model("qwen2", hidden=64).to(torch.bfloat16)  # 259 outputs: not int4
    assert lean_forward(quantize_linears(float_head, "int4", rows_kernel=True)).step is None


def test_int4_kernel_choice():
    assert int4_rows(BackendConfig()) == (build_error() is None)
    assert int4_rows(BackendConfig(), group=128) is False  # the row kernel takes groups of 32
    assert int4_rows(BackendConfig(int4_kernel="torch")) is False
    assert int4_rows(BackendConfig(int4_kernel="rows")) is True
    with pytest.raises(ConfigError, match="int4_kernel must be one of"):
        BackendConfig(int4_kernel="fast")
    with pytest.raises(ConfigError, match="rows_kernel runs int4 layers"):
        BackendConfig(dtype="bfloat16", rows_kernel=True, int4_kernel="torch")


def test_auto_falls_back_to_torchs_int4_where_the_kernels_do_not_build(monkeypatch):
    monkeypatch.setattr("specbench.quantize.build_error", lambda: "no C++ compiler")
    assert int4_rows(BackendConfig()) is False
    assert int4_rows(BackendConfig(int4_kernel="rows")) is True  # asked for: loading says why
