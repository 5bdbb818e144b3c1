"""Prompt-lookup drafting (transformers' `prompt_lookup_num_tokens`, vLLM's ngram): model-free.

The draft is what followed the most recent earlier occurrence of the sequence's last n tokens
(n from max_ngram down to min_ngram; the prompt plus the text so far), up to K tokens. Its law
is a point mass, so `verify` accepts x with probability target(x) and on rejection samples the
target with x removed and renormalised: exactly the target's law, through the same loop as
speculative sampling. Greedy, it is token for token the autoregressive target.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import ConfigError, DecoderConfig
from ..decoding.common import head_width, static_cache_len
from ..decoding.speculative import draft_and_verify
from ..sampling import SamplingParams
from .base import DecodeOptions, Generate, Models


@dataclass
class PromptLookupConfig(DecoderConfig):
    """Draft up to k tokens by matching the last max_ngram..min_ngram tokens earlier on."""

    name: str = "prompt_lookup"
    max_ngram: int = 3  # longest suffix matched (transformers' max_matching_ngram_size)
    min_ngram: int = 1  # shortest suffix matched before giving up (no draft this iteration)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ConfigError(
                f"decoder: need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}"
            )


def lookup(seq: torch.Tensor, k: int, max_ngram: int, min_ngram: int) -> torch.Tensor:
    """(L,) ids -> (K',) ids, K' <= k: what followed the latest earlier match of the longest
    suffix of length max_ngram..min_ngram; empty when no suffix recurs."""
    length = seq.shape[0]
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        windows = seq[: length - 1].unfold(0, n, 1)  # (L-n, n): starts with a token after them
        hits = (windows == seq[length - n :]).all(-1).nonzero()
        if len(hits):
            start = int(hits[-1]) + n
            return seq[start : start + k]
    return seq[:0]


class NgramDrafter:
    """A drafter with no model: proposes a point mass on the looked-up continuation."""

    calls = 0  # no draft forwards

    def __init__(self, cfg: PromptLookupConfig, vocab: int) -> None:
        self.cfg, self.vocab = cfg, vocab

    def propose(
        self, ids: torch.Tensor, n: int, k: int, sampling: SamplingParams, generator
    ) -> torch.Tensor:
        found = lookup(ids[0, :n], k, self.cfg.max_ngram, self.cfg.min_ngram) if k else ids[0, :0]
        outside = (found >= self.vocab).nonzero()  # ids no head can emit end the draft
        found = found[: int(outside[0])] if len(outside) else found
        ids[0, n : n + len(found)] = found
        probs = torch.zeros(1, len(found), self.vocab, device=ids.device)  # (1, K', V)
        return probs.scatter_(-1, found.view(1, -1, 1), 1.0)

    def rollback(self, keep: int) -> None:
        """Nothing cached: the next lookup reads the sequence as it is."""


def bind(cfg: PromptLookupConfig, models: Models, opt: DecodeOptions, _prep) -> Generate:
    width = head_width(models.target)
    vocab = min(opt.vocab_size or width, width)

    def generate(ids, max_new_tokens, generator):
        cached = opt.static_cache or opt.compile
        total = ids.shape[1] + max_new_tokens + cfg.k + 1
        return draft_and_verify(
            models.target, NgramDrafter(cfg, vocab), ids, k=cfg.k, max_new_tokens=max_new_tokens,
            sampling=opt.sampling, generator=generator, vocab_size=vocab, stop=opt.stop,
            max_len=static_cache_len(total) if cached else None, compile=opt.compile,
        )  # fmt: skip

    return generate
