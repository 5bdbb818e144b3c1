"""wandb tracking: config, per-job summary and the records table; the run always finishes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from .config import SpecBenchConfig


class NullTracker:
    """Tracking disabled: every call is a no-op."""

    def log(self, cfg: DictConfig, summary: dict[str, Any], records: pd.DataFrame) -> None:
        pass


class WandbTracker:
    """One wandb run per job (offline or online)."""

    def __init__(self, run: Any) -> None:
        self.run = run

    def log(self, cfg: DictConfig, summary: dict[str, Any], records: pd.DataFrame) -> None:
        import wandb

        self.run.config.update(OmegaConf.to_container(cfg, resolve=True), allow_val_change=True)
        self.run.summary.update(summary)
        self.run.log({"records": wandb.Table(dataframe=records)})


@contextmanager
def track(job: SpecBenchConfig, job_dir: Path) -> Iterator[NullTracker | WandbTracker]:
    """Yield a tracker; a wandb run is finished on the way out, with exit code 1 on error."""
    if job.tracking.mode == "disabled":
        yield NullTracker()
        return
    import wandb

    run = wandb.init(
        project=job.tracking.project,
        mode=job.tracking.mode,
        dir=str(job_dir),
        name=f"{job.experiment}/{job_dir.name}",
        reinit="finish_previous",
    )
    exit_code = 1
    try:
        yield WandbTracker(run)
        exit_code = 0
    finally:
        run.finish(exit_code=exit_code)
