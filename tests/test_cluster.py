"""Sweeps through hydra-submitit-launcher: each job a separate process, one gathered table."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import CONF, run_cli
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs the cluster extra")

FAST = ("bench.repeats=1", "bench.warmup=0")  # in every job folder name (sorted), before k
JOBS = {f"{','.join(FAST)},decoder.k={k}" for k in (1, 2)}


def submitit_jobs(experiment_dir) -> dict[str, str]:
    """submitit job id (the local process id) -> the job log's text, one per finished job."""
    logs = experiment_dir.glob(".submitit/*/*_log.out")
    return {log.parent.name: log.read_text() for log in logs if log.parent.name.isdigit()}


def test_submitit_local_sweep_runs_jobs_apart_and_gathers(tmp_path):
    args = ("+experiment=smoke", "-m", "hydra/launcher=submitit_local", f"results_dir={tmp_path}",
            *FAST)  # fmt: skip
    out = run_cli(*args)
    assert out.returncode == 0, out.stderr
    experiment = tmp_path / "smoke"
    jobs = submitit_jobs(experiment)
    assert len(jobs) == 2  # two processes, each its own submitit job
    assert all("summary:" in text for text in jobs.values())
    records = pd.read_parquet(experiment / "records.parquet")
    assert set(records.job) == JOBS and len(records) == 2 * 2 * 2  # jobs x prompts x methods
    assert not records.duplicated(["job", "method", "prompt_id", "repeat"]).any()
    iterations = pd.read_parquet(experiment / "iterations.parquet")
    assert set(iterations.job) == JOBS
    before = {job: (experiment / job / "records.parquet").stat().st_mtime_ns for job in JOBS}

    again = run_cli(*args)  # resume: both jobs are complete, so both are skipped
    assert again.returncode == 0, again.stderr
    rerun = {i: text for i, text in submitit_jobs(experiment).items() if i not in jobs}
    assert len(rerun) == 2 and all("skipping" in text for text in rerun.values())
    after = {job: (experiment / job / "records.parquet").stat().st_mtime_ns for job in JOBS}
    assert after == before
    assert len(pd.read_parquet(experiment / "records.parquet")) == len(records)


def test_slurm_launcher_config_composes(compose_cfg):
    compose_cfg()  # registers the schema
    overrides = ["+experiment=smoke", "hydra/launcher=slurm", "hydra.launcher.partition=gpu"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher)
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert launcher["partition"] == "gpu"
    for knob in ("gpus_per_task", "timeout_min", "mem_gb", "array_parallelism"):
        assert launcher[knob] is not None
