"""Hostile completions: each is a failed sample within its time limit, the harness survives,
no file outside the sandbox changes (canary tree hash), no connection is made, no fake pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from attacks import ATTACKS, TIMEOUT_S, Attack, canary_tree, listener, run_attack

from specbench.config import TaskConfig
from specbench.tasks.humaneval import load_humaneval, score_humaneval

SLACK_S = 3.0  # start-up and clean-up on a slow, busy machine


@pytest.fixture(scope="module")
def canary():
    with canary_tree() as tree:
        yield tree


@pytest.fixture(scope="module")
def server():
    with listener() as sock:
        yield sock


def _sandbox_processes() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"sandbox_child.py" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue  # exited while we looked
    return pids


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
    deadline = time.monotonic() + 3.0
    while _sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sandbox_processes() == []
    os.kill(os.getpid(), 0)  # the harness is alive (we are it)


@pytest.fixture(scope="module")
def problem():
    return load_humaneval(TaskConfig(name="humaneval"), 1)[0]


def test_scorer_passes_the_canonical_solution(problem):
    cfg = TaskConfig(name="humaneval", metric="humaneval")
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


@pytest.mark.skipif(os.geteuid() != 0, reason="running as another uid needs root")
@pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="no /usr/bin/python3 a normal user can run")
def test_attacks_are_contained_for_a_normal_user(tmp_path):
    """The same attacks with the harness itself running as a normal uid (the sandbox then uses a
    user namespace and drops every capability instead of switching to nobody). sandbox.py is
    stdlib only, so it runs on the system python, which that uid can read."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    (ROOT / ".pytest_cache").mkdir(exist_ok=True)  # absent in a fresh clone
    home = Path(tempfile.mkdtemp(prefix="nonroot-home-", dir=ROOT / ".pytest_cache"))
    try:
        os.chown(home, NORMAL_UID, NORMAL_UID)
        ids = [f"--reuid={NORMAL_UID}", f"--regid={NORMAL_UID}", "--clear-groups"]
        env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        out = subprocess.run(
            ["setpriv", *ids, str(SYSTEM_PYTHON), "-c", DRIVER],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        shutil.rmtree(home)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(ATTACKS)} of {len(ATTACKS)} attacks contained" in out.stdout
    assert "weaker isolation" not in out.stdout + out.stderr, out.stdout
