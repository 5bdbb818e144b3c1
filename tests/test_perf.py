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


def test_tokens_per_call_are_the_conditions_own(records):
    """Each condition's row counts its own target calls, not those pooled over every task."""
    humaneval = records.assign(task="humaneval", target_calls=5)
    table = comparisons(pd.concat([records, humaneval], ignore_index=True))
    sps = table[table.comparison == "speculative vs hf_assisted"].set_index("task")
    assert sps.loc["xsum", "tokens_per_call_ours"] == pytest.approx(2.0)
    assert sps.loc["humaneval", "tokens_per_call_ours"] == pytest.approx(4.0)


def test_the_ratio_at_equal_work_is_per_target_call(records):
    """Same wall time, but theirs made twice the target calls: half our cost per call."""
    twice = records.target_calls.where(records.method != "hf_assisted", 20)
    row = comparisons(records.assign(target_calls=twice)).set_index("comparison")
    sps = row.loc["speculative vs hf_assisted"]
    assert (sps.per_call_ratio, sps.per_call_low, sps.per_call_high) == pytest.approx((0.5,) * 3)
    assert "per target call 0.500x [0.500, 0.500]" in ratio_lines(row.reset_index())[-1]


def test_time_split_percentages_and_loop_ms(records):
    split = time_split(records).iloc[0]
    assert split.draft_pct == pytest.approx(50) and split.bookkeeping_pct == pytest.approx(5)
    assert split.loop_ms == pytest.approx(100) and split.bookkeeping_ms_per_loop == pytest.approx(5)


def test_nothing_to_compare_gives_empty_tables(records):
    ours = records[records.method.isin(["autoregressive"])]
    assert comparisons(ours).empty and time_split(ours).empty


def test_throughput_and_the_engines_figure(records, tmp_path):
    """tokens/s is the geometric mean over prompts of 1000 / ms_per_token; two engines in the
    records (specbench and transformers here) give figures/engines."""
    from specbench import stats
    from specbench.analysis.engine_figures import engine_of, engines_in
    from specbench.analysis.report import write_engine_figure

    table = stats.throughput(records.assign(cpu_kind="avx2")).set_index("method")
    assert table.loc["autoregressive", "tokens_per_s"] == pytest.approx(1000 / 30)
    expect = (100 * 50 * 25) ** (1 / 3)
    assert table.loc["speculative", "tokens_per_s"] == pytest.approx(expect)
    assert table.loc["speculative", "tokens_per_s_interval"].startswith("range")
    assert engine_of("llamacpp_speculative") == "llama.cpp" and engine_of("hf_assisted") == (
        "transformers"
    )
    assert engines_in(records) == {"specbench", "transformers"}
    frame = records.assign(cpu_kind="avx2", backend="cpu_bf16", paired_with="")
    paths = write_engine_figure(frame, tmp_path)
    assert sorted(p.name for p in paths) == ["engines.pdf", "engines.png"]
    assert write_engine_figure(frame[frame.method == "speculative"], tmp_path) == []
