"""The fixed-shape path (static KV cache, rollback by position; torch.compile on top of it)."""

import pandas as pd
import pytest
import torch
from conftest import run_cli

from specbench import SamplingParams, autoregressive_generate, speculative_generate
from specbench.decoding.common import CachedLM
from specbench.tiny import byte_tokenizer, perturbed_copy, tiny_model

GREEDY = SamplingParams(0.0)
N_NEW = 40


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def pair(request):
    target = tiny_model(request.param, seed=1, std=0.5)
    return target, perturbed_copy(target, noise=0.1, seed=2)


@pytest.fixture(scope="module")
def ids():
    return byte_tokenizer()("def add(a, b):\n", return_tensors="pt").input_ids


@pytest.mark.parametrize("k", [1, 3, 6])
def test_static_greedy_equals_dynamic_greedy(pair, ids, k):
    target, draft = pair
    common = dict(max_new_tokens=N_NEW, sampling=GREEDY, generator=None)
    ar = autoregressive_generate(target, ids, **common)
    ar_static = autoregressive_generate(target, ids, static_cache=True, **common)
    sps = speculative_generate(target, draft, ids, k=k, static_cache=True, **common)
    assert ar_static.tokens == ar.tokens == sps.tokens
    assert 0 < sum(sps.accepted) < sum(sps.proposed)  # rejections rolled the position back


def test_static_sampling_matches_dynamic_sampling(pair, ids):
    """Same generator seed, same stream: the static path draws the same tokens."""
    target, draft = pair
    params = SamplingParams(1.0, top_k=20)
    outs = [
        speculative_generate(
            target,
            draft,
            ids,
            k=4,
            max_new_tokens=N_NEW,
            sampling=params,
            generator=torch.Generator().manual_seed(7),
            static_cache=static,
        )
        for static in (False, True)
    ]
    assert outs[0].tokens == outs[1].tokens
    assert outs[0].accepted == outs[1].accepted


def test_static_rollback_matches_uncached_forward(pair, ids):
    """After a rollback, stale positions past the write point never leak into attention."""
    target, _ = pair
    lm = CachedLM(target, max_len=64)
    junk = torch.randint(0, 200, (1, 10))
    lm.forward(ids, keep=1)
    lm.forward(junk, keep=1)
    lm.rollback(10)
    tail = torch.tensor([[5, 6, 7]])
    cached = lm.forward(tail, keep=3)
    full = target(torch.cat([ids, tail], 1)).logits[:, -3:]
    torch.testing.assert_close(cached, full, atol=1e-4, rtol=1e-4)
    assert lm.length == ids.shape[1] + 3


def test_static_cache_overflow_and_compile_need_max_len(pair, ids):
    target, _ = pair
    with pytest.raises(ValueError, match="needs a static cache"):
        CachedLM(target, compile=True)
    lm = CachedLM(target, max_len=ids.shape[1])
    lm.forward(ids, keep=1)
    with pytest.raises(ValueError, match="is full"):
        lm.forward(ids[:, :1], keep=1)


def test_cli_static_cache_greedy_rows_match(tmp_path):
    """backend.static_cache=true through the harness: greedy SpS rows equal the AR rows."""
    out = run_cli(
        "+experiment=smoke", "sampling=greedy", "backend.static_cache=true",
        f"results_dir={tmp_path}", "bench.repeats=1",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    records = pd.read_parquet(next(tmp_path.rglob("records.parquet")))
    wide = records.pivot_table(
        index="prompt_id", columns="method", values="completion", aggfunc="first"
    )
    assert (wide.speculative == wide.autoregressive).all()
