"""CPU kernels (issue 23): fp32 prompts, the compiled CPU decode path, and the calibration."""

import json
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from conftest import run_cli

from specbench import SamplingParams, autoregressive_generate, kernels, speculative_generate
from specbench.calibrate import Costs, alpha_tokens, expected_lengths, predict, verdict
from specbench.config_measure import ProfileConfig
from specbench.decoding.common import GenerationResult
from specbench.kernels import (
    AVX2_ENV,
    PROMPT_BLOCK,
    PROMPT_ROWS,
    CpuLinear,
    cpu_linears,
    fp32_linear,
)
from specbench.quantize import Int4Linear, WeightOnly, quantize_linears
from specbench.tiny import byte_tokenizer, perturbed_copy, tiny_model

GREEDY = SamplingParams(0.0)


@pytest.mark.parametrize("rows", [1, PROMPT_ROWS, PROMPT_ROWS + 1, 64])
def test_prompt_fp32_linear(rows):
    """Decode widths pass through unchanged; prompt widths equal an fp32 GEMM, cast back."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48).to(torch.bfloat16)
    x = torch.randn(1, rows, 64, dtype=torch.bfloat16)
    out = CpuLinear(linear)(x)
    assert out.dtype == torch.bfloat16
    if rows <= PROMPT_ROWS:
        assert torch.equal(out, linear(x))
    else:
        ref = torch.nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float())
        assert torch.equal(out, ref.to(torch.bfloat16))


def test_fp32_linear_upcasts_in_blocks_to_the_same_product():
    """More weight rows than one upcast block (and a partial last block): the blocked product
    equals one fp32 F.linear over the whole weight."""
    torch.manual_seed(0)
    rows = 2 * PROMPT_BLOCK + 7
    weight = torch.randn(rows, 96, dtype=torch.bfloat16)
    bias, x = torch.randn(rows, dtype=torch.bfloat16), torch.randn(20, 96)
    ref = torch.nn.functional.linear(x, weight.float(), bias.float())
    torch.testing.assert_close(fp32_linear(x, weight, bias), ref, rtol=1e-6, atol=1e-5)


def test_prompt_fp32_wraps_weight_only_layers_on_their_dense_weight():
    model = quantize_linears(tiny_model("qwen2", seed=3, hidden=64).to(torch.bfloat16), "int4")
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear | WeightOnly)]
    cpu_linears(model, prompt_fp32=True, rows_kernel=False)
    wrapped = [m for m in model.modules() if isinstance(m, CpuLinear)]
    assert [m.inner for m in wrapped] == layers
    int4 = next(m for m in wrapped if isinstance(m.inner, Int4Linear))
    assert int4.float_weight() is int4.inner.dense


def test_prompt_fp32_model_greedy_matches_fp32_model():
    """An fp32 model is untouched by the wrapper: greedy tokens are identical."""
    target = tiny_model("qwen2", seed=1, std=0.5)
    ids = byte_tokenizer()("def add(a, b):\n", return_tensors="pt").input_ids
    common = dict(max_new_tokens=16, sampling=GREEDY, generator=None)
    ref = autoregressive_generate(target, ids, **common)
    wrapped = cpu_linears(target, prompt_fp32=True, rows_kernel=False)
    assert autoregressive_generate(wrapped, ids, **common).tokens == ref.tokens


@pytest.mark.slow
def test_compiled_cpu_path_freezes_weights_and_keeps_greedy_tokens(tmp_path, monkeypatch):
    """backend.compile on CPU: inductor freezing + CPP GEMM templates capture every decode
    shape; fp32 greedy through the compiled calls is token-identical to eager, for AR and
    speculative sampling alike (a rejection rolls the static cache back)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    # The CPP template alone: the same kernels, without timing ATEN against it per GEMM shape
    # (5 s each, minutes in all for a test).
    monkeypatch.setitem(kernels.INDUCTOR_CPU, "max_autotune_gemm_backends", "CPP")
    target = tiny_model("qwen2", seed=1, std=0.5)
    draft = perturbed_copy(target, noise=0.1, seed=2)
    ids = byte_tokenizer()("def add(a, b):\n", return_tensors="pt").input_ids
    common = dict(max_new_tokens=12, sampling=GREEDY, generator=None)
    ref = autoregressive_generate(target, ids, **common)
    ar = autoregressive_generate(target, ids, compile=True, **common)
    sps = speculative_generate(target, draft, ids, k=2, compile=True, **common)
    assert ar.tokens == sps.tokens == ref.tokens
    assert 0 < sum(sps.accepted) < sum(sps.proposed)
    # A later generation (a new cache, another prompt length) reuses the graphs and reads its
    # own cache, not the one the graphs were compiled with.
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    longer = byte_tokenizer()("def sub(a, b, c):\n", return_tensors="pt").input_ids
    again = speculative_generate(target, draft, longer, k=2, compile=True, **common)
    assert again.tokens == autoregressive_generate(target, longer, **common).tokens
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # no recompiles
    code = "".join(p.read_text() for p in (tmp_path / "inductor").rglob("*.py"))
    assert "_frozen_param" in code  # weights became constants: freezing took effect


