"""Scoring profile: forward latency for q = 1..max_q new tokens against a cached prefix.

The paper's central assumption is that scoring K+1 tokens in one target call costs about one
decoding step; this measures it on the user's hardware for the target and the draft.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .decoding.common import CachedLM, Clock, head_width, model_device, static_cache_len


@torch.inference_mode()
def profile_model(
    model: torch.nn.Module,
    prefix: torch.Tensor,
    max_q: int,
    repeats: int,
    compile: bool = False,
    max_len: int | None = None,
) -> list[dict]:
    """Rows (q, repeat, ms): one forward of q tokens after a cached prefix, then cropped back,
    through the backend's path when asked (a static cache of max_len positions; compiled)."""
    device = model_device(model)
    if compile and max_len is None:
        max_len = static_cache_len(prefix.shape[1] + max_q)
    lm = CachedLM(model, max_len=max_len, compile=compile)
    lm.forward(prefix.to(device), keep=1)  # the cached prefix (untimed)
    vocab = head_width(model)
    new = torch.randint(0, vocab, (1, max_q), generator=torch.Generator().manual_seed(0))
    new = new.to(device)
    rows = []
    for repeat in range(-1, repeats):  # repeat -1 is the warm-up pass, not recorded
        for q in range(1, max_q + 1):
            clock = Clock(device)
            lm.forward(new[:, :q], keep=q)
            clock.lap("forward")
            lm.rollback(q)
            if repeat >= 0:
                rows.append({"q": q, "repeat": repeat, "ms": 1e3 * clock.total()})
    return rows


def run_profile(prep, models: tuple, job_dir: Path, shared: dict) -> dict:
    """The scoring_profile job: both models on the task's first prompt; writes its own table."""
    # Imported here, not at the top: profile_model needs only torch (benchmarks/gpu_targets.py
    # runs it where pandas and hydra are absent); only this job's table needs them.
    import pandas as pd

    from .records import PROFILE, write_job

    job = prep.job
    prefix = prep.tokenizer(prep.prompts[0].text, return_tensors="pt").input_ids
    rows = []
    for role, model in zip(("target", "draft"), models, strict=True):
        if model is not None:
            cached = job.backend.static_cache or job.backend.compile
            max_len = static_cache_len(prefix.shape[1] + job.profile.max_q) if cached else None
            for row in profile_model(
                model, prefix, job.profile.max_q, job.bench.repeats, job.backend.compile, max_len
            ):
                rows.append(shared | {"model": role, "prefix_tokens": prefix.shape[1]} | row)
    table = pd.DataFrame(rows)
    ms_at_1 = table[table.q == 1].groupby("model").ms.median()
    summary = {
        f"{role}_ms_q{q}": float(g.ms.median())
        for (role, q), g in table.groupby(["model", "q"])
        if q in (1, 4, 8, job.profile.max_q)
    } | {f"{role}_ms_q1": float(v) for role, v in ms_at_1.items()}
    if {"target", "draft"} <= set(ms_at_1.index):  # the paper's c: a draft step / a target step
        summary["c"] = float(ms_at_1["draft"] / ms_at_1["target"])
    write_job(job_dir, {PROFILE: table}, summary | {"finished": time.time()})
    return summary
