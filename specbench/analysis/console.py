"""The short table printed at the end of a run: speed, acceptance and quality per method."""

from __future__ import annotations

import pandas as pd

from .aggregate import summary
from .perf import comparisons, ratio_lines

COLUMNS = {
    "task": "task", "sampling": "sampling", "cpu_kind": "cpu", "method": "method", "k": "k",
    "n_runs": "runs", "ms_per_token": "ms/tok", "speedup": "speedup", "speedup_low": "low",
    "speedup_high": "high", "acceptance_rate": "accept", "alpha": "alpha",
    "rouge2": "rouge2", "passed": "pass@1",
}  # fmt: skip


def summary_table(records: pd.DataFrame) -> str:
    """One line per (condition, method, k): median ms/token, speedup with its interval over
    prompts (geometric mean; a range under 10 prompts), acceptance, alpha, mean quality;
    then ours vs transformers' same method where both ran."""
    table = summary(records)
    shown = table[[c for c in COLUMNS if c in table]].rename(columns=COLUMNS)
    text = shown.to_string(index=False, float_format=lambda v: f"{v:.3g}")
    ratios = comparisons(records)
    return "\n".join([text, *(ratio_lines(ratios) if len(ratios) else [])])
