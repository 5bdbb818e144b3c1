"""Run untrusted generated Python in a separate, limited, network-less process; report pass/fail.

The parent half (`run_program`) starts this same file as a script (`python -I -B sandbox.py`)
with an empty environment. That wrapper, as root, enters new pid/net/mount/ipc/uts namespaces
(falling back, with a warning, to none), forks a supervisor (pid 1 of the new pid namespace)
which forks the program's process: that one drops to uid `nobody` (keeping only
CAP_DAC_READ_SEARCH, so the interpreter under /root stays importable), sets rlimits, disables
`socket` and runs the program. Only a token written after the program's last statement counts
as a pass. Stdlib only: the script half must not import specbench.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import NoReturn

OUTPUT_LIMIT = 64 * 1024  # bytes of stdout/stderr read back
FILE_SIZE_LIMIT = 16 * 1024 * 1024  # RLIMIT_FSIZE: also bounds the captured stdout/stderr files
NOBODY = 65534
CHILD_ENV = MappingProxyType(  # the program's whole environment: nothing is inherited
    {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    | {f"{lib}_NUM_THREADS": "1" for lib in ("OMP", "OPENBLAS", "MKL")}
)
_NEWNS, _NEWUTS, _NEWIPC, _NEWPID, _NEWNET = 0x20000, 0x4000000, 0x8000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 0x4000, 0x40000
_PR_SET_PDEATHSIG, _PR_SET_KEEPCAPS, _PR_SET_CHILD_SUBREAPER = 1, 8, 36
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 38, 47
_CAP_DAC_READ_SEARCH = 2
_SCRATCH_MOUNTS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one program: passed, failed[: detail], timeout or crashed[: signal]."""

    passed: bool
    outcome: str
    seconds: float


def run_program(source: str, *, timeout_s: float = 10.0, memory_mb: int = 1024) -> SandboxResult:
    """Run `source` in the sandbox; passed only if it ran to its end within the limits."""
    return _run(source, timeout_s=timeout_s, memory_mb=memory_mb, namespaces=True)


def _run(source: str, *, timeout_s: float, memory_mb: int, namespaces: bool) -> SandboxResult:
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="specbench-sandbox-") as tmp:
            outcome = _run_in(Path(tmp), source, timeout_s, memory_mb, namespaces)
    except Exception as err:  # a broken sandbox is a failed sample, reported with its reason
        outcome = f"failed: sandbox error: {type(err).__name__}: {err}"
    return SandboxResult(outcome == "passed", outcome, time.perf_counter() - start)


def _run_in(root: Path, source: str, timeout_s: float, memory_mb: int, namespaces: bool) -> str:
    token = secrets.token_hex(16)
    (root / "program.py").write_text(source, encoding="utf-8")
    (root / "token").write_text(token, encoding="ascii")
    args = [str(root), repr(float(timeout_s)), str(int(memory_mb)), "1" if namespaces else "0"]
    command = [sys.executable, "-I", "-B", str(Path(__file__).resolve()), *args]
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


# ---- the script half: runs in the child process, never in the harness ----


@dataclass(frozen=True)
class _Job:
    """What the child processes need: the program, its token, limits, fds and workdir."""

    source: str
    token: str
    timeout_s: float
    memory_mb: int
    workdir: Path
    status_fd: int
    result_fd: int


def _check(ret: int, what: str) -> None:
    if ret != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _isolate(libc: ctypes.CDLL, root: Path, namespaces: bool) -> tuple[Path, str]:
    """Enter new namespaces and mount private scratch dirs; returns (workdir, note)."""
    if not namespaces:
        note = "namespaces disabled by the caller"
    elif libc.unshare(_NEWNS | _NEWUTS | _NEWIPC | _NEWPID | _NEWNET) != 0:
        note = f"no namespaces (unshare: {os.strerror(ctypes.get_errno())})"
    else:
        try:
            _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / rprivate")
            for target in (t for t in _SCRATCH_MOUNTS if os.path.isdir(t)):
                flags, opts = _MS_NOSUID | _MS_NODEV, b"size=64m,mode=1777"
                _check(libc.mount(b"tmpfs", target.encode(), b"tmpfs", flags, opts), target)
            root, note = Path("/tmp"), ""  # the workdir lives in a tmpfs that dies with us
        except OSError as err:
            note = f"no private scratch mounts ({err})"
    workdir = root / "work"
    workdir.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(workdir, NOBODY, NOBODY)
    return workdir, note


def _set_limits(timeout_s: float, memory_mb: int) -> None:
    cpu = int(timeout_s) + 1
    memory = memory_mb * 1024 * 1024
    if os.geteuid() == 0:
        nproc = 64  # counted for uid nobody, which the program runs as
    else:
        nproc = 64 + sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
    for limit, wanted in (
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, nproc),
    ):
        hard = resource.getrlimit(limit)[1]
        value = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(limit, (value, value))


