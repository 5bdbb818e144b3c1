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

from .. import stats
from ..contrasts import k_contrasts
from .aggregate import LEGACY_DEFAULTS, drafting, normalize, series_label, summary
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
    """'target X / draft Y | device (CPU kind) | dtype' of the records."""
    drafts = records[records.draft_calls > 0] if "draft_calls" in records else records
    pair = f"target {_unique(records, 'target')} / draft {_unique(drafts, 'draft')}"
    kind = _unique(records, "cpu_kind") if "cpu_kind" in records else "CPU kind unrecorded"
    model = f", {_unique(records, 'cpu_model')}" if "cpu_model" in records else ""
    device = f"{_unique(records, 'device_name')} ({kind}{model})"
    return " | ".join([pair, device, _unique(records, "dtype")])


def token_budget(records: pd.DataFrame) -> str:
    """'N = 128 new tokens', or where runs stop at the task's stops, the cap and the mean."""
    cap = _unique(records, "max_new_tokens")
    if "fixed_length" not in records or records.fixed_length.fillna(True).astype(bool).all():
        return f"N = {cap} new tokens"
    return f"up to {cap} new tokens (task stops; mean {records.new_tokens.mean():.0f})"


def caption(records: pd.DataFrame) -> str:
    """One line naming the target/draft pair, device, dtype, N and the amount of data."""
    runs = f"{records.prompt_id.nunique()} prompts x {records.repeat.nunique()} repeats"
    parts = [pair_caption(records), token_budget(records), runs]
    if "git_sha" in records:
        shas = sorted({str(sha)[:8] for sha in records.git_sha.dropna() if str(sha)})
        parts.append(f"git {', '.join(shas)}")
    busy = int(stats.busy_rows(records).sum())
    if busy:
        parts.append(f"{busy} of {len(records)} rows timed beside other work (load > cores)")
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
    fig.suptitle("\n".join(textwrap.wrap(title, max(30, int(fig.get_figwidth() * 9)))))
    width = max(40, int(fig.get_figwidth() * 14))  # ~14 characters per inch at 8 pt
    wrapped = "\n".join(textwrap.wrap(text, width, break_long_words=False))
    fig.text(0.5, 0.01, wrapped, ha="center", va="bottom", fontsize=8, color="0.3")
    fig.tight_layout(rect=(0, 0.03 + 0.025 * wrapped.count("\n") + 0.02, 1, 1))
    return fig


PANEL = ["task", "sampling", "cpu_kind"]  # one panel each: CPU kinds are never pooled
LEGEND_WIDTH = 58  # characters per legend line below a panel


def legend_below(ax: Axes, fontsize: float = 7) -> None:
    """The panel's legend under its axes, long labels wrapped, so it never hides the data."""
    handles, labels = ax.get_legend_handles_labels()
    wrapped = ["\n".join(textwrap.wrap(label, LEGEND_WIDTH)) for label in labels]
    ncol = 4 if max(map(len, labels), default=0) <= 12 else 1  # short labels (K = 3) in a row
    ax.legend(handles, wrapped, fontsize=fontsize, loc="upper center", ncol=ncol,
              bbox_to_anchor=(0.5, -0.16), frameon=False)  # fmt: skip


def _in_panel(frame: pd.DataFrame, key: tuple) -> pd.DataFrame:
    """frame's rows of the panel `key` (values of PANEL)."""
    if frame.empty:
        return frame
    keep = np.logical_and.reduce([frame[c] == v for c, v in zip(PANEL, key, strict=True)])
    return frame[keep]


def _panel_title(key: tuple) -> str:
    task, sampling, cpu = key
    return f"{task} | {sampling} | CPU {cpu}"


def _panel_figure(records: pd.DataFrame, title: str, draw: Draw) -> Figure:
    """One panel per (task, sampling, CPU kind) with drafting rows; draw(ax, rows, summary
    rows of that panel: baselines at k = 0 and each drafting method's K)."""
    records = normalize(records)
    table = summary(records)
    keys = sorted(set(map(tuple, drafting(records)[PANEL].values)))
    if not keys:
        raise ValueError("no drafting rows to plot against K")
    fig, axes = _grid(len(keys), width=5.2, height=5.4)
    for ax, key in zip(axes, keys, strict=True):
        mine = _in_panel(table, key).sort_values("k")
        draw(ax, _in_panel(records, key), mine)
        ax.set_title(_panel_title(key))
        ax.set_xlabel(K_LABEL)
        ax.set_xticks(sorted(mine[mine.k > 0].k.unique()))
        ax.grid(alpha=0.3)
        legend_below(ax)
    return _finish(fig, title, caption(records))


