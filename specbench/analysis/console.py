"""The short table printed at the end of a run: speed, acceptance and quality per task and K."""

from __future__ import annotations

import pandas as pd

from .perf import HF_PAIRS, paired

QUALITY = ("rouge2", "passed")  # XSum ROUGE-2 F, HumanEval pass@1


def _paired_ratio(records: pd.DataFrame, slow: str, fast: str) -> float:
    """Median over (job, prompt, repeat) of ms/token of `slow` over ms/token of `fast`."""
    return float(paired(records, slow, fast).median())


def summary_table(records: pd.DataFrame) -> str:
    """One line per (task, sampling, k): ms/token, median paired speedup, acceptance, quality;
    with bench.compare_hf also ours vs transformers' generate / assisted generation."""
    lines = []
    for (task, sampling, k), g in records.groupby(["task", "sampling", "k"]):
        sps, ar = g[g.method == "speculative"], g[g.method == "autoregressive"]
        row = {"task": task, "sampling": sampling, "k": k, "runs": len(sps) or len(ar)}
        row["ar_ms/tok"] = ar.ms_per_token.median() if len(ar) else float("nan")
        row["sps_ms/tok"] = sps.ms_per_token.median() if len(sps) else float("nan")
        if len(sps) and len(ar):
            row["speedup"] = _paired_ratio(g, "autoregressive", "speculative")
        if len(sps):
            row["accept"] = sps.accepted.sum() / max(sps.proposed.sum(), 1)
            row["alpha"] = sps.alpha.mean()
        for name, (theirs, ours) in HF_PAIRS.items():  # > 1: ours is faster than transformers'
            if {theirs, ours} <= set(g.method):
                row[name] = _paired_ratio(g, theirs, ours)
        for col in QUALITY:
            if col in g and g[col].notna().any():
                row[f"{col}_ar"] = ar[col].mean()
                row[f"{col}_sps"] = sps[col].mean()
        lines.append(row)
    return pd.DataFrame(lines).to_string(index=False, float_format=lambda v: f"{v:.3g}")
