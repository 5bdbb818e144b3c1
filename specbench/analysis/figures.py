"""Figures of Chen et al. 2023 Fig. 1 (time, acceptance, loop latency vs K), speedup and scoring.

Every function returns a matplotlib Figure drawn on an Agg canvas (no pyplot, no global state);
the figures of the records table have one panel per (task, sampling mode).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .aggregate import AR, SPS, summary_by_k
from .theory import expected_tokens_per_loop, predicted_vs_measured

K_LABEL = "K (draft tokens per loop)"
Draw = Callable[[Axes, pd.DataFrame, pd.DataFrame], None]


def _unique(frame: pd.DataFrame, column: str) -> str:
    """The distinct non-empty values of a column, comma-joined; '?' if absent."""
    if column not in frame:
        return "?"
    values = sorted({str(v) for v in frame[column].dropna() if str(v)})
    return ", ".join(values) or "?"


def pair_caption(records: pd.DataFrame) -> str:
    """'target X / draft Y | device | dtype' of the records."""
    sps = records[records.method == SPS]
    pair = f"target {_unique(records, 'target')} / draft {_unique(sps, 'draft')}"
    return " | ".join([pair, _unique(records, "device_name"), _unique(records, "dtype")])


def caption(records: pd.DataFrame) -> str:
    """One line naming the target/draft pair, device, dtype, N and the amount of data."""
    runs = f"{records.prompt_id.nunique()} prompts x {records.repeat.nunique()} repeats"
    parts = [pair_caption(records), f"N = {_unique(records, 'max_new_tokens')} new tokens", runs]
    if "git_sha" in records:
        parts.append(f"git {_unique(records, 'git_sha')[:8]}")
    return " | ".join(parts)


def _grid(n: int, width: float = 4.3, height: float = 3.4) -> tuple[Figure, list[Axes]]:
    """A figure with n panels in a near-square grid, on an Agg canvas."""
    ncols = int(np.ceil(np.sqrt(n)))
    nrows = -(-n // ncols)
    fig = Figure(figsize=(width * ncols, height * nrows + 0.8))
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(nrows, ncols, squeeze=False).flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _finish(fig: Figure, title: str, text: str) -> Figure:
    """Title on top, caption at the bottom, panels laid out between them."""
    fig.suptitle(title)
    width = max(40, int(fig.get_figwidth() * 14))  # ~14 characters per inch at 8 pt
    wrapped = "\n".join(textwrap.wrap(text, width, break_long_words=False))
    fig.text(0.5, 0.01, wrapped, ha="center", va="bottom", fontsize=8, color="0.3")
    fig.tight_layout(rect=(0, 0.03 + 0.025 * wrapped.count("\n") + 0.02, 1, 1))
    return fig


def _panel_figure(records: pd.DataFrame, summary: pd.DataFrame, title: str, draw: Draw) -> Figure:
    """One panel per (task, sampling) with speculative rows; draw(ax, rows, summary rows)."""
    keys = sorted(set(map(tuple, records.loc[records.method == SPS, ["task", "sampling"]].values)))
    if not keys:
        raise ValueError("no speculative rows to plot against K")
    fig, axes = _grid(len(keys))
    for ax, (task, sampling) in zip(axes, keys, strict=True):
        rows = records[(records.task == task) & (records.sampling == sampling)]
        mine = summary[(summary.task == task) & (summary.sampling == sampling) & (summary.k > 0)]
        draw(ax, rows, mine.sort_values("k"))
        ax.set_title(f"{task} | {sampling}")
        ax.set_xlabel(K_LABEL)
        ax.set_xticks(mine.k.unique())
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _finish(fig, title, caption(records))


def _band(ax: Axes, x, mean, std, label: str, **style) -> None:
    """A line with markers and a shaded ±1 std band."""
    lines = ax.plot(x, mean, marker="o", label=label, **style)
    ax.fill_between(x, mean - std, mean + std, alpha=0.2, color=lines[0].get_color())


def _draw_time(ax: Axes, rows: pd.DataFrame, summary: pd.DataFrame) -> None:
    _band(ax, summary.k, summary.sps_time_s, summary.sps_time_s_std, "speculative, mean ±1 std")
    ar = rows.loc[rows.method == AR, "wall_s"]
    if len(ar):
        mean, std = ar.mean(), ar.std()
        ax.axhline(mean, color="k", ls="--", label="autoregressive, mean ±1 std")
        ax.axhspan(mean - std, mean + std, color="k", alpha=0.08)
    ax.set_ylabel(f"time to generate N = {_unique(rows, 'max_new_tokens')} tokens (s)")
    ax.set_ylim(bottom=0)


def time_vs_k_figure(records: pd.DataFrame) -> Figure:
    """Fig. 1 left: mean time to generate N tokens vs K, with the autoregressive baseline."""
    title = "Mean time to generate N tokens (±1 std over runs)"
    return _panel_figure(records, summary_by_k(records), title, _draw_time)


def _draw_acceptance(ax: Axes, rows: pd.DataFrame, summary: pd.DataFrame) -> None:
    label = "tokens per loop / (K+1), mean ±1 std"
    _band(ax, summary.k, summary.acceptance_per_loop, summary.acceptance_per_loop_std, label)
    ax.plot(summary.k, summary.alpha, marker="s", label="mean expected acceptance alpha")
    alpha = rows.loc[rows.method == SPS, "alpha"].mean()
    ks = np.arange(summary.k.min(), summary.k.max() + 1)
    ideal = expected_tokens_per_loop(alpha, ks) / (ks + 1)
    ax.plot(ks, ideal, ls=":", color="0.4", label=f"(1-a^(K+1))/((1-a)(K+1)), a={alpha:.2f}")
    ax.set_ylabel("fraction of K+1 (unitless)")
    ax.set_ylim(0, 1.05)


def acceptance_figure(records: pd.DataFrame) -> Figure:
    """Fig. 1 middle: tokens per loop / (K+1) vs K, and the mean expected acceptance alpha."""
    title = "Average tokens per loop / (K+1) and mean expected acceptance"
    return _panel_figure(records, summary_by_k(records), title, _draw_acceptance)


def _draw_loop(ax: Axes, rows: pd.DataFrame, summary: pd.DataFrame) -> None:
    label = "speculative loop, mean ±1 std"
    _band(ax, summary.k, summary.sps_loop_ms, summary.sps_loop_ms_std, label)
    ar = rows[rows.method == AR]
    if len(ar):
        step = 1e3 * (ar.target_s + ar.overhead_s) / ar.target_calls
        ax.axhline(step.mean(), color="k", ls="--", label="autoregressive step (1 target call)")
    ax.set_ylabel("mean loop latency (ms)")
    ax.set_ylim(bottom=0)


def loop_latency_figure(records: pd.DataFrame) -> Figure:
    """Fig. 1 right: mean latency of one draft-K-then-score loop vs K."""
    title = "Mean loop latency (draft K + score K+1 + verify)"
    return _panel_figure(records, summary_by_k(records), title, _draw_loop)


INTERVAL_LABELS = {
    "bootstrap95": "95% bootstrap CI over prompts",
    "min-max": "min-max over prompts (n < 10: no CI)",
}


def _speedup_drawer(theory: pd.DataFrame) -> Draw:
    """Draws measured speedups with their CI and the Thm 3.8 predictions of the same panel."""

    def draw(ax: Axes, rows: pd.DataFrame, summary: pd.DataFrame) -> None:
        err = [summary.speedup - summary.speedup_low, summary.speedup_high - summary.speedup]
        method = _unique(summary, "speedup_interval")
        label = "measured median, " + INTERVAL_LABELS.get(method, f"{method} over prompts")
        ax.errorbar(summary.k, summary.speedup, yerr=err, marker="o", capsize=4, label=label)
        task, sampling = rows.task.iloc[0], rows.sampling.iloc[0]
        mine = theory[(theory.task == task) & (theory.sampling == sampling)] if len(theory) else []
        if len(mine):
            ax.plot(mine.k, mine.predicted, ls="--", marker="x", label="Thm 3.8, measured s(K)")
            ax.plot(mine.k, mine.predicted_free_scoring, ls=":", label="Thm 3.8, free scoring s=1")
        ax.axhline(1.0, color="k", lw=0.8, label="no speedup")
        ax.set_ylabel("speedup over autoregressive (×)")

    return draw


def speedup_figure(records: pd.DataFrame) -> Figure:
    """Paired speedup vs K with its interval over prompts, and the Thm 3.8 prediction over it."""
    title = "Speedup (paired AR / SpS ms per token, median) vs Leviathan et al. Thm 3.8"
    draw = _speedup_drawer(predicted_vs_measured(records))
    return _panel_figure(records, summary_by_k(records), title, draw)


def scoring_profile_figure(profile: pd.DataFrame, text: str | None = None) -> Figure:
    """Latency of scoring q new tokens against a cached prefix, relative to q = 1, per model."""
    fig, (ax,) = _grid(1, width=6.0, height=4.2)
    for model, rows in profile.groupby("model", sort=True):
        base = rows.loc[rows.q == rows.q.min(), "ms"].median()
        rel = (rows.ms / base).groupby(rows.q)
        q = np.asarray(rel.median().index)
        label = f"{model}: median, IQR band ({base:.3g} ms at q = {q[0]})"
        lines = ax.plot(q, rel.median(), marker="o", label=label)
        band = (rel.quantile(0.25), rel.quantile(0.75))
        ax.fill_between(q, *band, alpha=0.2, color=lines[0].get_color())
    ax.axhline(1.0, color="k", ls="--", label="free parallel scoring (y = 1)")
    ax.set_xlabel("q (new tokens scored in one call against a cached prefix)")
    ax.set_ylabel("latency relative to q = 1 (×)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    present = [c for c in ("target", "draft", "device_name", "dtype") if c in profile]
    default = " | ".join(f"{c} {_unique(profile, c)}" for c in present) or "scoring profile"
    return _finish(fig, "Cost of scoring q tokens in one forward", text or default)
