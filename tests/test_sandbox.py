"""The sandbox: canonical solutions pass; hostile or broken programs fail, the harness survives."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_procs import assert_cleaned_up, own_sandbox_tmp, sandbox_processes

import specbench
from specbench.config import TaskConfig
from specbench.sandbox import SandboxResult, _run, run_program
from specbench.tasks.humaneval import humaneval_program, load_humaneval

TIMEOUT = 3.0  # for programs that run until they are stopped
ENOUGH = 60.0  # for programs that end on their own: no busy machine turns them into a timeout
SLACK = 10.0  # start-up, kill and clean-up beyond the time limit on a busy machine


@pytest.fixture(scope="module", autouse=True)
def sandbox_tmp(tmp_path_factory) -> Iterator[Path]:
    """This module's sandboxes keep their temp dirs here (see sandbox_procs.py)."""
    with own_sandbox_tmp(tmp_path_factory.mktemp("sandboxes")) as base:
        yield base


def _run_hostile(source: str, timeout_s: float = TIMEOUT) -> SandboxResult:
    start = time.monotonic()
    result = run_program(source, timeout_s=timeout_s)
    assert time.monotonic() - start < timeout_s + SLACK
    assert not result.passed
    assert_cleaned_up()
    return result


@pytest.fixture(scope="module")
def problems():
    return load_humaneval(TaskConfig(name="humaneval"), 5)


def test_canonical_solutions_pass(problems):
    for prompt in problems:
        program = humaneval_program(prompt, prompt.reference["canonical_solution"])
        result = run_program(program, timeout_s=ENOUGH)
        assert result == SandboxResult(True, "passed", result.seconds), prompt.id
    assert_cleaned_up()


def test_wrong_solution_fails(problems):
    result = run_program(humaneval_program(problems[0], "    return None\n"), timeout_s=ENOUGH)
    assert not result.passed
    assert result.outcome == "failed: AssertionError"


def test_syntax_error_fails():
    assert run_program("def f(:\n", timeout_s=ENOUGH).outcome == "failed: SyntaxError"


@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)"])
def test_exiting_before_the_tests_is_not_a_pass(problems, exit_call):
    completion = f"    return None\n\n{exit_call}\n"  # a wrong body, then leave early
    result = _run_hostile(humaneval_program(problems[0], completion), timeout_s=ENOUGH)
    assert result.outcome.startswith("failed")


def test_infinite_loop_times_out():
    assert _run_hostile("while True:\n    pass\n", timeout_s=2.0).outcome == "timeout"


def test_sleeping_program_times_out():
    assert _run_hostile("import time\ntime.sleep(60)\n", timeout_s=2.0).outcome == "timeout"


def test_leftover_check_sees_a_running_sandbox():
    """The cleanup assertions above would pass vacuously if they could not see a sandbox."""
    sleeper = ("import time\ntime.sleep(60)\n",)
    runner = threading.Thread(target=run_program, args=sleeper, kwargs={"timeout_s": 2.0})
    runner.start()
    deadline = time.monotonic() + SLACK
    while not sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = sandbox_processes()
    runner.join()
    assert seen
    assert_cleaned_up()


def test_fork_bomb_is_contained():
    _run_hostile("import os\nwhile True:\n    os.fork()\n")


def test_daemonized_child_is_killed():
    source = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
    run_program(source, timeout_s=TIMEOUT)
    assert_cleaned_up()


def test_memory_hog_fails():
    result = _run_hostile("block = bytearray(10 * 1024**3)\nblock[-1] = 1\n", timeout_s=ENOUGH)
    assert result.outcome in ("failed: MemoryError", "crashed: SIGKILL")


def test_huge_stdout_is_bounded():
    _run_hostile("import sys\nsys.stdout.write('x' * 100_000_000)\nsys.stdout.flush()\n")


def test_cannot_write_outside_its_directory(tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("untouched")
    target = tmp_path / "escaped.txt"
    source = (
        f"open({str(target)!r}, 'w').write('x')\nopen({str(canary)!r}, 'a').write('tampered')\n"
    )
    _run_hostile(source, timeout_s=ENOUGH)  # it must fail, not time out, before the checks
    assert not target.exists()
    assert canary.read_text() == "untouched"


def test_writes_inside_its_directory_work_and_vanish():
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("specbench-sandbox-*"))
    source = "import os\nopen('f.txt', 'w').write('x')\nassert os.listdir('.') == ['f.txt']\n"
    assert run_program(source, timeout_s=ENOUGH).passed
    assert set(tmp.glob("specbench-sandbox-*")) == before


def test_environment_is_not_inherited(monkeypatch):
    monkeypatch.setenv("SPECBENCH_FAKE_SECRET", "hunter2")
    source = (
        "import os\n"
        "assert 'SPECBENCH_FAKE_SECRET' not in os.environ\n"
        "assert set(os.environ) <= {'PATH', 'LANG', 'PYTHONDONTWRITEBYTECODE', "
        "'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS', 'LC_CTYPE'}\n"
        "import sys\nassert sys.stdin.read() == ''\n"
    )
    result = run_program(source, timeout_s=ENOUGH)
    assert result.passed, result.outcome


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.3)
    yield server
    server.close()


def _assert_no_connection(server: socket.socket) -> None:
    with pytest.raises(socket.timeout):
        server.accept()


def test_socket_connect_fails(listener):
    port = listener.getsockname()[1]
    result = _run_hostile(
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n",
        timeout_s=ENOUGH,
    )
    assert result.outcome.startswith("failed")
    _assert_no_connection(listener)


def test_network_namespace_blocks_raw_sockets(listener):
    """Bypassing Python's socket module (libc directly) still reaches nothing."""
    port = listener.getsockname()[1]
    source = (
        "import ctypes, struct\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = libc.socket(2, 1, 0)\n"
        "assert fd >= 0\n"
        f"addr = struct.pack('=H', 2) + struct.pack('!H4s8x', {port}, bytes([127, 0, 0, 1]))\n"
        "assert libc.connect(fd, addr, 16) == 0, ctypes.get_errno()\n"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_program(source, timeout_s=ENOUGH)
    if any("weaker isolation" in str(w.message) for w in caught):
        pytest.skip("no network namespace on this machine")
    assert not result.passed
    _assert_no_connection(listener)


@pytest.mark.skipif(os.geteuid() != 0, reason="the fallback path as root drops to nobody")
def test_fallback_without_namespaces_still_contains(problems):
    with pytest.warns(RuntimeWarning, match="weaker isolation"):
        passed = _run(
            humaneval_program(problems[1], problems[1].reference["canonical_solution"]),
            timeout_s=ENOUGH,
            memory_mb=1024,
            namespaces=False,
        )
    assert passed.passed
    bomb = "import os\nif os.fork() == 0:\n    os.setsid()\nwhile True:\n    os.fork()\n"
    with pytest.warns(RuntimeWarning, match="weaker isolation"):
        result = _run(bomb, timeout_s=2.0, memory_mb=1024, namespaces=False)
    assert not result.passed
    assert_cleaned_up()


def test_scratch_mounts_never_hide_the_running_interpreter():
    """A checkout or venv under /tmp must stay visible: such a mount target is skipped."""
    from specbench.sandbox_child import _hides_runtime

    assert _hides_runtime("/")  # everything lives under /
    assert not _hides_runtime("/nonexistent-scratch-dir")
    package = Path(specbench.__file__).resolve().parent
    assert _hides_runtime(str(package.parent))
