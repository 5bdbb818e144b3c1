"""Ours vs another engine's version of the same method, and where the loop's time goes.

`comparisons`: per condition and K, the other engine's ms/token over ours, paired on the same
runs (`stats.paired_runs`), for every registry method with a `compare_with`: > 1 means ours is
faster. `time_split`: our drafting loop's wall time split into draft (forwards + sampling),
target (forwards) and bookkeeping (logits -> probs, verify, rollback, stop checks). Both are
functions of records.parquet only.
"""

from __future__ import annotations

import pandas as pd

from .. import stats
from ..methods import METHODS
from .aggregate import drafting, normalize

SPLIT_KEY = ["task", "sampling", "cpu_kind", "method", "k"]
PER_CALL = "ms_per_call"
RATIO_COLUMNS = ("ratio", "ratio_low", "ratio_high")


# Each method with another engine's version of it: `comparisons` sets them side by side.
COMPARED = frozenset(frozenset((n, e.compare_with)) for n, e in METHODS.items() if e.compare_with)


def comparisons(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (condition, k, ours vs theirs): the headline ratio and its interval."""
    records = normalize(records)
    rows = []
    for name, entry in METHODS.items():
        theirs = entry.compare_with
        if not theirs or not {name, theirs} <= set(records.method):
            continue
        mine = records[records.method == name].assign(paired_with=theirs)
        other = records[records.method == theirs].assign(paired_with="")
        both = pd.concat([mine, other], ignore_index=True)
        pairs = stats.paired_runs(both)
        per_call = stats.paired_runs(both.assign(ms_per_call=stats.ms_per_call(both)), PER_CALL)
        keys = stats.present(pairs, ["task", "sampling", "cpu_kind", "k"])
        for key, g in pairs.groupby(keys, sort=True):
            here = _rows_of(records, keys, key)  # this condition's rows only
            calls = {m: stats.tokens_per_call(here[here.method == m]) for m in (name, theirs)}
            work = _rows_of(per_call, keys, key)
            rows.append(
                dict(zip(keys, key, strict=True))
                | {"comparison": f"{name} vs {theirs}", "ours": name, "theirs": theirs}
                | stats.ratio_interval(stats.per_prompt_log_ratio(g))
                | {"tokens_per_call_ours": calls[name], "tokens_per_call_theirs": calls[theirs]}
                | _per_call_ratio(work)
            )
    return pd.DataFrame(rows)


def _rows_of(frame: pd.DataFrame, keys: list[str], key: tuple) -> pd.DataFrame:
    """The rows of `frame` whose `keys` columns equal `key`."""
    return frame.loc[(frame[keys] == pd.Series(key, index=keys)).all(axis=1)]


def _per_call_ratio(pairs: pd.DataFrame) -> dict[str, float]:
    """Their ms per target call over ours, paired per prompt: the ratio at equal work (under
    sampling each engine draws its own accepted lengths, so ms/token also differs by luck)."""
    stat = stats.ratio_interval(stats.per_prompt_log_ratio(pairs))
    return {f"per_call_{k.removeprefix('ratio_')}": stat[k] for k in RATIO_COLUMNS}


def time_split(records: pd.DataFrame) -> pd.DataFrame:
    """Our drafting rows: % of wall time in draft / target / bookkeeping, and ms per loop."""
    ours = drafting(normalize(records))
    ours = ours[ours.target_s > 0]  # transformers' rows have one total, no split
    if ours.empty:
        return pd.DataFrame()
    calls = ours.target_calls.clip(lower=1)
    parts = ours.assign(
        draft_pct=100 * ours.draft_s / ours.wall_s,
        target_pct=100 * ours.target_s / ours.wall_s,
        bookkeeping_pct=100 * ours.overhead_s / ours.wall_s,
        loop_ms=stats.loop_ms(ours),
        bookkeeping_ms_per_loop=1e3 * ours.overhead_s / calls,
    )
    cols = ["draft_pct", "target_pct", "bookkeeping_pct", "loop_ms", "bookkeeping_ms_per_loop"]
    keys = stats.present(parts, SPLIT_KEY)
    out = parts.groupby(keys)[cols].median()
    out["bookkeeping_pct_max"] = parts.groupby(keys).bookkeeping_pct.max()
    return out.reset_index()


def ratio_lines(ratios: pd.DataFrame) -> list[str]:
    """`speculative vs hf_assisted  xsum greedy K=4: 1.07x [1.01, 1.12] (range, n=4)` lines."""
    return [
        f"{r.comparison:28s} {r.task} {r.sampling} K={r.k}: {r.ratio:.3f}x "
        f"[{r.ratio_low:.3f}, {r.ratio_high:.3f}] ({r.ratio_interval}, n={r.n_prompts}); "
        f"per target call {r.per_call_ratio:.3f}x [{r.per_call_low:.3f}, {r.per_call_high:.3f}]"
        for r in ratios.itertuples(index=False)
    ]
