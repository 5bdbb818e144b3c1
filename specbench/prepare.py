"""A job before timing: prompts, tokenizers and stops checked; methods bound to the models;
the kernels chosen (cpu_auto) and compiled (backend.compile) before any clock starts."""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from .config import ConfigError, DecoderConfig, SpecBenchConfig
from .decoding import GenerationResult, StopCondition
from .decoding.common import static_cache_len, warm_compiled
from .kernels import AUTO_CHOICES, auto_choice, measured_scoring_ratio
from .methods import DecodeOptions, Generate, Method, Models, Runs, check_job, job_methods, method
from .methods import needs_draft as job_needs_draft
from .models import (
    check_device,
    check_eos,
    check_tokenizers,
    eos_token_ids,
    load_tokenizer,
    preflight,
)
from .packaged import cache_root
from .tasks import Prompt, Scorer, format_prompts, load_prompts, scorer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timed:
    """One method at one K, timed on every (prompt, repeat) of a job; `label` keys its bound
    generate (the method's name at decoder.k, "<name>@k=<K>" at the other K of a sweep)."""

    label: str
    method: Method
    config: DecoderConfig


def timed_variants(job: SpecBenchConfig, methods: list[Method]) -> list[Timed]:
    """The job's methods, a drafting one once per K of decoder.k_sweep (and per n of its
    n_sweep, multidraft's): the block design. The decoder.k (and n_drafts) variant keeps the
    method's name as its label; the others are "<name>@k=<K>" (",n=<n>")."""
    timed = []
    for entry in methods:
        config = entry.config_from(job.decoder)
        ns = list(getattr(config, "n_sweep", None) or [None])
        for k in job.decoder.ks() if entry.drafts else [config.k]:
            for n in ns:
                sweep = {"k": k} | ({"n_drafts": n} if n is not None else {})
                variant = replace(config, **sweep) if sweep != {"k": config.k} else config
                plain = k == job.decoder.k and n in (None, getattr(config, "n_drafts", None))
                label = entry.name if plain else f"{entry.name}@k={k}" + (f",n={n}" if n else "")
                timed.append(Timed(label, entry, variant))
    return timed


@dataclass
class Prepared:
    """Everything a job needs before models load: its config, prompts, tokenizer, stops."""

    job: SpecBenchConfig
    prompts: list[Prompt]
    tokenizer: Any
    vocab_size: int
    stop: StopCondition | None  # None in fixed-length timing
    score: Scorer
    methods: list[Method]  # the decoder first, then what is timed beside it
    prepared: dict[str, Any] = field(default_factory=dict)  # a method's per-job preparation
    eos_token_ids: tuple[int, ...] = ()  # ends a generation; cuts fixed-length completions
    first_index: int = 0  # index of prompts[0] in the task (bench.shard): seeds use it

    @property
    def timed(self) -> list[Timed]:
        """What each (prompt, repeat) times: every method, drafting ones at every K swept."""
        return timed_variants(self.job, self.methods)

    @property
    def uses_draft(self) -> bool:
        return job_needs_draft(self.job)

    def seed(self, local_index: int, repeat: int) -> int:
        """The seed of a shard's local prompt index: the same as in an unsharded run."""
        return self.job.bench.seed_for(self.first_index + local_index, repeat)


def shard_prompts(prompts: list[Prompt], shard: tuple[int, int]) -> tuple[list[Prompt], int]:
    """The i-th of n contiguous blocks of prompts, and the index of its first prompt."""
    index, count = shard
    start, stop = len(prompts) * index // count, len(prompts) * (index + 1) // count
    if start == stop:
        raise ConfigError(f"bench.shard={index}/{count} is empty: {len(prompts)} prompts")
    return prompts[start:stop], start


def prepare_methods(job: SpecBenchConfig, prompts: list[Prompt], first: int) -> dict[str, Any]:
    """Each method's per-job preparation (replay's trace must cover the job's runs)."""

    def seed_of(index: int, repeat: int) -> int:
        return job.bench.seed_for(first + index, repeat)

    runs = Runs([p.id for p in prompts], job.bench.repeats, seed_of, job.bench.seed)
    return {
        m.name: m.prepare(m.config_from(job.decoder), runs) for m in job_methods(job) if m.prepare
    }


def prepare(job: SpecBenchConfig) -> Prepared:
    """Cheap checks that must pass before any model loads."""
    check_job(job)
    score = scorer(job.task)
    prompts, first = shard_prompts(
        load_prompts(job.task, job.bench.prompt_count()), job.bench.shard_index()
    )
    prepared = prepare_methods(job, prompts, first)
    check_device(job.backend)
    uses_draft = job_needs_draft(job)
    for model in (job.target, job.draft) if uses_draft else (job.target,):
        preflight(model)
    target_dtype = job.target.torch_dtype_name(job.backend.dtype)
    tokenizer = load_tokenizer(job.target, target_dtype)
    vocab_size = len(tokenizer)
    eos = eos_token_ids(job.target, tokenizer, target_dtype)
    if uses_draft:
        draft_dtype = job.draft.torch_dtype_name(job.backend.dtype)
        draft_tokenizer = load_tokenizer(job.draft, draft_dtype)
        vocab_size = check_tokenizers(tokenizer, draft_tokenizer)
        eos = check_eos(eos, eos_token_ids(job.draft, draft_tokenizer, draft_dtype))
    prompts = format_prompts(job.task, prompts, tokenizer)
    stop = None if job.bench.fixed_length else StopCondition(eos, tuple(job.task.stops), tokenizer)
    methods = job_methods(job)
    return Prepared(job, prompts, tokenizer, vocab_size, stop, score, methods, prepared, eos, first)


