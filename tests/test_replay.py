"""Acceptance-trace replay and random-weight shape models."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from specbench.config import ConfigError
from specbench.decoding import StopCondition, speculative_generate
from specbench.decoding.replay import Replay, ReplayConfig, ReplayError, Step, load_trace
from specbench.models import ModelPool
from specbench.runner import run
from specbench.sampling import SamplingParams
from specbench.shapes import parameter_count, shape_model
from specbench.tiny import byte_tokenizer, perturbed_copy, tiny_model

T1 = SamplingParams(temperature=1.0)
SMALL = {
    "num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 300,
    "num_attention_heads": 4, "num_key_value_heads": 2,
}  # fmt: skip


def count_forwards(model: torch.nn.Module) -> list[int]:
    """A counter of the model's forward calls, kept by a hook on its input embedding (run once
    per forward by transformers' path and the lean one alike), not by CachedLM."""
    calls = [0]
    embed = model.get_input_embeddings()
    embed.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.fixture(scope="module")
def recording():
    """A real speculative run on a tiny pair (with an EOS stop, so it may end early)."""
    target = tiny_model("qwen2", seed=1)
    draft = perturbed_copy(target, noise=0.3, seed=2)
    ids = byte_tokenizer()("def add(a, b):", return_tensors="pt").input_ids
    runs = {}
    for seed, stop in ((11, None), (12, StopCondition(eos_token_ids=(257,)))):
        gen = torch.Generator().manual_seed(seed)
        res = speculative_generate(
            target, draft, ids, k=4, max_new_tokens=40, sampling=T1, generator=gen, stop=stop
        )
        runs[seed] = res
    return ids, runs


@pytest.mark.parametrize("seed", [11, 12])
def test_replay_makes_exactly_the_recorded_draft_and_target_calls(recording, seed):
    ids, runs = recording
    rec = runs[seed]
    steps = [Step(k, a) for k, a in zip(rec.proposed, rec.accepted, strict=True)]
    replay = Replay({("p", 0): steps}, {seed: ("p", 0)})
    # another pair entirely: random Llama shapes of different sizes
    target = shape_model("llama_68m", overrides=SMALL | {"num_hidden_layers": 2}, seed=3)
    draft = shape_model("llama_68m", overrides=SMALL, seed=4)
    target_calls, draft_calls = count_forwards(target), count_forwards(draft)
    out = replay.generate(
        target, draft, ids, k=4, max_new_tokens=40, sampling=T1,
        generator=torch.Generator().manual_seed(seed), vocab_size=259,
    )  # fmt: skip
    assert out.accepted == rec.accepted and out.proposed == rec.proposed
    assert (out.target_calls, out.draft_calls) == (rec.target_calls, rec.draft_calls)
    assert (target_calls[0], draft_calls[0]) == (rec.target_calls, rec.draft_calls)
    assert out.num_tokens == sum(a + 1 for a in rec.accepted) >= rec.num_tokens


def test_replay_refuses_a_loop_that_drafts_more_than_recorded(recording):
    ids, runs = recording
    rec = runs[11]
    steps = [Step(k, a) for k, a in zip(rec.proposed, rec.accepted, strict=True)]
    target = tiny_model("llama", seed=1)
    with pytest.raises(ReplayError, match="the trace 4"):
        Replay({("p", 0): steps}, {11: ("p", 0)}).generate(
            target, target, ids, k=6, max_new_tokens=40, sampling=T1,
            generator=torch.Generator().manual_seed(11),
        )  # fmt: skip
    with pytest.raises(ReplayError, match="no recorded run"):
        Replay({("p", 0): steps}, {}).steps_for(torch.Generator().manual_seed(11))


def test_load_trace_picks_one_job_and_checks_k(tmp_path):
    rows = [
        {"job": job, "method": "speculative", "prompt_id": "a", "repeat": 0, "iteration": i,
         "k": k, "accepted": i % 2}
        for job, k in (("decoder.k=2", 2), ("decoder.k=3", 3)) for i in range(3)
    ]  # fmt: skip
    pd.DataFrame(rows).to_parquet(tmp_path / "iterations.parquet")
    with pytest.raises(ConfigError, match="trace_job"):
        load_trace(ReplayConfig(k=2, trace=str(tmp_path)))
    cfg = ReplayConfig(k=3, trace=str(tmp_path), trace_job="decoder.k=3")
    trace = load_trace(cfg)
    assert trace == {("a", 0): [Step(3, 0), Step(3, 1), Step(3, 0)]}
    with pytest.raises(ConfigError, match="decoder.k=2"):
        load_trace(ReplayConfig(k=4, trace=str(tmp_path), trace_job="decoder.k=2"))


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["decoder=replay"], "needs decoder.trace"),
        (["decoder=replay", "decoder.trace=/nonexistent/run"], "no iterations.parquet"),
        (["model@target=shape_llama2_7b", "target.source=llama_7"], "unknown model shape"),
    ],
)
def test_bad_replay_input_fails_before_loading(
    compose_cfg, no_load_pool, tmp_path, overrides, match
):
    with pytest.raises(ConfigError, match=match):
        run(compose_cfg(overrides), no_load_pool, tmp_path / "job", "job")


def test_replay_job_reproduces_the_recorded_counts(compose_cfg, tmp_path):
    """Record a timing job, then replay its trace on random shape models through run()."""
    base = ["bench.fixed_length=true", "decoder.k=3", "bench.warmup=1"]
    pool = ModelPool()
    run(compose_cfg(base), pool, tmp_path / "rec", "rec")
    replay = [
        "decoder=replay", f"decoder.trace={tmp_path / 'rec'}", "model@target=shape_llama_68m",
        "model@draft=shape_llama_68m", *(f"+target.shape.{k}={v}" for k, v in SMALL.items()),
        *(f"+draft.shape.{k}={v}" for k, v in SMALL.items()),
    ]  # fmt: skip
    summary = run(compose_cfg(base + replay), pool, tmp_path / "rep", "rep")
    assert "speedup_median" in summary
    cols = ["prompt_id", "repeat", "accepted", "proposed", "target_calls", "draft_calls"]
    rec = pd.read_parquet(tmp_path / "rec" / "records.parquet")
    rep = pd.read_parquet(tmp_path / "rep" / "records.parquet")
    rec = rec[rec.method == "speculative"][cols].reset_index(drop=True)
    rep = rep[rep.method == "replay"][cols].reset_index(drop=True)
    pd.testing.assert_frame_equal(rec, rep)
    iters = pd.read_parquet(tmp_path / "rep" / "iterations.parquet")
    assert set(iters.method) == {"replay"}


def test_shapes_match_the_published_parameter_counts():
    assert abs(parameter_count("llama2_7b") / 6.74e9 - 1) < 0.01
    assert abs(parameter_count("llama2_13b") / 13.02e9 - 1) < 0.01
    assert abs(parameter_count("tinyllama_1b") / 1.10e9 - 1) < 0.01
    assert abs(parameter_count("qwen25_7b") / 7.62e9 - 1) < 0.01


def test_shape_model_is_built_in_place():
    model = shape_model("llama_68m", dtype=torch.bfloat16)  # the smallest named shape, 68M
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert sum(p.numel() for p in model.parameters()) == parameter_count("llama_68m")
    assert model.config.vocab_size == 32000 and model.config.num_hidden_layers == 2
