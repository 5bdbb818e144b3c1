"""One job: validate -> prompts -> tokenizers -> models -> warm-up -> interleaved timing -> records.

Seed policy: every (prompt, repeat) gets its own seed (`BenchConfig.seed_for`), and each method
timed on that prompt and repeat starts a fresh torch.Generator from that same seed (common random
numbers: the methods see the same stream). Nothing is reseeded inside a decoding loop. The
order of methods alternates between consecutive (prompt, repeat) pairs to cancel drift.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from . import stats
from .audit import run_audit
from .calibrate import calibrate_first, run_calibrate
from .config import ConfigError, SpecBenchConfig
from .decoding import GenerationResult
from .methods import Method
from .models import ModelPool
from .prepare import Prepared, bind_methods, encode, prepare, resolve_kernels, warm_kernels
from .profile import run_profile
from .provenance import provenance
from .records import (
    AUDIT,
    CALIBRATION,
    ITERATIONS,
    PROFILE,
    RECORDS,
    job_done,
    write_job,
    write_text,
)
from .tasks import Prompt
from .tracking import track

log = logging.getLogger(__name__)


def to_config(cfg: DictConfig) -> SpecBenchConfig:
    """Resolve and validate (dataclass __post_init__); no model, no network, no files."""
    try:
        job = OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except Exception as err:  # OmegaConf wraps validation errors raised in __post_init__
        cause = err.__cause__ or err.__context__
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(str(err).splitlines()[0]) from err
    return job


def measure(prep: Prepared, models: tuple) -> tuple[list[dict], list[dict]]:
    """Warm up (and calibrate, with bench.calibrate), then time every method on every prompt x
    repeat; rows for both tables."""
    job, device = prep.job, prep.job.backend.device
    bound = bind_methods(prep, models)
    encoded = encode(prep)
    warm_kernels(prep, models, encoded)
    for _ in range(job.bench.warmup):
        for generate in bound.values():
            gen = torch.Generator(device).manual_seed(job.bench.seed)
            generate(encoded[0], min(job.max_new_tokens, 16), gen)
    predicted = calibrate_first(prep, models, bound, encoded)
    rows: list[dict] = []
    iterations: list[dict] = []
    cells = [(i, r) for i in range(len(prep.prompts)) for r in range(job.bench.repeats)]
    bar = tqdm(cells, desc=f"{job.experiment} {job.decoder.name}", unit="run")
    for step, (i, repeat) in enumerate(bar):
        seed = prep.seed(i, repeat)
        order = prep.methods if step % 2 == 0 else prep.methods[::-1]
        for entry in order:
            gen = torch.Generator(device).manual_seed(seed)
            res = bound[entry.name](encoded[i], job.max_new_tokens, gen)
            rows.append(result_row(prep, entry, prep.prompts[i], repeat, seed, res) | predicted)
            iterations += iteration_rows(rows[-1], res)
        bar.set_postfix_str(progress_text(rows))
    return rows, iterations


def score_rows(prep: Prepared, rows: list[dict]) -> None:
    """Add the task's quality columns (ROUGE, pass/fail) to each row, after all timing."""
    by_id = {p.id: p for p in prep.prompts}
    for row in tqdm(rows, desc=f"scoring {prep.job.task.name}", unit="row", leave=False):
        row.update(prep.score(prep.job.task, by_id[row["prompt_id"]], row["completion"]))


def result_row(
    prep: Prepared, entry: Method, prompt: Prompt, repeat: int, seed: int, res: GenerationResult
) -> dict[str, Any]:
    """One tidy row: what ran, its raw timings and counts, the completion."""
    return {
        "method": entry.name,
        "paired_with": entry.baseline or "",
        "k": entry.k(entry.config_from(prep.job.decoder)),
        "prompt_id": prompt.id,
        "repeat": repeat,
        "seed": seed,
        "new_tokens": res.num_tokens,
        "wall_s": res.wall_s,
        "ms_per_token": res.ms_per_token,
        "target_calls": res.target_calls,
        "draft_calls": res.draft_calls,
        "accepted": sum(res.accepted),
        "proposed": sum(res.proposed),
        "drafts": sum(1 for p in res.proposed if p > 0),
        "tokens_per_call": res.tokens_per_target_call,
        "alpha": res.mean_expected_acceptance,
        "draft_s": res.draft_s,
        "target_s": res.target_s,
        "overhead_s": res.overhead_s,
        "stopped_by": res.stopped_by,
        "load_1m": os.getloadavg()[0],  # other work beside the timing shows here
        # Scored text: cut at the first EOS (fixed-length runs generate past it), specials
        # dropped; the raw text keeps every token, special ones included, for re-scoring.
        "completion": prep.tokenizer.decode(
            cut_at_eos(res.tokens, prep.eos_token_ids), skip_special_tokens=True
        ),
        "completion_raw": prep.tokenizer.decode(res.tokens, skip_special_tokens=False),
    }


def cut_at_eos(tokens: list[int], eos_token_ids: tuple[int, ...]) -> list[int]:
    """tokens up to (excluding) the first EOS id."""
    end = next((i for i, t in enumerate(tokens) if t in eos_token_ids), len(tokens))
    return tokens[:end]


