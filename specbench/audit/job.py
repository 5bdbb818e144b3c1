"""The audit job (bench.kind=audit): sample, compute the exact laws, test, write tidy tables.

For each prefix (the task's first bench.num_prompts prompts) the decoder draws
audit.num_samples continuations; the target's own forwards give the exact law of the first
token and of the second given each of the likeliest first tokens. Every test of the job is one
family for Holm's correction, and the job's verdict is pass, suspicious or biased.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..config import AuditConfig
from ..decoding import pair_vocab_size
from ..decoding.common import head_width
from ..methods import Models, method
from ..records import AUDIT, AUDIT_SAMPLES, AUDIT_TOKENS, write_job
from ..sampling import SamplingParams
from .checks import REST, CheckSettings, conclude, prefix_tests
from .core import (
    ENDED,
    AuditedDecoder,
    Samples,
    audited_decoder,
    draw_samples,
    exact_first,
    exact_second,
)


def audit_vocab(models: tuple, vocab_size: int) -> int:
    """The vocabulary our decoders sample from: the pair's shared width, or the target's."""
    target, draft = models
    if draft is not None:
        return pair_vocab_size(target, draft, vocab_size)
    return min(vocab_size, head_width(target))


def settings(audit: AuditConfig) -> CheckSettings:
    return CheckSettings(audit.top_m, audit.min_expected, audit.bootstrap)


def audit_samples(
    decoder: AuditedDecoder,
    target: torch.nn.Module,
    ids: torch.Tensor,
    sampling: SamplingParams,
    vocab: int,
    audit: AuditConfig,
    seed: int,
    progress: Callable[[int], None] = lambda _: None,
) -> tuple[Samples, list[dict], list[dict]]:
    """Draw audit.num_samples continuations of ids (1, T) and test them against the target's
    exact laws: (samples, test rows, bucket rows). No Holm correction yet (see `conclude`)."""
    samples = draw_samples(decoder, ids, audit.num_samples, seed, progress)
    first_law = exact_first(target, ids, sampling, vocab)  # (V,)
    firsts = [int(t) for t in np.argsort(-first_law, kind="stable")[: audit.second_token_firsts]]
    firsts = [t for t in firsts if first_law[t] > 0]
    second_laws = exact_second(target, ids, firsts, sampling, vocab)  # (F, V)
    rng = np.random.default_rng(seed)
    tests, tokens = prefix_tests(
        samples, first_law, firsts, second_laws, settings(audit), rng, audit.min_conditional
    )
    return samples, tests, tokens


def audit_prefix(prep, models: tuple, index: int, vocab: int, bar: tqdm) -> tuple[list, ...]:
    """Sample one prefix, test it; (sample rows, test rows, token rows) keyed by prompt id."""
    job = prep.job
    ids = prep.tokenizer(prep.prompts[index].text, return_tensors="pt").input_ids
    ids = ids.to(job.backend.device)  # (1, T)
    entry, sampling = method(job.decoder.name), job.sampling.params()
    prepared = prep.prepared.get(entry.name)  # llama.cpp's server, started by the runner
    decoder = audited_decoder(entry, job.decoder, Models(*models), sampling, vocab, prepared)
    seed = job.bench.seed_for(index)
    samples, tests, tokens = audit_samples(
        decoder, models[0], ids, sampling, vocab, job.audit, seed, bar.update
    )
    key = {"prompt_id": prep.prompts[index].id, "prefix_tokens": ids.shape[1]}
    columns = zip(samples.seeds, samples.tokens, samples.accepted_first, strict=True)
    rows = [
        key
        | {"sample": i, "seed": int(s), "token1": int(t[0]), "token2": int(t[1])}
        | {"accepted_first": int(a)}
        for i, (s, t, a) in enumerate(columns)
    ]
    return rows, [key | t for t in tests], [key | t for t in tokens]


def token_text(tokenizer, token: int) -> str:
    return "<rest>" if token == REST else tokenizer.decode([token])


def run_audit(prep, models: tuple, job_dir: Path, shared: dict) -> dict[str, Any]:
    """The audit job: one decoder, every prefix; writes audit, audit_tokens and audit_samples."""
    job, entry = prep.job, method(prep.job.decoder.name)
    vocab = audit_vocab(models if entry.needs_draft else (models[0], None), prep.vocab_size)
    total = job.audit.num_samples * len(prep.prompts)
    drafts = entry.k(job.decoder)
    bar = tqdm(total=total, desc=f"audit {job.decoder.name} k={drafts}", unit="sample")
    samples, tests, tokens = [], [], []
    start = time.perf_counter()
    for index in range(len(prep.prompts)):
        s, t, k = audit_prefix(prep, models, index, vocab, bar)
        samples, tests, tokens = samples + s, tests + t, tokens + k
    bar.close()
    method_columns = {"method": job.decoder.name, "k": drafts}
    table, verdict = conclude(pd.DataFrame(tests), job.audit.alpha, job.audit.suspicious_alpha)
    table = pd.DataFrame([shared | method_columns | row for row in table.to_dict("records")])
    token_rows = pd.DataFrame([shared | method_columns | row for row in tokens])
    token_rows["text"] = [token_text(prep.tokenizer, t) for t in token_rows.token]
    given = table.given.map(lambda t: "" if t == REST else token_text(prep.tokenizer, t))
    table["given_text"] = given
    table = table.assign(verdict=verdict, alpha=job.audit.alpha, correction="holm")
    table["suspicious_alpha"] = job.audit.suspicious_alpha
    summary = audit_summary(table, pd.DataFrame(samples), verdict, job.audit)
    summary |= {"wall_s": time.perf_counter() - start, "pair_loads": shared["pair_loads"]}
    sample_rows = pd.DataFrame([{"job": shared["job"]} | method_columns | row for row in samples])
    tables = {AUDIT: table, AUDIT_TOKENS: token_rows, AUDIT_SAMPLES: sample_rows}
    write_job(job_dir, tables, summary)
    return summary


def audit_summary(
    tests: pd.DataFrame, samples: pd.DataFrame, verdict: str, audit: AuditConfig
) -> dict[str, Any]:
    """The verdict with its correction stated, the worst test, and which paths ran."""
    worst = tests.loc[tests.pvalue_holm.idxmin()]
    accepted = samples.accepted_first[samples.accepted_first >= 0]
    return {
        "verdict": verdict,
        "correction": f"Holm over {len(tests)} tests; biased if adjusted p < {audit.alpha}, "
        f"suspicious if < {audit.suspicious_alpha}",
        "tests": len(tests),
        "samples": len(samples),
        "min_pvalue": float(tests.pvalue.min()),
        "min_pvalue_holm": float(worst.pvalue_holm),
        "max_tv": float(tests.tv.max()),
        "max_tv_excess": float((tests.tv - tests.tv_null_q95).max()),
        "first_block_accepted_counts": {int(a): int(c) for a, c in accepted.value_counts().items()},
        "ended_after_one_token": int((samples.token2 == ENDED).sum()),
    }
