"""Leviathan et al. 2023, Thm 3.8: expected walltime speedup from alpha, the cost ratio c and K.

One loop drafts K tokens (cost K*c target calls) and scores K+1 positions in one target call
(cost s(K) target calls, 1 if parallel scoring were free); it yields (1 - a^(K+1)) / (1 - a)
tokens in expectation when each draft token is accepted independently with probability a.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from .aggregate import summary

_ONE = 1e-9  # alpha this close to 1 uses the limit (K+1)


def expected_tokens_per_loop(alpha: ArrayLike, k: ArrayLike) -> float | np.ndarray:
    """Expected tokens per loop, (1 - alpha^(k+1)) / (1 - alpha); k+1 as alpha -> 1."""
    alpha = np.asarray(alpha, dtype=float)
    k = np.asarray(k, dtype=float)
    near_one = np.abs(1 - alpha) < _ONE
    safe = np.where(near_one, 0.5, alpha)
    tokens = np.where(near_one, k + 1, (1 - safe ** (k + 1)) / (1 - safe))
    return float(tokens) if tokens.ndim == 0 else tokens


def loop_speedup(
    tokens_per_loop: ArrayLike, k: ArrayLike, c: ArrayLike, scoring_cost: ArrayLike = 1.0
) -> float | np.ndarray:
    """Tokens per loop over the loop's cost in target steps, k c + s (Thm 3.8's denominator)."""
    speedup = np.asarray(tokens_per_loop, dtype=float) / (
        np.asarray(k, dtype=float) * np.asarray(c, dtype=float) + scoring_cost
    )
    return float(speedup) if speedup.ndim == 0 else speedup


def expected_speedup(
    alpha: ArrayLike, k: ArrayLike, c: float, scoring_cost: ArrayLike = 1.0
) -> float | np.ndarray:
    """Thm 3.8: (1 - alpha^(k+1)) / ((1 - alpha)(k c + s)); s is the scoring cost of K+1 tokens."""
    return loop_speedup(expected_tokens_per_loop(alpha, k), k, c, scoring_cost)


def optimal_k(
    alpha: float, c: float, scoring_costs: dict[int, float] | None = None, k_max: int = 16
) -> int:
    """The K >= 1 of highest expected speedup; only measured K when scoring_costs is given."""
    if scoring_costs:
        candidates = {k: s for k, s in scoring_costs.items() if 1 <= k <= k_max}
    else:
        candidates = {k: 1.0 for k in range(1, k_max + 1)}
    if not candidates:
        raise ValueError(f"no K in 1..{k_max} among scoring_costs {sorted(scoring_costs or {})}")
    return max(candidates, key=lambda k: expected_speedup(alpha, k, c, candidates[k]))


SERIES = ["task", "sampling", "cpu_kind", "method", "draft", "n_drafts"]


def _series_rows(rows: pd.DataFrame) -> list[dict]:
    """predicted_vs_measured rows of one drafting series (one method on one condition)."""
    rows = rows[rows.c.notna() & rows.alpha.notna()].sort_values("k")
    if rows.empty:
        return []
    costs = {int(k): float(s) for k, s in zip(rows.k, rows.scoring_cost, strict=True)}
    alpha, c = float(rows.alpha.mean()), float(rows.c.mean())
    best = optimal_k(alpha, c, costs)
    out = []
    for r in rows.itertuples(index=False):
        predicted = expected_speedup(r.alpha, r.k, r.c, r.scoring_cost)
        free = expected_speedup(r.alpha, r.k, r.c, 1.0)
        out.append({
            "k": int(r.k), "alpha": r.alpha, "c": r.c, "scoring_cost": r.scoring_cost,
            "predicted": predicted, "predicted_free_scoring": free,
            "measured": r.speedup, "measured_low": r.speedup_low, "measured_high": r.speedup_high,
            "interval": r.speedup_interval, "ratio": r.speedup / predicted, "optimal_k": best,
        })  # fmt: skip
    return out


def predicted_vs_measured(records: pd.DataFrame) -> pd.DataFrame:
    """Per drafting series and K: Thm 3.8 from the run's alpha, c and s(K) vs the measured
    speedup (all from `summary`, so from `specbench.stats`)."""
    table = summary(records)
    if "speedup" not in table or "c" not in table:
        return pd.DataFrame()
    table = table[table.speedup.notna()]
    keys = [c for c in SERIES if c in table]
    rows = []
    for key, group in table.groupby(keys, sort=True, dropna=False):
        named = dict(zip(keys, key, strict=True))
        rows += [named | r for r in _series_rows(group)]
    return pd.DataFrame(rows)
