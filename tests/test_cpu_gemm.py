"""specbench's row kernels (issue 23): AVX2 bf16 and int4, and the AVX-512-BF16 dot-product
one: exact enough, batch invariant, greedy-exact."""

import pandas as pd
import pytest
import torch
from conftest import run_cli

from specbench import SamplingParams, autoregressive_generate, speculative_generate
from specbench.config import BackendConfig, ConfigError, ModelConfig, TinySpec
from specbench.cpu_gemm import (
    bf16_dot_linear,
    bf16_linear,
    dot_unavailable,
    int4_linear,
    load_kernel,
    pack_nibbles,
    unavailable,
)
from specbench.kernels import PROMPT_ROWS, ROWS_MAX, CpuLinear, auto_choice, cpu_linears
from specbench.models import load_model
from specbench.quantize import DENSE_TOKENS, Int4Linear, Int4RowsLinear, quantize_linears
from specbench.tiny import byte_tokenizer, perturbed_copy, tiny_model

needs_kernel = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
needs_dot = pytest.mark.skipif(dot_unavailable() is not None, reason=str(dot_unavailable()))
GREEDY = SamplingParams(0.0)


@pytest.fixture(scope="module")
def kernel():
    load_kernel()


@needs_kernel
@pytest.mark.parametrize(("n", "k"), [(48, 64), (33, 40), (7, 21), (1, 8)])
def test_kernel_matches_an_fp32_gemm_and_is_batch_invariant(kernel, n, k):
    """Every row count 1..ROWS_MAX (register blocks of 1..12 rows, pairs and single weight
    rows, odd N, K tails): close to fp32 x @ w.T, and each row bitwise what it is alone."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(n, k, generator=gen).to(torch.bfloat16)
    x = torch.randn(ROWS_MAX, k, generator=gen)
    single = torch.cat([bf16_linear(x[i : i + 1], weight) for i in range(ROWS_MAX)])
    torch.testing.assert_close(single, x @ weight.float().T, rtol=1e-5, atol=1e-5)
    for m in range(1, ROWS_MAX + 1):
        assert torch.equal(bf16_linear(x[:m].contiguous(), weight), single[:m]), m


@needs_dot
@pytest.mark.parametrize(("n", "k"), [(48, 64), (34, 40), (7, 21), (1, 8)])
def test_dot_kernel_matches_a_float64_gemm_and_is_batch_invariant(kernel, n, k):
    """AVX-512-BF16: every row count 1..ROWS_MAX (blocks of 8 weight rows for one row of x, 3
    for more, single rows for the rest; K tails): bf16 products are exact, so only the fp32
    sums round; each row bitwise what it is alone."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(n, k, generator=gen).to(torch.bfloat16)
    x = torch.randn(ROWS_MAX, k, generator=gen).to(torch.bfloat16)
    single = torch.cat([bf16_dot_linear(x[i : i + 1], weight) for i in range(ROWS_MAX)])
    ref = x.double() @ weight.double().T
    torch.testing.assert_close(single.double(), ref, rtol=1e-5, atol=1e-5)
    for m in range(1, ROWS_MAX + 1):
        assert torch.equal(bf16_dot_linear(x[:m].contiguous(), weight), single[:m]), m
    with pytest.raises(RuntimeError, match="x: \\(M, K\\) bf16"):
        bf16_dot_linear(x.float(), weight)


@needs_dot
def test_cpu_linear_takes_the_dot_kernel_unless_torch_is_held_to_avx2(kernel, monkeypatch):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48).to(torch.bfloat16)
    assert CpuLinear(linear, prompt_fp32=False, rows_kernel=True).dot
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert "AVX2" in str(dot_unavailable())
    assert not CpuLinear(linear, prompt_fp32=False, rows_kernel=True).dot