def costs(target_ms, draft_ms=2.0, prefill=(0.0, 0.0), alpha=0.8):
    return Costs(target_ms, draft_ms, *prefill, alpha)


def test_prediction_is_thm_3_8_without_prefill():
    """No prefill: the wall prediction is Thm 3.8's (1 - a^(K+1)) / ((1 - a)(K c + s))."""
    row = predict(costs({1: 10.0, 2: 11.0, 3: 12.0}), k=2, lengths=[100])
    expected = (1 - 0.8**3) / (1 - 0.8) / (2 * 0.2 + 1.2)
    assert row["scoring_cost"] == pytest.approx(1.2)
    assert row["predicted_speedup"] == pytest.approx(expected)
    assert row["decode_speedup"] == pytest.approx(expected)
    assert row["scoring_measured"]


def test_prediction_extrapolates_and_counts_prefill():
    c = costs({1: 10.0, 2: 12.0}, prefill=(500.0, 100.0))
    row = predict(c, k=3, lengths=[50])  # T(4) = 12 + 2 * 2: extrapolated
    assert not row["scoring_measured"] and row["scoring_cost"] == pytest.approx(1.6)
    per_loop = (1 - 0.8**4) / 0.2

    def ratio(n):
        return (500 + n * 10) / (600 + n / per_loop * (3 * 2 + 16))

    assert row["predicted_speedup"] == pytest.approx(ratio(50))
    assert row["predicted_speedup"] < row["decode_speedup"]  # prefill dilutes it
    # prompts of several lengths: the geometric mean of their ratios, as the runs report it,
    # below the ratio at their mean length (short completions are mostly prefill)
    spread = predict(c, k=3, lengths=[10, 90])["predicted_speedup"]
    assert spread == pytest.approx((ratio(10) * ratio(90)) ** 0.5) and spread < ratio(50)


def test_completions_that_stop_early_set_the_predicted_length():
    """A stopped alpha-run completion counts its own length; one cut at the run's length goes on
    at the run's per-token stop rate, up to the budget; with no stop seen, the whole budget."""
    stopped = GenerationResult(tokens=[1] * 20, wall_s=1.0, target_calls=5, stopped_by="eos")
    cut = GenerationResult(tokens=[1] * 48, wall_s=1.0, target_calls=12)
    assert expected_lengths([stopped], 128) == [20] and expected_lengths([cut], 128) == [128]
    rate = 1 / 68  # one stop in 20 + 48 tokens
    tail = (1 - (1 - rate) ** 80) / rate
    assert expected_lengths([stopped, cut], 128) == pytest.approx([20, 48 + tail])
    assert 48 < expected_lengths([stopped, cut], 128)[1] < 128


