"""The baseline: target-only autoregressive decoding with a KV cache, one token per call."""

from __future__ import annotations

import torch

from ..sampling import SamplingParams, logits_to_probs, next_token
from .common import (
    CachedLM,
    Clock,
    GenerationResult,
    StopCondition,
    check_inputs,
    model_device,
    static_cache_len,
)


@torch.inference_mode()
def autoregressive_generate(
    target: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    sampling: SamplingParams,
    generator: torch.Generator | None,
    stop: StopCondition | None = None,
    vocab_size: int | None = None,
    static_cache: bool = False,
    compile: bool = False,
) -> GenerationResult:
    """Sample up to max_new_tokens from `target` after input_ids (1, T); prefill is timed too.

    static_cache / compile select the fixed-shape path (see `CachedLM`).
    """
    check_inputs(input_ids, max_new_tokens)
    device = model_device(target)
    max_len = (
        static_cache_len(input_ids.shape[1] + max_new_tokens) if static_cache or compile else None
    )
    lm = CachedLM(target, vocab_size, max_len, compile)
    clock = Clock(device)
    pending = input_ids.to(device)  # (1, T): ids not yet in the cache
    tokens: list[int] = []
    stopped_by = "length"
    first_s = float("nan")  # time to first token: the prompt's prefill and one sampled token
    while len(tokens) < max_new_tokens:
        logits = lm.forward(pending, keep=1)  # (1, 1, V)
        clock.lap("target")
        probs = logits_to_probs(logits[:, -1], sampling)  # (1, V)
        pending = next_token(probs, sampling, generator).view(1, 1)
        tokens.append(int(pending))
        hit = stop.find(tokens, len(tokens) - 1) if stop else None
        clock.lap("overhead")
        first_s = clock.total() if len(tokens) == 1 else first_s
        if hit:
            stopped_by = hit[1]
            break
    return GenerationResult(
        tokens=tokens,
        wall_s=clock.total(),
        target_calls=lm.calls,
        target_s=clock.buckets.get("target", 0.0),
        overhead_s=clock.buckets.get("overhead", 0.0),
        stopped_by=stopped_by,
        first_s=first_s,
        first_tokens=1,
    )