def _series(table: pd.DataFrame):
    """(label, rows by K) per drafting method of a panel."""
    mine = table[(table.paired_with != "") & (table.k > 0)]
    many = mine.draft.nunique() > 1
    keys = stats.present(mine, ["method", "draft", "n_drafts"])
    for _, rows in mine.groupby(keys, sort=True, dropna=False):
        yield series_label(rows.iloc[0], many), rows.sort_values("k")


def _baselines(table: pd.DataFrame) -> pd.DataFrame:
    """The panel's baseline rows (methods that others are paired with), pooled per method."""
    names = set(table.paired_with) - {""}
    return table[table.method.isin(names)].groupby("method", as_index=False).first()


def _band(ax: Axes, x, mean, std, label: str, **style) -> None:
    """A line with markers and a shaded ±1 std band."""
    lines = ax.plot(x, mean, marker="o", label=label, **style)
    ax.fill_between(x, mean - std, mean + std, alpha=0.2, color=lines[0].get_color())


def _draw_time(ax: Axes, rows: pd.DataFrame, table: pd.DataFrame) -> None:
    for label, mine in _series(table):
        _band(ax, mine.k, mine.time_s, mine.time_s_std, f"{label}, mean ±1 std")
    for _, base in _baselines(table).iterrows():
        ax.axhline(base.time_s, color="k", ls="--", label=f"{base.method}, mean ±1 std")
        ax.axhspan(base.time_s - base.time_s_std, base.time_s + base.time_s_std, color="k",
                   alpha=0.08)  # fmt: skip
    ax.set_ylabel(f"time to generate N = {_unique(rows, 'max_new_tokens')} tokens (s)")
    ax.set_ylim(bottom=0)


def time_vs_k_figure(records: pd.DataFrame) -> Figure:
    """Fig. 1 left: mean time to generate N tokens vs K, with the autoregressive baseline."""
    title = "Mean time to generate N tokens (±1 std over runs)"
    return _panel_figure(records, title, _draw_time)


def _draw_acceptance(ax: Axes, rows: pd.DataFrame, table: pd.DataFrame) -> None:
    for label, mine in _series(table):
        fill = f"{label}: tokens per loop / (K+1), mean ±1 std"
        _band(ax, mine.k, mine.acceptance_per_loop, mine.acceptance_per_loop_std, fill)
        if mine.alpha.notna().any():
            ax.plot(mine.k, mine.alpha, marker="s", label=f"{label}: mean expected acceptance")
            alpha = float(mine.alpha.mean())
            ks = np.arange(mine.k.min(), mine.k.max() + 1)
            ideal = expected_tokens_per_loop(alpha, ks) / (ks + 1)
            ax.plot(
                ks, ideal, ls=":", color="0.4", label=f"(1-a^(K+1))/((1-a)(K+1)), a={alpha:.2f}"
            )
    ax.set_ylabel("fraction of K+1 (unitless)")
    ax.set_ylim(0, 1.05)


def acceptance_figure(records: pd.DataFrame) -> Figure:
    """Fig. 1 middle: tokens per loop / (K+1) vs K, and the mean expected acceptance alpha."""
    title = "Average tokens per loop / (K+1) and mean expected acceptance"
    return _panel_figure(records, title, _draw_acceptance)


def _draw_loop(ax: Axes, rows: pd.DataFrame, table: pd.DataFrame) -> None:
    for label, mine in _series(table):
        _band(ax, mine.k, mine.loop_ms, mine.loop_ms_std, f"{label} loop, mean ±1 std")
    for _, base in _baselines(table).iterrows():
        ax.axhline(base.loop_ms, color="k", ls="--", label=f"{base.method} step (1 target call)")
    ax.set_ylabel("mean loop latency (ms)")
    ax.set_ylim(bottom=0)


def loop_latency_figure(records: pd.DataFrame) -> Figure:
    """Fig. 1 right: mean latency of one draft-K-then-score loop vs K."""
    title = "Mean loop latency (draft K + score K+1 + verify)"
    return _panel_figure(records, title, _draw_loop)


def _contrast_text(contrasts: pd.DataFrame) -> str:
    """'best K = 6 (1.31x); vs K = 1: 1.12x [1.05, 1.19], distinguishable; ...' of a panel."""
    if contrasts.empty:
        return ""
    first = contrasts.iloc[0]
    parts = [f"best K = {first.best_k} ({first.best_speedup:.2f}x)"]
    for _, row in contrasts.iterrows():
        verdict = "distinguishable" if row.distinguishable else "not distinguishable"
        parts.append(f"vs K = {row.other_k}: {row.ratio:.2f}x [{row.ratio_low:.2f}, "
                     f"{row.ratio_high:.2f}], {verdict}")  # fmt: skip
    return "; ".join(parts) + " (paired within prompt)"


