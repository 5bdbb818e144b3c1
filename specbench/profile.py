"""Scoring profile: forward latency for q = 1..max_q new tokens against a cached prefix.

The paper's central assumption is that scoring K+1 tokens in one target call costs about one
decoding step; this measures it on the user's hardware for the target and the draft, and (with
profile.trees) what multi-draft's token trees cost: n branches of depth K scored in one call
under a tree mask, 1 + n*K nodes, beside a chain of the same width.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .decoding.common import CachedLM, Clock, head_width, model_device, static_cache_len
from .decoding.multidraft import Tree


@torch.inference_mode()
def profile_model(
    model: torch.nn.Module,
    prefix: torch.Tensor,
    max_q: int,
    repeats: int,
    compile: bool = False,
    max_len: int | None = None,
    trees: list[tuple[int, int]] = (),
) -> list[dict]:
    """Rows (shape, q, repeat, ms): one forward of q tokens after a cached prefix, then cropped
    back, through the backend's path when asked (a static cache of max_len positions;
    compiled); then each (n, K) of `trees` as a token tree of 1 + n*K nodes (dynamic cache)."""
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
                rows.append({"shape": "chain", "q": q, "repeat": repeat, "ms": 1e3 * clock.total()})
    return rows + [row for n, k in trees for row in _tree_rows(lm, vocab, n, k, repeats)]


def branches(n: int, k: int, vocab: int) -> Tree:
    """A tree of n disjoint branches of depth k below the root (distinct tokens per node)."""
    tree = Tree(tokens=[0])
    for branch in range(n):
        node = 0
        for depth in range(k):
            node = tree.add(node, (1 + branch * k + depth) % vocab)
    return tree


def _tree_rows(lm: CachedLM, vocab: int, n: int, k: int, repeats: int) -> list[dict]:
    """Rows for one (n, K): the tree's nodes scored in one call, as multidraft's tree_step does."""
    tree, device = branches(n, k, vocab), model_device(lm.model)
    dtype = next(lm.model.parameters()).dtype
    tokens = torch.tensor([tree.tokens], device=device)  # (1, N)
    positions = torch.tensor([tree.depth], device=device) + lm.length  # (1, N)
    mask = tree.attention(lm.length, dtype, device)  # (1, 1, N, past + N)
    rows = []
    for repeat in range(-1, repeats):
        clock = Clock(device)
        lm.forward(tokens, keep=len(tree.tokens), position_ids=positions, attention_mask=mask)
        clock.lap("forward")
        lm.rollback(len(tree.tokens))
        if repeat >= 0:
            shape = f"tree n={n} K={k}"
            rows.append({"shape": shape, "q": len(tree.tokens), "repeat": repeat,
                         "ms": 1e3 * clock.total(), "n_drafts": n, "k": k})  # fmt: skip
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
            trees = [tuple(t) for t in job.profile.trees] if role == "target" else []
            for row in profile_model(
                model, prefix, job.profile.max_q, job.bench.repeats, job.backend.compile, max_len,
                trees,
            ):  # fmt: skip
                rows.append(shared | {"model": role, "prefix_tokens": prefix.shape[1]} | row)
    table = pd.DataFrame(rows)
    summary = profile_summary(table, job.profile.max_q)
    write_job(job_dir, {PROFILE: table}, summary | {"finished": time.time()})
    return summary


def profile_summary(table, max_q: int) -> dict[str, float]:
    """Median ms of chosen widths per model, of each tree shape, and the paper's c."""
    chain, trees = table[table["shape"] == "chain"], table[table["shape"] != "chain"]
    ms_at_1 = chain[chain.q == 1].groupby("model").ms.median()
    summary = {
        f"{role}_ms_q{q}": float(g.ms.median())
        for (role, q), g in chain.groupby(["model", "q"])
        if q in (1, 4, 5, 8, max_q)
    } | {
        f"target_ms_tree_n{int(n)}_k{int(k)}": float(g.ms.median())
        for (n, k), g in trees.groupby(["n_drafts", "k"])
    }
    if {"target", "draft"} <= set(ms_at_1.index):  # the paper's c: a draft step / a target step
        summary["c"] = float(ms_at_1["draft"] / ms_at_1["target"])
    return summary
