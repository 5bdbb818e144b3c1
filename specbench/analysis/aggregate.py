"""From records to the summary every report reads: one row per (condition, method, knobs).

The statistics themselves are in `specbench.stats`; this module only groups rows and names
columns. Rows of older runs get the columns they lack (their baseline from the method registry,
an 'unrecorded' CPU kind, the raw prompt format) so every committed result renders the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stats
from ..methods import annotate

QUALITY = ("rouge2", "passed")  # XSum ROUGE-2 F, HumanEval pass@1: their means per group
LEGACY_DEFAULTS = {
    "cpu_kind": "unrecorded", "cpu_model": "unrecorded", "prompt_format": "raw",
    "task_options": "", "n_drafts": 1, "drafts_mode": "", "draft": "",
}  # fmt: skip


def normalize(records: pd.DataFrame) -> pd.DataFrame:
    """Records with every column the analysis groups and pairs on."""
    records = annotate(records)
    for column, value in LEGACY_DEFAULTS.items():
        records = records.assign(**{column: records.get(column, value)})
        records[column] = records[column].fillna(value)
    return records


def drafting(records: pd.DataFrame) -> pd.DataFrame:
    """Rows of methods reported against a baseline (speculative sampling and its kin)."""
    return records[(records.paired_with != "") & (records.k > 0)]


def _group_stats(frame: pd.DataFrame) -> dict[str, float]:
    """Counts, time, loop latency and acceptance of one group's runs."""
    loop = stats.loop_ms(frame)
    drafts = bool((frame.k > 0).any())
    fill = stats.loop_fill(frame) if drafts else pd.Series(dtype=float)
    return {
        "n_prompts": frame.prompt_id.nunique(),
        "n_runs": len(frame),
        "max_new_tokens": frame.max_new_tokens.max(),
        "mean_new_tokens": frame.new_tokens.mean(),
        "ms_per_token": frame.ms_per_token.median(),
        "time_s": frame.wall_s.mean(),
        "time_s_std": frame.wall_s.std(),
        "loop_ms": loop.mean(),
        "loop_ms_std": loop.std(),
        "tokens_per_call": stats.tokens_per_call(frame),
        "acceptance_rate": stats.acceptance_rate(frame) if drafts else np.nan,
        "mean_accepted_length": stats.mean_accepted_length(frame) if drafts else np.nan,
        "acceptance_per_loop": fill.mean() if drafts else np.nan,
        "acceptance_per_loop_std": fill.std() if drafts else np.nan,
        "alpha": stats.alpha(frame) if drafts else np.nan,
    } | {q: frame[q].mean() for q in QUALITY if q in frame}


def _costs(records: pd.DataFrame, key: dict, frame: pd.DataFrame) -> dict[str, float]:
    """c and s(K) of a drafting group against its baseline's rows in the same condition."""
    if not key.get("paired_with"):
        return {}
    base = records[records.method == key["paired_with"]]
    for column in stats.present(records, stats.CONDITION):
        base = base[base[column] == key[column]]
    return stats.cost_ratios(frame, base) if len(base) else {}


def summary(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (condition, method, knobs): counts, times, loop ms, acceptance, alpha,
    c and s(K) against the baseline, and the paired speedup with its labelled interval (and,
    where rows time the first emission, `decode_speedup*`: the same over ms per token after it,
    the prompt's prefill excluded)."""
    records = normalize(records)
    keys = stats.group_keys(records)
    rows = []
    for key, frame in records.groupby(keys, sort=True, dropna=False):
        named = dict(zip(keys, key, strict=True))
        rows.append(named | _group_stats(frame) | _costs(records, named, frame))
    table = pd.DataFrame(rows)
    speed = stats.speedups(records)
    if len(speed) and records.get("decode_ms_per_token", pd.Series(dtype=float)).notna().any():
        decode = stats.speedups(records, "decode_ms_per_token")  # prefill excluded
        decode = decode.rename(columns=lambda c: f"decode_{c}" if c.startswith("speedup") else c)
        speed = speed.merge(decode, on=keys, how="left")
    return table.merge(speed, on=keys, how="left") if len(speed) else table


def series_label(row: pd.Series, many_drafts: bool) -> str:
    """'speculative' or 'speculative (draft X)' when a panel holds several drafts."""
    draft = f" ({row['draft']})" if many_drafts and row.get("draft") else ""
    n = row.get("n_drafts", 1)
    width = f", n={int(n)}" if pd.notna(n) and int(n) > 1 else ""
    return f"{row['method']}{draft}{width}"
