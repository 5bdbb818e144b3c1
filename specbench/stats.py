"""Every statistic specbench reports, each defined once: pure pandas / numpy, no torch.

Rows are the tidy records of `runner`: one per (job, prompt, repeat, method). A row whose
`paired_with` names a method is compared with that method's row on the same run: the same
setting (task, prompt format and options, sampling, target, dtype, backend, budget, CPU kind)
and the same (prompt, repeat, seed), in any job, so one baseline per prompt serves a whole K
sweep. Runs that differ in anything but the method and its knobs are never paired.

The headline ratio is the geometric mean over prompts of per-prompt ratios (repeats of a prompt
averaged on the log scale first), with a t interval on the log ratios; the median is kept as a
secondary column. Over fewer than MIN_INTERVAL_PROMPTS prompts the interval is the range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats as sps

# What two runs must share to be compared (those columns the records have).
SETTING = [
    "experiment", "task", "prompt_format", "task_options", "sampling", "target", "dtype",
    "backend", "lean_decode", "pack_weights", "pad_decode", "max_new_tokens", "cpu_kind",
    "cpu_model",
]  # fmt: skip
RUN = ["prompt_id", "repeat", "seed"]
# A method's knobs: what tells apart its rows within one setting.
KNOBS = [
    "method", "paired_with", "k", "n_drafts", "drafts_mode", "draft", "int4_kernel",
    "draft_prompt_int8",
]  # fmt: skip
# How results are reported: one line per (condition, method, knobs); never pooled across CPUs
# (kinds, or generations of one kind: Zen 4 and Zen 5 speedups differ by 1.16x), backends or
# decode paths (eager and compiled kernels, lean and transformers' forward differ).
CONDITION = [
    "task", "sampling", "cpu_kind", "cpu_model", "backend", "lean_decode", "pack_weights",
    "pad_decode",
]  # fmt: skip
MIN_INTERVAL_PROMPTS = 10  # fewer prompts: report the range, not an interval
LEVEL = 0.95
HEADLINE = "geometric mean over prompts, 95% t interval on log ratios"
RANGE = "range over prompts (n < 10)"


def present(frame: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    """The columns of `columns` that frame has, in order."""
    return [c for c in columns if c in frame]


def group_keys(frame: pd.DataFrame) -> list[str]:
    """Columns of one reported line: the condition and the method's knobs."""
    return present(frame, [*CONDITION, *KNOBS])


# --- pairing -------------------------------------------------------------------------------


def paired_runs(records: pd.DataFrame, value: str = "ms_per_token") -> pd.DataFrame:
    """Each row with a `paired_with` beside its baseline's run: `base_<value>`, `<value>`, and
    `ratio` = baseline / method (a speedup for times). Same job first, else any job of the
    same setting (several baseline rows of one run are averaged)."""
    key = present(records, [*SETTING, *RUN])
    rows = records[records.paired_with.fillna("") != ""]
    extra = present(records, [*KNOBS, "job", *CONDITION])
    left = rows[list(dict.fromkeys([*key, *extra, value]))]
    base = records[records.method.isin(set(rows.paired_with))]
    base = base[[*key, "job", "method", value]].rename(
        columns={"method": "paired_with", value: f"base_{value}"}
    )
    same_job = left.merge(base, on=[*key, "job", "paired_with"], how="inner")
    rest = left.merge(same_job[[*key, "job", "method"]], how="left", indicator=True)
    rest = rest[rest._merge == "left_only"].drop(columns="_merge")
    pooled = base.groupby([*key, "paired_with"], as_index=False)[f"base_{value}"].mean()
    other_job = rest.merge(pooled, on=[*key, "paired_with"], how="inner")
    pairs = pd.concat([same_job, other_job], ignore_index=True)
    pairs["ratio"] = pairs[f"base_{value}"] / pairs[value]
    return pairs.sort_values(present(pairs, [*group_keys(pairs), *RUN])).reset_index(drop=True)


