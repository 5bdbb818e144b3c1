"""Task quality from records: pass@1 with a Wilson interval, mean ROUGE, greedy parity."""

from __future__ import annotations

import pandas as pd

from ..stats import wilson_interval

ROUGE = ("rouge1", "rouge2", "rougeL")


def pass_at_1(records: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """pass@1 per group (one sample per problem), with n, passes and the Wilson 95% interval."""
    rows = []
    for key, g in records.groupby(by):
        per_problem = g.groupby("prompt_id").passed.first()
        passes, n = int(per_problem.sum()), len(per_problem)
        low, high = wilson_interval(passes, n)
        rows.append(dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)))
        rows[-1] |= {"n": n, "passed": passes, "pass_at_1": passes / n, "low": low, "high": high}
    return pd.DataFrame(rows)


def rouge_means(records: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Mean ROUGE F-measures per group, with the number of documents."""
    grouped = records.groupby(by)
    return grouped[list(ROUGE)].mean().join(grouped.prompt_id.nunique().rename("n")).reset_index()


def greedy_parity(records: pd.DataFrame, method: str, baseline: str = "autoregressive") -> dict:
    """Token-for-token agreement of two greedy methods on the same prompts (raw text compared)."""
    column = "completion_raw" if "completion_raw" in records else "completion"
    wide = records.pivot_table(
        index=["prompt_id", "repeat"], columns="method", values=column, aggfunc="first"
    ).dropna(subset=[method, baseline])
    same = wide[method] == wide[baseline]
    return {"pairs": len(wide), "identical": int(same.sum()), "differ": list(wide.index[~same])}
