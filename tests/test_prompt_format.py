"""Chat-format prompts (task.prompt_format=chat), code extraction, and every EOS id honoured."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import run_cli

from specbench.config import ConfigError, ModelConfig, TaskConfig
from specbench.decoding import GenerationResult
from specbench.methods import METHODS
from specbench.models import check_eos, eos_token_ids
from specbench.prepare import prepare
from specbench.runner import job_columns, to_config
from specbench.tasks import format_prompts
from specbench.tasks import humaneval as he
from specbench.tasks.chat import ChatTurn, chat_text, extract_code, sanitize
from specbench.timing import Warm, cut_at_eos, result_row, score_rows, time_runs
from specbench.tiny import byte_tokenizer

CHAT_REPLY = """\
import math

def add(a, b):
    return a + b

print(add(1, 2))
if __name__ == "__main__":
    assert add(2, 2) == 4
```

This adds two numbers."""


def test_extract_code_inside_a_block_stops_at_the_closing_fence():
    assert extract_code(CHAT_REPLY, inside_block=True).endswith("assert add(2, 2) == 4\n")


def test_extract_code_takes_the_first_fenced_block():
    reply = "Here you go:\n```python\ndef f():\n    return 1\n```\nand\n```\nother\n```"
    assert extract_code(reply) == "def f():\n    return 1"
    assert extract_code("def g(): pass") == "def g(): pass"


def test_sanitize_keeps_definitions_and_drops_demo_code():
    code = sanitize(extract_code(CHAT_REPLY, inside_block=True))
    assert "import math" in code and "def add(a, b):" in code
    assert "print" not in code and "__main__" not in code
    assert sanitize("def f():\n    return 1\n\ndef broken(:\n") == "def f():\n    return 1\n"


def test_chat_text_ends_inside_the_reply_prefix():
    tok = byte_tokenizer()
    assert chat_text(tok, ChatTurn("hi")) == "user: hi<eos>\nassistant: "
    assert chat_text(tok, ChatTurn("hi", "```python\n")).endswith("assistant: ```python\n")


def test_chat_without_a_template_is_a_config_error():
    tok = byte_tokenizer()
    tok.chat_template = None
    with pytest.raises(ConfigError, match="prompt_format=raw"):
        chat_text(tok, ChatTurn("hi"))


def test_unknown_prompt_format_is_a_config_error():
    with pytest.raises(ConfigError, match="prompt_format"):
        TaskConfig(prompt_format="instruct")


def _humaneval_cfg(fmt: str) -> TaskConfig:
    return TaskConfig(
        name="humaneval", loader="humaneval", metric="humaneval", prompt_format=fmt,
        stop_strings=["\ndef ", "\n#"], chat_stop_strings=["\n```"],
    )  # fmt: skip


def test_humaneval_chat_scores_the_sanitized_reply():
    cfg = _humaneval_cfg("chat")
    raw = he.load_humaneval(cfg, 1)
    (prompt,) = format_prompts(cfg, raw, byte_tokenizer())
    assert prompt.reference["raw_prompt"] == raw[0].text
    assert prompt.text.endswith("```python\n") and he.CHAT_INSTRUCTION in prompt.text
    solution = raw[0].text + raw[0].reference["canonical_solution"]
    reply = f"{solution}\nprint({raw[0].reference['entry_point']}([1.0], 0.5))\n```\nDone."
    assert he.score_humaneval(cfg, prompt, reply) == {"passed": 1.0}
    assert he.score_humaneval(cfg, prompt, "def nope():\n    pass\n```") == {"passed": 0.0}


def test_raw_format_leaves_prompts_and_stops_alone():
    cfg = _humaneval_cfg("raw")
    raw = he.load_humaneval(cfg, 2)
    assert format_prompts(cfg, raw, byte_tokenizer()) == raw
    assert cfg.stops == ["\ndef ", "\n#"] and _humaneval_cfg("chat").stops == ["\n```"]


def test_cut_at_eos_takes_the_first_of_any_eos_id():
    assert cut_at_eos([5, 6, 9, 7, 8], (8, 9)) == [5, 6]
    assert cut_at_eos([5, 6], (8, 9)) == [5, 6]


def test_extra_eos_ids_join_the_tokenizers():
    cfg = ModelConfig(name="t", loader="tiny", eos_token_ids=[42])
    assert eos_token_ids(cfg, byte_tokenizer()) == (42, 257)
    with pytest.raises(ConfigError, match="disagree on EOS"):
        check_eos((42, 257), (257,))


