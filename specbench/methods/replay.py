"""Acceptance-trace replay: the real speculative loop, accepted counts from a recorded run."""

from __future__ import annotations

from ..decoding.replay import Replay, ReplayConfig, open_replay
from .base import DecodeOptions, Generate, Models, Runs

__all__ = ["ReplayConfig", "bind", "prepare"]


def prepare(cfg: ReplayConfig, runs: Runs) -> Replay:
    """Load the trace; it must cover every run of the job (checked before models load)."""
    return open_replay(cfg, runs.prompt_ids, runs.repeats, runs.seed_of, runs.warmup_seed)


def bind(cfg: ReplayConfig, models: Models, opt: DecodeOptions, replay: Replay) -> Generate:
    def generate(ids, max_new_tokens, generator):
        return replay.generate(
            models.target, models.draft, ids, k=cfg.k, max_new_tokens=max_new_tokens,
            sampling=opt.sampling, generator=generator, stop=opt.stop,
            vocab_size=opt.vocab_size, static_cache=opt.static_cache, compile=opt.compile,
        )  # fmt: skip

    return generate
