"""One job: validate -> prompts -> tokenizers -> models -> warm-up -> interleaved timing
(specbench.timing) -> records."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from . import stats
from .audit import run_audit
from .calibrate import run_calibrate
from .config import ConfigError, SpecBenchConfig
from .kernels import can_pack, pads_decode
from .models import ModelPool
from .prepare import Prepared, prepare, resolve_kernels, start_engines
from .profile import run_profile
from .provenance import git_dirty, provenance
from .quantize import int4_kernel
from .records import (
    AUDIT,
    CALIBRATION,
    ITERATIONS,
    JOB_CONFIG,
    PROFILE,
    RECORDS,
    job_done,
    options_column,
    write_job,
    write_text,
)
from .sequential import run_sequential
from .timing import Checkpoint, measure, score_rows
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


def check_clean(job: SpecBenchConfig) -> None:
    """bench.require_clean: a reference experiment refuses a checkout with uncommitted changes."""
    if job.bench.require_clean and not job.allow_dirty and git_dirty():
        raise ConfigError(
            f"{job.experiment} makes reference results and the checkout has uncommitted changes "
            "(git status): commit them first (or run from a clean `git worktree add`), or pass "
            "allow_dirty=true to run anyway (its rows then say git_dirty=true)"
        )


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
        "int4_kernel": int4_kernel(job, uses_draft),
        "backend": job.backend.name,
        "compiled": job.backend.compile,
        "prompt_fp32": job.backend.prompt_fp32,
        "rows_kernel": job.backend.rows_kernel,
        "lean_decode": job.backend.lean_decode,
        "pack_weights": can_pack(job.backend),
        "pad_decode": pads_decode(job.backend),
        "device": job.backend.device,
        "dtype": job.target.torch_dtype_name(job.backend.dtype),
        "draft_dtype": job.draft.torch_dtype_name(job.backend.dtype) if uses_draft else "",
        "draft_prompt_int8": job.draft.prompt_int8 if uses_draft else False,
        "task": job.task.name,
        "prompt_format": job.task.prompt_format,
        "task_options": options_column(job.task.options),
        "fixed_length": job.bench.fixed_length,
        "max_new_tokens": job.max_new_tokens,
    }


def time_decoders(prep: Prepared, models: tuple, job_dir: Path, shared: dict) -> dict[str, Any]:
    """The timing job: interleaved method vs baseline, quality scored after all timing (with
    bench.target_half_width: in blocks of prompts until the interval is that narrow)."""
    sample: dict[str, Any] = {}
    checkpoint = Checkpoint.of(prep, job_dir, shared)  # the runs of the block (or job) in progress
    if prep.job.overwrite:
        checkpoint.clear()  # redo means every run, not only those a killed attempt missed
    if prep.job.bench.target_half_width is not None:
        rows, iterations, calibration, sample = run_sequential(
            prep, models, job_dir, shared, checkpoint
        )
    else:
        rows, iterations, calibration = measure(prep, models, checkpoint)  # tests/faults patches
        score_rows(prep, rows)
    records = pd.DataFrame([shared | row for row in rows])  # resumed rows keep their own stamp
    tables = {
        RECORDS: records,
        ITERATIONS: pd.DataFrame([{"job": shared["job"]} | row for row in iterations]),
    }
    if calibration:
        tables[CALIBRATION] = pd.DataFrame([shared | row for row in calibration])
    summary = summarize(records, prep.job.decoder.k) | {f"sample_{k}": v for k, v in sample.items()}
    write_job(job_dir, tables, summary)
    checkpoint.clear()  # the job's tables hold every run now
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
    check_clean(job)
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
    write_text(job_dir / JOB_CONFIG, OmegaConf.to_yaml(cfg, resolve=True))
    with track(job, job_dir) as tracker, ExitStack() as engines:
        prep = start_engines(prep, job_dir, engines)  # llama.cpp's server; stopped on exit
        kind = KINDS[job.bench.kind]
        summary = kind.run(prep, models, job_dir, shared | {"pair_loads": pool.loads})
        tracker.log(cfg, summary, pd.read_parquet(job_dir / kind.table))
    log.info("summary: %s", summary)
    return summary


def summarize(records: pd.DataFrame, headline_k: int | None = None) -> dict[str, Any]:
    """Median ms/token per method; per drafting method (and K) its speedup over its baseline
    (geometric mean of per-prompt ratios and the median), acceptance and alpha. Unprefixed
    keys are the decoder's at `headline_k`; other K of a sweep are prefixed "<method>_k<K>_"."""
    out: dict[str, Any] = {"rows": len(records), "pair_loads": int(records.pair_loads.iloc[0])}
    for name, g in records.groupby("method"):
        out[f"{name}_ms_per_token_median"] = float(g.ms_per_token.median())
    for _, row in stats.speedups(records).iterrows():
        mine = records[(records.method == row.method) & (records.k == row.k)]
        headline = headline_k is None or int(row.k) == headline_k
        prefix = "" if row.method == records.decoder.iloc[0] else f"{row.method}_"
        prefix = prefix if headline else f"{row.method}_k{int(row.k)}_"
        out[f"{prefix}speedup"] = float(row.speedup)
        out[f"{prefix}speedup_median"] = float(row.speedup_median)
        out[f"{prefix}acceptance_rate"] = stats.acceptance_rate(mine)
        out[f"{prefix}alpha_mean"] = stats.alpha(mine)
    if "predicted_speedup" in records:  # bench.calibrate: the forecast made before timing
        for key in ("predicted_speedup", "target_prefill_ms", "draft_prefill_ms"):
            if key in records:  # rows checkpointed before a column existed lack it
                out[key] = float(records[key].iloc[0])
        out["calibration_reused"] = bool(records.calibration_reused.iloc[0])
    return out
