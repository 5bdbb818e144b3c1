"""The sandbox's child half, run as a script (`python -I -B sandbox_child.py ROOT ...`).

As root it enters new pid/net/mount/ipc/uts namespaces; as another user it adds a user namespace
to get them (falling back, with a note, to none). It forks a supervisor (pid 1 of the new pid
namespace, which mounts a fresh /proc) that forks the program's process: that one drops to uid
`nobody` when root (keeping only CAP_DAC_READ_SEARCH, so the interpreter under /root stays
importable) or drops every capability otherwise, sets rlimits, disables `socket`, enters a
Landlock domain (reads only the interpreter and system libraries, writes only its workdir, no
exec, no TCP, no signals out) and runs the program, then its tests with pristine builtins.
Only a token read from an unlinked file after the tests' last statement counts as a pass.
Stdlib only, and imports nothing of specbench: see sandbox_landlock.py for how it is loaded.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import importlib.util
import os
import resource
import signal
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

NOBODY = 65534
FILE_SIZE_LIMIT = 16 * 1024 * 1024  # RLIMIT_FSIZE: also bounds the captured stdout/stderr files
_NEWNS, _NEWUTS, _NEWIPC, _NEWPID, _NEWNET = 0x20000, 0x4000000, 0x8000000, 0x20000000, 0x40000000
_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 0x40000
_PR_SET_PDEATHSIG, _PR_SET_KEEPCAPS, _PR_SET_CHILD_SUBREAPER = 1, 8, 36
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 38, 47
_CAP_DAC_READ_SEARCH = 2
_SCRATCH_MOUNTS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


@dataclass(frozen=True)
class _Job:
    """What the child processes need: program, tests, limits, fds and workdir (no token)."""

    source: str
    tests: str
    timeout_s: float
    memory_mb: int
    workdir: Path
    scratch: bool  # /tmp is a private tmpfs (writable by the program)
    status_fd: int
    result_fd: int
    token_fd: int  # an unlinked file holding the token, read only after the tests ran


def _check(ret: int, what: str) -> None:
    if ret != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _unshare(libc: ctypes.CDLL) -> str:
    """New namespaces (with a user namespace unless root); '' or why there are none."""
    flags = _NEWNS | _NEWUTS | _NEWIPC | _NEWPID | _NEWNET
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0:
        _check(libc.unshare(flags), "unshare")
        return ""
    _check(libc.unshare(flags | _NEWUSER), "unshare")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")  # same uid inside: no root
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    return ""


def _hides_runtime(target: str) -> bool:
    """Whether a tmpfs on target would hide the interpreter, its packages or specbench itself
    (e.g. a checkout and venv under /tmp): then that target is left as it is."""
    needed = (sys.prefix, sys.base_prefix, sys.executable, __file__)
    mount = Path(target).resolve()
    return any(mount in (p := Path(n).resolve(), *p.parents) for n in needed)


def _isolate(libc: ctypes.CDLL, root: Path, namespaces: bool) -> tuple[Path, bool, str]:
    """Enter new namespaces and mount private scratch dirs; (workdir, scratch, note)."""
    scratch, note = False, ""
    if not namespaces:
        note = "namespaces disabled by the caller"
    else:
        try:
            _unshare(libc)
        except OSError as err:
            note = f"no namespaces ({err})"
    if not note:
        try:
            _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / rprivate")
            targets = [t for t in _SCRATCH_MOUNTS if os.path.isdir(t) and not _hides_runtime(t)]
            for target in targets:
                flags, opts = _MS_NOSUID | _MS_NODEV, b"size=64m,mode=1777"
                _check(libc.mount(b"tmpfs", target.encode(), b"tmpfs", flags, opts), target)
            if "/tmp" in targets:  # the workdir lives in a tmpfs that dies with us
                root, scratch = Path("/tmp"), True
        except OSError as err:
            note = f"no private scratch mounts ({err})"
    workdir = root / "work"
    workdir.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(workdir, NOBODY, NOBODY)
    return workdir, scratch, note


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


def _set_caps(libc: ctypes.CDLL, keep: int) -> None:
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = data[0].inheritable = keep
    _check(libc.capset(ctypes.byref(header), data), "capset")


def _drop_privileges(libc: ctypes.CDLL) -> None:
    """As root: become nobody, keeping only CAP_DAC_READ_SEARCH. Otherwise drop every
    capability (a user namespace grants them all). Never regain privileges."""
    if os.geteuid() == 0:
        _check(libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(KEEPCAPS)")
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        _set_caps(libc, 1 << _CAP_DAC_READ_SEARCH)
        _check(libc.prctl(_PR_CAP_AMBIENT, 2, _CAP_DAC_READ_SEARCH, 0, 0), "ambient cap")
    else:
        _set_caps(libc, 0)
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


def _load_landlock() -> object:
    """sandbox_landlock.py beside this file, by path (specbench itself is not importable)."""
    path = Path(__file__).resolve().with_name("sandbox_landlock.py")
    spec = importlib.util.spec_from_file_location("_sandbox_landlock", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_untrusted(source: str, tests: str, result_fd: int, token_fd: int) -> NoReturn:
    """exec the program as __main__, then its tests with the builtins and modules as they were
    before the program ran; write the token only if the tests' last statement completed."""
    out, err, write, pread, pid = sys.stdout, sys.stderr, os.write, os.pread, os.getpid()
    pristine, modules = dict(builtins.__dict__), dict(sys.modules)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(source, "<program>", "exec"), namespace)
        if tests:
            builtins.__dict__.clear()
            builtins.__dict__.update(pristine)
            sys.modules.clear()
            sys.modules.update(modules)
            namespace["__builtins__"] = builtins
            exec(compile(tests, "<tests>", "exec"), namespace)
        out.flush()
        err.flush()
    except BaseException as exc:  # SystemExit too: exiting early is not passing
        traceback.print_exc()
        if os.getpid() == pid:  # forked copies of the program report nothing
            write(result_fd, f"error {type(exc).__name__}".encode())
        err.flush()
        os._exit(1)
    if os.getpid() == pid:
        write(result_fd, pread(token_fd, 64, 0))
    os._exit(0)


