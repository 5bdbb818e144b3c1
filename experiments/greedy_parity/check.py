"""Greedy parity: each speculative row's tokens against its autoregressive baseline's.

    python experiments/greedy_parity/check.py results/greedy_parity

Prints one line per (task, draft vocabulary) and the first differing position of any mismatch;
exits 1 if any speculative completion differs from the target's own greedy one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

KEY = ["job", "prompt_id", "repeat"]


def parity(records: pd.DataFrame) -> pd.DataFrame:
    """One row per speculative run: equal to its baseline's raw completion, and where not."""
    spec = records[records.method == "speculative"].set_index(KEY)
    base = records[records.method == "autoregressive"].set_index(KEY)
    joined = spec[["task", "completion_raw", "new_tokens"]].join(
        base[["completion_raw"]], rsuffix="_base", how="inner"
    )
    joined["equal"] = joined.completion_raw == joined.completion_raw_base
    pairs = zip(joined.completion_raw, joined.completion_raw_base, strict=True)
    joined["first_diff_char"] = [first_difference(x, y) for x, y in pairs]
    return joined.reset_index()


def first_difference(a: str, b: str) -> int:
    """The first character index where a and b differ (the shorter length if one is a prefix)."""
    diffs = (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return next(diffs, min(len(a), len(b)))


def main(directory: str) -> int:
    records = pd.read_parquet(Path(directory) / "records.parquet")
    table = parity(records)
    for job, group in table.groupby("job"):
        print(
            f"{job}: {int(group.equal.sum())}/{len(group)} prompts token-identical, "
            f"{int(group.new_tokens.sum())} tokens"
        )
        for row in group[~group.equal].itertuples():
            print(f"  prompt {row.prompt_id}: first difference at character {row.first_diff_char}")
    return 0 if table.equal.all() and len(table) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
