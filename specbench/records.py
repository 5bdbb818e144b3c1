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
PROFILE = "scoring_profile.parquet"  # one row per (model x q x repeat) of a scoring profile
TABLES = (RECORDS, ITERATIONS, PROFILE)


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


def write_job(job_dir: Path, tables: dict[str, pd.DataFrame], summary: dict[str, Any]) -> None:
    """Tables first, the summary last, each atomically: a killed job leaves no summary."""
    for name, frame in tables.items():
        write_table(job_dir / name, frame)
    write_text(job_dir / SUMMARY, json.dumps(summary, indent=2, default=str))


def gather(experiment_dir: Path) -> dict[str, pd.DataFrame]:
    """Concatenate every complete job's tables into experiment_dir (records also as CSV)."""
    experiment_dir = Path(experiment_dir)
    jobs = sorted(p.parent for p in experiment_dir.glob(f"*/{SUMMARY}"))
    if not jobs:
        raise FileNotFoundError(f"no complete job (with {SUMMARY}) under {experiment_dir}")
    gathered = {}
    for name in TABLES:
        frames = [pd.read_parquet(job / name) for job in jobs if (job / name).is_file()]
        if frames:
            gathered[name] = pd.concat(frames, ignore_index=True)
            write_table(experiment_dir / name, gathered[name])
    if RECORDS in gathered:
        write_table(experiment_dir / "records.csv", gathered[RECORDS])
    log.info("gathered %d jobs into %s: %s", len(jobs), experiment_dir, sorted(gathered))
    return gathered


class GatherCallback(Callback):
    """Hydra callback: gather the experiment's job records when a run or a sweep ends."""

    def _gather(self, config: DictConfig) -> None:
        from .analysis.console import summary_table
        from .analysis.report import report

        experiment_dir = Path(config.results_dir) / config.experiment
        if any(experiment_dir.glob(f"*/{SUMMARY}")):
            tables = gather(experiment_dir)
            if RECORDS in tables:
                print(f"\n{config.experiment}: {len(tables[RECORDS])} rows in {experiment_dir}")
                print(summary_table(tables[RECORDS]))
            written = report(experiment_dir)
            log.info("figures and tables: %d files under %s", len(written), experiment_dir)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._gather(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._gather(config)
