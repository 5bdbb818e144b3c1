"""Speculative sampling (Chen et al. 2023): draft K, score K+1 in one target call, verify.

The loop is generic over a `Drafter` (transformers' candidate generators): a draft model with
its own KV cache (`ModelDrafter`, the paper's method) or any proposer that returns the law its
tokens were drawn from (a point mass for model-free drafting). Verification is always `verify`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from ..sampling import SamplingParams, expected_acceptance, logits_to_probs, next_token, verify
from .common import (
    CachedLM,
    Clock,
    GenerationResult,
    StopCondition,
    check_inputs,
    head_width,
    model_device,
    static_cache_len,
)

# (draft_ids (1, K), draft_probs (1, K, V), target_probs (1, K+1, V), generator)
#   -> (n_accepted (1,), next_id (1,))
VerifyFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
# One iteration: (tlm, drafter, ids, n, k_max, sampling, generator, verify_fn, clock)
#   -> (accepted, drafted depth K', beta per tested position); `step` for a chain
StepFn = Callable[..., tuple[int, int, torch.Tensor]]


class Drafter(Protocol):
    """Proposes up to k tokens after ids[:, :n] and says which law each was drawn from."""

    calls: int  # draft forwards (0 for a model-free drafter)

    def propose(
        self, ids: torch.Tensor, n: int, k: int, sampling: SamplingParams, generator
    ) -> torch.Tensor:
        """Writes K' <= k tokens into ids[:, n:n+K']; returns their draft_probs (1, K', V)."""
        ...

    def rollback(self, keep: int) -> None:
        """Forget everything after the first `keep` tokens of the sequence."""
        ...


def pair_vocab_size(target: torch.nn.Module, draft: torch.nn.Module, vocab_size: int | None) -> int:
    """The shared vocabulary width both models' logits are cut to; raises on a mismatch.

    vocab_size is the tokenizer's size: padded lm_heads are cut to it, and ids a tokenizer has
    beyond both heads (added tokens no model can emit) are dropped.
    """
    widths = {
        "target": head_width(target),
        "draft": head_width(draft),
    }
    if vocab_size is None and widths["target"] != widths["draft"]:
        raise ValueError(
            f"target and draft lm_heads differ in width ({widths}); pass "
            "vocab_size=len(tokenizer) to compare them on the shared token ids"
        )
    uneven = widths["target"] != widths["draft"]
    if uneven and vocab_size is not None and vocab_size > min(widths.values()):
        raise ValueError(f"vocab_size={vocab_size} exceeds the narrower lm_head {widths}")
    return min(vocab_size or widths["target"], *widths.values())


class ModelDrafter:
    """A draft model with its own KV cache: K sampled steps per proposal."""

    def __init__(self, draft: torch.nn.Module, vocab: int, max_len: int | None, compile: bool):
        self.lm = CachedLM(draft, vocab, max_len, compile)

    @property
    def calls(self) -> int:
        return self.lm.calls

    def propose(
        self, ids: torch.Tensor, n: int, k: int, sampling: SamplingParams, generator
    ) -> torch.Tensor:
        device = model_device(self.lm.model)
        probs = []
        pending = ids[:, self.lm.length : n]  # (1, P): prompt, 1 token, or 2 after a full accept
        for i in range(k):
            logits = self.lm.forward(pending.to(device), keep=1)[:, -1]  # (1, V)
            probs.append(logits_to_probs(logits, sampling).to(ids.device))
            ids[:, n + i] = next_token(probs[-1], sampling, generator)
            pending = ids[:, n + i : n + i + 1]
        if not probs:
            return torch.empty(1, 0, self.lm.vocab_size, device=ids.device)
        return torch.stack(probs, dim=1)  # (1, K, V)

    def rollback(self, keep: int) -> None:
        self.lm.rollback(self.lm.length - keep)


def finish(result: GenerationResult, clock: Clock, target_calls: int, draft_calls: int) -> None:
    """Fill the result's totals from the clock's buckets and the call counters."""
    result.wall_s = clock.total()
    result.target_calls, result.draft_calls = target_calls, draft_calls
    result.draft_s = clock.buckets.get("draft", 0.0)
    result.target_s = clock.buckets.get("target", 0.0)
    result.overhead_s = clock.buckets.get("overhead", 0.0)


def step(
    tlm: CachedLM,
    drafter: Drafter,
    ids: torch.Tensor,
    n: int,
    k_max: int,
    sampling: SamplingParams,
    generator: torch.Generator | None,
    verify_fn: VerifyFn,
    clock: Clock,
) -> tuple[int, int, torch.Tensor]:
    """One iteration after ids[:, :n]: draft K' <= k_max, score K'+1 in one target call,
    verify, write the next token. -> (accepted, K', beta at the tested positions (accepted+1,))"""
    draft_probs = drafter.propose(ids, n, k_max, sampling, generator)  # (1, K', V)
    k_now = draft_probs.shape[1]
    clock.lap("draft")
    logits = tlm.forward(ids[:, tlm.length : n + k_now], keep=k_now + 1)  # (1, K'+1, V)
    clock.lap("target")
    target_probs = logits_to_probs(logits, sampling)  # (1, K'+1, V)
    n_acc, next_id = verify_fn(ids[:, n : n + k_now], draft_probs, target_probs, generator)
    accepted = int(n_acc)  # host sync: the crop lengths and stop checks need it
    ids[:, n + accepted] = next_id
    beta = expected_acceptance(target_probs[:, :k_now], draft_probs)[0, : accepted + 1]
    return accepted, k_now, beta


def emit(result: GenerationResult, new: list[int], k_now: int, stop: StopCondition | None) -> bool:
    """Append one iteration's accepted tokens + the next one; True when a stop string cut them."""
    result.accepted.append(len(new) - 1)
    result.proposed.append(k_now)
    result.tokens.extend(new)
    hit = stop.find(result.tokens, len(result.tokens) - len(new)) if stop else None
    if hit:
        del result.tokens[hit[0] :]
        result.stopped_by = hit[1]
    return hit is not None


@torch.inference_mode()
def draft_and_verify(
    target: torch.nn.Module,
    drafter: Drafter,
    input_ids: torch.Tensor,
    *,
    k: int,
    max_new_tokens: int,
    sampling: SamplingParams,
    generator: torch.Generator | None,
    vocab_size: int,
    stop: StopCondition | None = None,
    verify_fn: VerifyFn = verify,
    max_len: int | None = None,
    compile: bool = False,
    step_fn: StepFn = step,
) -> GenerationResult:
    """Sample up to max_new_tokens after input_ids (1, T); exactly the target's distribution.

    The target caches every token but the last emitted one. Each iteration the drafter
    proposes K' <= K tokens, the target scores [last, x_1..x_K'] in one call, `verify` accepts
    n of them and draws one more, and both caches are cropped to the accepted prefix.
    verify_fn replaces the rejection test (trace replay; the audit's biased control: anything
    else breaks exactness); step_fn the iteration (multi-draft's `multidraft.tree_step`).
    """
    check_inputs(input_ids, max_new_tokens)
    if k < 1:
        raise ValueError(f"k (draft tokens per iteration) must be >= 1, got {k}")
    tlm = CachedLM(target, vocab_size, max_len, compile)
    clock = Clock(model_device(target))
    prompt_len = input_ids.shape[1]
    ids = torch.empty(1, prompt_len + max_new_tokens + k, dtype=torch.long, device=clock.device)
    ids[:, :prompt_len] = input_ids
    n = prompt_len  # ids[:, :n] is the sequence so far
    result = GenerationResult(tokens=[], wall_s=0.0, target_calls=0)
    betas = []  # per-iteration beta tensors, read back once at the end (no extra sync per loop)
    while n - prompt_len < max_new_tokens:
        k_max = min(k, max_new_tokens - (n - prompt_len) - 1)  # never draft past the budget
        accepted, k_now, beta = step_fn(
            tlm, drafter, ids, n, k_max, sampling, generator, verify_fn, clock
        )
        betas.append(beta)
        new = ids[0, n : n + accepted + 1].tolist()
        n += accepted + 1
        tlm.rollback(tlm.length - (n - 1))  # keep all but the newest token
        drafter.rollback(n - 1)
        stopped = emit(result, new, k_now, stop)
        clock.lap("overhead")
        result.mark_first(clock.total(), len(result.tokens))
        if stopped:
            break
    result.expected_acceptance = torch.cat(betas).tolist()
    clock.lap("overhead")
    finish(result, clock, tlm.calls, drafter.calls)
    return result


def speculative_generate(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    k: int,
    max_new_tokens: int,
    sampling: SamplingParams,
    generator: torch.Generator | None,
    stop: StopCondition | None = None,
    vocab_size: int | None = None,
    verify_fn: VerifyFn = verify,
    static_cache: bool = False,
    compile: bool = False,
) -> GenerationResult:
    """Speculative sampling with a draft model: `draft_and_verify` with a `ModelDrafter`.

    Both models keep a KV cache; the prompt is prefilled inside the first draft and target
    calls. static_cache / compile select the fixed-shape path (see `CachedLM`); the law is the
    same.
    """
    vocab = pair_vocab_size(target, draft, vocab_size)
    total = input_ids.shape[1] + max_new_tokens + k + 1
    max_len = static_cache_len(total) if static_cache or compile else None
    drafter = ModelDrafter(draft, vocab, max_len, compile)
    return draft_and_verify(
        target, drafter, input_ids, k=k, max_new_tokens=max_new_tokens, sampling=sampling,
        generator=generator, vocab_size=vocab, stop=stop, verify_fn=verify_fn, max_len=max_len,
        compile=compile,
    )  # fmt: skip
