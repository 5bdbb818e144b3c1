"""Table 1 of Chen et al. 2023: quality, ms per token and speedup per method, task and sampling.

Quality is ROUGE-2 (XSum rows) or pass@1 (HumanEval rows), whichever the rows carry. SpS and
AR quality are compared on the same (job, prompt, repeat) runs; differences are averaged per
prompt first, so repeats of a prompt count once in the test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from .aggregate import AR, PAIR, SPS, bootstrap_ci, paired_speedups, speedup_interval

METRICS = {"rouge2": "ROUGE-2", "passed": "pass@1"}
WILCOXON = "Wilcoxon signed-rank on per-prompt differences"
SIGN = "exact sign test (McNemar) on per-prompt differences"


def quality_metric(frame: pd.DataFrame) -> str | None:
    """The quality column these rows carry values for: rouge2, else passed, else None."""
    for column in METRICS:
        if column in frame and frame[column].notna().any():
            return column
    return None


def _quality(frame: pd.DataFrame, metric: str | None) -> dict:
    """Mean quality with a percentile-bootstrap CI that resamples prompts."""
    if metric is None:
        return {"metric": None, "quality": np.nan, "quality_low": np.nan, "quality_high": np.nan}
    rows = frame[frame[metric].notna()]
    low, high = bootstrap_ci(rows[metric], np.mean, groups=rows.prompt_id)
    value = float(rows[metric].mean())
    return {"metric": METRICS[metric], "quality": value, "quality_low": low, "quality_high": high}


def paired_test(diffs: pd.DataFrame, metric: str) -> tuple[str, float]:
    """(test name, p-value) of H0 'SpS and AR quality equal' on per-prompt mean differences."""
    per_prompt = diffs.groupby("prompt_id").diff_.mean().to_numpy()
    nonzero = per_prompt[per_prompt != 0]
    if metric == "passed":
        wins = int((nonzero > 0).sum())
        p = stats.binomtest(wins, len(nonzero), 0.5).pvalue if len(nonzero) else 1.0
        return SIGN, float(p)
    p = stats.wilcoxon(nonzero).pvalue if len(nonzero) else 1.0
    return WILCOXON, float(p)


def quality_comparison(records: pd.DataFrame, metric: str | None) -> dict:
    """SpS minus AR quality on the same runs: mean, bootstrap CI, test and p-value."""
    empty = {"quality_diff": np.nan, "quality_diff_low": np.nan, "quality_diff_high": np.nan}
    if metric is None:
        return empty | {"test": None, "p_value": np.nan}
    sps = records.loc[records.method == SPS, [*PAIR, metric]]
    ar = records.loc[records.method == AR, [*PAIR, metric]]
    pairs = sps.merge(ar, on=PAIR, suffixes=("_sps", "_ar"), validate="one_to_one").dropna()
    if pairs.empty:
        return empty | {"test": None, "p_value": np.nan}
    pairs["diff_"] = pairs[f"{metric}_sps"] - pairs[f"{metric}_ar"]
    low, high = bootstrap_ci(pairs.diff_, np.mean, groups=pairs.prompt_id)
    test, p = paired_test(pairs, metric)
    diff = float(pairs.diff_.mean())
    interval = {"quality_diff": diff, "quality_diff_low": low, "quality_diff_high": high}
    return interval | {"test": test, "p_value": p}


def _row(method: str, key: tuple, frame: pd.DataFrame, metric: str | None) -> dict:
    """Columns every Table 1 row has: keys, counts, quality, median ms per token."""
    task, sampling, k = key
    mine = frame[frame.method == method]
    return {"method": method, "task": task, "sampling": sampling, "k": k} | {
        "n_prompts": mine.prompt_id.nunique(),
        "n_runs": len(mine),
        **_quality(mine, metric),
        "ms_per_token": float(mine.ms_per_token.median()),
    }


def table1(records: pd.DataFrame) -> pd.DataFrame:
    """Per (method, task, sampling[, K]): quality + CI, median ms/token, speedup + CI, test."""
    pairs = paired_speedups(records)
    rows = []
    for (task, sampling), frame in records.groupby(["task", "sampling"], sort=True):
        metric = quality_metric(frame)
        if (frame.method == AR).any():
            rows.append(_row(AR, (task, sampling, pd.NA), frame, metric))
        for k, jobs in frame[frame.method == SPS].groupby("k", sort=True):
            runs = frame[frame.job.isin(jobs.job.unique())]
            mine = pairs[(pairs.task == task) & (pairs.sampling == sampling) & (pairs.k == k)]
            row = _row(SPS, (task, sampling, int(k)), runs, metric) | speedup_interval(mine)
            rows.append(row | quality_comparison(runs, metric))
    table = pd.DataFrame(rows)
    table["k"] = table["k"].astype("Int64")
    return table


def _interval(value: float, low: float, high: float, fmt: str, sign: bool = False) -> str:
    """'v [low, high]' with fmt, or '' for a missing value."""
    if pd.isna(value):
        return ""
    plus = "+" if sign else ""
    return f"{value:{plus}{fmt}} [{low:{plus}{fmt}}, {high:{plus}{fmt}}]"


def format_table1(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as display strings: one 'value [95% CI]' cell per quantity."""
    out = pd.DataFrame()
    is_sps = table.method == SPS
    out["Method"] = np.where(is_sps, "SpS (K=" + table.k.astype(str) + ")", "ArS")
    out["Task"], out["Sampling"] = table.task, table.sampling
    out["Metric"] = table.metric.fillna("")
    q = table[["quality", "quality_low", "quality_high"]].itertuples(index=False)
    out["Quality [95% CI]"] = [_interval(*r, ".3f") for r in q]
    out["ms/token (median)"] = table.ms_per_token.map("{:.2f}".format)
    s = table.get("speedup", pd.Series(np.nan, index=table.index))
    ci = zip(s, table.get("speedup_low", s), table.get("speedup_high", s), strict=True)
    method = table.get("speedup_interval", pd.Series("", index=table.index)).fillna("")
    out["Speedup [95% CI, or min-max if n < 10]"] = [
        _interval(*r, ".2f") + (" min-max" if m == "min-max" else "")
        for r, m in zip(ci, method, strict=True)
    ]
    d = table.reindex(columns=["quality_diff", "quality_diff_low", "quality_diff_high"])
    out["SpS - ArS quality [95% CI]"] = [_interval(*r, ".3f", True) for r in d.itertuples(False)]
    tests = table.reindex(columns=["test", "p_value"]).itertuples(index=False)
    out["Paired test, H0 equal quality (p)"] = [
        "" if pd.isna(t) else f"{t} (p={p:.3g})" for t, p in tests
    ]
    return out


def _cell(value, floatfmt: str) -> str:
    """A markdown cell: floats formatted, missing values empty, pipes escaped."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if isinstance(value, float | np.floating):
        return format(value, floatfmt)
    return str(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """A GitHub pipe table of df (numbers right-aligned); needs no tabulate."""
    cells = [[_cell(v, floatfmt) for v in row] for row in df.itertuples(index=False)]
    header = [_cell(str(c), floatfmt) for c in df.columns]
    numeric = [pd.api.types.is_numeric_dtype(df[c]) for c in df.columns]
    rule = ["---:" if n else "---" for n in numeric]
    lines = [header, rule, *cells]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines) + "\n"
