"""Hostile completions: each is a failed sample within its time limit, the harness survives,
no file outside the sandbox changes (canary tree hash), no connection is made, no fake pass."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from attacks import ATTACKS, TIMEOUT_S, Attack, canary_tree, listener, run_attack
from sandbox_procs import assert_cleaned_up, own_sandbox_tmp

from specbench.config import TaskConfig
from specbench.tasks.humaneval import load_humaneval, score_humaneval

SLACK_S = 10.0  # start-up, kill and clean-up beyond the time limit on a busy machine
ENOUGH_S = 60.0  # for programs that end on their own: no busy machine turns them into a timeout
SYSTEM_TMP = Path(tempfile.gettempdir())  # read before sandbox_tmp below redirects it


@pytest.fixture(scope="module", autouse=True)
def sandbox_tmp(tmp_path_factory) -> Iterator[Path]:
    """This module's sandboxes keep their temp dirs here (see sandbox_procs.py)."""
    with own_sandbox_tmp(tmp_path_factory.mktemp("sandboxes")) as base:
        yield base


@pytest.fixture(scope="module")
def canary():
    with canary_tree() as tree:
        yield tree


@pytest.fixture(scope="module")
def server():
    with listener() as sock:
        yield sock


def test_there_are_enough_attacks():
    assert len(ATTACKS) >= 15
    assert len({a.name for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_a_failed_sample_and_changes_nothing(attack: Attack, canary, server):
    outcome = run_attack(attack, canary, server)
    assert not outcome.result.passed, outcome
    assert outcome.seconds < TIMEOUT_S + SLACK_S, outcome
    assert not outcome.canary_changed, outcome
    assert not outcome.connected, outcome
    assert_cleaned_up()
    os.kill(os.getpid(), 0)  # the harness is alive (we are it)


@pytest.fixture(scope="module")
def problem():
    return load_humaneval(TaskConfig(name="humaneval"), 1)[0]


def test_scorer_passes_the_canonical_solution(problem):
    cfg = TaskConfig(name="humaneval", metric="humaneval", options={"timeout_s": ENOUGH_S})
    assert score_humaneval(cfg, problem, problem.reference["canonical_solution"]) == {"passed": 1.0}


@pytest.mark.parametrize(
    "cheat",
    [
        "    return None\nimport builtins\nbuiltins.isinstance = lambda *a: True\n"
        "builtins.abs = lambda x: 0\nimport math\nmath.isclose = lambda *a, **k: True\n",
        "    return None\nimport sys\nsys.exit(0)\n",
        "    return None\nimport atexit, os\natexit.register(os._exit, 0)\n",
    ],
    ids=["patched builtins", "sys.exit", "atexit"],
)
def test_scorer_records_a_fake_pass_as_failed(problem, cheat):
    cfg = TaskConfig(name="humaneval", metric="humaneval", options={"timeout_s": TIMEOUT_S})
    assert score_humaneval(cfg, problem, cheat) == {"passed": 0.0}


ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")
NORMAL_UID = 54321
DRIVER_FILES = (  # all the driver runs: sandbox.py and its child are stdlib only
    "specbench/sandbox.py", "specbench/sandbox_child.py", "specbench/sandbox_landlock.py",
    "tests/security/attacks.py", "tests/security/report.py",
)  # fmt: skip
DRIVER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("specbench.sandbox", "specbench/sandbox.py")
module = importlib.util.module_from_spec(spec)
sys.modules["specbench.sandbox"] = module
spec.loader.exec_module(module)
sys.path.insert(0, "tests/security")
import report
sys.exit(report.main())
"""


def _open_to_others(path: Path) -> bool:
    """Whether another uid can reach path: it and every folder above it let others through."""
    return path.is_dir() and all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))


def _shared_base() -> Path | None:
    """A folder another uid can reach: the checkout's .pytest_cache (the sandbox then keeps its
    private /tmp), else the system temp dir; None when both are closed to other users."""
    cache = ROOT / ".pytest_cache"
    if _open_to_others(ROOT):
        cache.mkdir(exist_ok=True)
    return next((p for p in (cache, SYSTEM_TMP) if _open_to_others(p)), None)


@contextmanager
def _driver_copy(uid: int, base: Path) -> Iterator[Path]:
    """The driver's files and an empty home, in a fresh folder under base that uid owns."""
    work = Path(tempfile.mkdtemp(prefix="nonroot-", dir=base))
    try:
        for name in DRIVER_FILES:
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, work / name)
        (work / "home").mkdir()
        for path in (work, *work.rglob("*")):
            os.chown(path, uid, uid)
        yield work
    finally:
        shutil.rmtree(work)


@pytest.mark.skipif(os.geteuid() != 0, reason="running as another uid needs root")
@pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="no /usr/bin/python3 a normal user can run")
def test_attacks_are_contained_for_a_normal_user():
    """The same attacks with the harness itself running as a normal uid (the sandbox then uses a
    user namespace and drops every capability instead of switching to nobody), on the system
    python, from a copy that uid owns: the checkout may be closed to it (/root, `mktemp -d`)."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    if (base := _shared_base()) is None:
        pytest.skip(f"uid {NORMAL_UID} can reach neither the checkout nor {SYSTEM_TMP}")
    with _driver_copy(NORMAL_UID, base) as work:
        ids = [f"--reuid={NORMAL_UID}", f"--regid={NORMAL_UID}", "--clear-groups"]
        env = {"HOME": str(work / "home"), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        out = subprocess.run(
            ["setpriv", *ids, str(SYSTEM_PYTHON), "-c", DRIVER],
            cwd=work, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(ATTACKS)} of {len(ATTACKS)} attacks contained" in out.stdout
    assert "weaker isolation" not in out.stdout + out.stderr, out.stdout
