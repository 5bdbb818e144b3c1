"""Precision-driven sample size (bench.target_half_width): prompts are timed in blocks, each
block's rows saved as it finishes (a killed job resumes at the next block), until the headline
speedup's 95% interval (the decoder at decoder.k over its baseline) is +- target_half_width, or
bench.max_prompts prompts have run. The next block is sized from the spread so far (or from a
pilot run's): prompts needed = ceil((z * sd_log * ratio / h)^2)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd

from . import stats
from .config import ConfigError, SpecBenchConfig
from .prepare import Prepared
from .records import CALIBRATION, ITERATIONS, RECORDS, write_table
from .timing import Checkpoint, Warm, score_rows, time_runs, warm

log = logging.getLogger(__name__)
BLOCKS = "blocks"  # job_dir/blocks/<first>-<end>.<table>: the finished blocks of a job
MIN_BLOCK = 5  # fewest prompts added at once (each block re-warms nothing, but logs a line)


def headline(frame: pd.DataFrame, job: SpecBenchConfig) -> dict[str, Any]:
    """The statistic the stopping rule watches: the decoder's speedup at decoder.k."""
    return stats.precision(frame, job.decoder.name, job.decoder.k)


def needed(stat: dict[str, Any], half_width: float) -> int | None:
    """Prompts the spread in `stat` asks for (None while it cannot say: n < 2)."""
    if not math.isfinite(stat["sd_log"]) or not math.isfinite(stat["ratio"]):
        return None
    return stats.prompts_needed(stat["sd_log"], half_width, stat["ratio"])


def pilot_size(job: SpecBenchConfig, available: int) -> int:
    """The first block: from bench.pilot's records when given (at most the cap and the task's
    `available` prompts), else bench.num_prompts."""
    bench = job.bench
    if bench.pilot is None:
        return min(bench.num_prompts, available)
    path = Path(bench.pilot)
    path = path / RECORDS if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"bench.pilot={bench.pilot}: no {RECORDS} there; pass an earlier run's")
    frame = pd.read_parquet(path)
    same = (frame.task == job.task.name) & (frame.sampling == job.sampling.name)
    count = needed(headline(frame[same], job), bench.target_half_width)
    if count is None:
        raise ConfigError(
            f"bench.pilot={bench.pilot} has no paired {job.decoder.name} rows at K = "
            f"{job.decoder.k} on {job.task.name}/{job.sampling.name} to size a run from"
        )
    log.info("pilot %s: %d prompts for +-%.3fx", path, count, bench.target_half_width)
    return min(max(stats.MIN_INTERVAL_PROMPTS, count), bench.max_prompts or count, available)


def saved_blocks(root: Path) -> list[tuple[int, int]]:
    """(first, end) local prompt ranges of the finished blocks under root, in order."""
    names = [p.name.split(".")[0] for p in root.glob(f"*-*.{RECORDS}")]
    return sorted((int(a), int(b)) for a, b in (name.split("-") for name in names))


def block_path(root: Path, span: tuple[int, int], table: str) -> Path:
    return root / f"{span[0]:04d}-{span[1]:04d}.{table}"


def next_block(
    done: int, stat: dict[str, Any], job: SpecBenchConfig, available: int | None = None
) -> tuple[int, str]:
    """(prompts to add, why) after `done` prompts; 0 prompts when the rule stops the job. The
    cap is bench.max_prompts, or the task's `available` prompts where it has fewer."""
    bench = job.bench
    cap = bench.max_prompts or done
    cap = cap if available is None else min(cap, available)
    if stat["half_width"] <= bench.target_half_width:
        return 0, "half_width"
    if done >= cap:
        return 0, "max_prompts"
    want = needed(stat, bench.target_half_width) or stats.MIN_INTERVAL_PROMPTS
    return min(cap - done, max(MIN_BLOCK, want - done)), "adding"


def run_sequential(
    prep: Prepared, models: tuple, job_dir: Path, shared: dict[str, Any], checkpoint: Checkpoint
) -> tuple[list[dict], list[dict], list[dict], dict[str, Any]]:
    """Time blocks of prompts until the stopping rule holds: all rows of the finished blocks
    (records, iterations, the first warm-up's calibration) and the rule's outcome. The block in
    progress is checkpointed per prompt, so a killed job loses at most one prompt."""
    job, root = prep.job, job_dir / BLOCKS
    rows: list[dict] = []
    iterations: list[dict] = []
    for span in saved_blocks(root):
        rows += pd.read_parquet(block_path(root, span, RECORDS)).to_dict("records")
        iterations += pd.read_parquet(block_path(root, span, ITERATIONS)).to_dict("records")
    done = max((end for _, end in saved_blocks(root)), default=0)
    available = len(prep.prompts)
    size, why = (pilot_size(job, available), "adding") if done == 0 else (0, "")
    warmed: Warm | None = None
    while True:
        stat = headline(pd.DataFrame([shared | r for r in rows]), job) if rows else {}
        if rows:
            size, why = next_block(done, stat, job, available)
        if size == 0:
            break
        if warmed is None:
            warmed = warm(prep, models)
            if warmed.calibration and not (root / CALIBRATION).is_file():
                write_table(root / CALIBRATION, pd.DataFrame(warmed.calibration))
        span = (done, done + size)
        log.info("prompts %d-%d of at most %d (+-%.3fx so far)", *span, available,
                 stat.get("half_width", math.inf))  # fmt: skip
        new_rows, new_iters = time_runs(prep, warmed, range(*span), checkpoint)
        score_rows(prep, new_rows)
        write_table(block_path(root, span, ITERATIONS), pd.DataFrame(new_iters))
        stamped = pd.DataFrame([shared | r for r in new_rows])  # each row with its session's stamp
        write_table(block_path(root, span, RECORDS), stamped)  # marks the block done
        checkpoint.clear()  # its runs now live in the block
        rows, iterations, done = rows + new_rows, iterations + new_iters, span[1]
    outcome = {
        "stopped_by": why, "target_half_width": job.bench.target_half_width,
        "half_width": stat["half_width"], "n_prompts": stat["n_prompts"],
        "prompts_needed": needed(stat, job.bench.target_half_width),
    }  # fmt: skip
    log.info("sample size: stopped by %s at n = %d, +-%.3fx", why, done, stat["half_width"])
    saved = root / CALIBRATION
    calibration = pd.read_parquet(saved).to_dict("records") if saved.is_file() else []
    return rows, iterations, calibration, outcome
