"""Ours vs transformers and where the loop's time goes: the numbers issue-style perf targets use.

`hf_ratios`: per (task, sampling, K), transformers' ms/token over ours, paired on the same
(job, prompt, repeat): > 1 means ours is faster. `time_split`: the speculative loop's wall time
split into draft (forwards + sampling), target (forwards) and bookkeeping (logits -> probs,
verify, rollback, stop checks). Both are functions of records.parquet only.
"""

from __future__ import annotations

import pandas as pd

GROUP = ["task", "sampling", "k"]
# name -> (transformers' method, ours)
HF_PAIRS = {
    "ar_vs_hf": ("hf_generate", "autoregressive"),
    "sps_vs_hf": ("hf_assisted", "speculative"),
}


def paired(records: pd.DataFrame, slow: str, fast: str) -> pd.Series:
    """ms/token of `slow` over `fast` for every (job, prompt, repeat) that has both."""
    wide = records.pivot_table(
        index=["job", "prompt_id", "repeat"], columns="method", values="ms_per_token"
    )
    if slow not in wide or fast not in wide:
        return pd.Series(dtype=float)
    return (wide[slow] / wide[fast]).dropna()


def hf_ratios(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, sampling, k, comparison): median, min, max and n of the ratio.

    Grouped by job (the baselines' rows carry k=0); k is the job's speculative K.
    """
    rows = []
    for (task, sampling, _), g in records.groupby(["task", "sampling", "job"]):
        key = (task, sampling, int(g.k.max()))
        for name, (theirs, ours) in HF_PAIRS.items():
            ratio = paired(g, theirs, ours)
            if len(ratio):
                stats = dict(median=ratio.median(), min=ratio.min(), max=ratio.max(), n=len(ratio))
                tpc = g[g.method == theirs].tokens_per_call.mean()
                ours_tpc = g[g.method == ours].tokens_per_call.mean()
                extra = dict(tokens_per_call_hf=tpc, tokens_per_call_ours=ours_tpc)
                rows.append(dict(zip(GROUP, key, strict=True), comparison=name, **stats, **extra))
    return pd.DataFrame(rows)


def time_split(records: pd.DataFrame) -> pd.DataFrame:
    """Speculative rows: % of wall time in draft / target / bookkeeping, and ms per loop."""
    sps = records[records.method == "speculative"]
    if sps.empty:
        return pd.DataFrame()
    parts = sps.assign(
        draft_pct=100 * sps.draft_s / sps.wall_s,
        target_pct=100 * sps.target_s / sps.wall_s,
        bookkeeping_pct=100 * sps.overhead_s / sps.wall_s,
        loop_ms=1e3 * sps.wall_s / sps.target_calls.clip(lower=1),
        bookkeeping_ms_per_loop=1e3 * sps.overhead_s / sps.target_calls.clip(lower=1),
    )
    cols = ["draft_pct", "target_pct", "bookkeeping_pct", "loop_ms", "bookkeeping_ms_per_loop"]
    out = parts.groupby(GROUP)[cols].median()
    out["bookkeeping_pct_max"] = parts.groupby(GROUP).bookkeeping_pct.max()
    return out.reset_index()


def ratio_lines(ratios: pd.DataFrame) -> list[str]:
    """`sps_vs_hf  xsum greedy K=4: 1.07x (min 1.01, max 1.12, n=4)` lines, one per row."""
    return [
        f"{r.comparison:9s} {r.task} {r.sampling} K={r.k}: {r['median']:.3f}x "
        f"(min {r['min']:.3f}, max {r['max']:.3f}, n={r.n})"
        for _, r in ratios.iterrows()
    ]
