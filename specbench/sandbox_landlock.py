"""Landlock (Linux >= 5.13) for the sandbox's program process: stdlib only, loaded by path.

The program may read the interpreter's prefix and the system's libraries, read and write its
workdir (and a private /tmp), and nothing else: no writes elsewhere, no exec, and - where the
kernel's Landlock ABI allows - no TCP bind/connect (ABI 4) and no signals or abstract unix
sockets reaching processes outside the sandbox (ABI 6). Landlock holds whatever the uid or the
capabilities (CAP_DAC_READ_SEARCH included), which is why it is a layer of its own.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # same on x86_64 and aarch64
_VERSION_FLAG, _RULE_PATH_BENEATH = 1, 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
FS_ABI1 = (1 << 13) - 1  # execute .. make_sym
FS_EXTRA = {2: 1 << 13, 3: 1 << 14, 5: 1 << 15}  # refer, truncate, ioctl_dev
NET_TCP = 0b11  # bind_tcp, connect_tcp (ABI 4)
SCOPES = 0b11  # abstract unix sockets, signals (ABI 6)
READ = READ_FILE | READ_DIR
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/dev/urandom")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version(libc: ctypes.CDLL) -> int:
    """The kernel's Landlock ABI version, 0 where Landlock is unavailable."""
    return max(int(libc.syscall(_CREATE_RULESET, None, 0, _VERSION_FLAG)), 0)


def _handled(abi: int) -> _RulesetAttr:
    fs = FS_ABI1 | sum(bit for version, bit in FS_EXTRA.items() if abi >= version)
    return _RulesetAttr(fs, NET_TCP if abi >= 4 else 0, SCOPES if abi >= 6 else 0)


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, access: int, handled: int) -> None:
    """Allow `access` beneath path (a file gets only the file rights); absent paths are skipped."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            access &= WRITE_FILE | READ_FILE | FS_EXTRA[3] | FS_EXTRA[5]
        rule = _PathBeneath(access & handled, fd)
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


def restrict(libc: ctypes.CDLL, workdir: Path, scratch: bool) -> str:
    """Enter the domain (needs no_new_privs); '' or a note on what is not enforced."""
    abi = abi_version(libc)
    if abi == 0:
        return "no Landlock: file reads, writes, exec and signals are limited by uid only"
    attr = _handled(abi)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16  # `scoped` exists from ABI 6
    ruleset = int(libc.syscall(_CREATE_RULESET, ctypes.byref(attr), size, 0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        rw = attr.fs & ~EXECUTE & ~(1 << 6) & ~(1 << 11)  # no exec, no device nodes
        for path in {sys.base_prefix, sys.prefix, *SYSTEM_READ}:
            _allow(libc, ruleset, path, READ, attr.fs)
        _allow(libc, ruleset, "/dev/null", READ_FILE | WRITE_FILE, attr.fs)
        for path in (str(workdir), *(("/tmp",) if scratch else ())):
            _allow(libc, ruleset, path, rw, attr.fs)
        if libc.syscall(_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return "" if abi >= 6 else f"Landlock ABI {abi}: no TCP and/or signal scoping"
