"""Sequence-level exactness: speculative samples follow the target's exact joint law."""

import itertools

import numpy as np
import pytest
import torch
from stats_helpers import chi2_pvalue, total_variation

from specbench import SamplingParams, speculative_generate
from specbench.sampling import logits_to_probs
from specbench.tiny import perturbed_copy, tiny_model

V, M = 5, 3  # vocabulary and continuation length: 125 outcomes
PROMPT = torch.tensor([[0, 3, 2, 4]])
SAMPLES = 3000


@torch.no_grad()
def exact_joint(model: torch.nn.Module, params: SamplingParams) -> np.ndarray:
    """P(next M tokens = s) for every s in V^M, from full uncached forwards: (V**M,)."""
    prefixes = torch.tensor(list(itertools.product(range(V), repeat=M - 1)))  # (V^(M-1), M-1)
    seqs = torch.cat([PROMPT.expand(len(prefixes), -1), prefixes], 1)
    probs = logits_to_probs(model(seqs).logits[:, -M:], params)  # (V^(M-1), M, V)
    joint = np.zeros([V] * M)
    for row, prefix in enumerate(prefixes.tolist()):
        head = 1.0
        for i, tok in enumerate(prefix):
            head *= probs[row, i, tok].item()
        joint[tuple(prefix)] = head * probs[row, M - 1].numpy()
    return joint.reshape(-1)


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("qwen2", vocab=V, seed=1, std=0.2)
    return target, perturbed_copy(target, noise=0.2, seed=2)


@pytest.mark.parametrize("k, params", [(1, SamplingParams(1.0)), (3, SamplingParams(0.8, top_k=4))])
def test_speculative_matches_target_joint(pair, k, params):
    target, draft = pair
    gen = torch.Generator().manual_seed(1234)  # one generator for all samples, never reseeded
    counts = np.zeros(V**M)
    accepted = []
    for _ in range(SAMPLES):
        # K+1 tokens so the first block runs at full K; the first M tokens are tested.
        res = speculative_generate(
            target, draft, PROMPT, k=k, max_new_tokens=max(k + 1, M), sampling=params, generator=gen
        )
        counts[np.ravel_multi_index(res.tokens[:M], [V] * M)] += 1
        accepted += res.accepted
    target_law, draft_law = exact_joint(target, params), exact_joint(draft, params)
    assert chi2_pvalue(counts, target_law) > 0.01
    # Power: the same samples reject the draft's law, which is this far from the target's.
    assert total_variation(target_law, draft_law) > 0.1
    assert chi2_pvalue(counts, draft_law) < 1e-6
    # Every path ran: rejections (residual), partial and full acceptance (bonus).
    assert {0, k} <= set(accepted)
