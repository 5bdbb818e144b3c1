"""Tidy records on disk: atomic writes, skip-if-done, and gathering jobs into one table."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)
SUMMARY = "summary.json"  # written last: its presence marks a complete job
RECORDS = "records.parquet"  # one row per (prompt x repeat x method)
ITERATIONS = "iterations.parquet"  # one row per speculative iteration


def atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    """Call write(tmp) on a temp file beside path, then rename: readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
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


def write_job(
    job_dir: Path, records: pd.DataFrame, iterations: pd.DataFrame, summary: dict[str, Any]
) -> None:
    """Tables first, the summary last, each atomically: a killed job leaves no summary."""
    write_table(job_dir / RECORDS, records)
    write_table(job_dir / ITERATIONS, iterations)
    write_text(job_dir / SUMMARY, json.dumps(summary, indent=2, default=str))


def gather(experiment_dir: Path) -> pd.DataFrame:
    """Concatenate every complete job under experiment_dir into records.parquet/.csv there."""
    experiment_dir = Path(experiment_dir)
    jobs = sorted(p.parent for p in experiment_dir.glob(f"*/{SUMMARY}"))
    if not jobs:
        raise FileNotFoundError(f"no complete job (with {SUMMARY}) under {experiment_dir}")
    for name in (RECORDS, ITERATIONS):
        frames = [pd.read_parquet(job / name) for job in jobs if (job / name).is_file()]
        frame = pd.concat([f for f in frames if len(f)], ignore_index=True) if frames else None
        if frame is None:
            continue
        write_table(experiment_dir / name, frame)
        if name == RECORDS:
            write_table(experiment_dir / "records.csv", frame)
            records = frame
    log.info("gathered %d jobs, %d rows into %s", len(jobs), len(records), experiment_dir)
    return records


class GatherCallback(Callback):
    """Hydra callback: gather the experiment's job records when a run or a sweep ends."""

    def _gather(self, config: DictConfig) -> None:
        experiment_dir = Path(config.results_dir) / config.experiment
        if any(experiment_dir.glob(f"*/{SUMMARY}")):
            gather(experiment_dir)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._gather(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._gather(config)