@needs_kernel
def test_kernel_rejects_wrong_inputs(kernel):
    weight = torch.randn(8, 16).to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="disagree on K"):
        bf16_linear(torch.randn(2, 8), weight)
    with pytest.raises(RuntimeError, match="bf16"):
        bf16_linear(torch.randn(2, 16), weight.float())


@needs_kernel
@pytest.mark.parametrize("rows", [1, 5, ROWS_MAX, ROWS_MAX + 1])
def test_cpu_linear_by_width(kernel, rows):
    """<= ROWS_MAX rows through the kernel (bias added in fp32), more rows in fp32."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48).to(torch.bfloat16)
    x = torch.randn(1, rows, 64, dtype=torch.bfloat16)
    out = CpuLinear(linear, prompt_fp32=True, rows_kernel=True)(x)
    ref = torch.nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float())
    assert out.dtype == torch.bfloat16 and out.shape == (1, rows, 48)
    if rows > ROWS_MAX:
        assert rows > PROMPT_ROWS and torch.equal(out, ref.to(torch.bfloat16))
    else:
        torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)


@needs_kernel
def test_rows_kernel_greedy_speculative_equals_autoregressive(kernel):
    """A bf16 pair with the row kernel: speculative greedy == autoregressive greedy token for
    token (rejections roll back), and the wrapped model stays close to eager bf16."""
    target = tiny_model("qwen2", seed=1, std=0.5).to(torch.bfloat16)
    draft = perturbed_copy(target, noise=0.1, seed=2).to(torch.bfloat16)
    ids = byte_tokenizer()("def add(a, b):\n", return_tensors="pt").input_ids
    with torch.inference_mode():
        eager = target(ids).logits
    cpu_linears(target, prompt_fp32=True, rows_kernel=True)
    cpu_linears(draft, prompt_fp32=True, rows_kernel=True)
    assert sum(isinstance(m, CpuLinear) and m.rows_kernel for m in target.modules()) > 10
    with torch.inference_mode():
        torch.testing.assert_close(target(ids[:, :ROWS_MAX]).logits, eager, rtol=0.1, atol=0.1)
    common = dict(max_new_tokens=24, sampling=GREEDY, generator=None)
    ar = autoregressive_generate(target, ids, **common)
    for k in (2, 4):
        sps = speculative_generate(target, draft, ids, k=k, **common)
        assert sps.tokens == ar.tokens
        assert 0 < sum(sps.accepted) < sum(sps.proposed)


@needs_kernel
@pytest.mark.parametrize(("n", "k"), [(48, 64), (33, 96), (7, 32)])
def test_int4_kernel_matches_its_dequantized_weight_and_is_batch_invariant(kernel, n, k):
    """1..11 rows (pairs of weight rows up to 4, single rows and 8-row blocks after; odd N):
    close to fp32 x @ w.T with w = code * scale + low (x rounded to int8 per group of 32),
    and each row bitwise what it is alone."""
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (n, k), generator=gen)
    scale, low = torch.rand(n, k // 32, generator=gen), torch.randn(n, k // 32, generator=gen)
    weight = codes.reshape(n, k // 32, 32) * scale[..., None] + low[..., None]  # (n, G, 32)
    packed, x = pack_nibbles(codes), torch.randn(11, k, generator=gen)
    single = torch.cat([int4_linear(x[i : i + 1], packed, scale, low) for i in range(11)])
    ref = x @ weight.reshape(n, k).T
    assert (single - ref).norm() / ref.norm() < 0.01
    for m in range(1, 12):
        assert torch.equal(int4_linear(x[:m].contiguous(), packed, scale, low), single[:m]), m
    with pytest.raises(RuntimeError, match="32-input groups"):
        int4_linear(torch.randn(2, 48), packed, scale, low)
    with pytest.raises(RuntimeError, match="uint8"):
        int4_linear(x, codes.to(torch.int32), scale, low)


@needs_kernel
def test_int4_rows_layer_is_torchs_int4_layer_on_the_row_kernel(kernel):
    """Same codes, scales and zeros as Int4Linear: decode rows agree to the activations'
    int8 rounding, prompt rows run on the same float weight bit for bit."""
    torch.manual_seed(2)
    linear = torch.nn.Linear(128, 96).to(torch.bfloat16)
    ours, theirs = Int4RowsLinear(linear), Int4Linear(linear)
    step = torch.randn(1, DENSE_TOKENS, 128, dtype=torch.bfloat16)
    a, b = ours(step).float(), theirs(step).float()
    assert (a - b).norm() / b.norm() < 0.02
    prompt = torch.randn(1, DENSE_TOKENS + 1, 128, dtype=torch.bfloat16)
    assert torch.equal(ours(prompt), theirs(prompt))


@needs_kernel
def test_int4_draft_on_the_row_kernel_keeps_greedy_parity(kernel):
    """backend rows_kernel + quantize int4: the draft's linears are Int4RowsLinear, and
    greedy speculative sampling still emits the target's greedy tokens."""
    backend = BackendConfig(dtype="bfloat16", rows_kernel=True, prompt_fp32=True)
    cfg = ModelConfig(name="d", loader="tiny", tiny=TinySpec(hidden=64), quantize="int4")
    assert any(isinstance(m, Int4RowsLinear) for m in load_model(cfg, backend).modules())
    target = tiny_model("qwen2", seed=1, std=0.5).to(torch.bfloat16)
    draft = quantize_linears(perturbed_copy(target, noise=0.1, seed=2), "int4", rows_kernel=True)
    cpu_linears(target, prompt_fp32=True, rows_kernel=True)
    cpu_linears(draft, prompt_fp32=True, rows_kernel=True)
    ids = byte_tokenizer()("def add(a, b):\n", return_tensors="pt").input_ids
    common = dict(max_new_tokens=24, sampling=GREEDY, generator=None)
    ar = autoregressive_generate(target, ids, **common)
    sps = speculative_generate(target, draft, ids, k=4, **common)
    assert sps.tokens == ar.tokens and 0 < sum(sps.accepted) < sum(sps.proposed)


