"""transformers' own generate and assisted generation, timed as comparison methods.

These call the library as users do; nothing in it is patched. transformers samples from the
global RNG, so each call runs under `torch.random.fork_rng` seeded once from the generator's
seed (before the call, never inside its loop). Per-iteration accepted counts are not exposed by
`generate`, so those fields stay empty; forward calls of each model are counted with public
forward hooks, which gives tokens per target call (the acceptance summary) for these rows too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import GenerationConfig

from ..sampling import SamplingParams
from .common import Clock, GenerationResult, StopCondition, check_inputs, model_device

# transformers reads the assistant's schedule from the *assistant's* generation_config (copied
# when each generate call starts), not from the config passed to generate: set it there.
FIXED_K = (
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
)


def generation_config(
    sampling: SamplingParams, max_new_tokens: int, stop: StopCondition | None
) -> GenerationConfig:
    """The same law as ours: top_k set explicitly (transformers defaults to 50)."""
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=not sampling.greedy,
        top_k=sampling.top_k if not sampling.greedy else None,
        top_p=sampling.top_p if not sampling.greedy else None,
        temperature=sampling.temperature if not sampling.greedy else None,
        eos_token_id=list(stop.eos_token_ids) if stop and stop.eos_token_ids else None,
        stop_strings=list(stop.stop_strings) if stop and stop.stop_strings else None,
        pad_token_id=stop.eos_token_ids[0] if stop and stop.eos_token_ids else 0,
    )


@contextmanager
def fixed_k(draft: torch.nn.Module | None, k: int | None) -> Iterator[None]:
    """A truly fixed K for the call: constant schedule, no early exit on draft confidence (a
    threshold of 0 disables it; transformers' default 0.4 stops drafting early). The draft's
    generation_config is restored afterwards."""
    if draft is None:
        yield
        return
    config = draft.generation_config
    saved = {name: getattr(config, name, None) for name in FIXED_K}
    config.num_assistant_tokens = k
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


@contextmanager
def count_forwards(*models: torch.nn.Module | None) -> Iterator[list[int]]:
    """Counts top-level forward calls per model while active (public forward hooks)."""
    counts = [0] * len(models)

    def hook(index: int):
        return lambda *_: counts.__setitem__(index, counts[index] + 1)

    handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(models) if m is not None]
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()


@torch.inference_mode()
def hf_generate(
    target: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    sampling: SamplingParams,
    generator: torch.Generator | None,
    stop: StopCondition | None = None,
    draft: torch.nn.Module | None = None,
    k: int | None = None,
    ngram: int | None = None,
) -> GenerationResult:
    """`target.generate(...)`; with `assistant_model=draft` and a fixed K when draft is given;
    with transformers' prompt lookup (K tokens after a match of up to `ngram` tokens) when
    ngram is given."""
    check_inputs(input_ids, max_new_tokens)
    device = model_device(target)
    drafting = draft is not None or ngram is not None
    if drafting and (k is None or k < 1):
        raise ValueError(f"assisted generation needs k >= 1 draft tokens per iteration, got {k}")
    config = generation_config(sampling, max_new_tokens, stop)
    if ngram is not None:
        config.prompt_lookup_num_tokens, config.max_matching_ngram_size = k, ngram
    extra = {"assistant_model": draft} if draft is not None else {}
    if stop and stop.stop_strings:
        extra["tokenizer"] = stop.tokenizer
    seed = generator.initial_seed() if generator is not None else 0
    forked = torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])
    with forked, fixed_k(draft, k), count_forwards(target, draft) as calls:
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
        target_calls=calls[0],
        draft_calls=calls[1],
        stopped_by=hit[1] if hit else "length",
    )
