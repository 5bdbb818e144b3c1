"""Time to first token and ms per token after it: recorded by both decoders, and the decode
speedup (prefill excluded) reported beside the wall-clock one."""

import math

import numpy as np
import pytest
import torch
from test_analysis import synthetic_records

from specbench import SamplingParams, autoregressive_generate, speculative_generate
from specbench.analysis import tables
from specbench.analysis.aggregate import summary
from specbench.tiny import perturbed_copy, tiny_model


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("qwen2", seed=11)
    return target, perturbed_copy(target, noise=0.2, seed=12)


def test_both_decoders_time_their_first_emission(pair):
    target, draft = pair
    prompt, params = torch.tensor([[3, 1, 4, 1, 5]]), SamplingParams(1.0)
    ar = autoregressive_generate(
        target, prompt, max_new_tokens=12, sampling=params, generator=torch.Generator()
    )
    sps = speculative_generate(
        target, draft, prompt, k=3, max_new_tokens=12, sampling=params,
        generator=torch.Generator().manual_seed(1),
    )  # fmt: skip
    assert ar.first_tokens == 1
    assert 1 <= sps.first_tokens <= 4 and sps.first_tokens == sps.accepted[0] + 1
    for res in (ar, sps):
        assert 0 < res.first_s <= res.wall_s
        after = (res.wall_s - res.first_s) / (res.num_tokens - res.first_tokens)
        assert res.decode_ms_per_token == pytest.approx(1e3 * after)


def test_one_token_has_no_decode_time(pair):
    res = autoregressive_generate(
        pair[0], torch.tensor([[1, 2]]), max_new_tokens=1, sampling=SamplingParams(0.0),
        generator=None,
    )  # fmt: skip
    assert res.first_tokens == 1 and math.isnan(res.decode_ms_per_token)


def test_decode_speedup_beside_the_wall_clock_one():
    records = synthetic_records(ks=(2,))
    prefill = np.where(records.method == "autoregressive", 0.2, 0.3)  # s; speculative's larger
    records["first_s"] = prefill
    records["decode_ms_per_token"] = records.ms_per_token  # synthetic rows: no prefill in them
    records["ms_per_token"] = 1e3 * (records.wall_s + prefill) / records.new_tokens
    table = summary(records)
    sps = table[table.method == "speculative"]
    assert (sps.decode_speedup > sps.speedup).all()  # the prompt's prefill dilutes the speedup
    assert (sps.decode_speedup_low < sps.decode_speedup).all()
    shown = tables.format_table1(tables.table1(records))
    column = "Decode speedup, prefill excluded [95% t CI; range if n < 10]"
    assert column in shown and shown[column].str.contains(r"\[").sum() == len(sps)
    old = summary(records.drop(columns=["first_s", "decode_ms_per_token"]))
    assert "decode_speedup" not in old and column not in tables.format_table1(tables.table1(
        records.drop(columns=["first_s", "decode_ms_per_token"])))  # fmt: skip
