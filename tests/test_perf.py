"""The perf summaries: paired ratios against transformers and the loop's time split."""

import pandas as pd
import pytest

from specbench.analysis.perf import comparisons, ratio_lines, time_split


def rows(method, ms, **extra):
    base = dict(task="xsum", sampling="greedy", k=4, job="decoder.k=4", repeat=0)
    base |= dict(method=method, new_tokens=20, wall_s=1.0, target_calls=10)
    return [base | {"prompt_id": f"p{i}", "ms_per_token": v} | extra for i, v in enumerate(ms)]


@pytest.fixture
def records():
    split = dict(draft_s=0.5, target_s=0.45, overhead_s=0.05)
    return pd.DataFrame(
        rows("speculative", [10, 20, 40], **split)
        + rows("hf_assisted", [11, 22, 40])
        + rows("autoregressive", [30, 30, 30])
        + rows("hf_generate", [30, 33, 27])
    )


def test_comparisons_are_paired_per_prompt_with_a_named_range(records):
    table = comparisons(records).set_index("comparison")
    sps = table.loc["speculative vs hf_assisted"]
    assert sps.ratio == pytest.approx((1.1 * 1.1 * 1.0) ** (1 / 3))  # geometric mean
    assert sps.ratio_median == pytest.approx(1.1)
    assert (sps.ratio_low, sps.ratio_high) == pytest.approx((1.0, 1.1))
    assert sps.ratio_interval.startswith("range") and sps.n_prompts == 3
    assert table.loc["autoregressive vs hf_generate", "ratio_high"] == pytest.approx(1.1)
    line = ratio_lines(comparisons(records))[-1]
    assert line.startswith("speculative vs hf_assisted") and "K=4: 1.066x [1.000, 1.100]" in line


def test_time_split_percentages_and_loop_ms(records):
    split = time_split(records).iloc[0]
    assert split.draft_pct == pytest.approx(50) and split.bookkeeping_pct == pytest.approx(5)
    assert split.loop_ms == pytest.approx(100) and split.bookkeeping_ms_per_loop == pytest.approx(5)


def test_nothing_to_compare_gives_empty_tables(records):
    ours = records[records.method.isin(["autoregressive"])]
    assert comparisons(ours).empty and time_split(ours).empty
