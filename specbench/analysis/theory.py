"""Leviathan et al. 2023, Thm 3.8: expected walltime speedup from alpha, the cost ratio c and K.

One loop drafts K tokens (cost K*c target calls) and scores K+1 positions in one target call
(cost s(K) target calls, 1 if parallel scoring were free); it yields (1 - a^(K+1)) / (1 - a)
tokens in expectation when each draft token is accepted independently with probability a.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from .aggregate import AR, SPS, paired_speedups, speedup_interval

_ONE = 1e-9  # alpha this close to 1 uses the limit (K+1)


def expected_tokens_per_loop(alpha: ArrayLike, k: ArrayLike) -> float | np.ndarray:
    """Expected tokens per loop, (1 - alpha^(k+1)) / (1 - alpha); k+1 as alpha -> 1."""
    alpha = np.asarray(alpha, dtype=float)
    k = np.asarray(k, dtype=float)
    near_one = np.abs(1 - alpha) < _ONE
    safe = np.where(near_one, 0.5, alpha)
    tokens = np.where(near_one, k + 1, (1 - safe ** (k + 1)) / (1 - safe))
    return float(tokens) if tokens.ndim == 0 else tokens


def expected_speedup(
    alpha: ArrayLike, k: ArrayLike, c: float, scoring_cost: ArrayLike = 1.0
) -> float | np.ndarray:
    """Thm 3.8: (1 - alpha^(k+1)) / ((1 - alpha)(k c + s)); s is the scoring cost of K+1 tokens."""
    speedup = np.asarray(expected_tokens_per_loop(alpha, k)) / (
        np.asarray(k, dtype=float) * c + scoring_cost
    )
    return float(speedup) if speedup.ndim == 0 else speedup


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


def _per_call_s(frame: pd.DataFrame, seconds: str, calls: str) -> float:
    """Seconds per call, pooled over runs (sum of seconds over sum of calls)."""
    total = frame[calls].sum()
    return float(frame[seconds].sum() / total) if total else float("nan")


def estimate_parameters(records: pd.DataFrame) -> dict:
    """alpha, c and per-K scoring cost s(K), in units of one autoregressive target call."""
    sps, ar = records[records.method == SPS], records[records.method == AR]
    ar_call = _per_call_s(ar, "target_s", "target_calls")
    draft_call = _per_call_s(sps, "draft_s", "draft_calls")
    scoring: dict[int, float] = {}
    for k, frame in sps.groupby("k"):
        same_jobs = ar[ar.job.isin(frame.job.unique())]
        baseline = _per_call_s(same_jobs, "target_s", "target_calls") if len(same_jobs) else ar_call
        scoring[int(k)] = _per_call_s(frame, "target_s", "target_calls") / baseline
    return {
        "alpha": float(sps.alpha.mean()),
        "c": draft_call / ar_call,
        "scoring_costs": scoring,
        "ar_call_ms": 1e3 * ar_call,
        "draft_call_ms": 1e3 * draft_call,
    }


def _group_rows(frame: pd.DataFrame, pairs: pd.DataFrame) -> list[dict]:
    """predicted_vs_measured rows of one (task, sampling) group, one per K."""
    params = estimate_parameters(frame)
    alpha, c, costs = params["alpha"], params["c"], params["scoring_costs"]
    best = optimal_k(alpha, c, costs) if costs else None
    rows = []
    for k, scoring in sorted(costs.items()):
        mine = pairs[pairs.k == k]
        predicted = expected_speedup(alpha, k, c, scoring)
        measured = speedup_interval(mine)
        rows.append(
            {
                "k": k,
                "alpha": alpha,
                "c": c,
                "scoring_cost": scoring,
                "predicted": predicted,
                "predicted_free_scoring": expected_speedup(alpha, k, c, 1.0),
                "measured": measured["speedup"],
                "measured_low": measured["speedup_low"],
                "measured_high": measured["speedup_high"],
                "interval": measured["speedup_interval"],
                "ratio": measured["speedup"] / predicted,
                "optimal_k": best,
            }
        )
    return rows


def predicted_vs_measured(records: pd.DataFrame) -> pd.DataFrame:
    """Per (task, sampling, k): Thm 3.8 speedup from pooled alpha, c and s(K) vs the median."""
    pairs = paired_speedups(records)
    rows = []
    for (task, sampling), frame in records.groupby(["task", "sampling"], sort=True):
        if not {SPS, AR} <= set(frame.method):
            continue
        mine = pairs[(pairs.task == task) & (pairs.sampling == sampling)]
        rows += [{"task": task, "sampling": sampling} | r for r in _group_rows(frame, mine)]
    return pd.DataFrame(rows)
