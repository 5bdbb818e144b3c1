"""What a decoding method is to specbench: its schema, how it binds to a job, how it is reported."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields
from typing import Any

import torch

from ..config import DecoderConfig
from ..decoding.common import GenerationResult, StopCondition
from ..sampling import SamplingParams

# (input_ids (1, T), max_new_tokens, generator) -> one generation of the bound method
Generate = Callable[[torch.Tensor, int, "torch.Generator | None"], GenerationResult]


@dataclass(frozen=True)
class DecodeOptions:
    """What every generate call of one job shares."""

    sampling: SamplingParams
    stop: StopCondition | None = None  # None: fixed length (and in the audit)
    vocab_size: int | None = None  # the tokenizer's size: logits are cut to it
    static_cache: bool = False
    compile: bool = False


@dataclass(frozen=True)
class Models:
    """The job's loaded models; draft is None when no method of the job needs one."""

    target: torch.nn.Module
    draft: torch.nn.Module | None = None


@dataclass(frozen=True)
class Runs:
    """The runs a job will time, for a method's per-job preparation (replay maps seeds)."""

    prompt_ids: list[str]
    repeats: int
    seed_of: Callable[[int, int], int]  # (local prompt index, repeat) -> seed
    warmup_seed: int


Bind = Callable[[Any, Models, DecodeOptions, Any], Generate]  # (config, models, options, prepared)


@dataclass(frozen=True)
class Method:
    """One registry entry. `config` is the method's schema (the only home of its defaults)."""

    name: str
    config: type[DecoderConfig]
    bind: Bind  # binds the method to a job's models once
    needs_draft: bool = False  # the job loads a draft model
    drafts: bool = False  # proposes tokens: rows carry k, iterations, acceptance, alpha
    global_rng: bool = False  # samples from an RNG of its own, seeded per call (transformers'
    # global RNG, llama.cpp's per-request seed): the audit gives each call its own seed
    auditable: bool = True  # its output law should be the target's (replay's is not)
    baseline: str | None = None  # rows' paired_with: speedups are over this method
    compare_with: str | None = None  # bench.compare_hf: another engine's version of it
    prepare: Callable[[Any, Runs], Any] | None = None  # per-job work before models load
    # an external engine the method drives (llama.cpp's server): (config, job, log path) ->
    # a context manager, entered once per job and timed variant, closed on every exit path;
    # what it yields is bind's last argument
    engine: Callable[[Any, Any, Any], AbstractContextManager] | None = None
    engine_name: str = "specbench"  # whose code decodes: specbench, transformers, llama.cpp

    def config_from(self, decoder: DecoderConfig) -> DecoderConfig:
        """This method's config carrying over the fields it shares with the job's decoder
        (a comparison or baseline method runs at the decoder's k)."""
        if type(decoder) is self.config:  # not isinstance: a subclass is another method's schema
            return decoder
        names = {f.name for f in fields(self.config)} - {"name"}
        shared = {n: getattr(decoder, n) for n in names if hasattr(decoder, n)}
        return self.config(name=self.name, **shared)

    def k(self, config: DecoderConfig) -> int:
        """Draft tokens per iteration of a row (0 for a method that does not draft)."""
        return int(config.k) if self.drafts else 0
