"""End to end through the CLI: a multirun sweep, resume after kill -9, wandb offline, hf loader."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, run_cli

KEY = ["job", "method", "prompt_id", "repeat"]
REQUIRED = {
    "experiment", "job", "method", "k", "temperature", "top_k", "top_p", "target", "draft",
    "backend", "device", "dtype", "task", "prompt_id", "repeat", "new_tokens", "wall_s",
    "ms_per_token", "target_calls", "draft_calls", "accepted", "proposed", "tokens_per_call",
    "alpha", "draft_s", "target_s", "overhead_s", "completion", "seed", "git_sha", "git_dirty",
    "torch_version", "transformers_version", "device_name", "hostname",
}  # fmt: skip


@pytest.fixture(scope="module")
def smoke_sweep(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    out = run_cli("+experiment=smoke", "-m", "decoder.k=1,2", f"results_dir={results}")
    assert out.returncode == 0, out.stderr
    return results / "smoke"


def test_sweep_writes_tidy_records(smoke_sweep):
    records = pd.read_parquet(smoke_sweep / "records.parquet")
    assert set(records.columns) >= REQUIRED
    assert len(records) == 2 * 2 * 2 * 2  # jobs x prompts x repeats x methods
    assert not records.duplicated(KEY).any()
    assert set(records.job) == {"decoder.k=1", "decoder.k=2"}
    assert (records.new_tokens.between(1, 16)).all() and (records.wall_s > 0).all()
    spec = records[records.method == "speculative"]
    assert (spec.accepted <= spec.proposed).all() and (spec.proposed > 0).all()
    assert spec.alpha.between(0, 1).all() and (spec.draft_calls > 0).all()
    assert set(spec.k) == {1, 2}
    ar = records[records.method == "autoregressive"]
    assert (ar.target_calls == ar.new_tokens).all() and (ar.draft_calls == 0).all()
    assert records.first_s.between(0, records.wall_s).all()  # time to first token
    longer = records[records.new_tokens > 1]
    assert len(longer) and longer.decode_ms_per_token.gt(0).all()
    iters = pd.read_parquet(smoke_sweep / "iterations.parquet")
    per_run = iters.groupby(KEY).accepted.sum()
    assert (per_run == spec.set_index(KEY).accepted.reindex(per_run.index)).all()
    assert pd.read_csv(smoke_sweep / "records.csv").shape == records.shape


def test_sweep_loads_the_pair_once(smoke_sweep):
    for job in ("decoder.k=1", "decoder.k=2"):
        summary = json.loads((smoke_sweep / job / "summary.json").read_text())
        assert summary["pair_loads"] == 1
        assert (smoke_sweep / job / "config.yaml").is_file()


def test_finished_job_is_skipped(smoke_sweep):
    before = (smoke_sweep / "decoder.k=1" / "records.parquet").stat().st_mtime_ns
    out = run_cli("+experiment=smoke", f"results_dir={smoke_sweep.parent}", "decoder.k=1")
    assert out.returncode == 0
    assert "skipping" in out.stdout + out.stderr
    assert (smoke_sweep / "decoder.k=1" / "records.parquet").stat().st_mtime_ns == before


def test_killed_sweep_resumes_without_loss_or_duplicates(tmp_path):
    args = [
        "+experiment=smoke", "-m", "decoder.k=1,2,3", f"results_dir={tmp_path}",
        "bench.max_new_tokens=48", "bench.num_prompts=4",
    ]  # fmt: skip
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "specbench", *args], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    prefix = "bench.max_new_tokens=48,bench.num_prompts=4,"  # sweep dirs: override_dirname
    first = tmp_path / "smoke" / f"{prefix}decoder.k=1" / "summary.json"
    deadline = time.time() + 120
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert first.exists()
    assert not (tmp_path / "smoke" / f"{prefix}decoder.k=3" / "summary.json").exists()
    first_mtime = first.stat().st_mtime_ns
    out = run_cli(*args)
    assert out.returncode == 0, out.stderr
    assert "skipping" in out.stdout + out.stderr
    assert first.stat().st_mtime_ns == first_mtime  # the finished job was not redone
    records = pd.read_parquet(tmp_path / "smoke" / "records.parquet")
    assert set(records.job) == {f"{prefix}decoder.k={k}" for k in (1, 2, 3)}
    assert not records.duplicated(KEY).any()
    assert len(records) == 3 * 4 * 2 * 2


def test_wandb_offline_run_is_finished(tmp_path):
    out = run_cli("+experiment=smoke", f"results_dir={tmp_path}", "tracking=wandb_offline")
    assert out.returncode == 0, out.stderr
    runs = list((tmp_path / "smoke" / "default" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))


def test_hf_loader_reads_a_local_checkpoint(tmp_path, saved_tiny_dirs):
    path = saved_tiny_dirs["same"]
    out = run_cli(
        "+experiment=smoke", f"results_dir={tmp_path}", "target.loader=hf",
        f"target.source={path}", "draft.loader=hf", f"draft.source={path}",
        "sampling=greedy", "draft.dtype=bfloat16",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    records = pd.read_parquet(tmp_path / "smoke" / "records.parquet")
    spec = records[records.method == "speculative"]
    assert set(records.draft_dtype) == {"bfloat16"} and set(records.dtype) == {"float32"}
    # draft == target up to bf16 rounding of the draft: greedy accepts most drafts, and the
    # output is still exactly the fp32 target's greedy output (checked below)
    assert spec.accepted.sum() >= 0.75 * spec.proposed.sum()
    by_method = records.pivot_table(index=["prompt_id", "repeat"], columns="method",
                                    values="completion", aggfunc="first")  # fmt: skip
    assert (by_method.speculative == by_method.autoregressive).all()


def test_shards_gather_into_the_unsharded_run(tmp_path):
    """bench.shard=i/n splits the prompts into blocks; seeds and rows match one whole run."""
    common = ["+experiment=smoke", "bench.num_prompts=3", "bench.repeats=1", "decoder.k=2"]
    whole = run_cli(*common, f"results_dir={tmp_path / 'whole'}")
    parts = run_cli(*common, "-m", "bench.shard=0/2,1/2", f"results_dir={tmp_path / 'parts'}")
    assert whole.returncode == 0 and parts.returncode == 0, parts.stderr[-3000:]
    cols = ["method", "prompt_id", "repeat", "seed", "completion"]
    one = pd.read_parquet(tmp_path / "whole" / "smoke" / "records.parquet")
    split = pd.read_parquet(tmp_path / "parts" / "smoke" / "records.parquet")
    assert split.groupby("job").prompt_id.nunique().to_dict() == {
        "bench.num_prompts=3,bench.repeats=1,bench.shard=0_2,decoder.k=2": 1,
        "bench.num_prompts=3,bench.repeats=1,bench.shard=1_2,decoder.k=2": 2,
    }
    key = ["method", "prompt_id"]
    assert (
        one[cols].sort_values(key).values.tolist() == split[cols].sort_values(key).values.tolist()
    )


def test_gather_gives_older_jobs_the_task_options_of_their_config(tmp_path):
    """A job from before the task_options column pools with newer ones: its config fills it."""
    from specbench.records import gather

    options = '{"source": "packaged", "timeout_s": 10}'
    for name, extra in (("old", {}), ("new", {"task_options": options})):
        job = tmp_path / name
        job.mkdir()
        pd.DataFrame({"prompt_id": [name], **{k: [v] for k, v in extra.items()}}).to_parquet(
            job / "records.parquet"
        )
        (job / "summary.json").write_text("{}")
    (tmp_path / "old" / "config.yaml").write_text(
        "task:\n  name: humaneval\n  options:\n    timeout_s: 10\n    source: packaged\n"
    )
    records = gather(tmp_path)["records.parquet"]
    assert records.task_options.tolist() == [options, options]


def test_block_design_shares_one_baseline_per_run(tmp_path):
    """decoder.k_sweep times the baseline once per (prompt, repeat) and the drafting method at
    every K on the same seed; each K pairs with that one baseline row."""
    from specbench import stats

    out = run_cli("+experiment=smoke", "decoder.k=2", "decoder.k_sweep=[1,2,3]",
                  "bench.repeats=1", f"results_dir={tmp_path}")  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    records = pd.read_parquet(next(tmp_path.glob("smoke/*/records.parquet")))
    counts = records.groupby(["method", "k"]).size().to_dict()
    assert counts == {("autoregressive", 0): 2, ("speculative", 1): 2, ("speculative", 2): 2,
                      ("speculative", 3): 2}  # fmt: skip
    assert records.groupby("prompt_id").seed.nunique().eq(1).all()
    table = stats.speedups(records)
    assert sorted(table.k) == [1, 2, 3] and (table.speedup_n_prompts == 2).all()
    summary = json.loads(next(tmp_path.glob("smoke/*/summary.json")).read_text())
    assert {"speedup", "speculative_k1_speedup", "speculative_k3_speedup"} <= set(summary)


def test_k_sweep_must_hold_the_headline_k():
    out = run_cli("+experiment=smoke", "decoder.k=4", "decoder.k_sweep=[1,2]")
    assert out.returncode != 0 and "put it in decoder.k_sweep" in out.stderr


def test_precision_driven_run_adds_blocks_and_resumes(tmp_path):
    """bench.target_half_width: blocks of prompts until the cap (8 toy prompts) here, each block
    saved; a job killed after its first block times only the rest when rerun."""
    args = ("+experiment=smoke", "decoder.k=2", "bench.repeats=1", "bench.num_prompts=3",
            "bench.max_new_tokens=6", "bench.target_half_width=0.001", "bench.max_prompts=8",
            f"results_dir={tmp_path}")  # fmt: skip
    out = run_cli(*args)
    assert out.returncode == 0, out.stderr[-3000:]
    job = next(tmp_path.glob("smoke/*/summary.json")).parent
    summary = json.loads((job / "summary.json").read_text())
    assert summary["sample_stopped_by"] == "max_prompts" and summary["sample_n_prompts"] == 8
    blocks = sorted(p.name for p in (job / "blocks").glob("*.records.parquet"))
    assert blocks == ["0000-0003.records.parquet", "0003-0008.records.parquet"]
    first = pd.read_parquet(job / "records.parquet")
    (job / "summary.json").unlink()
    (job / "blocks" / blocks[1]).unlink()
    again = run_cli(*args)
    logged = again.stdout + again.stderr
    assert again.returncode == 0 and "prompts 0-3" not in logged and "prompts 3-8" in logged
    cols = ["method", "prompt_id", "seed", "completion"]
    second = pd.read_parquet(job / "records.parquet")
    assert first[cols].values.tolist() == second[cols].values.tolist()


def test_stopping_rule(compose_cfg):
    """Stop when the interval is narrow enough or at the cap; else add what the spread asks."""
    from specbench.runner import to_config
    from specbench.sequential import MIN_BLOCK, next_block

    over = ["bench.target_half_width=0.05", "bench.max_prompts=100", "bench.num_prompts=10"]
    job = to_config(compose_cfg(over))
    wide = {"half_width": 0.2, "sd_log": 0.12, "ratio": 2.0}
    assert next_block(10, {**wide, "half_width": 0.04}, job) == (0, "half_width")
    assert next_block(100, wide, job) == (0, "max_prompts")
    size, why = next_block(10, wide, job)  # (1.96 * 0.12 * 2 / 0.05)^2 = 88.5 -> 89 - 10
    assert why == "adding" and size == 79
    assert next_block(88, wide, job)[0] == MIN_BLOCK
    assert next_block(10, wide, job, available=40) == (30, "adding")  # a task of 40 prompts
    assert next_block(40, wide, job, available=40) == (0, "max_prompts")


def test_pilot_sizes_the_first_block_within_the_cap_and_the_task(compose_cfg, tmp_path):
    """A pilot asking for 300 prompts starts a block of at most max_prompts and of what the
    task has (HumanEval's 164), not past its end."""
    from specbench.runner import to_config
    from specbench.sequential import pilot_size

    over = ["bench.target_half_width=0.01", "bench.max_prompts=200"]
    pilot = synthetic_pilot(tmp_path, to_config(compose_cfg(over)))
    job = to_config(compose_cfg([*over, f"bench.pilot={pilot}"]))
    assert pilot_size(job, available=164) == 164
    assert pilot_size(job, available=500) == 200


def test_a_long_job_name_is_cut_and_hashed_to_fit_a_file_name():
    """File paths among the overrides can pass 255 bytes; the folder still names one job."""
    from specbench.__main__ import MAX_NAME, job_dirname

    long = "decoder.model_file=/" + "x" * 300 + ".gguf"
    name = job_dirname(long)
    assert len(name) == MAX_NAME and name == job_dirname(long)
    assert name != job_dirname(long.replace("x", "y", 1))
    assert job_dirname("decoder.k=2") == "decoder.k=2" and job_dirname("") == "default"


def synthetic_pilot(tmp_path, job) -> str:
    """A pilot's records: 12 prompts of paired runs at the job's K, sd of log ratios ~0.1."""
    rng = np.random.default_rng(0)
    base = {"task": job.task.name, "sampling": job.sampling.name, "job": "pilot", "repeat": 0}
    rows = []
    for i in range(12):
        ar = 100.0
        run = base | {"prompt_id": str(i), "seed": i}
        rows.append(run | {"method": "autoregressive", "paired_with": "", "k": 0,
                           "ms_per_token": ar})  # fmt: skip
        rows.append(run | {"method": job.decoder.name, "paired_with": "autoregressive",
                           "k": job.decoder.k,
                           "ms_per_token": ar / 2 * float(np.exp(rng.normal(0, 0.1)))})  # fmt: skip
    path = tmp_path / "records.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def test_a_sweep_gathers_where_hydra_sweep_dir_puts_its_jobs(tmp_path):
    """hydra.sweep.dir=...: the jobs and their gathered tables land there, nowhere else."""
    where = tmp_path / "elsewhere"
    common = ["+experiment=smoke", "bench.num_prompts=1", "bench.repeats=1", "decoder.k=2"]
    out = run_cli(*common, "-m", f"hydra.sweep.dir={where}", f"results_dir={tmp_path / 'r'}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert (where / "records.parquet").is_file()
    assert not (tmp_path / "r").exists()
