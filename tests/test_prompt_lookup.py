"""Prompt lookup: the n-gram proposer, exactness of point-mass verification, greedy parity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from specbench.audit.checks import conclude
from specbench.audit.core import audited_decoder
from specbench.audit.job import audit_samples
from specbench.config import AuditConfig, ConfigError
from specbench.decoding import autoregressive_generate
from specbench.methods import METHODS, DecodeOptions, Models
from specbench.methods.prompt_lookup import PromptLookupConfig, lookup
from specbench.sampling import SamplingParams, residual, verify
from specbench.tiny import byte_tokenizer, tiny_model

GREEDY, T1 = SamplingParams(0.0), SamplingParams(1.0)
PROMPT = "def add(a, b):\n    return a + b\n\ndef add3(a, b, c):\n    return a + b + c\n\ndef "


def ids_of(seq):
    return torch.tensor(seq)


@pytest.mark.parametrize(
    "seq, k, expected",
    [
        ([1, 2, 3, 9, 1, 2], 2, [3, 9]),  # the 2-gram (1, 2) recurs: what followed it
        ([5, 1, 7, 1, 8, 1], 2, [8, 1]),  # several matches: the latest wins
        ([1, 2, 3, 4], 3, []),  # nothing recurs: no draft
        ([4, 4], 5, [4]),  # the continuation is cut at the sequence's end
    ],
)
def test_lookup(seq, k, expected):
    assert lookup(ids_of(seq), k, max_ngram=3, min_ngram=1).tolist() == expected


def test_lookup_prefers_the_longest_suffix():
    seq = ids_of([7, 2, 9, 5, 2, 8, 7, 2])  # (7, 2) recurs at 0; (2,) alone last at 4
    assert lookup(seq, 1, max_ngram=2, min_ngram=1).tolist() == [9]
    assert lookup(seq, 1, max_ngram=1, min_ngram=1).tolist() == [8]
    assert lookup(seq, 1, max_ngram=2, min_ngram=2).tolist() == [9]


def test_ngram_bounds_are_checked():
    with pytest.raises(ConfigError, match="min_ngram"):
        PromptLookupConfig(min_ngram=3, max_ngram=2)


def point_mass(x: int, vocab: int) -> torch.Tensor:
    return torch.zeros(vocab).scatter_(0, torch.tensor([x]), 1.0)


@pytest.mark.parametrize("seed", range(5))
def test_point_mass_rule_is_exact_by_enumeration(seed):
    """Accept x with prob target(x), else the residual: the output law is target's, exactly."""
    target = torch.distributions.Dirichlet(torch.ones(8)).sample((1,))[0].double()
    x = seed % 8
    if seed == 3:  # a draft the target gives no mass: always rejected
        target[x] = 0.0
    target /= target.sum()
    accept = target[x].clamp(max=1)
    mass = point_mass(x, 8).double()
    law = accept * mass + (1 - accept) * residual(target, mass)
    torch.testing.assert_close(law, target, atol=1e-12, rtol=0)


def test_point_mass_verify_samples_the_target():
    """200,000 draws of `verify` itself at K = 1 with a point-mass draft: chi-square on (n, y)."""
    gen = torch.Generator().manual_seed(0)
    vocab, n = 6, 200_000
    target = torch.tensor([0.3, 0.25, 0.2, 0.15, 0.07, 0.03])
    bonus = torch.tensor([0.1, 0.1, 0.2, 0.2, 0.2, 0.2])
    draft_tokens = torch.full((n, 1), 1)
    draft_probs = point_mass(1, vocab).expand(n, 1, vocab)
    target_probs = torch.stack([target, bonus]).expand(n, 2, vocab)
    accepted, nxt = verify(draft_tokens, draft_probs, target_probs, gen)
    first = torch.where(accepted == 1, draft_tokens[:, 0], nxt)  # the first emitted token
    counts = np.bincount(first.numpy(), minlength=vocab)
    expected = target.double().numpy() / float(target.double().sum()) * n
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    assert accepted.float().mean().item() == pytest.approx(0.25, abs=0.005)


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("qwen2", seed=1, std=0.5)
    return target, byte_tokenizer()(PROMPT, return_tensors="pt").input_ids


def bound(target, sampling, **knobs):
    entry = METHODS["prompt_lookup"]
    options = DecodeOptions(sampling, vocab_size=target.config.vocab_size)
    return entry.bind(entry.config(**knobs), Models(target), options, None)


def test_greedy_prompt_lookup_is_the_autoregressive_target(pair):
    target, ids = pair
    ours = bound(target, GREEDY, k=4)(ids, 48, None)
    ar = autoregressive_generate(target, ids, max_new_tokens=48, sampling=GREEDY, generator=None)
    assert ours.tokens == ar.tokens
    assert sum(ours.proposed) > 0 and ours.draft_calls == 0  # it drafted, with no model


def test_prompt_lookup_passes_the_audit_on_every_path(pair):
    """A prefix that repeats the model's own greedy continuation, so lookups are often right
    and accept, residual and bonus paths all run; sampled at T = 0.5."""
    target, ids = pair
    own = autoregressive_generate(target, ids, max_new_tokens=6, sampling=GREEDY, generator=None)
    prefix = torch.cat([ids, torch.tensor([own.tokens]), ids], dim=1)
    audit, warm = AuditConfig(num_samples=400, bootstrap=300), SamplingParams(0.5)
    vocab = target.config.vocab_size
    entry = METHODS["prompt_lookup"]
    knobs = entry.config(k=2, max_ngram=ids.shape[1])  # the whole prompt matches: G proposed
    decoder = audited_decoder(entry, knobs, Models(target), warm, vocab)
    samples, tests, _ = audit_samples(decoder, target, prefix, warm, vocab, audit, seed=3)
    table, outcome = conclude(pd.DataFrame(tests), audit.alpha, audit.suspicious_alpha)
    assert outcome == "pass", table
    assert {0, 1} <= set(samples.accepted_first.tolist())  # drafts rejected and accepted
