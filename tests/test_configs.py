"""Configs compose and validate; every bad input is one clear error before any model loads."""

from __future__ import annotations

import pytest
from conftest import CONF, run_cli
from hydra.errors import ConfigCompositionException, MissingConfigException

from specbench.config import ConfigError
from specbench.runner import run, to_config

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
GROUPS = ["backend", "decoder", "sampling", "task", "bench", "tracking"]


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_validates(compose_cfg, experiment):
    job = to_config(compose_cfg([f"+experiment={experiment}"], base=None))
    assert job.experiment == experiment


@pytest.mark.parametrize(
    "override",
    [f"{g}={p.stem}" for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]
    + [
        f"model@{slot}={p.stem}"
        for slot in ("target", "draft")
        for p in (CONF / "model").glob("*.yaml")
    ],
)
def test_every_group_option_validates(compose_cfg, override):
    cfg = compose_cfg([override])
    if override.startswith("model@target=") and cfg.target.get("prompt_int8"):
        with pytest.raises(ConfigError, match="target.prompt_int8"):  # a draft-only model
            to_config(cfg)
        return
    to_config(cfg)


def test_a_model_can_override_the_backend_dtype(compose_cfg):
    job = to_config(compose_cfg(["backend=cpu_bf16", "draft.dtype=float32"]))
    assert job.draft.torch_dtype_name(job.backend.dtype) == "float32"
    assert job.target.torch_dtype_name(job.backend.dtype) == "bfloat16"


def test_model_group_is_placed_twice(compose_cfg):
    job = to_config(compose_cfg(["model@draft=qwen25_05b", "model@target=qwen25_7b"]))
    assert (job.draft.source, job.target.source) == ("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-7B")


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["decoder.k=0"], "decoder.k must be >= 1"),
        (["sampling.temperature=-0.5"], "temperature must be >= 0"),
        (["sampling.top_p=0"], "top_p must be in"),
        (["sampling.top_p=1.5"], "top_p must be in"),
        (["sampling.top_k=-2"], "top_k"),
        (["bench.max_new_tokens=0"], "max_new_tokens must be >= 1"),
        (["bench.repeats=0"], "repeats"),
        (["backend.dtype=fp8"], "backend.dtype"),
        (["draft.dtype=fp8"], "dtype must be one of"),
        (
            ["task.loader=jsonl", "+task.options.path=/nonexistent/data.jsonl"],
            "data file not found",
        ),
        (["task.prompts=[]"], "lists no prompts"),
        (["task.prompts=['']"], "empty prompt"),
    ],
)
def test_bad_input_is_a_config_error_before_loading(
    compose_cfg, no_load_pool, tmp_path, overrides, match
):
    with pytest.raises(ConfigError, match=match):
        run(compose_cfg(overrides), no_load_pool, tmp_path / "job", "job")


def test_mismatched_tokenizers_fail_before_loading(
    compose_cfg, no_load_pool, tmp_path, saved_tiny_dirs
):
    cfg = compose_cfg(["draft.loader=hf", f"draft.source={saved_tiny_dirs['other']}"])
    with pytest.raises(ConfigError, match="tokenizer does not match"):
        run(cfg, no_load_pool, tmp_path / "job", "job")


@pytest.mark.parametrize(
    "override, error",
    [
        ("model@draft=no_such_model", MissingConfigException),
        ("task=no_such_task", MissingConfigException),
        ("decoder=no_such_decoder", MissingConfigException),
        ("decoder.k=four", ConfigCompositionException),
        ("backend.no_such_key=1", ConfigCompositionException),
    ],
)
def test_unknown_names_and_wrong_types_fail_at_composition(compose_cfg, override, error):
    with pytest.raises(error):
        compose_cfg([override])


def test_default_config_is_the_offline_pair(compose_cfg):
    job = to_config(compose_cfg(base=None))
    assert (job.target.loader, job.draft.loader) == ("packaged", "packaged")
    assert job.backend.dtype == "bfloat16"


def test_cli_error_is_one_line_and_nonzero(tmp_path):
    out = run_cli("decoder.k=0", f"results_dir={tmp_path}")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "specbench: error: decoder.k must be >= 1 (draft tokens per iteration), got 0"
    )
    assert "loading" not in out.stdout + out.stderr


def test_cli_unknown_model_lists_the_options(tmp_path):
    out = run_cli("model@draft=no_such_model", f"results_dir={tmp_path}")
    assert out.returncode != 0
    assert "Could not find 'model/no_such_model'" in out.stderr
    assert "tiny_draft" in out.stderr


def test_help_lists_config_groups():
    out = run_cli("--help")
    assert out.returncode == 0
    for group in ("backend:", "decoder:", "model:", "sampling:", "task:", "experiment: "):
        assert group in out.stdout


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize(
    "setting, task, sampling, fixed",
    [
        ("xsum_greedy", "xsum", "greedy", True),
        ("xsum_nucleus", "xsum", "nucleus_p08", True),
        ("humaneval", "humaneval", "t08_p095", False),
        ("xsum_t1", "xsum", "t1", True),
    ],
)
def test_paper_regime_settings_win_in_either_merge_order(
    compose_cfg, first, setting, task, sampling, fixed
):
    # A multirun's +setting sweep merges before +experiment: nothing in the experiment may set
    # what a setting decides.
    pair = ["+experiment=paper_regime", f"+setting={setting}"]
    job = to_config(compose_cfg(pair[::-1] if first else pair, base=None))
    assert (job.task.name, job.sampling.name, job.bench.fixed_length) == (task, sampling, fixed)
    assert job.draft.quantize == "int4" and job.target.quantize == "none" and job.decoder.k == 4
