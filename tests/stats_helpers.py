"""Goodness-of-fit helpers for the exactness tests: the audit's own tests, one home."""

from __future__ import annotations

import numpy as np

from specbench.audit.stats import chi_square, total_variation

__all__ = ["chi2_pvalue", "total_variation"]


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-square p-value of counts against probs (`audit.stats.chi_square`: small cells
    pooled, an observed outcome of probability 0 an outright rejection)."""
    return chi_square(counts, probs, min_expected).pvalue
