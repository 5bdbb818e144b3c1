"""Speculative sampling (Chen et al. 2023) with a draft model: the paper's method."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DecoderConfig
from ..decoding.speculative import speculative_generate
from .base import DecodeOptions, Generate, Models


@dataclass
class SpeculativeConfig(DecoderConfig):
    """Draft k tokens with the draft model, score k+1 in one target call, verify."""

    name: str = "speculative"


def bind(cfg: SpeculativeConfig, models: Models, opt: DecodeOptions, _prep) -> Generate:
    def generate(ids, max_new_tokens, generator):
        return speculative_generate(
            models.target, models.draft, ids, k=cfg.k, max_new_tokens=max_new_tokens,
            sampling=opt.sampling, generator=generator, stop=opt.stop,
            vocab_size=opt.vocab_size, static_cache=opt.static_cache, compile=opt.compile,
        )  # fmt: skip

    return generate
