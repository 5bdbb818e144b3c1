"""The audit's two sides: many short continuations from a decoder, and the target's exact law.

A decoder is audited on the first two tokens it emits after a fixed prefix. Drafting decoders
run K+1 tokens, because the drafted count is capped at the remaining budget minus one: with
K+1 the first block drafts the full K, so its accept, residual and bonus paths all feed the two
tested positions. The exact law comes from the target's own uncached forward passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..decoding.common import model_device
from ..methods import DecodeOptions, Generate, Method, Models
from ..sampling import SamplingParams, logits_to_probs

POSITIONS = 2  # tested positions: the first token, the second given the first
ENDED = -2  # token id recorded for a position after the generation ended (EOS)


@dataclass(frozen=True)
class AuditedDecoder:
    """One method under audit: a bound generate call, its budget, its seeding."""

    generate: Generate  # (ids, max_new_tokens, generator) -> GenerationResult
    max_new_tokens: int
    seed_per_call: bool  # transformers samples from the global RNG: a fresh seed for each call


def audited_decoder(
    entry: Method, cfg, models: Models, sampling: SamplingParams, vocab_size: int,
    prepared: object = None,
) -> AuditedDecoder:  # fmt: skip
    """The registry method `entry` with its config (and per-job preparation or engine, as the
    job made them), bound to the pair for the audit."""
    options = DecodeOptions(sampling, stop=None, vocab_size=vocab_size)
    budget = entry.k(cfg) + 1 if entry.drafts else POSITIONS
    return AuditedDecoder(entry.bind(cfg, models, options, prepared), budget, entry.global_rng)


@dataclass
class Samples:
    """N continuations of one prefix: the first two tokens and, for our speculative decoder,
    how many drafts the first block accepted (-1 where the method does not report it)."""

    tokens: np.ndarray  # (N, 2) int64; ENDED where the generation stopped before the position
    accepted_first: np.ndarray  # (N,) int64
    seeds: np.ndarray  # (N,) the generator seed behind each continuation


def call_seeds(seed: int, n: int, per_call: bool) -> np.ndarray:
    """(n,) seeds: n independent ones from a SeedSequence, or the one seed repeated."""
    if per_call:
        return np.random.SeedSequence(seed).generate_state(n, dtype=np.uint32).astype(np.int64)
    return np.full(n, seed, dtype=np.int64)


def draw_samples(
    decoder: AuditedDecoder,
    ids: torch.Tensor,
    n: int,
    seed: int,
    progress: Callable[[int], None] = lambda _: None,
) -> Samples:
    """n continuations of ids (1, T). Ours share one generator, never reseeded; transformers'
    calls each get a fresh generator from its own derived seed (hf_generate seeds from it)."""
    seeds = call_seeds(seed, n, decoder.seed_per_call)
    device = ids.device
    shared = torch.Generator(device).manual_seed(seed)
    tokens = np.zeros((n, POSITIONS), dtype=np.int64)
    accepted = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        own = decoder.seed_per_call
        gen = torch.Generator(device).manual_seed(int(seeds[i])) if own else shared
        res = decoder.generate(ids, decoder.max_new_tokens, gen)
        if not res.tokens:
            raise RuntimeError("the decoder returned no token; the audit needs at least one")
        # transformers stops at the model's EOS even without a stop condition: no second token
        tokens[i] = (res.tokens + [ENDED] * POSITIONS)[:POSITIONS]
        accepted[i] = res.accepted[0] if res.accepted else -1
        progress(1)
    return Samples(tokens, accepted, seeds)


@torch.inference_mode()
def exact_first(
    target: torch.nn.Module, ids: torch.Tensor, sampling: SamplingParams, vocab_size: int
) -> np.ndarray:
    """(V,) the target's law of the first new token after ids (1, T), cut to vocab_size."""
    logits = target(input_ids=ids.to(model_device(target))).logits[:, -1, :vocab_size]  # (1, V)
    return logits_to_probs(logits, sampling)[0].double().cpu().numpy()


@torch.inference_mode()
def exact_second(
    target: torch.nn.Module,
    ids: torch.Tensor,
    firsts: list[int],
    sampling: SamplingParams,
    vocab_size: int,
) -> np.ndarray:
    """(F, V) the target's law of the second new token given each first token in `firsts`."""
    if not firsts:
        return np.zeros((0, vocab_size))
    device = model_device(target)
    head = ids.to(device).expand(len(firsts), -1)  # (F, T)
    seqs = torch.cat([head, torch.tensor(firsts, device=device)[:, None]], dim=1)  # (F, T+1)
    logits = target(input_ids=seqs).logits[:, -1, :vocab_size]  # (F, V)
    return logits_to_probs(logits, sampling).double().cpu().numpy()
