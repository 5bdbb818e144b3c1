"""The baseline: the target alone, one token per call, with a KV cache."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DecoderConfig
from ..decoding.autoregressive import autoregressive_generate
from .base import DecodeOptions, Generate, Models


@dataclass
class AutoregressiveConfig(DecoderConfig):
    """No knobs: the target samples every token itself."""

    name: str = "autoregressive"


def bind(cfg: AutoregressiveConfig, models: Models, opt: DecodeOptions, _prep) -> Generate:
    def generate(ids, max_new_tokens, generator):
        return autoregressive_generate(
            models.target, ids, max_new_tokens=max_new_tokens, sampling=opt.sampling,
            generator=generator, stop=opt.stop, vocab_size=opt.vocab_size,
            static_cache=opt.static_cache, compile=opt.compile,
        )  # fmt: skip

    return generate
