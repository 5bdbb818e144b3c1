"""Quality statistics: Wilson interval, pass@1 per group, greedy parity."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from specbench.analysis.quality import greedy_parity, pass_at_1, wilson_interval


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0)],  # Wilson (1927)
)
def test_wilson_interval_matches_published_values(k, n, low, high):
    assert wilson_interval(k, n) == pytest.approx((low, high), abs=1e-4)


def test_wilson_interval_of_nothing_is_nan():
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_pass_at_1_counts_each_problem_once():
    records = pd.DataFrame(
        {"fmt": ["chat"] * 4 + ["raw"] * 2, "prompt_id": ["a", "b", "c", "c", "a", "b"],
         "passed": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]}
    )  # fmt: skip
    table = pass_at_1(records, ["fmt"]).set_index("fmt")
    assert table.loc["chat", ["n", "passed"]].tolist() == [3, 2]
    assert table.loc["raw", "pass_at_1"] == 0.0 and table.loc["raw", "high"] > 0


def test_greedy_parity_compares_raw_text():
    records = pd.DataFrame(
        {"method": ["speculative", "autoregressive"] * 2, "prompt_id": ["a", "a", "b", "b"],
         "repeat": 0, "completion_raw": ["x<|endoftext|>", "x<|endoftext|>", "y", "z"]}
    )  # fmt: skip
    assert greedy_parity(records, "speculative") == {
        "pairs": 2, "identical": 1, "differ": [("b", 0)]
    }  # fmt: skip