def fastest_baseline_runs(
    records: pd.DataFrame, value: str = "ms_per_token", across: Sequence[str] = ("backend",)
) -> pd.DataFrame:
    """Each row with a `paired_with` beside the fastest baseline of its run over the `across`
    columns (by default every backend's run of the baseline on the same prompt, repeat and
    seed): the speedup over the fastest baseline specbench could build, not only its own."""
    key = present(records, [c for c in [*SETTING, *RUN] if c not in across])
    rows = records[records.paired_with.fillna("") != ""]
    base = records[records.method.isin(set(rows.paired_with))]
    per_variant = base.groupby([*key, *present(base, across), "method"], as_index=False)[value]
    fastest = per_variant.mean().groupby([*key, "method"], as_index=False)[value].min()
    fastest = fastest.rename(columns={"method": "paired_with", value: f"base_{value}"})
    pairs = rows.merge(fastest, on=[*key, "paired_with"], how="inner")
    pairs["ratio"] = pairs[f"base_{value}"] / pairs[value]
    return pairs


def per_prompt_log_ratio(pairs: pd.DataFrame) -> pd.Series:
    """Mean log ratio per prompt (its repeats averaged first), indexed by prompt_id."""
    return np.log(pairs.ratio).groupby(pairs.prompt_id).mean()


def ratio_interval(log_ratios: ArrayLike, level: float = LEVEL) -> dict[str, object]:
    """Headline ratio of per-prompt log ratios: geometric mean, its interval, median, n."""
    logs = np.asarray(log_ratios, dtype=float)
    logs = logs[np.isfinite(logs)]
    n = len(logs)
    if n == 0:
        nan = float("nan")
        return {"ratio": nan, "ratio_low": nan, "ratio_high": nan, "ratio_median": nan,
                "ratio_interval": "", "n_prompts": 0}  # fmt: skip
    centre = float(np.exp(logs.mean()))
    if n < MIN_INTERVAL_PROMPTS:
        low, high, label = float(np.exp(logs.min())), float(np.exp(logs.max())), RANGE
    else:
        half = sps.t.ppf(0.5 + level / 2, n - 1) * logs.std(ddof=1) / math.sqrt(n)
        low, high, label = (
            float(np.exp(logs.mean() - half)),
            float(np.exp(logs.mean() + half)),
            HEADLINE,
        )
    return {"ratio": centre, "ratio_low": low, "ratio_high": high,
            "ratio_median": float(np.exp(np.median(logs))), "ratio_interval": label,
            "n_prompts": n}  # fmt: skip


def speedups(
    records: pd.DataFrame, value: str = "ms_per_token", across: Sequence[str] = ()
) -> pd.DataFrame:
    """One row per (condition, method, knobs) with a baseline: the speedup and its interval
    (columns `speedup`, `speedup_low`, `speedup_high`, `speedup_median`, `speedup_interval`).
    With `across` (e.g. ("backend",)): over the fastest baseline of each run among those
    variants (`fastest_baseline_runs`), one row per variant of the method."""
    pairs = fastest_baseline_runs(records, value, across) if across else paired_runs(records, value)
    keys = present(pairs, [*group_keys(pairs), *across])
    rows = []
    for key, g in pairs.groupby(keys, sort=True, dropna=False):
        stat = ratio_interval(per_prompt_log_ratio(g))
        named = {k.replace("ratio", "speedup", 1): v for k, v in stat.items()}
        named["speedup_n_prompts"] = named.pop("n_prompts")
        rows.append(dict(zip(keys, key, strict=True)) | named)
    return pd.DataFrame(rows)


def throughput(records: pd.DataFrame) -> pd.DataFrame:
    """Tokens per second per (condition, method, knobs): the geometric mean over prompts of each
    run's new tokens / wall time (prefill included), its interval as `ratio_interval`'s
    (columns `tokens_per_s`, `tokens_per_s_low`, `_high`, `_median`, `_interval`, `n_prompts`)."""
    keys = group_keys(records)
    rows = []
    for key, g in records.groupby(keys, sort=True, dropna=False):
        logs = np.log(1000.0 / g.ms_per_token).groupby(g.prompt_id).mean()
        stat = ratio_interval(logs)
        named = {k.replace("ratio", "tokens_per_s", 1): v for k, v in stat.items()}
        named["tokens_per_s_interval"] = named["tokens_per_s_interval"].replace(
            "log ratios", "log tokens/s"
        )
        rows.append(dict(zip(keys, key, strict=True)) | named)
    return pd.DataFrame(rows)