def iteration_rows(row: dict[str, Any], res: GenerationResult) -> list[dict]:
    """One row per drafting iteration of a result: drafts proposed and accepted."""
    head = {name: row[name] for name in ("method", "prompt_id", "repeat")}
    return [
        head | {"iteration": it, "k": k, "accepted": acc}
        for it, (acc, k) in enumerate(zip(res.accepted, res.proposed, strict=True))
    ]


def progress_text(rows: list[dict]) -> str:
    """'spec 120.3ms/tok auto 230.1ms/tok acc 0.81' for the progress bar."""
    frame = pd.DataFrame(rows)
    parts = [
        f"{m[:4]} {g.ms_per_token.mean():.1f}ms/tok" for m, g in frame.groupby("method", sort=False)
    ]
    drafting = frame[frame.proposed > 0]
    if len(drafting):
        parts.append(f"acc {stats.acceptance_rate(drafting):.2f}")
    return " ".join(parts)


def job_columns(job: SpecBenchConfig, override: str, uses_draft: bool) -> dict[str, Any]:
    """Columns shared by every row of a job: what ran, where, with what."""
    return {
        "experiment": job.experiment,
        "job": override,
        "decoder": job.decoder.name,
        "temperature": job.sampling.temperature,
        "top_k": job.sampling.top_k,
        "top_p": job.sampling.top_p,
        "sampling": job.sampling.name,
        "target": job.target.name,
        "draft": job.draft.name if uses_draft else "",
        "backend": job.backend.name,
        "compiled": job.backend.compile,
        "prompt_fp32": job.backend.prompt_fp32,
        "device": job.backend.device,
        "dtype": job.target.torch_dtype_name(job.backend.dtype),
        "draft_dtype": job.draft.torch_dtype_name(job.backend.dtype) if uses_draft else "",
        "task": job.task.name,
        "prompt_format": job.task.prompt_format,
        "fixed_length": job.bench.fixed_length,
        "max_new_tokens": job.max_new_tokens,
    }


def time_decoders(prep: Prepared, models: tuple, job_dir: Path, shared: dict) -> dict[str, Any]:
    """The timing job: interleaved method vs baseline, quality scored after all timing."""
    rows, iterations = measure(prep, models)
    score_rows(prep, rows)
    records = pd.DataFrame([shared | row for row in rows])
    iters = pd.DataFrame([{"job": shared["job"]} | row for row in iterations])
    summary = summarize(records)
    write_job(job_dir, {RECORDS: records, ITERATIONS: iters}, summary)
    return summary


@dataclass(frozen=True)
class JobKind:
    """What a job of one kind runs, and the table it logs to the tracker."""

    run: Callable[[Prepared, tuple, Path, dict], dict[str, Any]]
    table: str


KINDS: dict[str, JobKind] = {  # keyed by bench.kind
    "time": JobKind(time_decoders, RECORDS),
    "profile": JobKind(run_profile, PROFILE),
    "audit": JobKind(run_audit, AUDIT),
    "calibrate": JobKind(run_calibrate, CALIBRATION),
}


def run(cfg: DictConfig, pool: ModelPool, job_dir: Path, job_id: str) -> dict[str, Any] | None:
    """Run one job into job_dir, unless its records are complete and overwrite is off."""
    job = to_config(cfg)
    if job_done(job_dir) and not job.overwrite:
        log.info("skipping %s: records exist (overwrite=true to redo)", job_dir)
        return None
    prep = prepare(job)
    if job.backend.num_threads:
        torch.set_num_threads(job.backend.num_threads)
    prep = resolve_kernels(prep)
    job = prep.job
    # backend.compile: decoding.common.compiled_call sets dynamo up, inside every CachedLM.
    models = pool.get(job.target, job.draft if prep.uses_draft else None, job.backend)
    shared = job_columns(job, job_id, prep.uses_draft) | provenance(job.backend.device)
    write_text(job_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    with track(job, job_dir) as tracker:
        kind = KINDS[job.bench.kind]
        summary = kind.run(prep, models, job_dir, shared | {"pair_loads": pool.loads})
        tracker.log(cfg, summary, pd.read_parquet(job_dir / kind.table))
    log.info("summary: %s", summary)
    return summary


def summarize(records: pd.DataFrame) -> dict[str, Any]:
    """Median ms/token per method; per drafting method its speedup over its baseline
    (geometric mean of per-prompt ratios and the median), acceptance and alpha."""
    out: dict[str, Any] = {"rows": len(records), "pair_loads": int(records.pair_loads.iloc[0])}
    for name, g in records.groupby("method"):
        out[f"{name}_ms_per_token_median"] = float(g.ms_per_token.median())
    for _, row in stats.speedups(records).iterrows():
        mine = records[records.method == row.method]
        prefix = "" if row.method == records.decoder.iloc[0] else f"{row.method}_"
        out[f"{prefix}speedup"] = float(row.speedup)
        out[f"{prefix}speedup_median"] = float(row.speedup_median)
        out[f"{prefix}acceptance_rate"] = stats.acceptance_rate(mine)
        out[f"{prefix}alpha_mean"] = stats.alpha(mine)
    if "predicted_speedup" in records:  # bench.calibrate: the forecast made before timing
        out["predicted_speedup"] = float(records.predicted_speedup.iloc[0])
    return out
