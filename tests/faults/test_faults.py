"""Faults mid-sweep: kill -9 during a job, a records write and the gather step, then rerun;
a job that raises is a failure row, the sweep goes on, the exit code counts the failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().with_name("driver.py")
KEY = ["job", "method", "prompt_id", "repeat"]
# job dirs are named by their overrides
PREFIX = "bench.max_new_tokens=8,bench.num_prompts=1,bench.repeats=1,bench.warmup=0,"
JOBS = tuple(f"{PREFIX}decoder.k={k}" for k in (1, 2, 3))
ARGS = ("+experiment=smoke", "-m", "decoder.k=1,2,3", "bench.warmup=0", "bench.repeats=1")
ARGS += ("bench.num_prompts=1", "bench.max_new_tokens=8")
ROWS_PER_JOB = 1 * 2  # prompts x methods


def _env(fault: str = "", job: str = "", file: str = "", mark: Path | None = None) -> dict:
    return os.environ | {
        "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "SPECBENCH_FAULT": fault,
        "SPECBENCH_FAULT_JOB": job, "SPECBENCH_FAULT_FILE": file,
        "SPECBENCH_FAULT_MARK": str(mark or "/dev/null"),
    }  # fmt: skip


def _run(results: Path, **fault: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(DRIVER), *ARGS, f"results_dir={results}"]
    return subprocess.run(
        command, cwd=ROOT, env=_env(**fault), capture_output=True, text=True, timeout=300
    )


def _kill_at(
    results: Path, fault: str, job: str = "", file: str = "", args: tuple[str, ...] = ARGS
) -> None:
    """Start the sweep with a hanging fault, wait until it hangs there, kill -9 its group."""
    mark = results / "hanging"
    command = [sys.executable, str(DRIVER), *args, f"results_dir={results}"]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=_env(fault, job, file, mark), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert mark.exists(), "the fault was never reached"
    mark.unlink()


def _finished(experiment: Path) -> dict[str, int]:
    """Jobs with a summary -> mtime of their records (to prove they are not redone)."""
    return {
        d.name: (d / "records.parquet").stat().st_mtime_ns
        for d in experiment.iterdir()
        if (d / "summary.json").is_file()
    }


def _assert_no_partial_read_as_complete(experiment: Path) -> None:
    """Every job with a summary has readable, complete tables; none without one is gathered;
    every table under the experiment that is not a temp file reads back whole."""
    for summary in experiment.glob("*/summary.json"):
        rows = json.loads(summary.read_text())["rows"]
        assert len(pd.read_parquet(summary.parent / "records.parquet")) == rows
    for table in experiment.rglob("*.parquet"):
        pd.read_parquet(table)  # raises on a truncated file
    if (experiment / "records.parquet").exists():
        gathered = set(pd.read_parquet(experiment / "records.parquet").job)
        assert gathered <= {s.parent.name for s in experiment.glob("*/summary.json")}


def _assert_complete(experiment: Path) -> None:
    records = pd.read_parquet(experiment / "records.parquet")
    assert set(records.job) == set(JOBS)
    assert not records.duplicated(KEY).any()
    assert len(records) == len(JOBS) * ROWS_PER_JOB
    assert pd.read_csv(experiment / "records.csv").shape == records.shape
    assert not list(experiment.glob("*/failure.json"))
    assert not (experiment / "failures.csv").exists()
    assert not list(experiment.glob("*/.*.tmp"))  # a rerun job removes what a killed one left


def _rerun_and_check(results: Path, finished: dict[str, int]) -> None:
    out = _run(results)
    assert out.returncode == 0, out.stderr[-3000:]
    experiment = results / "smoke"
    now = _finished(experiment)
    assert {job: now[job] for job in finished} == finished  # finished jobs were skipped
    _assert_complete(experiment)


def test_killed_during_a_job_a_write_and_the_gather_then_rerun_loses_nothing(tmp_path):
    """One sweep, kill -9 three times at three places, then a rerun completes it."""
    experiment = tmp_path / "smoke"
    _kill_at(tmp_path, "hang", job="decoder.k=2")  # 1. in the middle of job k=2
    assert set(_finished(experiment)) == {JOBS[0]}
    _assert_no_partial_read_as_complete(experiment)

    _kill_at(tmp_path, "write", job="decoder.k=3", file="records.parquet")  # 2. mid-write
    finished = _finished(experiment)
    assert set(finished) == {JOBS[0], JOBS[1]}
    assert list((experiment / JOBS[2]).glob(".records.parquet.*.tmp"))  # the half-written file
    assert not (experiment / JOBS[2] / "records.parquet").exists()
    _assert_no_partial_read_as_complete(experiment)

    _kill_at(tmp_path, "gather", file="records.parquet")  # 3. every job done, gather killed
    assert set(_finished(experiment)) == set(JOBS)
    assert list(experiment.glob(".records.parquet.*.tmp"))  # the half-written gathered table
    assert not (experiment / "records.parquet").exists()
    _assert_no_partial_read_as_complete(experiment)

    _rerun_and_check(tmp_path, _finished(experiment))


def test_a_raising_job_is_a_failure_row_and_the_sweep_goes_on(tmp_path):
    out = _run(tmp_path, fault="raise", job="decoder.k=2")
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"specbench: error: 1 of 3 jobs failed ({JOBS[1]}: OutOfMemoryError")
    assert "rerun the same command to retry" in last
    experiment = tmp_path / "smoke"
    failures = pd.read_csv(experiment / "failures.csv")
    assert list(failures.job) == [JOBS[1]]
    assert failures.error_type[0] == "OutOfMemoryError" and "injected" in failures.error[0]
    assert "Traceback" in failures.traceback[0]
    finished = _finished(experiment)
    assert set(finished) == {JOBS[0], JOBS[2]}
    assert set(pd.read_parquet(experiment / "records.parquet").job) == set(finished)
    _rerun_and_check(tmp_path, finished)  # the failed job is retried, not skipped


def test_killed_between_prompts_the_rerun_keeps_the_prompt_timed_before(tmp_path):
    """A timing job checkpoints each finished (prompt, repeat): kill -9 after the first, and
    the rerun keeps those rows (not retimed), times the rest, and removes the checkpoint."""
    args = ("+experiment=smoke", "-m", "decoder.k=2", "bench.warmup=0", "bench.repeats=1",
            "bench.num_prompts=2", "bench.max_new_tokens=8")  # fmt: skip
    _kill_at(tmp_path, "cell", job="decoder.k=2", args=args)
    (job_dir,) = [d for d in (tmp_path / "smoke").iterdir() if d.is_dir() and "k=2" in d.name]
    before = pd.read_parquet(job_dir / "partial_records.parquet")
    assert len(before) == ROWS_PER_JOB and before.prompt_id.nunique() == 1
    command = [sys.executable, str(DRIVER), *args, f"results_dir={tmp_path}"]
    out = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    records = pd.read_parquet(job_dir / "records.parquet")
    assert len(records) == 2 * ROWS_PER_JOB and records.prompt_id.nunique() == 2
    kept = records.merge(before[["method", "prompt_id", "wall_s"]], on=["method", "prompt_id"])
    assert len(kept) == ROWS_PER_JOB and (kept.wall_s_x == kept.wall_s_y).all()
    assert not (job_dir / "partial_records.parquet").exists()
    # a resumed row keeps the provenance of the session that timed it, not the finishing one's
    stamp = records.merge(before[["method", "prompt_id", "timestamp"]], on=["method", "prompt_id"])
    assert (stamp.timestamp_x == stamp.timestamp_y).all() and records.timestamp.nunique() == 2


def test_killed_inside_a_precision_block_the_rerun_keeps_its_finished_prompts(tmp_path):
    """bench.target_half_width jobs checkpoint each prompt of the block in progress too: kill -9
    after its first prompt, and the rerun times only the rest of that block."""
    args = ("+experiment=smoke", "-m", "decoder.k=2", "bench.warmup=0", "bench.repeats=1",
            "bench.num_prompts=3", "bench.max_prompts=3", "bench.target_half_width=0.001",
            "bench.max_new_tokens=6")  # fmt: skip
    _kill_at(tmp_path, "cell", job="decoder.k=2", args=args)
    (job_dir,) = [d for d in (tmp_path / "smoke").iterdir() if d.is_dir() and "k=2" in d.name]
    before = pd.read_parquet(job_dir / "partial_records.parquet")
    assert before.prompt_id.nunique() == 1 and not list(job_dir.glob("blocks/*.records.parquet"))
    command = [sys.executable, str(DRIVER), *args, f"results_dir={tmp_path}"]
    out = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    records = pd.read_parquet(job_dir / "records.parquet")
    assert records.prompt_id.nunique() == 3
    kept = records.merge(before[["method", "prompt_id", "wall_s"]], on=["method", "prompt_id"])
    assert len(kept) == len(before) and (kept.wall_s_x == kept.wall_s_y).all()
    assert not (job_dir / "partial_records.parquet").exists()
    stamp = records.merge(before[["method", "prompt_id", "timestamp"]], on=["method", "prompt_id"])
    assert (stamp.timestamp_x == stamp.timestamp_y).all() and records.timestamp.nunique() == 2
