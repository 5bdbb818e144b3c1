"""sampling.py: the filters by hand, and verify() exact against the target law by chi-square."""

import pytest
import torch
from scipy import stats

from specbench.sampling import (
    SamplingParams,
    expected_acceptance,
    logits_to_probs,
    residual,
    sample,
    verify,
)

V = 8
DRAWS = 40_000
ALPHA_EACH = 0.01 / 45  # Bonferroni over the 45 chi-square tests of the verify family


def chi2_pvalue(samples: torch.Tensor, probs: torch.Tensor) -> float:
    """Goodness of fit of integer samples to probs (V,); zero-probability tokens must not occur."""
    counts = torch.bincount(samples, minlength=probs.numel()).double()
    support = probs > 0
    assert counts[~support].sum() == 0, "emitted a token the target gives probability 0"
    if support.sum() == 1:
        return 1.0  # a point mass: nothing left to test once the support is respected
    expected = probs[support].double()
    expected = expected / expected.sum() * counts.sum()
    return stats.chisquare(counts[support].numpy(), expected.numpy()).pvalue


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_sampling_params_reject_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_logits_to_probs_filters_by_hand():
    logits = torch.log(torch.tensor([0.05, 0.4, 0.1, 0.3, 0.15]))
    assert torch.allclose(logits_to_probs(logits, SamplingParams(1.0)), logits.softmax(-1))
    greedy = logits_to_probs(logits, SamplingParams(0.0))
    assert greedy.tolist() == [0, 1, 0, 0, 0]
    top2 = logits_to_probs(logits, SamplingParams(1.0, top_k=2))
    assert torch.allclose(top2, torch.tensor([0, 0.4, 0, 0.3, 0]) / 0.7)
    # Nucleus 0.8: 0.4 + 0.3 = 0.7 < 0.8, so 0.15 joins; 0.85 >= 0.8, so the rest go.
    nucleus = logits_to_probs(logits, SamplingParams(1.0, top_p=0.8))
    assert torch.allclose(nucleus, torch.tensor([0, 0.4, 0, 0.3, 0.15]) / 0.85)
    hot = logits_to_probs(logits, SamplingParams(0.5))
    assert torch.allclose(hot, (logits / 0.5).softmax(-1))
    both = logits_to_probs(logits, SamplingParams(1.0, top_k=3, top_p=0.6))
    assert torch.allclose(both, torch.tensor([0, 0.4, 0, 0.3, 0]) / 0.7)


def test_logits_to_probs_keeps_leading_shape():
    logits = torch.randn(2, 3, V)
    probs = logits_to_probs(logits, SamplingParams(0.7, top_k=4, top_p=0.9))
    assert probs.shape == (2, 3, V)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 3))
    assert ((probs > 0).sum(-1) <= 4).all()


def test_sample_matches_probs():
    probs = torch.tensor([0.5, 0.0, 0.2, 0.3])
    gen = torch.Generator().manual_seed(0)
    draws = sample(probs.expand(DRAWS, -1).contiguous(), gen)
    assert chi2_pvalue(draws, probs) > 0.01


def reference_top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter by a full sort: the definition the shortcut must reproduce."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    sorted_probs = sorted_probs.masked_fill(sorted_probs.cumsum(-1) - sorted_probs >= top_p, 0)
    kept = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return kept / kept.sum(-1, keepdim=True)


@pytest.mark.parametrize("scale, top_p", [(4.0, 0.95), (4.0, 0.8), (0.1, 0.99), (0.1, 0.5)])
def test_nucleus_shortcut_equals_full_sort_on_a_large_vocabulary(scale, top_p):
    # scale 4: a peaked law, the top 1024 hold top_p (the shortcut); 0.1: a flat one over 50k
    # tokens, they do not (the full sort); rows of both kinds in one batch go the full way.
    gen = torch.Generator().manual_seed(3)
    logits = scale * torch.randn(3, 50_000, generator=gen)
    ours = logits_to_probs(logits, SamplingParams(1.0, top_p=top_p))
    assert torch.allclose(ours, reference_top_p(logits.softmax(-1), top_p), atol=1e-7)
    mixed = torch.stack([4 * logits[0], 0.1 * logits[1]])
    ours = logits_to_probs(mixed, SamplingParams(1.0, top_p=top_p))
    assert torch.allclose(ours, reference_top_p(mixed.softmax(-1), top_p), atol=1e-7)


def test_sample_keeps_tiny_probabilities_on_a_large_vocabulary():
    # Inverse CDF in float64: 1% of the mass spread as 1e-7 per id over 100k ids keeps its
    # share (a float32 CDF near 1 has steps of 6e-8 and would round each of them).
    probs = torch.full((100_001,), 1e-7, dtype=torch.float64)
    probs[0] = 1 - probs[1:].sum()
    gen = torch.Generator().manual_seed(0)
    rows = probs.float().expand(200, -1)
    draws = torch.cat([sample(rows, gen) for _ in range(50)])  # 10k draws, 100 expected in tail
    assert abs(int((draws > 0).sum()) - 100) < 4 * 100**0.5