def test_backend_refuses_rows_kernel_with_compile_or_fp32():
    with pytest.raises(ConfigError, match="set one"):
        BackendConfig(dtype="bfloat16", rows_kernel=True, compile=True, static_cache=True)
    with pytest.raises(ConfigError, match="bfloat16"):
        BackendConfig(dtype="float32", rows_kernel=True)


def test_auto_choice(monkeypatch):
    from specbench import kernels

    assert auto_choice(1.1) == "eager"
    monkeypatch.setattr(kernels, "unavailable", lambda: None)
    assert auto_choice(3.5) == "rows_kernel"
    monkeypatch.setattr(kernels, "unavailable", lambda: "no avx2")
    assert auto_choice(3.5) == "compiled"


@needs_kernel
def test_cli_job_on_cpu_avx2_records_the_kernel(tmp_path):
    out = run_cli(
        "+experiment=smoke", "backend=cpu_avx2", "allow_dirty=true", f"results_dir={tmp_path}"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    records = pd.read_parquet(next(tmp_path.rglob("records.parquet")))
    assert records.rows_kernel.all() and records.prompt_fp32.all() and not records.compiled.any()


@needs_kernel
def test_cli_exactness_audit_on_cpu_avx2(tmp_path):
    """The exactness audit with the row kernel on the tiny bf16 pair: no method is biased."""
    out = run_cli(
        "+experiment=audit_tiny", "backend=cpu_avx2", "bench.num_prompts=1",
        f"results_dir={tmp_path}", timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    verdicts = pd.read_csv(tmp_path / "audit_tiny" / "audit_verdicts.csv")
    assert set(verdicts.method) == {"speculative", "hf_assisted", "autoregressive"}
    assert "biased" not in set(verdicts.verdict), verdicts.to_string()
