"""Paired contrasts between the configurations of one sweep, within prompt: a K sweep's best K
against its ends, multi-draft against single-draft speculative sampling, and two drafting
methods against each other. Pure pandas."""

from __future__ import annotations

from collections.abc import Collection
from itertools import combinations

import numpy as np
import pandas as pd

from .stats import (
    CONDITION,
    HEADLINE,
    KNOBS,
    paired_runs,
    per_prompt_log_ratio,
    present,
    ratio_interval,
)


def clear(stat: dict) -> bool:
    """Whether a contrast is a claim: a 95% interval (n >= 10) that excludes 1."""
    inside = stat["ratio_low"] <= 1 <= stat["ratio_high"]
    return stat["ratio_interval"] == HEADLINE and not inside


def contrast(times: pd.DataFrame, reference: object, other: object) -> dict:
    """Per-prompt times (rows (prompt_id, repeat), one column per configuration) -> the ratio
    time(reference) / time(other) over prompts (> 1: `other` is faster), `ratio_interval`'s."""
    logs = np.log(times[reference] / times[other]).groupby(level="prompt_id").mean()
    stat = ratio_interval(logs)
    return stat | {"distinguishable": clear(stat)}


def best_k(pairs: pd.DataFrame) -> tuple[int, float]:
    """The K with the highest speedup (geometric mean over prompts) among `pairs`, and it."""
    per_k = {k: np.exp(per_prompt_log_ratio(rows).mean()) for k, rows in pairs.groupby("k")}
    best = max(per_k, key=per_k.get)
    return best, float(per_k[best])


def k_contrasts(records: pd.DataFrame, value: str = "ms_per_token") -> pd.DataFrame:
    """Per condition and drafting method of a K sweep: its best K (highest speedup) against the
    smallest and the largest K swept, paired within prompt (ratio = time at the other K / time
    at the best K; > 1: the best K is faster); `distinguishable` when a 95% interval (n >= 10)
    excludes 1."""
    pairs = paired_runs(records, value)
    keys = present(pairs, [*CONDITION, *(c for c in KNOBS if c != "k")])
    out = []
    for key, g in pairs[pairs.k > 0].groupby(keys, sort=True, dropna=False):
        best, speedup = best_k(g)
        times = g.groupby(["prompt_id", "repeat", "k"])[value].mean().unstack("k")
        for other in sorted({int(g.k.min()), int(g.k.max())} - {best}):
            out.append(dict(zip(keys, key, strict=True)) | {
                "best_k": best, "best_speedup": speedup, "other_k": other,
                **contrast(times, other, best)})  # fmt: skip
    return pd.DataFrame(out)


def draft_contrasts(records: pd.DataFrame, value: str = "ms_per_token") -> pd.DataFrame:
    """Per condition of a multi-draft sweep: every n > 1 drafts x K against single-draft
    speculative sampling (n = 1, the same method and rule) on the same prompts, at the single
    draft's best K, at the same K and at the same target budget (K = n x K, where swept), paired
    within prompt (ratio = single's time / the multi-draft time; > 1: multi-draft is faster)."""
    pairs = paired_runs(records, value)
    if "n_drafts" not in pairs:
        return pd.DataFrame()
    keys = present(pairs, [*CONDITION, *(c for c in KNOBS if c not in ("k", "n_drafts"))])
    out = []
    for key, g in pairs[pairs.k > 0].groupby(keys, sort=True, dropna=False):
        single = g[g.n_drafts == 1]
        if single.empty or not (g.n_drafts > 1).any():
            continue
        best, _ = best_k(single)
        times = g.groupby(["prompt_id", "repeat", "n_drafts", "k"])[value].mean()
        times = times.unstack(["n_drafts", "k"])
        for n, k in sorted(c for c in times.columns if c[0] > 1):
            for against, ref in (("best K", best), ("same K", k), ("same budget", n * k)):
                if (1, ref) in times:
                    out.append(dict(zip(keys, key, strict=True)) | {
                        "n_drafts": n, "k": k, "against": against, "single_k": ref,
                        **contrast(times, (1, ref), (n, k))})  # fmt: skip
    return pd.DataFrame(out)


def rule_contrasts(records: pd.DataFrame, value: str = "ms_per_token") -> pd.DataFrame:
    """Per condition where multi-draft ran under two draft rules (each job over its own
    baseline): every n > 1 drafts x K of one rule against the other, paired within prompt on
    speedups (ratio = `drafts_mode`'s speedup / `against`'s; > 1: `drafts_mode` is faster)."""
    pairs = paired_runs(records, value)
    if "drafts_mode" not in pairs or pairs.drafts_mode.nunique() < 2:
        return pd.DataFrame()
    keys = present(pairs, [*CONDITION, "method", "paired_with", "draft"])
    out = []
    for key, g in pairs[(pairs.n_drafts > 1) & (pairs.k > 0)].groupby(keys, sort=True):
        index = ["prompt_id", "repeat", "n_drafts", "k", "drafts_mode"]
        logs = np.log(g.ratio).groupby([g[c] for c in index]).mean().unstack("drafts_mode")
        for first, second in combinations(sorted(logs.columns), 2):
            both = logs[[first, second]].dropna()
            for (n, k), rows in both.groupby(level=["n_drafts", "k"]):
                logs_ratio = (rows[first] - rows[second]).groupby(level="prompt_id").mean()
                stat = ratio_interval(logs_ratio)
                out.append(dict(zip(keys, key, strict=True)) | {
                    "n_drafts": n, "k": k, "drafts_mode": first, "against": second,
                    **stat, "distinguishable": clear(stat)})  # fmt: skip
    return pd.DataFrame(out)


def method_contrasts(
    records: pd.DataFrame, value: str = "ms_per_token", skip: Collection[frozenset] = ()
) -> pd.DataFrame:
    """Per condition and K: every two methods paired with the same baseline on the same prompts
    (prompt lookup against speculative sampling, say), within prompt (ratio = `against`'s time
    / `method`'s; > 1: `method` is faster). A method run with several knob settings in one
    condition (a multi-draft sweep: `draft_contrasts`) and the pairs in `skip` are left out."""
    pairs = paired_runs(records, value)
    keys = present(pairs, [*CONDITION, "paired_with", "k"])
    knobs = present(pairs, [c for c in KNOBS if c not in ("method", "paired_with", "k")])
    out = []
    for key, g in pairs[pairs.k > 0].groupby(keys, sort=True, dropna=False):
        settings = g.groupby("method")[knobs].nunique(dropna=False).max(axis=1) if knobs else None
        single = [m for m in g.method.unique() if settings is None or settings[m] == 1]
        times = g.groupby(["prompt_id", "repeat", "method"])[value].mean().unstack("method")
        for first, second in combinations(sorted(single), 2):
            both = times[[first, second]].dropna()
            if both.empty or frozenset((first, second)) in skip:
                continue
            out.append(dict(zip(keys, key, strict=True)) | {
                "method": first, "against": second, **contrast(both, second, first)})  # fmt: skip
    return pd.DataFrame(out)