@pytest.mark.parametrize("task", ["humaneval", "xsum"])
def test_chat_format_from_the_cli(tmp_path, task):
    out = run_cli(
        "+experiment=smoke", f"task={task}", "task.prompt_format=chat", "bench.num_prompts=1",
        "bench.repeats=1", "bench.max_new_tokens=8", f"results_dir={tmp_path}",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    records = pd.read_parquet(next(tmp_path.glob("smoke/*/records.parquet")))
    assert len(records) == 2 and (records.new_tokens >= 1).all()
    assert {"completion", "completion_raw"} <= set(records.columns)


def test_fixed_length_completion_is_cut_at_eos(compose_cfg):
    # Fixed-length timing generates past EOS; the scored completion stops at the first EOS id
    # (here an extra one from the model config), the raw text keeps every token.
    extra = ["target.eos_token_ids=[120]", "draft.eos_token_ids=[120]"]
    cfg = compose_cfg(["bench.fixed_length=true", *extra])
    prep = prepare(to_config(cfg))
    assert prep.stop is None and set(prep.eos_token_ids) == {120, 257}
    encode, decode = prep.tokenizer.encode, prep.tokenizer.decode
    tokens = encode("hi") + [120] + encode("yo") + [257]
    res = GenerationResult(tokens=tokens, wall_s=1.0, target_calls=len(tokens))
    auto = next(t for t in prep.timed if t.method is METHODS["autoregressive"])
    row = result_row(prep, auto, prep.prompts[0], 0, 0, res)
    assert row["completion"] == "hi" and row["completion_raw"] == f"hi{decode([120])}yo<eos>"
    assert row["new_tokens"] == 6


def test_packaged_eos_list_covers_endoftext():
    """The offline pair's configs end generations on <|endoftext|> as well as <|im_end|>."""
    from conftest import CONF
    from omegaconf import OmegaConf

    for name in ("qwen25_coder_15b_instruct_gguf", "qwen25_coder_05b_instruct_gguf"):
        cfg = OmegaConf.load(CONF / "model" / f"{name}.yaml")
        assert {151643, 151645} <= set(cfg.eos_token_ids)


@pytest.mark.slow
def test_real_tokenizer_ends_on_endoftext_and_has_a_chat_template(compose_cfg):
    """On the real offline tokenizer: 151643 (<|endoftext|>) stops a generation."""
    cfg = compose_cfg(["task=humaneval", "task.prompt_format=chat", "bench.num_prompts=1"], None)
    prep = prepare(to_config(cfg))
    assert prep.tokenizer.convert_ids_to_tokens(151643) == "<|endoftext|>"
    assert {151643, 151645} <= set(prep.eos_token_ids)
    ids = prep.tokenizer("    return x", add_special_tokens=False).input_ids
    assert prep.stop.find(ids + [151643, 151659, 1234], 0) == (len(ids) + 1, "eos")
    text = prep.prompts[0].text
    assert text.startswith("<|im_start|>") and text.endswith(
        "<|im_start|>assistant\n" + he.CHAT_REPLY
    )


def test_rows_say_how_they_were_prompted(compose_cfg):
    """A gathered table of chat and raw runs splits on a column, not on job names."""
    for fmt in ("raw", "chat"):
        job = to_config(compose_cfg([f"task.prompt_format={fmt}"]))
        assert job_columns(job, "job", False)["prompt_format"] == fmt


def test_rows_carry_the_task_options_that_shape_a_prompt(compose_cfg):
    """XSum's article cut (a loader option) is a column, and runs that differ in it never pair."""
    import json

    from specbench import stats

    job = to_config(compose_cfg(["task=xsum", "task.options.max_document_chars=600"]))
    options = json.loads(job_columns(job, "job", False)["task_options"])
    assert options["max_document_chars"] == 600
    assert "task_options" in stats.SETTING


def test_match_lengths_gives_every_pair_the_leaders_token_count(compose_cfg):
    # bench.match_lengths: per (prompt, repeat) the first method (rotating) decodes up to its
    # stop; the others generate exactly as many tokens with the stops off, and are not scored.
    overrides = ["task=humaneval", "bench.match_lengths=true", "bench.num_prompts=3"]
    cfg = compose_cfg([*overrides, "bench.repeats=1"])
    prep = prepare(to_config(cfg))
    calls = []

    def fake(label: str, fixed: bool):
        def generate(ids, budget, gen):
            calls.append((label, fixed, budget))
            n = budget if fixed else 3 + len(calls)  # leaders stop early, at varying lengths
            return GenerationResult(tokens=[65] * n, wall_s=0.1, target_calls=n)

        return generate

    labels = [t.label for t in prep.timed]
    warmed = Warm(
        {label: fake(label, False) for label in labels}, [None] * 3, {}, [],
        {label: fake(label, True) for label in labels},
    )  # fmt: skip
    rows, _ = time_runs(prep, warmed, range(3))
    frame = pd.DataFrame(rows)
    assert len(labels) == 2 and len(frame) == 6
    for _, pair in frame.groupby("prompt_id"):
        assert pair.new_tokens.nunique() == 1  # equal token counts in every pair
        leader = pair[pair.length_from == ""]
        assert len(leader) == 1 and set(pair.length_from) == {"", leader.method.iloc[0]}
    assert frame[frame.length_from == ""].method.nunique() == 2  # the leader rotates
    assert [fixed for _, fixed, _ in calls] == [False, True] * 3
    score_rows(prep, rows)
    scored = pd.DataFrame(rows)
    assert scored[scored.length_from == ""].passed.notna().all()
    assert scored[scored.length_from != ""].passed.isna().all()
    with pytest.raises(ConfigError, match="pick one"):
        to_config(compose_cfg(["bench.match_lengths=true", "bench.fixed_length=true"]))
