"""Table 1 of Chen et al. 2023: quality, ms per token and speedup per method, task and sampling.

Quality is ROUGE-2 (XSum rows) or pass@1 (HumanEval rows), whichever the rows carry. A method's
and its baseline's quality are compared on the same runs (`stats.paired_runs`); differences are
averaged per prompt first, so repeats of a prompt count once in the test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as tests

from .. import stats
from .aggregate import drafting, normalize, summary

METRICS = {"rouge2": "ROUGE-2", "passed": "pass@1"}
WILCOXON = "Wilcoxon signed-rank on per-prompt differences"
SIGN = "exact sign test (McNemar) on per-prompt differences"
# One block of rows per condition: a run with two backends (e.g. kernel and eager) reports each
# backend's baseline on its own row, never their runs pooled.
TABLE_KEY = stats.CONDITION


def quality_metric(frame: pd.DataFrame) -> str | None:
    """The quality column these rows carry values for: rouge2, else passed, else None."""
    for column in METRICS:
        if column in frame and frame[column].notna().any():
            return column
    return None


def _quality(frame: pd.DataFrame, metric: str | None) -> dict:
    """Mean quality with a bootstrap CI over prompts (the range under 10 prompts)."""
    if metric is None:
        return {"metric": None, "quality": np.nan, "quality_low": np.nan, "quality_high": np.nan,
                "quality_interval": ""}  # fmt: skip
    rows = frame[frame[metric].notna()]
    low, high, label = stats.prompt_interval(rows[metric], rows.prompt_id)
    value = float(rows[metric].mean())
    return {"metric": METRICS[metric], "quality": value, "quality_low": low, "quality_high": high,
            "quality_interval": label}  # fmt: skip


def paired_test(diffs: pd.DataFrame, metric: str) -> tuple[str, float]:
    """(test name, p-value) of H0 'method and baseline quality equal' on per-prompt mean
    differences."""
    per_prompt = diffs.groupby("prompt_id").diff_.mean().to_numpy()
    nonzero = per_prompt[per_prompt != 0]
    if metric == "passed":
        wins = int((nonzero > 0).sum())
        p = tests.binomtest(wins, len(nonzero), 0.5).pvalue if len(nonzero) else 1.0
        return SIGN, float(p)
    p = tests.wilcoxon(nonzero).pvalue if len(nonzero) else 1.0
    return WILCOXON, float(p)


def quality_comparison(runs: pd.DataFrame, metric: str | None) -> dict:
    """A method's quality minus its baseline's on the same runs: mean, CI, test, p-value."""
    empty = {"quality_diff": np.nan, "quality_diff_low": np.nan, "quality_diff_high": np.nan,
             "quality_detectable": np.nan}  # fmt: skip
    if metric is None:
        return empty | {"test": None, "p_value": np.nan}
    pairs = stats.paired_runs(runs[runs[metric].notna()], value=metric)
    if pairs.empty:
        return empty | {"test": None, "p_value": np.nan}
    pairs["diff_"] = pairs[metric] - pairs[f"base_{metric}"]
    low, high, label = stats.prompt_interval(pairs.diff_, pairs.prompt_id)
    test, p = paired_test(pairs, metric)
    diff = float(pairs.diff_.mean())
    per_prompt = pairs.groupby("prompt_id").diff_.mean()
    detectable = stats.detectable_difference(float(per_prompt.std(ddof=1)), len(per_prompt))
    interval = {"quality_diff": diff, "quality_diff_low": low, "quality_diff_high": high,
                "quality_diff_interval": label, "quality_detectable": detectable}  # fmt: skip
    return interval | {"test": test, "p_value": p}


def _row(mine: pd.DataFrame, key: dict, metric: str | None) -> dict:
    """Columns every Table 1 row has: keys, counts, quality, median ms per token."""
    return key | {
        "n_prompts": mine.prompt_id.nunique(),
        "n_runs": len(mine),
        **_quality(mine, metric),
        "ms_per_token": float(mine.ms_per_token.median()),
    }


SPEEDUP = ["speedup", "speedup_low", "speedup_high", "speedup_median", "speedup_interval"]
DECODE = [f"decode_{c}" for c in SPEEDUP]  # the same over ms per token after the first emission


def _equal(column: pd.Series, value: object) -> pd.Series:
    """column == value, where a missing value matches a missing value."""
    return column.isna() if pd.isna(value) else column == value


def _condition_rows(frame: pd.DataFrame, table: pd.DataFrame, key: dict) -> list[dict]:
    """Table 1 rows of one condition: each baseline, then each drafting method at each K."""
    metric = quality_metric(frame)
    methods = drafting(frame)
    baselines = sorted(set(methods.paired_with)) or sorted(set(frame.method))
    rows = [
        _row(frame[frame.method == b], key | {"method": b, "k": pd.NA}, metric) for b in baselines
    ]
    knobs = stats.present(methods, stats.KNOBS)
    for knob, mine in methods.groupby(knobs, sort=True, dropna=False):
        named = key | dict(zip(knobs, knob, strict=True))
        found = table.loc[np.logical_and.reduce([_equal(table[c], v) for c, v in named.items()])]
        columns = [c for c in SPEEDUP + DECODE if c in found]
        speed = found.iloc[0][columns].to_dict() if len(found) and "speedup" in found else {}
        runs = pd.concat([mine, frame[frame.method == named["paired_with"]]])
        rows.append(_row(mine, named, metric) | speed | quality_comparison(runs, metric))
    return rows


def table1(records: pd.DataFrame) -> pd.DataFrame:
    """Per condition and method (and K): quality + CI, median ms/token, speedup + interval, and
    the paired quality test against the baseline."""
    records = normalize(records)
    table = summary(records)
    rows = []
    keys = stats.present(records, TABLE_KEY)
    for key, frame in records.groupby(keys, sort=True, dropna=False):
        rows += _condition_rows(frame, table, dict(zip(keys, key, strict=True)))
    out = pd.DataFrame(rows)
    out["k"] = out["k"].astype("Int64")
    return out


def _interval(value: float, low: float, high: float, fmt: str, sign: bool = False) -> str:
    """'v [low, high]' with fmt, or '' for a missing value."""
    if pd.isna(value):
        return ""
    plus = "+" if sign else ""
    return f"{value:{plus}{fmt}} [{low:{plus}{fmt}}, {high:{plus}{fmt}}]"


def _range(label: object) -> str:
    """' range' after a bracket that is the range over prompts (n < 10), else nothing."""
    return " range" if label == stats.RANGE else ""


def format_table1(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as display strings: one 'value [95% CI]' cell per quantity."""
    out = pd.DataFrame()
    drafts = table.k.notna()
    n = table.get("n_drafts", pd.Series(1, index=table.index)).fillna(1).astype(int)
    width = np.where(n > 1, "n=" + n.astype(str) + ", ", "")  # multi-draft: n drafts of K
    out["Method"] = np.where(
        drafts, table.method + " (" + width + "K=" + table.k.astype(str) + ")", table.method
    )
    out["Task"], out["Sampling"], out["CPU"] = table.task, table.sampling, table.cpu_kind
    if "backend" in table:
        out["Backend"] = table.backend.fillna("")
    out["Metric"] = table.metric.fillna("")
    q = table.reindex(columns=["quality", "quality_low", "quality_high", "quality_interval"])
    out["Quality [95% CI; range if n < 10]"] = [
        _interval(*r[:3], ".3f") + _range(r[3]) for r in q.itertuples(index=False)
    ]
    out["ms/token (median)"] = table.ms_per_token.map("{:.2f}".format)
    s = table.get("speedup", pd.Series(np.nan, index=table.index))
    ci = zip(s, table.get("speedup_low", s), table.get("speedup_high", s), strict=True)
    method = table.get("speedup_interval", pd.Series("", index=table.index)).fillna("")
    out["Speedup, geometric mean [95% t CI; range if n < 10]"] = [
        _interval(*r, ".2f") + _range(m) for r, m in zip(ci, method, strict=True)
    ]
    median = table.get("speedup_median", pd.Series(np.nan, index=table.index))
    out["Speedup, median"] = [("" if pd.isna(m) else f"{m:.2f}") for m in median]
    if table.get("decode_speedup", pd.Series(dtype=float)).notna().any():
        r = table[DECODE[:3]].itertuples(index=False)
        out["Decode speedup, prefill excluded [95% t CI; range if n < 10]"] = [
            _interval(*v, ".2f") + _range(m) for v, m in zip(r, table[DECODE[4]], strict=True)
        ]
    d = table.reindex(
        columns=["quality_diff", "quality_diff_low", "quality_diff_high", "quality_diff_interval"]
    )
    out["Quality - baseline's [95% CI; range if n < 10]"] = [
        _interval(*r[:3], ".3f", True) + _range(r[3]) for r in d.itertuples(False)
    ]
    detects = table.reindex(columns=["quality_detectable"]).quality_detectable
    out["Detectable quality difference (80% power)"] = [
        "" if pd.isna(d) else f"±{d:.3f}" for d in detects
    ]
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
