"""Leftover sandbox processes of this test module only.

Every sandbox process carries its temp dir on its command line (`python -I -B sandbox_child.py
ROOT ...`, inherited by the supervisor and the program's forks). A module that sends its
sandboxes' temp dirs to a folder of its own (`own_sandbox_tmp`) can therefore tell its own
leftovers from the sandboxes of a concurrent test run or HumanEval batch on the same machine,
which a check over every `sandbox_child.py` process cannot.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CLEANUP_S = 10.0  # the kernel tears a killed pid namespace down; slower on a busy machine


@contextmanager
def own_sandbox_tmp(base: Path) -> Iterator[Path]:
    """Sandboxes started inside make their temp dirs under base (tempfile's default dir)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(base))
        yield base


def sandbox_processes() -> list[int]:
    """Live sandbox processes whose temp dir is under tempfile's current default dir."""
    marker = f"{tempfile.gettempdir()}/".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # exited while we looked
        if b"sandbox_child.py" in cmdline and marker in cmdline:
            pids.append(int(entry.name))
    return pids


def assert_cleaned_up() -> None:
    """No sandbox process of ours is left (after a grace period for the kernel)."""
    deadline = time.monotonic() + CLEANUP_S
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []
