"""Thm 3.8's multi-draft analogue from a multi-draft sweep's summary: what each n x K would give
where n draft rows cost one and a token tree one target step (a GPU at batch 1).

    python experiments/multidraft/analogue.py results/multidraft

speedup = tokens per target call / (K c + 1), with c the single draft's measured cost per draft
step at that K (the n = 1 row), against the measured speedup of the same configuration; `vs
best single` divides by the best n = 1 analogue of the same setting and draft rule.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from specbench.analysis.theory import loop_speedup

SETTING = ["task", "sampling", "cpu_kind", "drafts_mode"]


def analogue(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (setting, rule, n, K): measured speedup and the analogue's prediction."""
    rows = summary[summary.k > 0].copy()
    single = rows[rows.n_drafts == 1].set_index([*SETTING, "k"]).c.rename("c_single")
    rows = rows.join(single, on=[*SETTING, "k"])
    rows["analogue"] = loop_speedup(rows.tokens_per_call, rows.k, rows.c_single)  # s = 1
    best = rows[rows.n_drafts == 1].groupby(SETTING).analogue.max().rename("best_single")
    rows = rows.join(best, on=SETTING)
    rows["vs_best_single"] = rows.analogue / rows.best_single
    keep = [*SETTING, "n_drafts", "k", "tokens_per_call", "c_single", "speedup", "analogue"]
    return rows[[*keep, "vs_best_single"]].sort_values([*SETTING, "k", "n_drafts"])


def main(results: Path) -> None:
    table = analogue(pd.read_csv(results / "summary.csv"))
    print(table.round(3).to_string(index=False))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results/multidraft"))
