"""Hydra callback: gather an experiment's job records when a run or a sweep ends, and report."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ..records import AUDIT, CALIBRATION, RECORDS, SUMMARY, gather, gather_failures
from .audit import verdict_table
from .console import summary_table
from .report import calibration_table, report

log = logging.getLogger(__name__)


class GatherCallback(Callback):
    """Gathers complete jobs into the run's directory (results/<experiment>/ unless hydra.sweep.dir
    says otherwise), prints the summary, draws the report."""

    def _gather(self, config: DictConfig, experiment_dir: Path) -> None:
        if experiment_dir.is_dir():
            gather_failures(experiment_dir)
        if not any(experiment_dir.glob(f"*/{SUMMARY}")):
            return
        tables = gather(experiment_dir)
        if RECORDS in tables:
            print(f"\n{config.experiment}: {len(tables[RECORDS])} rows in {experiment_dir}")
            print(summary_table(tables[RECORDS]))
        if AUDIT in tables:
            print(f"\n{config.experiment}: exactness audit in {experiment_dir}")
            print(verdict_table(tables[AUDIT]).to_string(index=False))
        if CALIBRATION in tables:
            print(f"\n{config.experiment}: predicted speedup per K in {experiment_dir}")
            print(calibration_table(tables[CALIBRATION]).to_string(index=False))
        written = report(experiment_dir)
        log.info("figures and tables: %d files under %s", len(written), experiment_dir)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._gather(config, Path(config.hydra.run.dir).parent)  # results_dir/experiment/JOB

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._gather(config, Path(config.hydra.sweep.dir))  # results_dir/experiment unless set