def test_residual_falls_back_to_target_when_laws_tie():
    probs = torch.tensor([0.25, 0.75, 0.0])
    assert torch.allclose(residual(probs, probs), probs)
    assert torch.allclose(residual(probs, torch.tensor([0.5, 0.5, 0.0])), torch.tensor([0, 1.0, 0]))


def synthetic_laws(case: str, params: SamplingParams, k: int, seed: int):
    """(draft_probs (K, V), target_probs (K+1, V)) for a named edge case, after the filters."""
    gen = torch.Generator().manual_seed(seed)
    target_logits = 2 * torch.randn(k + 1, V, generator=gen)
    draft_logits = target_logits[:k] + torch.randn(k, V, generator=gen)
    if case == "zeros":  # the draft misses tokens the target likes, and vice versa
        draft_logits[:, :2] = float("-inf")
        target_logits[:, 6:] = float("-inf")
    elif case == "disjoint":  # no overlap at all: every draft token must be rejected
        draft_logits[:, : V // 2] = float("-inf")
        target_logits[:, V // 2 :] = float("-inf")
    return logits_to_probs(draft_logits, params), logits_to_probs(target_logits, params)


PARAMS = {
    "t1": SamplingParams(1.0),
    "t07": SamplingParams(0.7),
    "topk3": SamplingParams(1.0, top_k=3),
    "topp08": SamplingParams(1.0, top_p=0.8),
    "greedy": SamplingParams(0.0),
}


@pytest.mark.parametrize("case", ["overlap", "zeros", "disjoint"])
@pytest.mark.parametrize("name", list(PARAMS))
def test_verify_emits_the_target_law(name, case):
    """Each emitted position follows target_probs: accepts, residual draws and the bonus.

    The family (5 params x 3 cases x K+1 = 3 positions = 45 tests) holds p > 0.01 overall by
    Bonferroni: each test needs p > 0.01 / 45. The negative control below shows the power.
    """
    k, params = 2, PARAMS[name]
    draft_probs, target_probs = synthetic_laws(case, params, k, seed=sorted(PARAMS).index(name))
    gen = torch.Generator().manual_seed(1)
    draft_tokens = sample(draft_probs.expand(DRAWS, -1, -1).contiguous(), gen)  # (B, K)
    n_acc, nxt = verify(
        draft_tokens,
        draft_probs.expand(DRAWS, -1, -1),
        target_probs.expand(DRAWS, -1, -1),
        gen,
    )
    emitted = torch.cat([draft_tokens, torch.zeros(DRAWS, 1, dtype=torch.long)], 1)
    emitted[torch.arange(DRAWS), n_acc] = nxt  # (B, K+1): position j is valid when n_acc >= j
    for pos in range(k + 1):
        reached = n_acc >= pos
        if params.greedy:
            assert (emitted[reached, pos] == target_probs[pos].argmax()).all()
        elif reached.sum() > 500:
            assert chi2_pvalue(emitted[reached, pos], target_probs[pos]) > ALPHA_EACH, pos
    # P(first draft accepted) = sum_x min(target, draft) = beta.
    beta = expected_acceptance(target_probs[0], draft_probs[0]).item()
    hits = int((n_acc >= 1).sum())
    # Bonferroni over the 15 (params x case) acceptance tests, like the chi-squares above.
    assert stats.binomtest(hits, DRAWS, min(beta, 1.0)).pvalue > 0.01 / 15
    if case == "disjoint":
        assert hits == 0


def test_verify_accepts_when_draft_gives_zero():
    """draft(x) = 0 < target(x) means ratio infinity: always accept, never divide by zero."""
    draft_probs = torch.tensor([[[1.0, 0.0]]])
    target_probs = torch.tensor([[[0.5, 0.5], [0.5, 0.5]]])
    n_acc, _ = verify(torch.tensor([[1]]), draft_probs, target_probs, torch.Generator())
    assert n_acc.item() == 1


def test_verify_greedy_is_exact_match():
    onehot = torch.eye(V)
    draft_probs = onehot[[3, 4, 5]].unsqueeze(0)  # draft proposes 3, 4, 5
    target_probs = onehot[[3, 4, 7, 1]].unsqueeze(0)  # target agrees twice, then wants 7
    n_acc, nxt = verify(torch.tensor([[3, 4, 5]]), draft_probs, target_probs, torch.Generator())
    assert (n_acc.item(), nxt.item()) == (2, 7)
    full = onehot[[3, 4, 5, 2]].unsqueeze(0)
    n_acc, nxt = verify(torch.tensor([[3, 4, 5]]), draft_probs, full, torch.Generator())
    assert (n_acc.item(), nxt.item()) == (3, 2)


def test_chi2_detects_an_accept_everything_verifier():
    """Negative control: emitting the draft's tokens unverified fails the same test."""
    draft_probs, target_probs = synthetic_laws("overlap", PARAMS["t1"], 1, seed=3)
    gen = torch.Generator().manual_seed(0)
    draft_tokens = sample(draft_probs.expand(DRAWS, -1, -1).contiguous(), gen)
    assert chi2_pvalue(draft_tokens[:, 0], target_probs[0]) < ALPHA_EACH / 100
