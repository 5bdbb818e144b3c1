"""End to end on the real offline pair (Qwen2.5-Coder 0.5B -> 1.5B, GGUF from PyPI packages).

Slow: the first run converts the GGUF parts into the safetensors cache (~3 minutes on 2 cores).
CI runs it too; deselect locally with `-m "not slow"`.
"""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import run_cli

pytestmark = pytest.mark.slow


def test_real_pair_on_two_humaneval_prompts(tmp_path):
    out = run_cli(
        "task=humaneval", "sampling=greedy", "decoder.k=4", "bench.num_prompts=2",
        "bench.max_new_tokens=24", "bench.warmup=0", f"results_dir={tmp_path}",
        timeout=1800,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    records = pd.read_parquet(tmp_path / "default" / "records.parquet")
    assert len(records) == 2 * 2  # prompts x methods
    assert set(records.target) == {"qwen25_coder_15b_instruct_gguf"}
    assert set(records.dtype) == {"bfloat16"}
    spec = records[records.method == "speculative"]
    # A coder pair on code under greedy decoding agrees most of the time.
    assert spec.accepted.sum() / spec.proposed.sum() > 0.5
    assert (spec.tokens_per_call > 1.5).all()
    assert records.passed.isin([0.0, 1.0]).all()
    assert records.completion.str.len().gt(0).all()
