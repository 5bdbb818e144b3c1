"""The perf summaries: paired ratios against transformers and the loop's time split."""

import pandas as pd
import pytest

from specbench.analysis.perf import hf_ratios, ratio_lines, time_split


def rows(method, ms, **extra):
    base = dict(task="xsum", sampling="greedy", k=4, job="decoder.k=4", repeat=0)
    base |= dict(method=method, tokens_per_call=2.0, wall_s=1.0, target_calls=10)
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


def test_hf_ratios_are_paired_medians_with_range(records):
    table = hf_ratios(records).set_index("comparison")
    assert table.loc["sps_vs_hf", "median"] == pytest.approx(1.1)
    assert table.loc["sps_vs_hf", "min"] == pytest.approx(1.0)
    assert table.loc["ar_vs_hf", "max"] == pytest.approx(1.1)
    assert table.loc["ar_vs_hf", "n"] == 3
    assert ratio_lines(hf_ratios(records))[-1].startswith("sps_vs_hf xsum greedy K=4: 1.100x")


def test_time_split_percentages_and_loop_ms(records):
    split = time_split(records).iloc[0]
    assert split.draft_pct == pytest.approx(50) and split.bookkeeping_pct == pytest.approx(5)
    assert split.loop_ms == pytest.approx(100) and split.bookkeeping_ms_per_loop == pytest.approx(5)


def test_nothing_to_compare_gives_empty_tables(records):
    ours = records[records.method.isin(["autoregressive"])]
    assert hf_ratios(ours).empty and time_split(ours).empty