def precision(records: pd.DataFrame, method: str, k: int, level: float = LEVEL) -> dict:
    """The headline speedup of `method` at K = k over its baseline (`ratio_interval`) with its
    half-width in ratio units (the wider side; inf while it is a range, n < 10) and the sd of
    the per-prompt log ratios (what sizes a run: `prompts_needed`)."""
    pairs = paired_runs(records)
    logs = per_prompt_log_ratio(pairs[(pairs.method == method) & (pairs.k == k)])
    stat = ratio_interval(logs, level)
    interval = stat["ratio_interval"] == HEADLINE
    half = max(stat["ratio_high"] - stat["ratio"], stat["ratio"] - stat["ratio_low"])
    sd = float(logs.std(ddof=1)) if len(logs) > 1 else math.nan
    return stat | {"half_width": half if interval else math.inf, "sd_log": sd}


def prompts_needed(sd_log: float, half_width: float, ratio: float, level: float = LEVEL) -> int:
    """Prompts for a `level` interval of +-half_width (ratio units) around `ratio`, from the
    per-prompt sd of log ratios: ceil((z * sd_log / (half_width / ratio))^2)."""
    z = sps.norm.ppf(0.5 + level / 2)
    return max(2, math.ceil((z * sd_log * ratio / half_width) ** 2))


def detectable_difference(
    sd_diff: float, n: int, level: float = LEVEL, power: float = 0.8
) -> float:
    """The smallest paired mean difference n prompts detect with `power` at a two-sided `level`
    test, from the sd of per-prompt differences: (z_level + z_power) * sd / sqrt(n). (A 5-point
    pass@1 difference with sd 0.55 needs ~940 problems.)"""
    if n < 2 or not math.isfinite(sd_diff):
        return math.nan
    z = sps.norm.ppf(0.5 + level / 2) + sps.norm.ppf(power)
    return float(z * sd_diff / math.sqrt(n))


BUSY_MARGIN = 0.5  # load above the cores the timing itself fills, plus this: other work


def busy_rows(records: pd.DataFrame) -> pd.Series:
    """Rows timed beside other work: the 1-minute load above the machine's cores (a 2-thread
    timing keeps a 2-core machine near 2) by more than BUSY_MARGIN."""
    if "load_1m" not in records or "cpu_cores" not in records:
        return pd.Series(False, index=records.index)
    return records.load_1m > records.cpu_cores + BUSY_MARGIN


# --- acceptance and cost -------------------------------------------------------------------


def acceptance_rate(frame: pd.DataFrame) -> float:
    """Accepted over proposed draft tokens, pooled over the rows."""
    proposed = frame.proposed.sum()
    return float(frame.accepted.sum() / proposed) if proposed else float("nan")


def mean_accepted_length(frame: pd.DataFrame) -> float:
    """vLLM's mean acceptance length: 1 + accepted tokens / drafts (iterations that drafted)."""
    total = frame.get("drafts", frame.target_calls).sum()
    return float(1 + frame.accepted.sum() / total) if total else float("nan")


def tokens_per_call(frame: pd.DataFrame) -> float:
    """New tokens per target forward, pooled over the rows."""
    calls = frame.target_calls.sum()
    return float(frame.new_tokens.sum() / calls) if calls else float("nan")


def alpha(frame: pd.DataFrame) -> float:
    """Mean per-run alpha (the mean expected acceptance beta over tested draft positions)."""
    return float(frame.alpha.mean()) if "alpha" in frame and len(frame) else float("nan")


def loop_ms(frame: pd.DataFrame) -> pd.Series:
    """Milliseconds per target call (one loop) per row: draft + target + bookkeeping time."""
    return 1e3 * (frame.draft_s + frame.target_s + frame.overhead_s) / frame.target_calls


def ms_per_call(frame: pd.DataFrame) -> pd.Series:
    """Wall milliseconds per target call per row, for any engine (transformers' rows have one
    total, no split): the cost of equal work when two methods draw different accepted lengths."""
    return 1e3 * frame.wall_s / frame.target_calls.where(frame.target_calls > 0)


