"""transformers' own generate and assisted generation, timed as comparison methods.

These call the library as users do; nothing in it is patched. transformers samples from the
global RNG, so each call runs under `torch.random.fork_rng` seeded once from the generator's
seed (before the call, never inside its loop). Per-iteration accepted counts are not exposed by
`generate`, so those fields stay empty for these methods.
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from ..sampling import SamplingParams
from .common import Clock, GenerationResult, StopCondition, check_inputs, model_device


def generation_config(
    sampling: SamplingParams, max_new_tokens: int, stop: StopCondition | None, k: int | None
) -> GenerationConfig:
    """The same law as ours: top_k set explicitly (transformers defaults to 50)."""
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        do_sample=not sampling.greedy,
        top_k=sampling.top_k if not sampling.greedy else None,
        top_p=sampling.top_p if not sampling.greedy else None,
        temperature=sampling.temperature if not sampling.greedy else None,
        eos_token_id=list(stop.eos_token_ids) if stop and stop.eos_token_ids else None,
        stop_strings=list(stop.stop_strings) if stop and stop.stop_strings else None,
        pad_token_id=stop.eos_token_ids[0] if stop and stop.eos_token_ids else 0,
    )
    if k is not None:  # a truly fixed K: no schedule, no early exit on draft confidence
        kwargs |= dict(
            num_assistant_tokens=k,
            num_assistant_tokens_schedule="constant",
            assistant_confidence_threshold=0.0,
        )
    return GenerationConfig(**kwargs)


@torch.inference_mode()
def hf_generate(
    target: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    sampling: SamplingParams,
    generator: torch.Generator | None,
    stop: StopCondition | None = None,
    vocab_size: int | None = None,
    draft: torch.nn.Module | None = None,
    k: int | None = None,
) -> GenerationResult:
    """`target.generate(...)`, or with `assistant_model=draft` and a fixed K when draft is given."""
    check_inputs(input_ids, max_new_tokens)
    device = model_device(target)
    config = generation_config(sampling, max_new_tokens, stop, k if draft is not None else None)
    extra = {"assistant_model": draft} if draft is not None else {}
    if stop and stop.stop_strings:
        extra["tokenizer"] = stop.tokenizer
    seed = generator.initial_seed() if generator is not None else 0
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        clock = Clock(device)
        out = target.generate(
            input_ids.to(device),
            attention_mask=torch.ones_like(input_ids, device=device),
            generation_config=config,
            **extra,
        )
        clock.lap("total")
    tokens = out[0, input_ids.shape[1] :].tolist()
    hit = stop.find(tokens, 0) if stop else None
    return GenerationResult(
        tokens=tokens[: hit[0]] if hit else tokens,
        wall_s=clock.total(),
        target_calls=0,  # not exposed by generate
        stopped_by=hit[1] if hit else "length",
    )
