"""Decoders: the autoregressive baseline and speculative sampling."""

from .autoregressive import autoregressive_generate
from .common import GenerationResult, StopCondition
from .speculative import pair_vocab_size, speculative_generate

__all__ = [
    "GenerationResult",
    "StopCondition",
    "autoregressive_generate",
    "pair_vocab_size",
    "speculative_generate",
]
