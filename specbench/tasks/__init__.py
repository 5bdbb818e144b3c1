"""Tasks as data: a loader turns a TaskConfig into prompts; a small registry picks the loader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import ConfigError, TaskConfig


@dataclass(frozen=True)
class Prompt:
    """One prompt of a task, with whatever its metric needs (reference summary, unit tests)."""

    id: str
    text: str
    reference: dict[str, Any] = field(default_factory=dict)


def _inline(cfg: TaskConfig, n: int) -> list[Prompt]:
    if not cfg.prompts:
        raise ConfigError(f"task {cfg.name!r} (loader=inline) lists no prompts")
    return [Prompt(id=f"{cfg.name}/{i}", text=text) for i, text in enumerate(cfg.prompts[:n])]


def _jsonl(cfg: TaskConfig, n: int) -> list[Prompt]:
    """A local JSON-lines file: options.path, options.text_field, options.id_field."""
    path = Path(cfg.options.get("path", ""))
    if not path.is_file():
        raise ConfigError(
            f"task {cfg.name!r}: data file not found: {str(path)!r}; set task.options.path"
        )
    from datasets import Dataset

    rows = Dataset.from_json(str(path))
    rows = rows.select(range(min(n, len(rows))))
    text_field = cfg.options.get("text_field", "prompt")
    id_field = cfg.options.get("id_field", "id")
    if text_field not in rows.column_names:
        raise ConfigError(f"task {cfg.name!r}: {path} has no field {text_field!r}")
    return [
        Prompt(id=str(row.get(id_field, i)), text=row[text_field], reference=dict(row))
        for i, row in enumerate(rows)
    ]


def truncate_at_stops(completion: str, stop_strings: list[str] | tuple[str, ...]) -> str:
    """The completion up to (excluding) the earliest stop string."""
    cut = min((i for s in stop_strings if (i := completion.find(s)) >= 0), default=len(completion))
    return completion[:cut]


def _no_metric(cfg: TaskConfig, prompt: Prompt, completion: str) -> dict[str, float]:
    return {}


from .chat import ChatTurn, chat_text  # noqa: E402
from .humaneval import humaneval_chat, load_humaneval, score_humaneval  # noqa: E402  (need Prompt)
from .xsum import load_xsum, score_rouge, xsum_chat  # noqa: E402

TASK_LOADERS: dict[str, Callable[[TaskConfig, int], list[Prompt]]] = {
    "inline": _inline,
    "jsonl": _jsonl,
    "xsum": load_xsum,
    "humaneval": load_humaneval,
}
CHAT_TURNS: dict[str, Callable[[Prompt], ChatTurn]] = {  # by loader; others: the text as is
    "xsum": xsum_chat,
    "humaneval": humaneval_chat,
}
Scorer = Callable[[TaskConfig, Prompt, str], dict[str, float]]
TASK_METRICS: dict[str, Scorer] = {
    "none": _no_metric,
    "rouge": score_rouge,
    "humaneval": score_humaneval,
}


def scorer(cfg: TaskConfig) -> Scorer:
    """The task's quality metric: completion -> named scores recorded per row."""
    if cfg.metric not in TASK_METRICS:
        raise ConfigError(
            f"task {cfg.name!r}: unknown metric {cfg.metric!r}; "
            f"choose one of {sorted(TASK_METRICS)}"
        )
    return TASK_METRICS[cfg.metric]


def format_prompts(cfg: TaskConfig, prompts: list[Prompt], tokenizer: Any) -> list[Prompt]:
    """The prompts in cfg.prompt_format: raw as loaded, or wrapped in the chat template (the raw
    text stays in reference["raw_prompt"])."""
    if cfg.prompt_format == "raw":
        return prompts
    turn = CHAT_TURNS.get(cfg.loader, lambda p: ChatTurn(p.text))
    return [
        replace(
            p, text=chat_text(tokenizer, turn(p)), reference=p.reference | {"raw_prompt": p.text}
        )
        for p in prompts
    ]


def load_prompts(cfg: TaskConfig, n: int) -> list[Prompt]:
    """The first n prompts of the task; a ConfigError for an unknown loader or empty prompts."""
    if cfg.loader not in TASK_LOADERS:
        raise ConfigError(
            f"task {cfg.name!r}: unknown loader {cfg.loader!r}; "
            f"choose one of {sorted(TASK_LOADERS)}"
        )
    prompts = TASK_LOADERS[cfg.loader](cfg, n)
    empty = [p.id for p in prompts if not p.text]
    if empty:
        raise ConfigError(f"task {cfg.name!r}: empty prompt(s) {empty}; every prompt needs text")
    return prompts
