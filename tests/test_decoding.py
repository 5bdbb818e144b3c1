"""Decoders on tiny HF models: greedy parity, stops inside a block, cache rollback, errors."""

import pytest
import torch

from specbench import SamplingParams, StopCondition, autoregressive_generate, speculative_generate
from specbench.tiny import byte_tokenizer, perturbed_copy, tiny_model

GREEDY = SamplingParams(0.0)
N_NEW = 48


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def pair(request):
    target = tiny_model(request.param, seed=1, std=0.5)
    return target, perturbed_copy(target, noise=0.1, seed=2)


def prompt(tokenizer, text="def add(a, b):\n"):
    return tokenizer(text, return_tensors="pt").input_ids


def greedy_ar(target, ids, stop=None):
    return autoregressive_generate(
        target, ids, max_new_tokens=N_NEW, sampling=GREEDY, generator=None, stop=stop
    )


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_speculative_equals_greedy_target(pair, tokenizer, k):
    target, draft = pair
    ids = prompt(tokenizer)
    ar = greedy_ar(target, ids)
    sps = speculative_generate(
        target, draft, ids, k=k, max_new_tokens=N_NEW, sampling=GREEDY, generator=None
    )
    assert sps.tokens == ar.tokens
    assert len(sps.tokens) == N_NEW
    assert 0 < sum(sps.accepted) < sum(sps.proposed)  # both accept and reject paths ran
    assert sps.target_calls == len(sps.accepted) < N_NEW


def block_cut_by_stop(result) -> bool:
    """True when the stopping iteration had produced tokens past the stop."""
    return sum(a + 1 for a in result.accepted) > len(result.tokens)


@pytest.mark.parametrize("kind", ["stop_string", "eos"])
def test_stop_inside_an_accepted_block(pair, tokenizer, kind):
    target, draft = pair
    ids = prompt(tokenizer)
    full = greedy_ar(target, ids).tokens
    k = 6
    plain = speculative_generate(
        target, draft, ids, k=k, max_new_tokens=N_NEW, sampling=GREEDY, generator=None
    )
    # Place the stop on a token that sits inside a block with a token after it.
    ends = [0]
    for a in plain.accepted:
        ends.append(ends[-1] + a + 1)
    cut = next(e - 2 for s, e in zip(ends, ends[1:], strict=False) if e - s >= 2 and e - 2 >= 2)
    if kind == "eos":
        stop = StopCondition(eos_token_ids=(full[cut],))
        cut = full.index(full[cut])  # the first occurrence stops the run
    else:
        text = tokenizer.decode(full[cut - 1 : cut + 1])
        stop = StopCondition(stop_strings=(text,), tokenizer=tokenizer)
        cut = next(i for i in range(len(full)) if text in tokenizer.decode(full[: i + 1]))
    ar = greedy_ar(target, ids, stop=stop)
    sps = speculative_generate(
        target, draft, ids, k=k, max_new_tokens=N_NEW, sampling=GREEDY, generator=None, stop=stop
    )
    assert ar.tokens == full[: cut + 1] == sps.tokens
    assert sps.stopped_by == ar.stopped_by == kind
    assert block_cut_by_stop(sps)


class UncachedCheck(torch.nn.Module):
    """Wraps a model; every cached call is checked against a fresh uncached forward."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.config = model, model.config
        self.history: list[int] = []
        self.checked = 0

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids, cache, use_cache=True, logits_to_keep=0):
        self.history = self.history[: cache.get_seq_length()] + input_ids[0].tolist()
        out = self.inner(input_ids=input_ids, cache=cache, use_cache=True)
        fresh = self.inner(input_ids=torch.tensor([self.history])).logits
        n = input_ids.shape[1]
        torch.testing.assert_close(out.logits, fresh[:, -n:], rtol=1e-4, atol=1e-4)
        self.checked += 1
        return out


def test_rollback_matches_uncached_forward(pair, tokenizer):
    target, draft = pair
    checked_target, checked_draft = UncachedCheck(target), UncachedCheck(draft)
    res = speculative_generate(
        checked_target,
        checked_draft,
        prompt(tokenizer),
        k=4,
        max_new_tokens=32,
        sampling=SamplingParams(1.0),
        generator=torch.Generator().manual_seed(0),
    )
    assert sum(res.accepted) < sum(res.proposed)  # rejections happened, so caches were cropped
    assert checked_target.checked == res.target_calls
    assert checked_draft.checked == res.draft_calls


def test_same_seed_same_output(pair, tokenizer):
    target, draft = pair
    ids, params = prompt(tokenizer), SamplingParams(1.0, top_p=0.9)

    def run(seed):
        gen = torch.Generator().manual_seed(seed)
        return speculative_generate(
            target, draft, ids, k=3, max_new_tokens=24, sampling=params, generator=gen
        ).tokens

    def run_ar(seed):
        gen = torch.Generator().manual_seed(seed)
        return autoregressive_generate(
            target, ids, max_new_tokens=24, sampling=params, generator=gen
        ).tokens

    assert run(7) == run(7)
    assert run(7) != run(8)
    assert run_ar(7) == run_ar(7)


def test_result_accounting(pair, tokenizer):
    target, draft = pair
    res = speculative_generate(
        target,
        draft,
        prompt(tokenizer),
        k=4,
        max_new_tokens=20,
        sampling=SamplingParams(1.0),
        generator=torch.Generator().manual_seed(0),
    )
    assert len(res.tokens) == 20 == sum(a + 1 for a in res.accepted)
    assert all(p <= 4 for p in res.proposed) and res.proposed[0] == 4
    assert res.draft_calls == sum(res.proposed)
    assert len(res.expected_acceptance) == sum(
        min(a + 1, p) for a, p in zip(res.accepted, res.proposed, strict=True)
    )
    assert all(0 <= b <= 1 + 1e-6 for b in res.expected_acceptance)
    assert res.wall_s >= res.draft_s + res.target_s + res.overhead_s - 1e-6 > 0


def test_pair_with_different_lm_head_widths(tokenizer):
    target = tiny_model("qwen2", seed=1)
    wide = tiny_model("qwen2", vocab=300, seed=2)  # padded lm_head: ids >= 259 are unused
    kwargs = dict(k=2, max_new_tokens=8, sampling=GREEDY, generator=None)
    with pytest.raises(ValueError, match="vocab_size"):
        speculative_generate(target, wide, prompt(tokenizer), **kwargs)
    res = speculative_generate(target, wide, prompt(tokenizer), vocab_size=len(tokenizer), **kwargs)
    assert res.tokens == greedy_ar(target, prompt(tokenizer)).tokens[:8]


@pytest.mark.parametrize(
    "change, match",
    [
        ({"k": 0}, "k "),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"input_ids": torch.zeros(1, 0, dtype=torch.long)}, "empty"),
        ({"input_ids": torch.zeros(2, 3, dtype=torch.long)}, "batch 1"),
    ],
)
def test_bad_arguments_raise(pair, tokenizer, change, match):
    target, draft = pair
    kwargs = dict(input_ids=prompt(tokenizer), k=2, max_new_tokens=4, sampling=GREEDY)
    kwargs.update(change)
    with pytest.raises(ValueError, match=match):
        speculative_generate(target, draft, generator=None, **kwargs)
