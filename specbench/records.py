"""Tidy records on disk: atomic writes, skip-if-done, and gathering jobs into one table."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

log = logging.getLogger(__name__)
JOB_CONFIG = "config.yaml"  # a job's resolved config, written first
SUMMARY = "summary.json"  # written last: its presence marks a complete job
FAILURE = "failure.json"  # a job that raised: its error (no summary, so it is retried)
FAILURES = "failures.csv"  # gathered: one row per job whose last attempt failed
RECORDS = "records.parquet"  # one row per (prompt x repeat x method)
ITERATIONS = "iterations.parquet"  # one row per speculative iteration
PROFILE = "scoring_profile.parquet"  # one row per (model x q x repeat) of a scoring profile
CALIBRATION = "calibration.parquet"  # one row per K of a calibration: s(K), c, alpha, prediction
AUDIT = "audit.parquet"  # one row per exactness test (job x prefix x position x given token)
AUDIT_TOKENS = "audit_tokens.parquet"  # one row per tested bucket: exact vs empirical probability
AUDIT_SAMPLES = "audit_samples.parquet"  # one row per audited continuation (its first two tokens)
# a timing job's finished (prompt, repeat) runs, saved after each: a killed job resumes there
PARTIAL_RECORDS = "partial_records.parquet"
PARTIAL_ITERATIONS = "partial_iterations.parquet"
TABLES = (RECORDS, ITERATIONS, PROFILE, CALIBRATION, AUDIT, AUDIT_TOKENS, AUDIT_SAMPLES)


def atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    """Call write(tmp) on a temp file beside path, then rename: readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are shared (other users, cluster nodes)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_table(path: Path, frame: pd.DataFrame) -> None:
    if path.suffix == ".csv":
        atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))
    else:
        atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


def job_done(job_dir: Path) -> bool:
    return (job_dir / SUMMARY).is_file()


def write_job(job_dir: Path, tables: dict[str, pd.DataFrame], summary: dict[str, Any]) -> None:
    """Tables first, the summary last, each atomically: a killed job leaves no summary.
    Temp files a killed earlier attempt left and its failure record are removed."""
    for stale in job_dir.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    for name, frame in tables.items():
        write_table(job_dir / name, frame)
    write_text(job_dir / SUMMARY, json.dumps(summary, indent=2, default=str))
    (job_dir / FAILURE).unlink(missing_ok=True)


def write_failure(job_dir: Path, job_id: str, err: BaseException) -> dict[str, str]:
    """Record why a job raised (no summary: the next run retries it); returns the row."""
    trace = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    row = {
        "job": job_id,
        "error_type": type(err).__name__,
        "error": str(err).strip().splitlines()[0] if str(err).strip() else "",
        "traceback": trace[-4000:],
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    write_text(job_dir / FAILURE, json.dumps(row, indent=2))
    return row


def gather_failures(experiment_dir: Path) -> pd.DataFrame:
    """failures.csv: one row per job whose last attempt failed (removed when there is none)."""
    rows = [
        json.loads(path.read_text())
        for path in sorted(Path(experiment_dir).glob(f"*/{FAILURE}"))
        if not (path.parent / SUMMARY).is_file()
    ]
    frame = pd.DataFrame(rows, columns=["job", "error_type", "error", "traceback", "timestamp"])
    target = Path(experiment_dir) / FAILURES
    if rows:
        write_table(target, frame)
    else:
        target.unlink(missing_ok=True)
    return frame


def options_column(options: Any) -> str:
    """A task's options as the records' task_options column (what else shapes a prompt)."""
    return json.dumps(options, sort_keys=True)


def job_records(job_dir: Path) -> pd.DataFrame:
    """A job's records; rows older than the task_options column get it from the job's config,
    rows older than the lean decode path say they ran transformers' forward, rows older than
    packed weights that they ran plain F.linear, and rows older than padded decode calls that
    their one-row calls ran oneDNN's one-row kernel."""
    frame = pd.read_parquet(job_dir / RECORDS)
    for flag in ("lean_decode", "pack_weights", "pad_decode"):
        if flag not in frame:
            frame[flag] = False
    config = job_dir / JOB_CONFIG
    if "task_options" not in frame and config.is_file():
        task = OmegaConf.to_container(OmegaConf.load(config)).get("task") or {}
        frame["task_options"] = options_column(task.get("options") or {})
    return frame


def _read(job_dir: Path, name: str) -> pd.DataFrame:
    """One table of one job (records with the columns older jobs lack)."""
    return job_records(job_dir) if name == RECORDS else pd.read_parquet(job_dir / name)


def gather(experiment_dir: Path) -> dict[str, pd.DataFrame]:
    """Concatenate every complete job's tables into experiment_dir (records also as CSV)."""
    experiment_dir = Path(experiment_dir)
    jobs = sorted(p.parent for p in experiment_dir.glob(f"*/{SUMMARY}"))
    if not jobs:
        raise FileNotFoundError(f"no complete job (with {SUMMARY}) under {experiment_dir}")
    gathered = {}
    for name in TABLES:
        frames = [_read(job, name) for job in jobs if (job / name).is_file()]
        if frames:
            gathered[name] = pd.concat(frames, ignore_index=True)
            write_table(experiment_dir / name, gathered[name])
    if RECORDS in gathered:
        write_table(experiment_dir / "records.csv", gathered[RECORDS])
    log.info("gathered %d jobs into %s: %s", len(jobs), experiment_dir, sorted(gathered))
    return gathered
