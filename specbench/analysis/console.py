"""The short table printed at the end of a run: speed, acceptance and quality per task and K."""

from __future__ import annotations

import pandas as pd

QUALITY = ("rouge2", "passed")  # XSum ROUGE-2 F, HumanEval pass@1


def _paired_speedup(records: pd.DataFrame) -> pd.Series:
    wide = records.pivot_table(
        index=["job", "prompt_id", "repeat"], columns="method", values="ms_per_token"
    )
    return wide["autoregressive"] / wide["speculative"]


def summary_table(records: pd.DataFrame) -> str:
    """One line per (task, sampling, k): ms/token, median paired speedup, acceptance, quality."""
    lines = []
    for (task, sampling, k), g in records.groupby(["task", "sampling", "k"]):
        sps, ar = g[g.method == "speculative"], g[g.method == "autoregressive"]
        row = {"task": task, "sampling": sampling, "k": k, "runs": len(sps) or len(ar)}
        row["ar_ms/tok"] = ar.ms_per_token.median() if len(ar) else float("nan")
        row["sps_ms/tok"] = sps.ms_per_token.median() if len(sps) else float("nan")
        if len(sps) and len(ar):
            row["speedup"] = _paired_speedup(g).median()
        if len(sps):
            row["accept"] = sps.accepted.sum() / max(sps.proposed.sum(), 1)
            row["alpha"] = sps.alpha.mean()
        for col in QUALITY:
            if col in g and g[col].notna().any():
                row[f"{col}_ar"] = ar[col].mean()
                row[f"{col}_sps"] = sps[col].mean()
        lines.append(row)
    return pd.DataFrame(lines).to_string(index=False, float_format=lambda v: f"{v:.3g}")