def _speedup_drawer(
    theory: pd.DataFrame, calibration: pd.DataFrame, contrasts: pd.DataFrame
) -> Draw:
    """Draws measured speedups with their interval, the Thm 3.8 prediction made before timing
    (a calibration's alpha, c and s(K), measured apart from these runs), the in-run Thm 3.8
    check, and whether the best K is told apart from the smallest and largest K."""

    def draw(ax: Axes, rows: pd.DataFrame, table: pd.DataFrame) -> None:
        key = tuple(rows[PANEL].iloc[0])
        for label, mine in _series(table):
            mine = mine[mine.speedup.notna()]
            err = [mine.speedup - mine.speedup_low, mine.speedup_high - mine.speedup]
            how = _unique(mine, "speedup_interval")
            ax.errorbar(mine.k, mine.speedup, yerr=err, marker="o", capsize=4,
                        label=f"{label}: {how}")  # fmt: skip
        before = _in_panel(calibration, key)
        if len(before):
            curve = before.groupby("k").predicted_speedup.mean()
            ax.plot(
                curve.index,
                curve.values,
                ls="--",
                marker="^",
                color="C3",
                label="Thm 3.8 predicted before timing (calibration: alpha, c, s(K))",
            )
        predicted = _in_panel(theory, key)
        for label, pred in predicted.groupby("method") if len(predicted) else []:
            ax.plot(
                pred.k,
                pred.predicted,
                ls=":",
                marker="x",
                color="0.4",
                label=f"{label}: Thm 3.8 from these runs' alpha, c, s(K) (a check, not a fit)",
            )
        ax.axhline(1.0, color="k", lw=0.8, label="no speedup")
        ax.set_ylabel("speedup over the baseline (x)")
        text = _contrast_text(_in_panel(contrasts, key))
        if text:  # a legend line of its own, below the series
            ax.plot([], [], " ", label=text)

    return draw


def speedup_figure(records: pd.DataFrame, calibration: pd.DataFrame | None = None) -> Figure:
    """Paired speedup vs K (geometric mean over prompts, 95% interval) with Thm 3.8 overlaid:
    predicted from a calibration when one is given, and recomputed from the runs' own terms."""
    title = "Speedup over autoregressive decoding vs K (paired per prompt)"
    contrasts = k_contrasts(normalize(records))
    calibration = pd.DataFrame() if calibration is None else calibration
    if len(calibration) and "cpu_kind" not in calibration:  # as normalize() fills records
        calibration = calibration.assign(cpu_kind=LEGACY_DEFAULTS["cpu_kind"])
    draw = _speedup_drawer(predicted_vs_measured(records), calibration, contrasts)
    return _panel_figure(records, title, draw)


def _tree_points(ax, trees: pd.DataFrame, base: float) -> None:
    """Multi-draft token trees (profile.trees) as points at their node count, relative to q = 1."""
    for shape, rows in trees.groupby("shape", sort=True):
        ax.plot(rows.q.iloc[0], rows.ms.median() / base, marker="*", ms=11, ls="none",
                label=f"{shape} ({rows.q.iloc[0]} nodes, tree mask)")  # fmt: skip


def scoring_profile_figure(profile: pd.DataFrame, text: str | None = None) -> Figure:
    """Latency of scoring q new tokens against a cached prefix, relative to q = 1, per model."""
    fig, (ax,) = _grid(1, width=6.0, height=4.2)
    shape = profile.get("shape", pd.Series("chain", index=profile.index)).fillna("chain")
    profile = profile.assign(shape=shape)  # older profiles: every row a chain
    for model, rows in profile[shape == "chain"].groupby("model", sort=True):
        base = rows.loc[rows.q == rows.q.min(), "ms"].median()
        rel = (rows.ms / base).groupby(rows.q)
        q = np.asarray(rel.median().index)
        label = f"{model}: median, IQR band ({base:.3g} ms at q = {q[0]})"
        lines = ax.plot(q, rel.median(), marker="o", label=label)
        band = (rel.quantile(0.25), rel.quantile(0.75))
        ax.fill_between(q, *band, alpha=0.2, color=lines[0].get_color())
        _tree_points(ax, profile[(shape != "chain") & (profile.model == model)], base)
    ax.axhline(1.0, color="k", ls="--", label="free parallel scoring (y = 1)")
    ax.set_xlabel("q (new tokens scored in one call against a cached prefix)")
    ax.set_ylabel("latency relative to q = 1 (×)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    present = [c for c in ("target", "draft", "device_name", "dtype") if c in profile]
    default = " | ".join(f"{c} {_unique(profile, c)}" for c in present) or "scoring profile"
    return _finish(fig, "Cost of scoring q tokens in one forward", text or default)
