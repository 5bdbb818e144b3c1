"""transformers' own generate and assisted generation, as comparison methods."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DecoderConfig
from ..decoding.hf import hf_generate
from .base import DecodeOptions, Generate, Models


@dataclass
class HFGenerateConfig(DecoderConfig):
    """`target.generate(...)` as users call it."""

    name: str = "hf_generate"


@dataclass
class HFAssistedConfig(DecoderConfig):
    """Assisted generation with the draft as assistant and a truly fixed K."""

    name: str = "hf_assisted"


def bind_generate(cfg: HFGenerateConfig, models: Models, opt: DecodeOptions, _prep) -> Generate:
    def generate(ids, max_new_tokens, generator):
        return hf_generate(
            models.target, ids, max_new_tokens=max_new_tokens, sampling=opt.sampling,
            generator=generator, stop=opt.stop,
        )  # fmt: skip

    return generate


def bind_assisted(cfg: HFAssistedConfig, models: Models, opt: DecodeOptions, _prep) -> Generate:
    def generate(ids, max_new_tokens, generator):
        return hf_generate(
            models.target, ids, max_new_tokens=max_new_tokens, sampling=opt.sampling,
            generator=generator, stop=opt.stop, draft=models.draft, k=cfg.k,
        )  # fmt: skip

    return generate


@dataclass
class HFPromptLookupConfig(DecoderConfig):
    """transformers' prompt lookup: k tokens after a match of up to max_ngram tokens."""

    name: str = "hf_prompt_lookup"
    max_ngram: int = 3  # max_matching_ngram_size


def bind_prompt_lookup(
    cfg: HFPromptLookupConfig, models: Models, opt: DecodeOptions, _prep
) -> Generate:
    def generate(ids, max_new_tokens, generator):
        return hf_generate(
            models.target, ids, max_new_tokens=max_new_tokens, sampling=opt.sampling,
            generator=generator, stop=opt.stop, k=cfg.k, ngram=cfg.max_ngram,
        )  # fmt: skip

    return generate
