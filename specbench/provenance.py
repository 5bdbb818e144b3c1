"""Where a measurement came from: code version, library versions, machine."""

from __future__ import annotations

import os
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


def _git(*args: str, repo: Path = REPO) -> str | None:
    """git in the checkout specbench runs from; None for an installed copy (whose site-packages
    may sit inside some other repository) or without git."""
    if not (repo / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def cpuinfo() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo as key -> value (empty where there is none)."""
    path = Path("/proc/cpuinfo")
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if not line.strip():
            break  # the first processor's block is enough
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return cpuinfo().get("model name") or platform.processor() or platform.machine()


ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")  # what changes CPU kernel costs


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    return set(cpuinfo().get("flags", "").split())


def cpu_model() -> str:
    """'AuthenticAMD family 26 model 2': the CPU generation, which a VM's model name ('AMD
    EPYC') hides and the ISA flags do not tell (Zen 4 and Zen 5 both have AVX-512-BF16)."""
    fields = cpuinfo()
    if not fields:
        return platform.processor() or platform.machine()
    vendor, family, model = (fields.get(k, "?") for k in ("vendor_id", "cpu family", "model"))
    return f"{vendor} family {family} model {model}"


def cpu_kind(flags: set[str], capability: str) -> str:
    """'amx', 'avx512_bf16', 'avx512', 'avx2' or 'other' from the flags; '@CAPABILITY' appended
    when torch runs below what the CPU has (ATEN_CPU_CAPABILITY=avx2 on an AVX-512 CPU).
    Rows of different kinds are never pooled into one statistic."""
    kinds = (("amx_bf16", "amx"), ("avx512_bf16", "avx512_bf16"), ("avx512f", "avx512"))
    kind = next((name for flag, name in kinds if flag in flags), None)
    kind = kind or ("avx2" if "avx2" in flags else "other")
    native = "AVX512" if kind.startswith(("amx", "avx512")) else kind.upper()
    return kind if capability in (native, "") else f"{kind}@{capability}"


def cpu_columns() -> dict[str, object]:
    """The CPU: its kind, the ISA flags that matter, its generation, torch's capability, cores."""
    flags = cpu_flags()
    capability = torch.backends.cpu.get_cpu_capability()
    return {
        "cpu_kind": cpu_kind(flags, capability),
        "cpu_isa": ",".join(f for f in ISA_FLAGS if f in flags),
        "cpu_model": cpu_model(),
        "cpu_capability": capability,
        "cpu_cores": os.cpu_count(),
    }


def git_dirty(repo: Path = REPO) -> bool | None:
    """Whether tracked files of the checkout have uncommitted changes (None: not a checkout).
    results/ is data, not code: Hydra rewrites a committed sweep's multirun.yaml when a shard
    resumes it, which must not make the code that measures look modified."""
    status = _git(
        "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results", repo=repo
    )
    return bool(status) if status is not None else None


def provenance(device: str) -> dict[str, object]:
    """Flat columns for every record row."""
    return cpu_columns() | {
        "git_sha": _git("rev-parse", "HEAD") or "unknown",
        "git_dirty": git_dirty(),
        "specbench_version": __version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": sys.version.split()[0],
        "device_name": device_name(device),
        "num_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
