"""specbench's bf16 row kernel for x86 CPUs without native bf16 dot products (issue 23).

`csrc/bf16_gemm.cpp` computes x @ w.T for a few rows of x against a bf16 weight with AVX2 + FMA:
each weight block is widened to fp32 once and multiplied into every row in registers, so K+1
rows cost about one row (memory-bound), where eager bf16 on AVX2 costs K+1 rows. No graph
compile: the extension is built once per torch version (~20 s on 2 cores) into the specbench
cache and loads in milliseconds after. Each output row is computed the same way whatever the
number of rows in the call (batch invariant), so scoring K+1 tokens gives each position the
logits a single step would.
"""

from __future__ import annotations

import logging
import platform
import shutil
from functools import cache
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "csrc" / "bf16_gemm.cpp"
NEEDS = ("avx2", "fma")  # the kernel's instructions
CFLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]  # OpenMP: torch's own runtime (at::parallel_for)


def unavailable() -> str | None:
    """Why the kernel cannot run here (None: it can)."""
    from .provenance import cpu_flags

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"the bf16 row kernel is x86 code; this machine is {platform.machine()}"
    missing = [flag for flag in NEEDS if flag not in cpu_flags()]
    if missing:
        return f"the bf16 row kernel needs {'+'.join(NEEDS)}; this CPU lacks {', '.join(missing)}"
    if shutil.which("c++") is None and shutil.which("g++") is None:
        return "the bf16 row kernel is built on first use and needs a C++ compiler (g++)"
    return None


@cache
def load_kernel() -> None:
    """Build (first time: ~20 s) or load the extension; registers torch.ops.specbench."""
    from torch.utils import cpp_extension

    from .packaged import cache_root

    reason = unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    build = cache_root() / "extensions" / f"bf16_gemm-torch{torch.__version__}"
    build.mkdir(parents=True, exist_ok=True)
    if not any(build.glob("*.so")):
        log.info("building specbench's bf16 row kernel once into %s (~20 s)", build)
    cpp_extension.load(
        name="specbench_bf16_gemm",
        sources=[str(SOURCE)],
        build_directory=str(build),
        extra_cflags=CFLAGS,
        extra_ldflags=["-fopenmp"],
        is_python_module=False,
    )


def bf16_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(M, K) fp32 x @ (N, K) bf16 weight.T -> (M, N) fp32, through the row kernel."""
    return torch.ops.specbench.bf16_linear(x, weight)
