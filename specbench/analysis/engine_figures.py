"""Engines side by side: tokens per second of every method of every engine (specbench,
transformers, llama.cpp) on the same prompts, one panel per (task, sampling, CPU kind)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .. import stats
from ..methods import METHODS
from .aggregate import normalize
from .figures import PANEL, _finish, _grid, _in_panel, _panel_title, caption


def engine_of(method: str) -> str:
    """The registry's engine name of a method ('specbench' for rows of an unknown one)."""
    return METHODS[method].engine_name if method in METHODS else "specbench"


def engines_in(records: pd.DataFrame) -> set[str]:
    """The engines whose methods the records time."""
    return {engine_of(m) for m in records.method.unique()}


def _label(row: pd.Series) -> str:
    """'engine: method (K = k) [backend]' of one throughput line (llama.cpp runs its own
    kernels, so no torch backend there)."""
    k = f" (K = {int(row.k)})" if row.get("k", 0) and row.k > 0 else ""
    engine = engine_of(row.method)
    backend = "" if engine == "llama.cpp" else f" [{row.backend}]"
    return f"{engine}: {row.method}{k}{backend}"


def throughput_figure(records: pd.DataFrame) -> Figure:
    """Horizontal bars of tokens/s (geometric mean over prompts, prefill included) with their
    labelled interval, one bar per engine's method, fastest on top."""
    records = normalize(records)
    table = stats.throughput(records)
    keys = sorted(set(map(tuple, table[PANEL].values)))
    fig, axes = _grid(len(keys), width=7.0, height=0.5 * table.method.nunique() + 1.8)
    intervals = set()
    for ax, key in zip(axes, keys, strict=True):
        mine = _in_panel(table, key).sort_values("tokens_per_s")
        low = (mine.tokens_per_s - mine.tokens_per_s_low).clip(lower=0)
        high = (mine.tokens_per_s_high - mine.tokens_per_s).clip(lower=0)
        colors = [f"C{sorted(engines_in(records)).index(engine_of(m))}" for m in mine.method]
        ax.barh(range(len(mine)), mine.tokens_per_s, xerr=[low, high], color=colors, capsize=3)
        ax.set_yticks(range(len(mine)), [_label(r) for _, r in mine.iterrows()], fontsize=8)
        ends = zip(mine.tokens_per_s, mine.tokens_per_s_high, mine.n_prompts, strict=True)
        for y, (v, end, n) in enumerate(ends):
            ax.text(end, y, f"  {v:.1f} (n = {n})", va="center", ha="left", fontsize=7)
        ax.set_xlim(0, 1.45 * mine.tokens_per_s_high.max())  # room for the value labels
        ax.set_title(_panel_title(key))
        ax.set_xlabel("tokens / s (higher is faster)")
        ax.grid(axis="x", alpha=0.3)
        intervals |= set(mine.tokens_per_s_interval)
    title = "Tokens per second by engine and method, same prompts and sampling"
    what = f"bars: {'; '.join(sorted(i for i in intervals if i))}"
    return _finish(fig, title, f"{what} | {caption(records)}")
