"""The exactness audit's figure and verdict table, from the gathered audit tables.

One panel per (decoder, test) for the first token of each prefix and the best-sampled
second-token test: empirical probability of the top tokens (with a 95% binomial interval at the
test's sample size) beside the target's exact probability.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..stats import binomial_range
from .figures import _finish, _unique

SHOWN_TOKENS = 8  # top tokens drawn per panel, plus the rest bucket
TEST_KEY = ["prompt_id", "position", "given"]


def verdict_table(tests: pd.DataFrame, summaries: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per audited method: tests, samples, worst TV vs its noise ceiling, p-values."""
    rows = []
    for (method, k), g in tests.groupby(["method", "k"], sort=False):
        worst = g.loc[g.pvalue_holm.idxmin()]
        rows.append(
            {
                "method": method,
                "k": int(k),
                "tests": len(g),
                "samples_per_prefix": int(g[g.position == 1].n.max()),
                "max_tv": float(g.tv.max()),
                "max_tv_null_q95": float(g.tv_null_q95.max()),
                "worst_test": f"{worst.prompt_id} pos {worst.position}",
                "min_pvalue": float(g.pvalue.min()),
                "min_pvalue_holm": float(g.pvalue_holm.min()),
                "verdict": _unique(g, "verdict"),
                "correction": f"Holm over {len(g)} tests, alpha {_unique(g, 'alpha')}",
            }
        )
    return pd.DataFrame(rows)


def shown_tests(tests: pd.DataFrame) -> pd.DataFrame:
    """Per method and prefix: the first-token test and the second-token test with most samples."""
    first = tests[tests.position == 1]
    second = tests[tests.position == 2].sort_values("n", ascending=False)
    second = second.drop_duplicates(["method", "k", "prompt_id"])
    both = pd.concat([first, second])
    return both.sort_values(["method", "prompt_id", "position"], kind="stable")


def _label(text: str, token: int) -> str:
    """A short printable label: the token's text, or its id when that text is not printable."""
    shown = repr(str(text))[1:-1].replace(" ", "␣")  # spaces drawn as open boxes
    if "\ufffd" in str(text) or not shown:
        return f"#{token}"
    return shown if len(shown) <= 10 else shown[:9] + "…"


def _draw_test(ax: Axes, test, buckets: pd.DataFrame) -> None:
    """Bars of exact and sampled probability for one test (a row of the audit table)."""
    head = buckets[buckets.token >= 0].nsmallest(SHOWN_TOKENS, "rank")
    rest = buckets[buckets.token < 0]
    rows = pd.concat([head, rest])
    x = np.arange(len(rows))
    n = test.n
    low, high = binomial_range(rows.exact, n)  # exact-sampling noise at this n
    ax.bar(x - 0.2, rows.exact, 0.4, color="0.7", label="exact (target forward)")
    err = np.clip([rows.exact - low, high - rows.exact], 0, None)  # float error at p ~ 0, 1
    ax.errorbar(x - 0.2, rows.exact, yerr=err, fmt="none", ecolor="0.3", capsize=2)
    ax.bar(x + 0.2, rows.empirical, 0.4, color="C0", label=f"sampled, n = {n}")
    labels = [_label(t, i) for t, i in zip(rows.text, rows.token, strict=True)]
    ax.set_xticks(x, labels, rotation=60, fontsize=7)
    given = "" if test.position == 1 else f" | 1st = {_label(test.given_text, test.given)}"
    ax.set_title(
        f"{test.method} k={test.k} | {test.prompt_id} pos {test.position}{given}\n"
        f"TV {test.tv:.3f} (noise q95 {test.tv_null_q95:.3f}), p_holm {test.pvalue_holm:.2g}",
        fontsize=8,
    )
    ax.set_ylabel("probability")
    ax.grid(alpha=0.3, axis="y")


def audit_figure(tests: pd.DataFrame, tokens: pd.DataFrame) -> Figure:
    """Empirical vs exact probabilities of the top tokens: one row of panels per decoder."""
    shown = shown_tests(tests)
    methods = list(dict.fromkeys(zip(shown.method, shown.k, strict=True)))
    ncols = int(shown.groupby(["method", "k"]).size().max())
    fig = Figure(figsize=(3.6 * ncols, 3.3 * len(methods) + 0.8))
    FigureCanvasAgg(fig)
    grid = fig.subplots(len(methods), ncols, squeeze=False).reshape(-1)
    for r, (method, k) in enumerate(methods):
        mine = shown[(shown.method == method) & (shown.k == k)]
        for c, test in enumerate(mine.itertuples(index=False)):
            match = (tokens.method == method) & (tokens.k == k)
            for col in TEST_KEY:
                match &= tokens[col] == getattr(test, col)
            _draw_test(grid[r * ncols + c], test, tokens[match].sort_values("rank"))
        for c in range(len(mine), ncols):
            grid[r * ncols + c].set_visible(False)
    grid[0].legend(fontsize=7)
    text = f"target {_unique(tests, 'target')} / draft {_unique(tests, 'draft')} | "
    text += f"{_unique(tests, 'dtype')} | sampling {_unique(tests, 'sampling')}; "
    text += "error bars: 95% range of a sampled probability under exact sampling"
    return _finish(fig, "Exactness audit: sampled vs exact next-token probabilities", text)
