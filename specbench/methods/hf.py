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


def _bind(models: Models, opt: DecodeOptions, **extra) -> Generate:
    """transformers' generate on the target with the job's options and `extra` arguments."""

    def generate(ids, max_new_tokens, generator):
        return hf_generate(
            models.target, ids, max_new_tokens=max_new_tokens, sampling=opt.sampling,
            generator=generator, stop=opt.stop, **extra,
        )  # fmt: skip

    return generate


def bind_generate(cfg: HFGenerateConfig, models: Models, opt: DecodeOptions, _prep) -> Generate:
    return _bind(models, opt)


def bind_assisted(cfg: HFAssistedConfig, models: Models, opt: DecodeOptions, _prep) -> Generate:
    return _bind(models, opt, draft=models.draft, k=cfg.k)


@dataclass
class HFPromptLookupConfig(DecoderConfig):
    """transformers' prompt lookup: k tokens after a match of up to max_ngram tokens."""

    name: str = "hf_prompt_lookup"
    max_ngram: int = 3  # max_matching_ngram_size


def bind_prompt_lookup(
    cfg: HFPromptLookupConfig, models: Models, opt: DecodeOptions, _prep
) -> Generate:
    return _bind(models, opt, k=cfg.k, ngram=cfg.max_ngram)