def per_call_s(frame: pd.DataFrame, seconds: str, calls: str) -> float:
    """Seconds per call, pooled over rows (sum of seconds over sum of calls)."""
    total = frame[calls].sum()
    return float(frame[seconds].sum() / total) if total else float("nan")


def cost_ratios(method_rows: pd.DataFrame, base_rows: pd.DataFrame) -> dict[str, float]:
    """c = draft call / baseline target call; s = method's target call / baseline's (s(K));
    NaN where the baseline's calls are not timed apart (an external engine's)."""
    base = per_call_s(base_rows, "target_s", "target_calls") or float("nan")
    return {
        "c": per_call_s(method_rows, "draft_s", "draft_calls") / base,
        "scoring_cost": per_call_s(method_rows, "target_s", "target_calls") / base,
        "base_call_ms": 1e3 * base,
        "draft_call_ms": 1e3 * per_call_s(method_rows, "draft_s", "draft_calls"),
    }


def acceptance_by_position(
    iterations: pd.DataFrame, by: Sequence[str] = ("method", "k", "n_drafts")
) -> pd.DataFrame:
    """P(draft i accepted | drafts 1..i-1 accepted and i proposed), per group of `by` (an
    iteration's `k` is the drafts it proposed)."""
    keys = present(iterations, list(by))
    rows = []
    for key, g in iterations.groupby(keys):
        for i in range(1, int(g.k.max()) + 1):
            reached = g[(g.k >= i) & (g.accepted >= i - 1)]
            rate = float((reached.accepted >= i).mean()) if len(reached) else float("nan")
            rows.append(dict(zip(keys, np.atleast_1d(key), strict=True)) | {
                "position": i, "rate": rate, "n": len(reached)})  # fmt: skip
    return pd.DataFrame(rows)


# --- generic intervals ---------------------------------------------------------------------


def bootstrap_ci(
    values: ArrayLike,
    stat: Callable = np.mean,
    groups: ArrayLike | None = None,
    n_boot: int = 2000,
    level: float = LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of stat(values); resamples whole groups (prompts) if given."""
    values = np.asarray(values, dtype=float)
    labels = np.arange(len(values)) if groups is None else np.asarray(groups)
    keep = ~np.isnan(values)
    values, labels = values[keep], labels[keep]
    if len(values) == 0:
        return (float("nan"), float("nan"))
    names, inverse = np.unique(labels, return_inverse=True)
    members = [values[inverse == g] for g in range(len(names))]
    picks = np.random.default_rng(seed).integers(0, len(names), size=(n_boot, len(names)))
    draws = [stat(np.concatenate([members[g] for g in row])) for row in picks]
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return (float(low), float(high))


BOOTSTRAP = "95% percentile bootstrap over prompts"


def prompt_interval(values: ArrayLike, groups: ArrayLike) -> tuple[float, float, str]:
    """(low, high, label) of the mean of `values` grouped by prompt: a bootstrap interval that
    resamples prompts, or under MIN_INTERVAL_PROMPTS prompts the range of per-prompt means."""
    frame = pd.DataFrame({"value": np.asarray(values, dtype=float), "group": np.asarray(groups)})
    per_prompt = frame.dropna().groupby("group").value.mean()
    if len(per_prompt) < MIN_INTERVAL_PROMPTS:
        return float(per_prompt.min()), float(per_prompt.max()), RANGE
    return (*bootstrap_ci(frame.value, np.mean, groups=frame.group), BOOTSTRAP)


def wilson_interval(successes: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (nan, nan) for n = 0."""
    if n == 0:
        return math.nan, math.nan
    z = sps.norm.ppf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def loop_fill(frame: pd.DataFrame) -> pd.Series:
    """Per row: tokens per loop over K+1 (the paper's Fig. 1 middle); each loop emits its
    accepted drafts plus one target token."""
    return (frame.accepted + frame.target_calls) / (frame.target_calls * (frame.k + 1))


def binomial_range(p: ArrayLike, n: int, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The central `level` range of a sampled proportion under exact sampling at p, n draws."""
    p = np.asarray(p, dtype=float)
    tail = (1 - level) / 2
    return sps.binom.ppf(tail, n, p) / n, sps.binom.ppf(1 - tail, n, p) / n
