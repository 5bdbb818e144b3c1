"""A regular (non-editable) install: the wheel ships every module and the YAML config tree, and
the installed package, not this checkout, runs `specbench --help` and a tiny-model job from an
empty directory, writing results/ there. Offline: pip builds and installs with --no-index."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT
from omegaconf import OmegaConf

SOURCES = ("pyproject.toml", "README.md", "specbench", "conf")
TINY_JOB = (
    "+experiment=smoke", "decoder.k=2", "bench.warmup=0", "bench.repeats=1",
    "bench.num_prompts=1", "bench.max_new_tokens=8",
)  # fmt: skip


def _pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", *args, "--no-index", "--quiet"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]


def _copy_sources(dest: Path) -> None:
    """The files a wheel is built from, copied so the build writes nothing into the checkout."""
    dest.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(ROOT / name, dest / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, dest / name)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    _copy_sources(tmp / "src")
    _pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(tmp / "src"))
    (built,) = (tmp / "dist").glob("specbench-*.whl")
    return built


@pytest.fixture(scope="module")
def site(wheel, tmp_path_factory) -> Path:
    """The wheel installed on its own into a fresh directory (no dependencies: those are the
    venv's)."""
    target = tmp_path_factory.mktemp("site")
    _pip("install", "--no-deps", "--target", str(target), str(wheel))
    return target


def _run_installed(site: Path, cwd: Path, *command: str) -> subprocess.CompletedProcess:
    """Run from `cwd` with only the installed copy of specbench importable ahead of the venv."""
    env = os.environ | {
        "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1",
        "WANDB_SILENT": "true",
    }  # fmt: skip
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def test_wheel_ships_every_module_and_the_configs(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    package = [p for p in (ROOT / "specbench").rglob("*") if p.is_file()]
    modules = {f"specbench/{p.relative_to(ROOT / 'specbench')}" for p in package}
    configs = {
        f"specbench/conf/{p.relative_to(ROOT / 'conf')}" for p in ROOT.glob("conf/**/*.yaml")
    }
    missing = sorted(n for n in modules | configs if "__pycache__" not in n and n not in names)
    assert not missing, f"not in the wheel (see [tool.setuptools] in pyproject.toml): {missing[:5]}"


def test_installed_console_script_lists_the_shipped_configs(site, tmp_path):
    out = _run_installed(site, tmp_path, str(site / "bin" / "specbench"), "--help")
    assert "tiny_target" in out.stdout and "smoke" in out.stdout, out.stdout[-2000:]


def test_installed_package_runs_a_tiny_job_into_the_current_directory(site, tmp_path):
    _run_installed(site, tmp_path, sys.executable, "-m", "specbench", *TINY_JOB)
    (summary,) = (tmp_path / "results" / "smoke").glob("*/summary.json")
    hydra = OmegaConf.load(summary.parent / ".hydra" / "hydra.yaml").hydra
    (main,) = [s for s in hydra.runtime.config_sources if s.provider == "main"]
    assert Path(main.path) == site / "specbench" / "conf"  # the wheel's copy, not the checkout's
    assert not list(site.rglob("results")) and not list(site.rglob("outputs"))
