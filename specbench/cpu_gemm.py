"""specbench's row kernels for x86 CPUs without native bf16 dot products (issue 23).

`csrc/bf16_gemm.cpp` computes x @ w.T for a few rows of x against a bf16 weight with AVX2 + FMA:
each weight block is widened to fp32 once and multiplied into every row in registers, so K+1
rows cost about one row (memory-bound), where eager bf16 on AVX2 costs K+1 rows. `int4_linear`
does the same for the int4 draft's group-quantized weights (activations rounded to int8 per
group, one byte multiply-add per code), where torch's int4 kernel is compute-bound on AVX2.
`csrc/int4_decode.cpp` runs an all-int4 model's whole decode step on it in one call
(specbench.decoding.int4_step). No graph compile: the extension is built once per torch version
(~30 s on 2 cores) into the specbench cache and loads in milliseconds after. Each output row
is computed the same way whatever the number of rows in the call (batch invariant), so scoring
K+1 tokens gives each position the logits a single step would."""

from __future__ import annotations

import hashlib
import logging
import platform
import shutil
from functools import cache
from pathlib import Path

import torch

log = logging.getLogger(__name__)

CSRC = ("bf16_gemm.cpp", "bf16_dot.cpp", "int4_decode.cpp")
SOURCES = [Path(__file__).parent / "csrc" / name for name in CSRC]
HEADERS = [Path(__file__).parent / "csrc" / "rows.h"]  # what the sources share
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


def source_digest() -> str:
    """A short hash of the kernels' source: cached measurements of them are keyed by it."""
    files = [*SOURCES, *HEADERS]
    return hashlib.sha1(b"".join(src.read_bytes() for src in files)).hexdigest()[:12]


@cache
def load_kernel() -> None:
    """Build (first time: ~30 s) or load the extension; registers torch.ops.specbench."""
    from torch.utils import cpp_extension

    from .packaged import cache_root

    reason = unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    build = cache_root() / "extensions" / f"bf16_gemm-torch{torch.__version__}"
    build.mkdir(parents=True, exist_ok=True)
    if not any(build.glob("*.so")):
        log.info("building specbench's row kernels once into %s (~30 s)", build)
    cpp_extension.load(
        name="specbench_bf16_gemm",
        sources=[str(src) for src in SOURCES],
        build_directory=str(build),
        extra_cflags=CFLAGS,
        extra_ldflags=["-fopenmp"],
        is_python_module=False,
    )


@cache
def build_error() -> str | None:
    """Why the extension cannot be used here, its build tried once (None: it is loaded). For
    choices that fall back to torch's kernels (backend.int4_kernel=auto) rather than fail."""
    reason = unavailable()
    if reason is None:
        try:
            load_kernel()
        except (RuntimeError, OSError) as err:  # cpp_extension's build errors are RuntimeErrors
            reason = f"building specbench's row kernels failed: {str(err).splitlines()[0]}"
    if reason is not None:
        log.warning("%s; int4 layers stay on torch's kernel (backend.int4_kernel=auto)", reason)
    return reason


def bf16_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(M, K) fp32 x @ (N, K) bf16 weight.T -> (M, N) fp32, through the row kernel."""
    return torch.ops.specbench.bf16_linear(x, weight)


def dot_unavailable() -> str | None:
    """Why the AVX-512-BF16 row kernel cannot run here (None: it can): it needs the extension,
    a CPU with avx512_bf16, and torch not held to its AVX2 kernels (ATEN_CPU_CAPABILITY), which
    stands for an AVX2-only machine."""
    from .provenance import cpu_flags

    capability = torch.backends.cpu.get_cpu_capability()
    if "avx512_bf16" not in cpu_flags():
        return "the bf16 dot-product row kernel needs a CPU with avx512_bf16"
    if not capability.startswith("AVX512"):
        return f"torch runs its {capability} kernels here: the AVX2 row kernel stands in"
    return unavailable()


def bf16_dot_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(M, K) bf16 x @ (N, K) bf16 weight.T -> (M, N) fp32, through the AVX-512-BF16 row
    kernel (vdpbf16ps; check dot_unavailable() first)."""
    return torch.ops.specbench.bf16_dot_linear(x, weight)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """(N, K) int4 codes (0..15) -> (N, K / 2) uint8 in int4_linear's layout: per group of 32,
    byte j holds code j in its low nibble and code j + 16 in its high one."""
    n, k = codes.shape
    halves = codes.reshape(n, k // 32, 2, 16).to(torch.uint8)
    return (halves[:, :, 0] | (halves[:, :, 1] << 4)).reshape(n, k // 2).contiguous()


def int4_linear(
    x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, low: torch.Tensor
) -> torch.Tensor:
    """(M, K) fp32 x @ int4 weight.T -> (M, N) fp32, w = code * scale + low per group of 32
    (packed from `pack_nibbles`; scale, low (N, K / 32) fp32); x rounded to int8 per group."""
    return torch.ops.specbench.int4_linear(x, packed, scale, low)