def _program_process(libc: ctypes.CDLL, job: _Job) -> NoReturn:
    try:
        os.chdir(job.workdir)
        landlock = _load_landlock()
        _set_limits(job.timeout_s, job.memory_mb)
        _drop_privileges(libc)
        _block_sockets()
        note = landlock.restrict(libc, job.workdir, job.scratch)  # type: ignore[attr-defined]
        if note:
            os.write(job.status_fd, f"note {note}\n".encode())
        os.close(job.status_fd)
    except BaseException as exc:
        traceback.print_exc()
        os.write(job.result_fd, f"error sandbox setup: {type(exc).__name__}: {exc}".encode())
        os._exit(1)
    _run_untrusted(job.source, job.tests, job.result_fd, job.token_fd)


def _mount_proc(libc: ctypes.CDLL) -> str:
    """As pid 1 of a new pid namespace: a /proc that shows only this namespace's processes."""
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    if libc.mount(b"proc", b"/proc", b"proc", flags, None) != 0:
        return f"host /proc visible (mount proc: {os.strerror(ctypes.get_errno())})"
    return ""


def _supervise(libc: ctypes.CDLL, job: _Job) -> NoReturn:
    """Run the program and report how it ended. As pid 1 of a namespace, exiting kills the
    rest; without one, outlive the harness's group kill and kill everything left below."""
    in_namespace = os.getpid() == 1
    if in_namespace:
        _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        if note := _mount_proc(libc):
            os.write(job.status_fd, f"note {note}\n".encode())
    _check(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")
    pid = os.fork()
    if pid == 0:
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
    tests = (root / "tests.py").read_text(encoding="utf-8")
    token_fd = os.open(root / "token", os.O_RDONLY)
    (root / "token").unlink()  # the token now lives only behind token_fd
    status_fd = os.open(root / "status", flags, 0o600)
    result_fd = os.open(root / "result", flags, 0o600)
    workdir, scratch, note = _isolate(libc, root, argv[3] == "1")
    if note:
        os.write(status_fd, f"note {note}\n".encode())
    limits = float(argv[1]), int(argv[2])
    job = _Job(source, tests, *limits, workdir, scratch, status_fd, result_fd, token_fd)
    pid = os.fork()
    if pid == 0:
        _supervise(libc, job)
    _, wait_status = os.waitpid(pid, 0)
    return 0 if os.WIFEXITED(wait_status) else 1


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # python < 3.11 -I still puts specbench/ first; keep it off the path
    sys.exit(_child_main(sys.argv[1:]))
