"""Goodness-of-fit statistics of the exactness audit, as small pure numpy functions.

A test compares the counts of sampled tokens with an exact law over B buckets: the top-M tokens
of the exact law plus one "rest" bucket (all other tokens), so vocabularies of any size reduce
to M + 1 cells. Every random draw takes an explicit numpy Generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats


def top_tokens(probs: np.ndarray, m: int) -> np.ndarray:
    """Ids of the (at most) m most likely tokens with positive probability, most likely first."""
    order = np.argsort(-probs, kind="stable")[:m]
    return order[probs[order] > 0]


def bucket_probs(probs: np.ndarray, top: np.ndarray) -> np.ndarray:
    """(V,) exact law -> (M+1,): the top tokens' probabilities, then the rest's total mass."""
    head = probs[top]
    return np.append(head, max(0.0, 1.0 - head.sum()))


def bucket_counts(tokens: np.ndarray, top: np.ndarray) -> np.ndarray:
    """(N,) sampled ids -> (M+1,) counts: how many fell on each top token, then on the rest."""
    head = (tokens[:, None] == top[None, :]).sum(0)  # (M,)
    return np.append(head, len(tokens) - head.sum())


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.asarray(p, float) - np.asarray(q, float)).sum())


def null_tv(probs: np.ndarray, n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(draws,) TV between the empirical law of n exact samples and the law itself."""
    counts = rng.multinomial(n, probs / probs.sum(), size=draws)  # (draws, B)
    return 0.5 * np.abs(counts / n - probs[None, :]).sum(1)


def bootstrap_tv(
    counts: np.ndarray, probs: np.ndarray, draws: int, rng: np.random.Generator, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the TV between the sampled law and the exact one."""
    n = int(counts.sum())
    resampled = rng.multinomial(n, counts / n, size=draws)  # (draws, B)
    tvs = 0.5 * np.abs(resampled / n - probs[None, :]).sum(1)
    lo, hi = np.quantile(tvs, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def pooling(exp: np.ndarray, min_expected: float) -> np.ndarray:
    """(B,) expected counts -> (B, G) 0/1 matrix mapping cells to pooled cells: the cells
    expected below min_expected become one; a pool still too small joins the smallest other."""
    small = exp < min_expected
    keep = np.flatnonzero(~small)
    groups = np.zeros((len(exp), len(keep)))
    groups[keep, np.arange(len(keep))] = 1.0
    if small.any():
        if exp[small].sum() < min_expected and len(keep):
            groups[small, int(np.argmin(exp[keep]))] = 1.0
        else:
            groups = np.column_stack([groups, small.astype(float)])
    return groups


def merge_small(obs: np.ndarray, exp: np.ndarray, min_expected: float) -> tuple[np.ndarray, ...]:
    """(observed, expected) over the pooled cells (see `pooling`)."""
    groups = pooling(exp, min_expected)
    return obs @ groups, exp @ groups


@dataclass(frozen=True)
class ChiSquare:
    """Pearson's chi-square of counts against an exact law, after pooling small cells."""

    statistic: float
    dof: int
    pvalue: float


def chi_square(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> ChiSquare:
    """Counts (B,) against exact bucket probabilities (B,); an observed outcome of probability 0
    is an outright rejection (p-value 0)."""
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    if counts[probs <= 0].sum() > 0:
        return ChiSquare(float("inf"), max(int((probs > 0).sum()) - 1, 0), 0.0)
    live = probs > 0
    obs, exp = merge_small(counts[live], probs[live] / probs.sum() * counts.sum(), min_expected)
    if len(obs) < 2:
        return ChiSquare(0.0, 0, 1.0)
    result = stats.chisquare(obs, exp)
    return ChiSquare(float(result.statistic), len(obs) - 1, float(result.pvalue))


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence)."""
    p = np.asarray(pvalues, float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def verdict(adjusted: np.ndarray, alpha: float, suspicious_alpha: float) -> str:
    """biased: some Holm-adjusted p < alpha; suspicious: some < suspicious_alpha; else pass."""
    smallest = float(np.min(adjusted)) if len(adjusted) else 1.0
    if smallest < alpha:
        return "biased"
    return "suspicious" if smallest < suspicious_alpha else "pass"


def detectable_shift(
    probs: np.ndarray, n: int, level: float, rng: np.random.Generator, power: float = 0.8
) -> float:
    """Smallest mass d moved from the likeliest bucket to the second (a bias of TV = d) that the
    chi-square test at `level` flags with the given power at n samples (simulated, 0.005 grid)."""
    groups = pooling(probs * n, 5.0)  # (B, G)
    exp = probs * n @ groups  # (G,)
    critical = stats.chi2.ppf(1 - level, max(len(exp) - 1, 1))
    for shift in np.arange(0.005, min(probs[0], 0.5) + 1e-9, 0.005):
        biased = probs.copy()
        biased[0], biased[1] = biased[0] - shift, biased[1] + shift
        obs = rng.multinomial(n, biased, size=2000) @ groups  # (2000, G)
        statistic = ((obs - exp) ** 2 / exp).sum(1)
        if np.mean(statistic > critical) >= power:
            return float(shift)
    return float("nan")
