"""The registry: every decoding method, one entry each (name -> Method), and what reads it.

A new method is one module (its schema and `bind`), one entry below and one
conf/decoder/<name>.yaml; the runner, the audit and the analysis read only this table.
"""

from __future__ import annotations

import pandas as pd
from hydra.core.config_store import ConfigStore

from ..config import ConfigError, SpecBenchConfig
from . import autoregressive, hf, llamacpp, multidraft, prompt_lookup, replay, speculative
from .base import Method

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("autoregressive", autoregressive.AutoregressiveConfig, autoregressive.bind,
               compare_with="hf_generate"),
        Method("speculative", speculative.SpeculativeConfig, speculative.bind, needs_draft=True,
               drafts=True, baseline="autoregressive", compare_with="hf_assisted"),
        Method("hf_generate", hf.HFGenerateConfig, hf.bind_generate, global_rng=True,
               engine_name="transformers"),
        Method("hf_assisted", hf.HFAssistedConfig, hf.bind_assisted, needs_draft=True,
               drafts=True, global_rng=True, baseline="autoregressive",
               engine_name="transformers"),
        Method("replay", replay.ReplayConfig, replay.bind, needs_draft=True, drafts=True,
               auditable=False, baseline="autoregressive", prepare=replay.prepare),
        Method("prompt_lookup", prompt_lookup.PromptLookupConfig, prompt_lookup.bind,
               drafts=True, baseline="autoregressive", compare_with="hf_prompt_lookup"),
        Method("multidraft", multidraft.MultiDraftConfig, multidraft.bind, needs_draft=True,
               drafts=True, baseline="autoregressive"),
        Method("hf_prompt_lookup", hf.HFPromptLookupConfig, hf.bind_prompt_lookup, drafts=True,
               global_rng=True, baseline="autoregressive", engine_name="transformers"),
        Method("llamacpp", llamacpp.LlamaCppConfig, llamacpp.bind, global_rng=True,
               engine=llamacpp.engine, engine_name="llama.cpp"),
        Method("llamacpp_speculative", llamacpp.LlamaCppSpeculativeConfig, llamacpp.bind,
               drafts=True, global_rng=True, baseline="llamacpp", engine=llamacpp.engine,
               engine_name="llama.cpp"),
    )
}  # fmt: skip


def method(name: str) -> Method:
    """The registry entry of `name`; a ConfigError naming the choices otherwise."""
    if name not in METHODS:
        raise ConfigError(f"unknown decoder {name!r}; choose one of {sorted(METHODS)}")
    return METHODS[name]


def job_methods(job: SpecBenchConfig) -> list[Method]:
    """The decoder, then what is timed beside it on every prompt: its baseline
    (bench.baseline) and, with bench.compare_hf, the decoder's and the baseline's
    other-engine versions."""
    decoder = method(job.decoder.name)
    pair = [decoder] + ([method(decoder.baseline)] if decoder.baseline else [])
    chosen = pair if job.bench.baseline else [decoder]
    if job.bench.compare_hf:
        chosen = chosen + [method(m.compare_with) for m in pair if m.compare_with]
    return list({m.name: m for m in chosen}.values())


def needs_draft(job: SpecBenchConfig) -> bool:
    """Whether the job loads a draft: a method of it uses one, or the profile times it."""
    return job.bench.kind == "profile" or any(m.needs_draft for m in job_methods(job))


def check_job(job: SpecBenchConfig) -> None:
    """What the method table says about a job, checked before anything loads."""
    decoder = method(job.decoder.name)
    if job.bench.kind != "audit":
        return
    if not decoder.auditable:
        auditable = sorted(n for n, m in METHODS.items() if m.auditable)
        raise ConfigError(f"bench.kind=audit audits one of {auditable}, got decoder={decoder.name}")
    if decoder.drafts and job.decoder.k < 2:
        raise ConfigError(
            "bench.kind=audit needs decoder.k >= 2 (so accept, residual and bonus paths all run)"
        )


def register_configs(store: ConfigStore | None = None) -> None:
    """The root schema as `schema` (config.yaml extends it) and each method's schema as
    decoder/<name>_schema (conf/decoder/<name>.yaml extends it), so every override is
    type-checked against its dataclass when merged."""
    store = store or ConfigStore.instance()
    store.store(name="schema", node=SpecBenchConfig)
    for entry in METHODS.values():
        store.store(group="decoder", name=f"{entry.name}_schema", node=entry.config)


def annotate(records: pd.DataFrame) -> pd.DataFrame:
    """Records as today's runner writes them, from older runs too: `paired_with` (each row's
    baseline) filled in, and k = 0 on rows of methods that do not draft (older runs wrote the
    job's K on every row)."""
    known = {name: m.baseline or "" for name, m in METHODS.items()}
    filled = records.method.map(known).fillna("")
    if "paired_with" in records:
        filled = records.paired_with.fillna(filled)
    drafts = records.method.map({name: m.drafts for name, m in METHODS.items()})
    k = records.k.where(drafts.fillna(True).astype(bool), 0) if "k" in records else None
    return records.assign(paired_with=filled, **({"k": k} if k is not None else {}))
