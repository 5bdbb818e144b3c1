"""Goodness-of-fit helpers shared by the exactness tests."""

from __future__ import annotations

import numpy as np
from scipy import stats


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-square p-value of counts against probs; cells expected < min_expected are pooled.

    An observed outcome of probability 0 is an outright rejection: p-value 0.
    """
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    if counts[probs == 0].sum() > 0:
        return 0.0
    expected = probs / probs.sum() * counts.sum()
    small = expected < min_expected
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    if keep.sum() < 2:
        return 1.0
    return float(stats.chisquare(obs[keep], exp[keep]).pvalue)


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.asarray(p, float) - np.asarray(q, float)).sum())