def test_alpha_run_covers_the_jobs_budget_unless_told():
    """Acceptance rises along a completion: by default alpha comes from the whole budget."""
    job = SimpleNamespace(profile=ProfileConfig(), max_new_tokens=128)
    assert alpha_tokens(job) == 128
    job.profile = ProfileConfig(alpha_tokens=48)
    assert alpha_tokens(job) == 48
    with pytest.raises(ValueError, match="alpha_tokens"):
        ProfileConfig(alpha_tokens=1)


def test_verdict_says_what_to_try_when_slower():
    rows = [predict(costs({1: 10.0, 5: 37.0}, draft_ms=2.5), k, [128]) for k in (4,)]
    text = verdict(rows, 4, "cpu_bf16")
    assert "SLOWER" in text and "3.7 target steps" in text and "backend=cpu_auto" in text
    fast = [predict(costs({1: 10.0, 5: 9.3}), 4, [128])]
    assert "SLOWER" not in verdict(fast, 4, "cpu_bf16")


def test_cli_calibrate_job_and_calibrated_timing_job(tmp_path):
    """+experiment=calibrate writes one row per K; bench.calibrate puts the forecast on rows."""
    tiny = ("model@target=tiny_target", "model@draft=tiny_draft", "task=toy", "backend=cpu")
    out = run_cli(
        "+experiment=calibrate", *tiny, "profile.max_k=3", "profile.alpha_tokens=8",
        "allow_dirty=true", f"results_dir={tmp_path}",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "calibration: predicted speedup" in out.stdout + out.stderr
    table = pd.read_parquet(next(tmp_path.rglob("calibration.parquet")))
    assert table.k.tolist() == [1, 2, 3, 4] and table.cpu_kind.notna().all()
    out = run_cli(
        "+experiment=smoke", "decoder.k=2", "bench.calibrate=true", "profile.max_k=3",
        f"results_dir={tmp_path}/timed",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    records = pd.read_parquet(next((tmp_path / "timed").rglob("records.parquet")))
    assert records.predicted_speedup.notna().all()
    summary = json.loads(next((tmp_path / "timed").rglob("summary.json")).read_text())
    assert summary["predicted_speedup"] > 0
    per_k = pd.read_parquet(tmp_path / "timed" / "smoke" / "calibration.parquet")  # gathered
    assert per_k.k.tolist() == [1, 2, 3] and per_k.job.notna().all()


def test_avx2_restriction_selects_torch_avx2_kernels():
    """benchmarks/cpu_kernels.py --avx2: the environment that holds torch to AVX2 kernels on
    any x86 CPU (so the AVX2 regime can be measured on an AVX-512 machine)."""
    import os
    import subprocess
    import sys

    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=os.environ | AVX2_ENV, capture_output=True, text=True
    )
    assert out.stdout.strip() == "AVX2", out.stderr


def test_calibration_costs_are_reused_for_the_same_machine_and_pair(tmp_path, monkeypatch):
    """profile.reuse: the second job with the same key reads the first one's costs."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    common = ("+experiment=smoke", "decoder.k=2", "bench.calibrate=true", "profile.max_k=2",
              "profile.reuse=true", "profile.alpha_tokens=4")  # fmt: skip
    for i in range(2):
        out = run_cli(*common, "bench.seed=0", f"results_dir={tmp_path}/r{i}")
        assert out.returncode == 0, out.stderr[-2000:]
    first, second = (
        json.loads(next((tmp_path / f"r{i}").rglob("summary.json")).read_text()) for i in (0, 1)
    )
    assert not first["calibration_reused"] and second["calibration_reused"]
    assert first["predicted_speedup"] == second["predicted_speedup"]
    assert first["draft_prefill_ms"] == second["draft_prefill_ms"] > 0
    assert (tmp_path / "cache" / "calibration.json").is_file()
