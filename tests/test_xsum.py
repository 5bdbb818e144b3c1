"""XSum task: packaged data, the 1-shot prompt, ROUGE on fixed strings, stop handling."""

from __future__ import annotations

import pytest

from specbench.config import ConfigError, TaskConfig
from specbench.tasks import Prompt, load_prompts, scorer, truncate_at_stops
from specbench.tasks.xsum import build_prompt, packaged_path

XSUM = TaskConfig(name="xsum", loader="xsum", metric="rouge", stop_strings=["\n"])


def test_packaged_file_is_the_1000_row_test_split():
    lines = packaged_path().read_text().splitlines()
    assert len(lines) == 1000


def test_prompts_are_one_shot_and_exclude_the_shot():
    prompts = load_prompts(XSUM, 5)
    assert len(prompts) == 5 and len({p.id for p in prompts}) == 5
    for p in prompts:
        assert p.text.count("Article: ") == 2 and p.text.endswith("\nSummary:")
        assert p.reference["summary"]
    shot = prompts[0].text.split("\nSummary:")[0].removeprefix("Article: ")
    assert len(shot) >= 200  # XSum has empty documents: they are never the shot
    assert all(p.text.startswith(f"Article: {shot}\nSummary:") for p in prompts)
    assert all(shot not in p.text.split("\nSummary:", 1)[1] for p in prompts)


def test_max_document_chars_filters_long_articles():
    short = TaskConfig(**{**XSUM.__dict__, "options": {"max_document_chars": 800}})
    for p in load_prompts(short, 10):
        article = p.text.split("\n\nArticle: ", 1)[1].rsplit("\nSummary:", 1)[0]
        assert 200 <= len(article) <= 800


def test_build_prompt_format():
    shot = {"document": " A cat sat. ", "summary": "Cat sits."}
    row = {"document": "Dogs bark.", "summary": "x"}
    assert build_prompt(shot, row) == (
        "Article: A cat sat.\nSummary: Cat sits.\n\nArticle: Dogs bark.\nSummary:"
    )


def test_rouge_on_fixed_strings():
    prompt = Prompt("x", "", {"summary": "The cats are running fast"})
    score = scorer(XSUM)
    # Stemming maps cats->cat, running->run; the completion is cut at the newline.
    scores = score(XSUM, prompt, " a cat runs fast\nArticle: more text")
    assert scores["rouge1"] == pytest.approx(2 * 0.75 * 0.6 / (0.75 + 0.6))
    assert scores["rouge2"] == pytest.approx(2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4))
    assert score(XSUM, prompt, "The cats are running fast")["rouge2"] == pytest.approx(1.0)


def test_truncate_at_stops_takes_the_earliest():
    assert truncate_at_stops("a\n#b\ndef c", ["\ndef ", "\n#"]) == "a"
    assert truncate_at_stops("no stop", ["\n"]) == "no stop"


def test_missing_data_and_unknown_metric_are_config_errors():
    missing = TaskConfig(name="xsum", loader="xsum", options={"source": "/nonexistent.jsonl"})
    with pytest.raises(ConfigError, match="not found"):
        load_prompts(missing, 2)
    with pytest.raises(ConfigError, match="unknown metric"):
        scorer(TaskConfig(name="t", metric="bleu"))
