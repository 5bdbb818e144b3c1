"""Run untrusted generated Python in a separate, limited, network-less process; report pass/fail.

The parent half (`run_program`) starts `sandbox_child.py` as a script (`python -I -B`) with an
empty environment; that file holds the isolation (namespaces, `nobody` or no capabilities,
rlimits, Landlock via `sandbox_landlock.py`). Only a token written after the tests' last
statement counts as a pass. See SECURITY.md for what this does and does not promise.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

OUTPUT_LIMIT = 64 * 1024  # bytes of stdout/stderr read back
CHILD_ENV = MappingProxyType(  # the program's whole environment: nothing is inherited
    {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    | {f"{lib}_NUM_THREADS": "1" for lib in ("OMP", "OPENBLAS", "MKL")}
)
CHILD_SCRIPT = Path(__file__).resolve().with_name("sandbox_child.py")


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one program: passed, failed[: detail], timeout or crashed[: signal]."""

    passed: bool
    outcome: str
    seconds: float


def run_program(
    source: str, *, tests: str = "", timeout_s: float = 10.0, memory_mb: int = 1024
) -> SandboxResult:
    """Run `source`, then `tests` (with the builtins and modules as they were before `source`
    ran) in the sandbox; passed only if both ran to their end within the limits."""
    return _run(source, tests=tests, timeout_s=timeout_s, memory_mb=memory_mb, namespaces=True)


def _run(
    source: str, *, tests: str = "", timeout_s: float, memory_mb: int, namespaces: bool
) -> SandboxResult:
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="specbench-sandbox-") as tmp:
            programs = (source, tests)
            outcome = _run_in(Path(tmp), programs, timeout_s, memory_mb, namespaces)
    except Exception as err:  # a broken sandbox is a failed sample, reported with its reason
        outcome = f"failed: sandbox error: {type(err).__name__}: {err}"
    return SandboxResult(outcome == "passed", outcome, time.perf_counter() - start)


def _run_in(
    root: Path, programs: tuple[str, str], timeout_s: float, memory_mb: int, namespaces: bool
) -> str:
    token = secrets.token_hex(16)
    (root / "program.py").write_text(programs[0], encoding="utf-8")
    (root / "tests.py").write_text(programs[1], encoding="utf-8")
    (root / "token").write_text(token, encoding="ascii")
    args = [str(root), repr(float(timeout_s)), str(int(memory_mb)), "1" if namespaces else "0"]
    command = [sys.executable, "-I", "-B", str(CHILD_SCRIPT), *args]
    with open(root / "stdout", "wb") as out, open(root / "stderr", "wb") as err:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=dict(CHILD_ENV),
            cwd=root,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)
    if timed_out:
        return "timeout"
    return _classify(root, token, proc.returncode)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the program's whole process group (the pid namespace dies with its pid 1)."""
    with contextlib.suppress(ProcessLookupError):  # raised only when no member is left
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _read_bounded(path: Path) -> bytes:
    if not path.exists():
        return b""
    with open(path, "rb") as f:
        return f.read(OUTPUT_LIMIT)


def _classify(root: Path, token: str, returncode: int) -> str:
    status: dict[str, str] = {}
    for line in _read_bounded(root / "status").decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        status[key] = value
    if "note" in status:
        warnings.warn(f"sandbox: weaker isolation: {status['note']}", RuntimeWarning, stacklevel=4)
    result = _read_bounded(root / "result").decode("utf-8", "replace")
    if "signal" in status:
        return f"crashed: {_signal_name(int(status['signal']))}"
    if "exit" not in status:
        if returncode < 0:
            return f"crashed: sandbox killed by {_signal_name(-returncode)}"
        tail = _read_bounded(root / "stderr").decode("utf-8", "replace").strip().splitlines()
        return f"failed: sandbox error: {tail[-1] if tail else f'exit code {returncode}'}"
    code = int(status["exit"])
    if code == 0 and result == token:
        return "passed"
    if result.startswith("error "):
        return f"failed: {result.removeprefix('error ')[:200]}"
    if code == 0:
        return "failed: exited before the tests finished"
    return f"failed: exit code {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
