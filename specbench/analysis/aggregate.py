"""Paired speedups, percentile-bootstrap intervals and the per-K summary of an experiment."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

SPS, AR = "speculative", "autoregressive"
PAIR = ["job", "prompt_id", "repeat"]  # one timing pair: both methods, same prompt and seed
GROUP = ["task", "sampling", "k"]


def paired_speedups(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (job, prompt, repeat) timed with both methods: AR over SpS ms per token."""
    keep = [*PAIR, "task", "sampling", "k", "ms_per_token"]
    sps = records.loc[records.method == SPS, keep]
    ar = records.loc[records.method == AR, [*PAIR, "ms_per_token"]]
    pairs = sps.merge(ar, on=PAIR, suffixes=("_sps", "_ar"), validate="one_to_one")
    pairs = pairs.rename(
        columns={"ms_per_token_sps": "sps_ms_per_token", "ms_per_token_ar": "ar_ms_per_token"}
    )
    pairs["speedup"] = pairs.ar_ms_per_token / pairs.sps_ms_per_token
    columns = [*PAIR, "k", "task", "sampling", "ar_ms_per_token", "sps_ms_per_token", "speedup"]
    return pairs[columns].sort_values([*GROUP, "prompt_id", "repeat"]).reset_index(drop=True)


def _resample(
    values: np.ndarray, groups: np.ndarray | None, n_boot: int, rng: np.random.Generator
) -> np.ndarray:
    """(n_boot, n) resampled values; whole groups (prompts) are drawn when groups is given."""
    if groups is None:
        return values[rng.integers(0, len(values), size=(n_boot, len(values)))]
    labels, inverse = np.unique(groups, return_inverse=True)
    members = [values[inverse == g] for g in range(len(labels))]
    picks = rng.integers(0, len(labels), size=(n_boot, len(labels)))
    if len({len(m) for m in members}) == 1:  # balanced: one fancy index does it
        return np.stack(members)[picks].reshape(n_boot, -1)
    return np.array([np.concatenate([members[g] for g in row]) for row in picks], dtype=object)


def bootstrap_ci(
    values: ArrayLike,
    stat: Callable = np.median,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    groups: ArrayLike | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval of stat(values); resamples whole groups (prompts) if given."""
    values = np.asarray(values, dtype=float)
    if groups is not None:
        groups = np.asarray(groups)
        keep = ~np.isnan(values)
        values, groups = values[keep], groups[keep]
    else:
        values = values[~np.isnan(values)]
    if len(values) == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    samples = _resample(values, groups, n_boot, rng)
    if samples.dtype == object:  # unbalanced groups: rows of different lengths
        stats = np.array([stat(np.asarray(row, dtype=float)) for row in samples])
    else:
        stats = stat(samples, axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(stats, [tail, 100 - tail])
    return (float(low), float(high))


MIN_BOOTSTRAP_PROMPTS = 10  # below this a percentile bootstrap undercovers: report min-max


def speedup_interval(pairs: pd.DataFrame) -> dict[str, object]:
    """The one home of the paired speedup statistic: median of the per-prompt-pair ratios, and
    its interval over prompts. With >= MIN_BOOTSTRAP_PROMPTS prompts a 95% percentile bootstrap
    resampling whole prompts ("bootstrap95"); with fewer, the min and max of the ratios, called
    that ("min-max": over 3 prompts the median's true coverage is at most 75%)."""
    n = int(pairs.prompt_id.nunique()) if len(pairs) else 0
    if n >= MIN_BOOTSTRAP_PROMPTS:
        low, high = bootstrap_ci(pairs.speedup, np.median, groups=pairs.prompt_id)
        method = "bootstrap95"
    else:
        low, high, method = float(pairs.speedup.min()), float(pairs.speedup.max()), "min-max"
    median = float(pairs.speedup.median()) if len(pairs) else float("nan")
    return {
        "speedup": median, "speedup_low": low, "speedup_high": high,
        "speedup_interval": method, "speedup_n_prompts": n,
    }  # fmt: skip


def _loop_ms(frame: pd.DataFrame) -> pd.Series:
    """Milliseconds per target call (one loop): draft + target + overhead time over calls."""
    return 1e3 * (frame.draft_s + frame.target_s + frame.overhead_s) / frame.target_calls


def _method_stats(frame: pd.DataFrame, prefix: str) -> dict[str, float]:
    """Time to generate the N tokens and loop latency of one method's runs."""
    if frame.empty:
        names = ("time_s", "time_s_std", "loop_ms", "loop_ms_std")
        return {f"{prefix}_{name}": np.nan for name in names}
    loop = _loop_ms(frame)
    return {
        f"{prefix}_time_s": frame.wall_s.mean(),
        f"{prefix}_time_s_std": frame.wall_s.std(),
        f"{prefix}_loop_ms": loop.mean(),
        f"{prefix}_loop_ms_std": loop.std(),
    }


def _group_summary(frame: pd.DataFrame, pairs: pd.DataFrame, k: int) -> dict[str, float]:
    """The summary_by_k row of one (task, sampling, k) group."""
    sps, ar = frame[frame.method == SPS], frame[frame.method == AR]
    # one target call per loop: each loop emits its accepted drafts plus one target token
    per_loop = (sps.accepted + sps.target_calls) / (sps.target_calls * (k + 1))
    row = {
        "n_prompts": frame.prompt_id.nunique(),
        "n_runs": len(sps) if len(sps) else len(ar),
        "max_new_tokens": frame.max_new_tokens.max(),
        "mean_new_tokens": frame.new_tokens.mean(),
        **_method_stats(sps, "sps"),
        **_method_stats(ar, "ar"),
        "acceptance_per_loop": per_loop.mean() if len(sps) else np.nan,
        "acceptance_per_loop_std": per_loop.std() if len(sps) else np.nan,
        "alpha": sps.alpha.mean() if len(sps) else np.nan,
    }
    return row | speedup_interval(pairs)


def summary_by_k(records: pd.DataFrame) -> pd.DataFrame:
    """Per (task, sampling, k): times, acceptance per loop / (K+1), alpha, loop ms, speedup."""
    pairs = paired_speedups(records)
    rows = []
    for (task, sampling, k), frame in records.groupby(GROUP, sort=True):
        mine = pairs[(pairs.task == task) & (pairs.sampling == sampling) & (pairs.k == k)]
        rows.append({"task": task, "sampling": sampling, "k": k} | _group_summary(frame, mine, k))
    return pd.DataFrame(rows)
