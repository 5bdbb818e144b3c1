"""Figures of the drafts themselves, per K: how many are accepted per loop, and where the first
rejection falls (acceptance by draft position). One panel per (task, sampling, CPU kind)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .. import stats
from .aggregate import normalize
from .figures import PANEL, _finish, _grid, _in_panel, _panel_title, caption, legend_below

RUN = ["job", "method", "prompt_id", "repeat"]


def with_panels(iterations: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """The iterations of drafting runs with their run's K (`run_k`; an iteration's own `k` is
    the drafts it proposed, fewer near the token budget) and panel columns."""
    runs = records[[*RUN, "k", *PANEL]].rename(columns={"k": "run_k"})
    if "run_k" in iterations:  # written since the block design: one run per (RUN, K)
        return iterations[iterations.k > 0].merge(runs, on=[*RUN, "run_k"], how="inner")
    return iterations[iterations.k > 0].merge(runs.drop_duplicates(RUN), on=RUN, how="inner")


def _loop_figure(records: pd.DataFrame, iterations: pd.DataFrame, title: str, xlabel: str,
                 ylabel: str, draw) -> Figure:  # fmt: skip
    """One panel per (task, sampling, CPU kind): draw(ax, that panel's drafting loops)."""
    records = normalize(records)
    loops = with_panels(iterations, records)
    keys = sorted(set(map(tuple, loops[PANEL].values)))
    if not keys:
        raise ValueError("no drafting iterations to plot")
    fig, axes = _grid(len(keys), width=5.2, height=4.4)
    for ax, key in zip(axes, keys, strict=True):
        draw(ax, _in_panel(loops, key))
        ax.set_title(_panel_title(key))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        legend_below(ax)
    return _finish(fig, title, caption(records))


def accepted_length_figure(records: pd.DataFrame, iterations: pd.DataFrame) -> Figure:
    """Per K: the fraction of loops that accepted 0..K drafts (all K accepted = a bonus token)."""

    def draw(ax, mine: pd.DataFrame) -> None:
        for k, rows in mine[mine.k == mine.run_k].groupby("run_k"):  # loops that drafted K
            share = rows.accepted.value_counts(normalize=True).reindex(range(k + 1), fill_value=0)
            ax.plot(share.index, share.values, marker="o", label=f"K = {k} ({len(rows)} loops)")

    return _loop_figure(records, iterations, "Accepted drafts per loop, by K",
                        "drafts accepted in one loop", "fraction of loops", draw)  # fmt: skip


def acceptance_position_figure(records: pd.DataFrame, iterations: pd.DataFrame) -> Figure:
    """P(draft i accepted | drafts 1..i-1 accepted), by position i, one line per K."""

    def draw(ax, mine: pd.DataFrame) -> None:
        table = stats.acceptance_by_position(mine, by=["run_k"])
        for k, rows in table.groupby("run_k"):
            ax.plot(rows.position, rows.rate, marker="o", label=f"K = {k}")
        ax.set_xticks(np.arange(1, int(mine.run_k.max()) + 1))

    return _loop_figure(records, iterations, "Acceptance by draft position, by K",
                        "draft position i", "P(accept i | 1..i-1 accepted)", draw)  # fmt: skip
