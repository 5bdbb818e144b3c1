"""Turn samples and exact laws into test rows (one per prefix x position x condition) and token
rows (one per tested bucket), then a verdict over the family of tests with Holm's correction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .core import ENDED, Samples
from .stats import (
    bootstrap_tv,
    bucket_counts,
    bucket_probs,
    chi_square,
    holm,
    null_tv,
    top_tokens,
    total_variation,
    verdict,
)

REST = -1  # token id of the "rest" bucket; also `given` of first-token tests


@dataclass(frozen=True)
class CheckSettings:
    """The statistical knobs of one audit (a view of AuditConfig)."""

    top_m: int = 20
    min_expected: float = 5.0
    bootstrap: int = 1000
    level: float = 0.95


def one_test(
    tokens: np.ndarray, law: np.ndarray, settings: CheckSettings, rng: np.random.Generator
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Sampled ids (N,) against an exact law (V,): the test row and its per-bucket rows."""
    top = top_tokens(law, settings.top_m)
    probs, counts = bucket_probs(law, top), bucket_counts(tokens, top)  # (B,), (B,)
    n = len(tokens)
    empirical = counts / n
    chi = chi_square(counts, probs, settings.min_expected)
    null = null_tv(probs, n, settings.bootstrap, rng)
    lo, hi = bootstrap_tv(counts, probs, settings.bootstrap, rng, settings.level)
    row = {
        "n": n,
        "buckets": len(probs),
        "tv": total_variation(empirical, probs),
        "tv_lo": lo,
        "tv_hi": hi,
        "tv_null_mean": float(null.mean()),
        "tv_null_q95": float(np.quantile(null, 0.95)),
        "chi2": chi.statistic,
        "dof": chi.dof,
        "pvalue": chi.pvalue,
        "rest_exact": float(probs[-1]),
        "rest_empirical": float(empirical[-1]),
    }
    ids = np.append(top, REST)
    buckets = [
        {"rank": r, "token": int(t), "exact": float(p), "count": int(c), "empirical": float(e)}
        for r, (t, p, c, e) in enumerate(zip(ids, probs, counts, empirical, strict=True))
    ]
    return row, buckets


def prefix_tests(
    samples: Samples,
    first_law: np.ndarray,
    firsts: list[int],
    second_laws: np.ndarray,
    settings: CheckSettings,
    rng: np.random.Generator,
    min_conditional: int,
) -> tuple[list[dict], list[dict]]:
    """First-token test, then a second-token test per given first token with enough samples."""
    cases = [(1, REST, samples.tokens[:, 0], first_law)]
    for first, law in zip(firsts, second_laws, strict=True):
        seconds = samples.tokens[samples.tokens[:, 0] == first, 1]
        seconds = seconds[seconds != ENDED]  # a generation that ended has no second token
        if len(seconds) >= min_conditional:
            cases.append((2, first, seconds, law))
    tests, tokens = [], []
    for position, given, sampled, law in cases:
        row, buckets = one_test(sampled, law, settings, rng)
        key = {"position": position, "given": int(given)}
        tests.append(key | row)
        tokens += [key | b for b in buckets]
    return tests, tokens


def conclude(
    tests: pd.DataFrame, alpha: float, suspicious_alpha: float
) -> tuple[pd.DataFrame, str]:
    """Holm-adjust the p-values of one decoder's whole family of tests; the verdict."""
    tests = tests.copy()
    tests["pvalue_holm"] = holm(tests.pvalue.to_numpy())
    tests["significant"] = tests.pvalue_holm < alpha
    return tests, verdict(tests.pvalue_holm.to_numpy(), alpha, suspicious_alpha)
