"""Sequence-level multi-draft speculative sampling: n draft sequences verified as one tree."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import ConfigError, DecoderConfig
from ..decoding.multidraft import DRAFT_MODES, multidraft_generate
from ..decoding.speculative import speculative_generate
from .base import DecodeOptions, Generate, Models


@dataclass
class MultiDraftConfig(DecoderConfig):
    """n_drafts sequences of depth k from the draft model, scored in one target call."""

    name: str = "multidraft"
    n_drafts: int = 2  # 1 = speculative sampling (token for token: the same code path)
    drafts: str = "iid"  # iid (SpecInfer) | without_replacement (Recursive Speculative Decoding)
    # Block design over n as k_sweep is over K: every n of this list (x every K) in one job,
    # against the one baseline per prompt; [] = n_drafts only (which must then be in it).
    n_sweep: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_drafts < 1:
            raise ConfigError(f"decoder.n_drafts must be >= 1, got {self.n_drafts}")
        if self.n_sweep and (min(self.n_sweep) < 1 or self.n_drafts not in self.n_sweep):
            raise ConfigError(
                f"decoder.n_sweep={list(self.n_sweep)} must list n >= 1, "
                f"n_drafts={self.n_drafts} among them"
            )
        if self.drafts not in DRAFT_MODES:
            raise ConfigError(f"decoder.drafts must be one of {DRAFT_MODES}, got {self.drafts!r}")


def bind(cfg: MultiDraftConfig, models: Models, opt: DecodeOptions, _prep) -> Generate:
    if opt.static_cache or opt.compile:
        raise ConfigError(
            "decoder=multidraft runs on dynamic KV caches (its tree's branches are cut from "
            "them): use an eager backend (cpu, cpu_bf16, cuda)"
        )

    def generate(ids, max_new_tokens, generator):
        if cfg.n_drafts == 1:
            return speculative_generate(
                models.target, models.draft, ids, k=cfg.k, max_new_tokens=max_new_tokens,
                sampling=opt.sampling, generator=generator, stop=opt.stop,
                vocab_size=opt.vocab_size,
            )  # fmt: skip
        return multidraft_generate(
            models.target, models.draft, ids, k=cfg.k, n_drafts=cfg.n_drafts,
            drafts=cfg.drafts, max_new_tokens=max_new_tokens, sampling=opt.sampling,
            generator=generator, stop=opt.stop, vocab_size=opt.vocab_size,
        )  # fmt: skip

    return generate