def bind(
    prep: Prepared, models: tuple, entry: Method, config: DecoderConfig | None = None,
    label: str | None = None, fixed: bool = False,
) -> Generate:  # fmt: skip
    """One registry method bound to the loaded models with the job's options (at `config`, by
    default the job's decoder carried over to the method; `label`: its timed variant's;
    `fixed`: stops off, exactly the budget asked for)."""
    job, backend = prep.job, prep.job.backend
    stop = None if fixed else prep.stop
    options = DecodeOptions(
        job.sampling.params(), stop, prep.vocab_size, backend.static_cache, backend.compile
    )
    config = config or entry.config_from(job.decoder)
    prepared = prep.prepared.get(label or entry.name, prep.prepared.get(entry.name))
    return entry.bind(config, Models(*models), options, prepared)


def bind_methods(prep: Prepared, models: tuple, fixed: bool = False) -> dict[str, Generate]:
    """Every timed variant of the job bound to the loaded models, once: label -> generate
    (`fixed`: with the stops off, for bench.match_lengths' followers)."""
    return {t.label: bind(prep, models, t.method, t.config, t.label, fixed) for t in prep.timed}


def start_engines(prep: Prepared, job_dir: Path, stack: ExitStack) -> Prepared:
    """The external engines of the job's timed variants (llama.cpp's server), one per variant,
    each logging to <job>/<label>.engine.log and stopped when `stack` closes."""
    started = {
        t.label: stack.enter_context(
            t.method.engine(t.config, prep.job, job_dir / f"{t.label}.engine.log")
        )
        for t in prep.timed
        if t.method.engine
    }
    return replace(prep, prepared=prep.prepared | started) if started else prep


def generate(
    name: str, prep: Prepared, models: tuple, ids: torch.Tensor, gen: torch.Generator, n: int
) -> GenerationResult:
    """One generation of the registry method `name` on one prompt (scripts and benchmarks)."""
    return bind(prep, models, method(name))(ids, n, gen)


def encode(prep: Prepared) -> list[torch.Tensor]:
    """The job's prompts as (1, T) ids on the backend's device."""
    device = prep.job.backend.device
    return [prep.tokenizer(p.text, return_tensors="pt").input_ids.to(device) for p in prep.prompts]


def warm_kernels(prep: Prepared, models: tuple, encoded: list[torch.Tensor]) -> None:
    """backend.compile: every decode graph the job calls is compiled before any clock starts
    (target: 1..K+1 new tokens, draft: 1-2, at each static cache length the prompts need)."""
    job = prep.job
    if not job.backend.compile:
        return
    k, n = max(job.decoder.ks()), job.max_new_tokens
    lens = {static_cache_len(e.shape[1] + n + extra) for e in encoded for extra in (0, k + 1)}
    log.info(
        "compiling decode graphs (target 1..%d tokens, draft 1-2, %d cache lengths): minutes "
        "the first time on a CPU, seconds once cached", k + 1, len(lens),
    )  # fmt: skip
    target, draft = models
    warm_compiled(target, lens, [(w, w) for w in range(1, k + 2)])
    if draft is not None:
        warm_compiled(draft, lens, [(1, 1), (2, 1)])


def resolve_kernels(prep: Prepared) -> Prepared:
    """backend.auto_kernels (cpu_auto): eager, the AVX2 row kernel or compiled calls, from this
    CPU's measured eager scoring cost; the job (and so its rows' compiled / rows_kernel /
    prompt_fp32 columns) carries the choice."""
    backend = prep.job.backend
    if not backend.auto_kernels:
        return prep
    ratio = measured_scoring_ratio(prep.job.decoder.k, cache_root() / "kernels.json")
    choice = auto_choice(ratio)
    log.info(
        "cpu_auto: an eager bf16 linear's T(K+1)/T(1) is %.2f on this CPU: %s", ratio,
        {"eager": "eager kernels", "rows_kernel": "the AVX2 row kernel and fp32 prompts",
         "compiled": "compiled decode calls and fp32 prompts"}[choice],
    )  # fmt: skip
    # the name carries the choice, so rows of different choices never pool (stats.SETTING)
    chosen = replace(backend, name=f"{backend.name}:{choice}", **AUTO_CHOICES[choice])
    return replace(prep, job=replace(prep.job, backend=chosen))
