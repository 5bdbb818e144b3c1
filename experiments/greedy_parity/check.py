"""Greedy parity: each speculative row's tokens against its autoregressive baseline's.

    python experiments/greedy_parity/check.py results/greedy_parity

Prints one line per job (task x draft vocabulary x shard) and the first differing character of
any mismatch; exits 1 if any speculative completion differs from the target's own greedy one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from specbench.analysis.quality import greedy_parity


def first_difference(a: str, b: str) -> int:
    """The first character index where a and b differ (the shorter length if one is a prefix)."""
    diffs = (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return next(diffs, min(len(a), len(b)))


def main(directory: str) -> int:
    records = pd.read_parquet(Path(directory) / "records.parquet")
    pairs = identical = 0
    for job, group in records.groupby("job"):
        parity = greedy_parity(group, "speculative")
        pairs, identical = pairs + parity["pairs"], identical + parity["identical"]
        tokens = int(group.loc[group.method == "speculative", "new_tokens"].sum())
        same = f"{parity['identical']}/{parity['pairs']}"
        print(f"{job}: {same} prompts token-identical, {tokens} tokens")
        for prompt_id, repeat in parity["differ"]:
            rows = group[(group.prompt_id == prompt_id) & (group.repeat == repeat)]
            text = rows.set_index("method").completion_raw
            at = first_difference(text["speculative"], text["autoregressive"])
            print(f"  prompt {prompt_id}: first difference at character {at}")
    return 0 if pairs and identical == pairs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
