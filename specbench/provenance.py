"""Where a measurement came from: code version, library versions, machine."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers

from . import __version__

REPO = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    """git in the checkout specbench runs from; None for an installed copy (whose site-packages
    may sit inside some other repository) or without git."""
    if not (REPO / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def provenance(device: str) -> dict[str, object]:
    """Flat columns for every record row."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_sha": _git("rev-parse", "HEAD") or "unknown",
        "git_dirty": bool(status) if status is not None else None,
        "specbench_version": __version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": sys.version.split()[0],
        "device_name": device_name(device),
        "num_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