class _CapHeader(ctypes.Structure):
    """struct __user_cap_header_struct."""

    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    """struct __user_cap_data_struct."""

    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]


def _drop_privileges(libc: ctypes.CDLL) -> None:
    """As root: become nobody, keeping only CAP_DAC_READ_SEARCH; never regain privileges."""
    if os.geteuid() == 0:
        _check(libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(KEEPCAPS)")
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
        data = (_CapData * 2)()
        keep = 1 << _CAP_DAC_READ_SEARCH
        data[0].effective = data[0].permitted = data[0].inheritable = keep
        _check(libc.capset(ctypes.byref(header), data), "capset")
        _check(libc.prctl(_PR_CAP_AMBIENT, 2, _CAP_DAC_READ_SEARCH, 0, 0), "ambient cap")
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")


def _block_sockets() -> None:
    """Defense in depth beside the empty network namespace: no new sockets from Python."""
    import _socket
    import socket

    def denied(*args: object, **kwargs: object) -> NoReturn:
        raise PermissionError("network access is disabled in the sandbox")

    class NoSocket(socket.socket):
        """A socket class that cannot be instantiated."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            denied()

    socket.socket = socket.SocketType = _socket.socket = NoSocket  # type: ignore[misc]
    socket.socketpair = socket.fromfd = socket.create_connection = denied  # type: ignore[assignment]


def _run_untrusted(job: _Job) -> NoReturn:
    """exec the program as __main__; write the token only if its last statement completed."""
    out, err, write, pid = sys.stdout, sys.stderr, os.write, os.getpid()
    try:
        exec(compile(job.source, "<program>", "exec"), {"__name__": "__main__"})
        out.flush()
        err.flush()
    except BaseException as exc:  # SystemExit too: exiting early is not passing
        traceback.print_exc()
        if os.getpid() == pid:  # forked copies of the program report nothing
            write(job.result_fd, f"error {type(exc).__name__}".encode())
        err.flush()
        os._exit(1)
    if os.getpid() == pid:
        write(job.result_fd, job.token.encode())
    os._exit(0)


def _program_process(libc: ctypes.CDLL, job: _Job) -> NoReturn:
    try:
        os.chdir(job.workdir)
        _set_limits(job.timeout_s, job.memory_mb)
        _drop_privileges(libc)
        _block_sockets()
    except BaseException as exc:
        traceback.print_exc()
        os.write(job.result_fd, f"error sandbox setup: {type(exc).__name__}: {exc}".encode())
        os._exit(1)
    _run_untrusted(job)


def _supervise(libc: ctypes.CDLL, job: _Job) -> NoReturn:
    """Run the program and report how it ended. As pid 1 of a namespace, exiting kills the
    rest; without one, outlive the harness's group kill and kill everything left below."""
    in_namespace = os.getpid() == 1
    if in_namespace:
        _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    _check(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")
    pid = os.fork()
    if pid == 0:
        os.close(job.status_fd)
        _program_process(libc, job)
    if not in_namespace:
        os.setpgid(0, 0)
    signal.signal(signal.SIGALRM, lambda *_: os.kill(pid, signal.SIGKILL))
    signal.setitimer(signal.ITIMER_REAL, job.timeout_s + 1.0)  # our own wall-clock deadline
    _, wait_status = os.waitpid(pid, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    if os.WIFSIGNALED(wait_status):
        os.write(job.status_fd, f"signal {os.WTERMSIG(wait_status)}\n".encode())
    else:
        os.write(job.status_fd, f"exit {os.WEXITSTATUS(wait_status)}\n".encode())
    if not in_namespace:
        _kill_descendants()
    os._exit(0)


def _kill_descendants() -> None:
    """As a subreaper: SIGKILL and reap children until none is left (orphans come to us)."""
    children = Path(f"/proc/self/task/{os.getpid()}/children")
    while pids := [int(p) for p in children.read_text().split()]:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # it died since the read
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            os.waitpid(pid, 0)


def _child_main(argv: list[str]) -> int:
    """argv: tmp root, timeout_s, memory_mb, namespaces (1/0)."""
    root = Path(argv[0])
    libc = ctypes.CDLL(None, use_errno=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    source = (root / "program.py").read_text(encoding="utf-8")
    token = (root / "token").read_text(encoding="ascii")
    (root / "token").unlink()
    status_fd = os.open(root / "status", flags, 0o600)
    result_fd = os.open(root / "result", flags, 0o600)
    workdir, note = _isolate(libc, root, argv[3] == "1")
    if note:
        os.write(status_fd, f"note {note}\n".encode())
    job = _Job(source, token, float(argv[1]), int(argv[2]), workdir, status_fd, result_fd)
    pid = os.fork()
    if pid == 0:
        _supervise(libc, job)
    _, wait_status = os.waitpid(pid, 0)
    return 0 if os.WIFEXITED(wait_status) else 1


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # python < 3.11 -I still puts specbench/ first; keep it off the path
    sys.exit(_child_main(sys.argv[1:]))
