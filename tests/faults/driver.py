"""`python tests/faults/driver.py ARGS`: `python -m specbench ARGS` with one fault injected, for
the fault tests only (the product has no hooks). The environment picks it:

  SPECBENCH_FAULT=raise    the job whose dir name contains $SPECBENCH_FAULT_JOB raises
                           torch.OutOfMemoryError in its timing loop
  SPECBENCH_FAULT=hang     that job touches $SPECBENCH_FAULT_MARK and hangs in its timing loop
  SPECBENCH_FAULT=write    that job's atomic write of $SPECBENCH_FAULT_FILE stops half-written,
                           touches the mark and hangs
  SPECBENCH_FAULT=gather   the gather step's write of $SPECBENCH_FAULT_FILE does the same
  SPECBENCH_FAULT=cell     that job checkpoints its first timed (prompt, repeat), touches the
                           mark and hangs
"""

from __future__ import annotations

import os
import runpy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import specbench.records as records
import specbench.runner as runner
import specbench.timing as timing

FAULT = os.environ.get("SPECBENCH_FAULT", "")
JOB = os.environ.get("SPECBENCH_FAULT_JOB", "")
FILE = os.environ.get("SPECBENCH_FAULT_FILE", "")
MARK = Path(os.environ.get("SPECBENCH_FAULT_MARK", "/dev/null"))
CURRENT = [""]  # the job dir name being run
measure, atomic_write, run = runner.measure, records.atomic_write, runner.run
save = timing.Checkpoint.save


def hang() -> None:
    MARK.touch()
    time.sleep(600)  # until the test kills us


def faulty_measure(prep: runner.Prepared, models: tuple, *checkpoint: Any) -> Any:
    if FAULT in ("raise", "hang") and JOB in CURRENT[0]:
        if FAULT == "raise":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20 GiB (injected)")
        hang()
    return measure(prep, models, *checkpoint)


def faulty_save(self: timing.Checkpoint, rows: list, iterations: list) -> None:
    save(self, rows, iterations)
    if FAULT == "cell" and JOB in CURRENT[0]:
        hang()


def faulty_write(path: Path, write: Callable[[Path], Any]) -> None:
    in_job = (path.parent / "config.yaml").exists()  # job dirs have one, the experiment not
    wanted = path.name == FILE and (
        (FAULT == "write" and in_job and JOB in path.parent.name)
        or (FAULT == "gather" and not in_job)
    )

    def half(tmp: Path) -> None:
        write(tmp)
        if wanted:
            with open(tmp, "r+b") as f:
                f.truncate(tmp.stat().st_size // 2)
            hang()

    atomic_write(path, half)


def tracking_run(cfg: Any, pool: Any, job_dir: Path, job_id: str) -> Any:
    CURRENT[0] = job_dir.name
    return run(cfg, pool, job_dir, job_id)


runner.measure = faulty_measure
timing.Checkpoint.save = faulty_save
runner.run = tracking_run
records.atomic_write = faulty_write

if __name__ == "__main__":
    runpy.run_module("specbench", run_name="__main__", alter_sys=True)
