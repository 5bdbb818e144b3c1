"""CPU kernels for the decode, scoring and prompt shapes (issue 23).

On a CPU without native bf16 dot products (AVX2 only) eager bf16 matmuls are compute-bound from
two rows on: scoring K+1 tokens costs about K+1 single steps and a 512-token prompt 6.7x its fp32
time. The levers, chosen per backend (conf/backend/cpu_avx2.yaml, cpu_compiled.yaml, cpu_auto):

- compiled decode and scoring calls: inductor with `freezing` (weights become constants) and
  `max_autotune` (its CPP micro-GEMM templates, which read bf16 weights once and accumulate in
  fp32), one graph per call width, kept in a persistent cache (`inductor_cache`);
- decode and scoring matmuls (<= ROWS_MAX rows) through specbench's row kernel
  (`specbench.cpu_gemm`): K+1 rows read the bf16 weight once, no graph compile (`cpu_avx2`);
  on CPUs with AVX-512-BF16 its dot-product variant (`bf16_dot_linear`), bf16 in, fp32 out;
  an int4 draft's decode matmuls on its int4 row kernel (`quantize.Int4RowsLinear`);
- prompt-width matmuls (> PROMPT_ROWS rows) in fp32, the bf16 weight upcast PROMPT_BLOCK rows
  at a time (`CpuLinear`, `fp32_linear`): an fp32 GEMM on MKL is compute-efficient where bf16
  is not.

Where oneDNN has native bf16 (AVX-512-BF16, AMX), `pack_weights` reorders every bf16 linear's
weight once into oneDNN's blocked layout (`PackedLinear`): the same products, but a decode step
streams the weights at ~43 GB/s instead of ~25 (plain `F.linear` reorders per call); the 1.5B
target's step 150 -> 73 ms on the Zen 5 EPYC, logits identical. With `pad_decode` a packed
one-row call runs as a PAD_ROWS-row call (row 0 kept): oneDNN's one-row kernel is the slower one
on Zen 4 (the autoregressive baseline 1.126x faster padded, results/pad_decode_zen4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from .cpu_gemm import bf16_dot_linear, bf16_linear, dot_unavailable, load_kernel, unavailable
from .quantize import WeightOnly

# Inductor settings for the CPU decode path; applied around each compiled call (they are read
# when a graph compiles, which happens lazily on a call). `options=` of torch.compile does not
# turn freezing on in torch 2.13, so they are patched into inductor's config instead.
INDUCTOR_CPU = {
    "freezing": True,
    "max_autotune": True,
    "max_autotune_gemm_backends": "CPP,ATEN",
    "autotune_num_choices_displayed": 0,  # no per-GEMM timing tables on stderr
    "max_autotune_report_choices_stats": False,
}
# Holds torch to its AVX2 kernels on any x86 CPU (set before torch is imported): the AVX2 regime
# measured on an AVX-512 machine (benchmarks/cpu_kernels.py --avx2).
AVX2_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def rerun_held_to_avx2(script: str, argv: list[str]) -> None:
    """Run `script` again in a child with AVX2_ENV (set before its torch loads) and exit with
    its status; nothing where torch is already held to AVX2."""
    if os.environ.get("ATEN_CPU_CAPABILITY") != "avx2":
        env = os.environ | AVX2_ENV
        raise SystemExit(subprocess.call([sys.executable, script, *argv], env=env))


PROMPT_ROWS = 8  # calls with more rows than this are prompts (prefill): fp32 under prompt_fp32
PROMPT_BLOCK = 256  # prompt_fp32 upcasts this many weight rows at a time (<= 9 MB: cache-resident)
PAD_ROWS = 4  # pad_decode: a packed one-row call runs as this many rows
ROWS_MAX = 17  # rows_kernel: calls of up to this many rows (decode, scoring K+1 <= 17)
AUTO_RATIO = 2.0  # cpu_auto keeps eager kernels while an eager bf16 T(K+1)/T(1) is at most this


def inductor_cache(root: Path) -> Path:
    """Where compiled graphs and autotuning results persist (TORCHINDUCTOR_CACHE_DIR, unless the
    user set it): the first compile of a 1.5B model's widths takes minutes on 2 cores, later
    processes load them in seconds."""
    path = Path(os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor")))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def cpu_inductor() -> Iterator[None]:
    """Inductor's CPU decode settings for the compiles that happen inside this block."""
    with torch._inductor.config.patch(INDUCTOR_CPU):
        yield


def keep_cache_as_input(cache: object) -> None:
    """Drop the static-address mark transformers' StaticCache puts on its tensors (for CUDA
    graphs). Under inductor `freezing` a static-address input is inlined as a constant like a
    weight, so a graph compiled with one cache would read and write that cache's tensors in every
    later generation (measured: logits off by 16 on a tiny model). Unmarked, each generation's
    cache is a graph input."""
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values", "cumulative_length"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor) and hasattr(tensor, "_dynamo_static_input_type"):
                del tensor._dynamo_static_input_type


class CpuLinear(nn.Module):
    """A linear layer (nn.Linear or a weight-only one) with the CPU backend's kernel per width.

    rows_kernel: calls of up to ROWS_MAX rows (decode, scoring) of a bf16 nn.Linear go through
    specbench's row kernel (specbench.cpu_gemm: AVX-512-BF16 dot products where the CPU has them
    and torch is not held to AVX2, else AVX2). prompt_fp32: calls of more rows (prompts)
    run in fp32 (`fp32_linear`, the float weight upcast a block of rows at a time) and cast the
    output back. Everything else goes to the wrapped layer unchanged."""

    def __init__(
        self,
        inner: nn.Module,
        prompt_fp32: bool = True,
        rows_kernel: bool = False,
        dot: bool | None = None,  # the AVX-512-BF16 row kernel (None: ask cpu_gemm)
    ):
        super().__init__()
        self.inner = inner
        self.in_features, self.out_features = inner.in_features, inner.out_features
        self.prompt_fp32 = prompt_fp32
        bf16 = isinstance(inner, nn.Linear) and inner.weight.dtype == torch.bfloat16
        self.rows_kernel = rows_kernel and bf16
        self.dot = self.rows_kernel and (dot_unavailable() is None if dot is None else dot)
        bias = inner.bias if self.rows_kernel else None
        self.bias32 = None if bias is None else bias.detach().float()  # the kernel's fp32 bias

    def float_weight(self) -> torch.Tensor:
        """The layer's float weight: nn.Linear's own, or a weight-only layer's dense copy."""
        return self.inner.dense if hasattr(self.inner, "dense") else self.inner.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[:-1].numel()
        bias = self.inner.bias
        if self.rows_kernel and x.dtype == torch.bfloat16 and rows <= ROWS_MAX:
            x2d, weight = x.reshape(rows, -1), self.inner.weight
            if self.dot:
                out = bf16_dot_linear(x2d.contiguous(), weight)
            else:
                out = bf16_linear(x2d.float(), weight)
            out = out if self.bias32 is None else out + self.bias32
            return out.reshape(*x.shape[:-1], -1).to(x.dtype)
        upcast = self.prompt_fp32 and x.dtype != torch.float32 and rows > PROMPT_ROWS
        if upcast and self.float_weight().numel():  # (an int8 prompt layer has none)
            out = fp32_linear(x.reshape(rows, -1).float(), self.float_weight(), bias)
            return out.reshape(*x.shape[:-1], -1).to(x.dtype)
        return self.inner(x)


def fp32_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(M, K) fp32 x (N, K) float weight -> (M, N) fp32, the weight upcast PROMPT_BLOCK rows at a
    time: each block's fp32 copy stays in cache instead of a whole fp32 weight going through
    memory. Torch held to AVX2 on Zen 5 (benchmarks/prompt_blocks.py, whole vs blocks
    interleaved in one process): the 1.5B target's prefill 1.03-1.86x faster on four prompts
    of 109-307 tokens, the int4 draft's 1.03-1.11x
    (results/paper_regime_avx2_restricted_zen5_82ed0bd/prompt_blocks.txt)."""
    out = x.new_empty(x.shape[0], weight.shape[0])
    for start in range(0, weight.shape[0], PROMPT_BLOCK):
        end = start + PROMPT_BLOCK
        part = None if bias is None else bias[start:end].float()
        out[:, start:end] = nn.functional.linear(x, weight[start:end].float(), part)
    return out


def can_pack(backend: object) -> bool:
    """Whether load_model packs this backend's bf16 linears for oneDNN (`PackedLinear`): asked
    for, on CPU in bf16, no other kernel choice (row kernel, fp32 prompts, compile), and a CPU
    whose oneDNN has native bf16."""
    other = backend.rows_kernel or backend.prompt_fp32 or backend.compile
    asked = backend.pack_weights and backend.device == "cpu" and backend.dtype == "bfloat16"
    return asked and not other and torch.ops.mkldnn._is_mkldnn_bf16_supported()


class PackedLinear(nn.Module):
    """A bf16 linear layer whose weight is reordered once into oneDNN's blocked layout: the same
    products as `F.linear`, without the per-call reorder that halves its streaming rate.
    `pad_one_row` (backend.pad_decode): a one-row call (a decode step) runs as a PAD_ROWS-row
    call, row 0 kept: on Zen 4 faster than oneDNN's one-row call, and bitwise the row a
    scoring call of 2..17 rows gives (oneDNN's one-row kernel sums in another order)."""

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        rows: int = 5,
        pad_one_row: bool = False,
    ):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        # an opaque oneDNN tensor (not a buffer: state_dict and .to() cannot carry it); `rows`
        # only picks the layout, every width runs on it
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows)
        self.bias = None if bias is None else bias.detach()
        self.pad_one_row = pad_one_row
        # (PAD_ROWS, in): a padded call writes x into row 0; the other rows stay zero (reused:
        # allocating and zeroing it per call cost ~1 ms of a decode step)
        self.rows = weight.new_zeros(PAD_ROWS, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pad_one_row and x.shape[:-1].numel() == 1:
            self.rows[0].copy_(x.reshape(-1))
            return self.linear(self.rows)[:1].reshape(*x.shape[:-1], -1)
        return self.linear(x)

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        """oneDNN's linear on the packed weight, as wide as x."""
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def pads_decode(backend: object) -> bool:
    """Whether load_model's packed layers pad one-row calls (what rows and caches record)."""
    return can_pack(backend) and backend.pad_decode


def pack_linears(model: nn.Module, pad_one_row: bool = False) -> nn.Module:
    """Pack every bf16 weight `model` multiplies by (in place): each nn.Linear becomes a
    PackedLinear (a tied embedding keeps its own weight; `pad_one_row` as PackedLinear's), and a
    weight-only layer's float copy for prompts (`WeightOnly.dense`) moves into a PackedLinear
    (`WeightOnly.prompt`): the int4 draft's prefill 1.09x faster
    (results/pack_weights/prefill_xsum.csv)."""
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is nn.Linear and module.weight.dtype == torch.bfloat16
    ]
    for name, module in targets:
        model.set_submodule(name, PackedLinear(module.weight, module.bias, pad_one_row=pad_one_row))
    for module in model.modules():
        dense = module.dense if isinstance(module, WeightOnly) else None
        if dense is not None and dense.dtype == torch.bfloat16 and dense.numel():
            module.prompt = PackedLinear(dense, module.bias)
            module.dense = dense.new_empty(0)
    return model


def cpu_linears(model: nn.Module, prompt_fp32: bool, rows_kernel: bool) -> nn.Module:
    """Wrap every linear layer of `model` (in place) in a CpuLinear with these choices."""
    if not (prompt_fp32 or rows_kernel):
        return model
    if rows_kernel:
        load_kernel()
    dot = rows_kernel and dot_unavailable() is None  # once, not per layer
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear | WeightOnly)
    ]
    for name, module in targets:
        model.set_submodule(name, CpuLinear(module, prompt_fp32, rows_kernel, dot))
    return model


def linear_ms(rows: int, out_f: int = 8960, in_f: int = 1536, calls: int = 20) -> float:
    """Median ms of one eager bf16 (rows, in_f) x (out_f, in_f)^T linear: the micro-benchmark
    behind cpu_auto (default shape: the 1.5B target's MLP)."""
    weight = torch.randn(out_f, in_f, dtype=torch.bfloat16)
    x = torch.randn(rows, in_f, dtype=torch.bfloat16)
    times = []
    with torch.inference_mode():
        for _ in range(calls + 2):
            start = time.perf_counter()
            nn.functional.linear(x, weight)
            times.append(time.perf_counter() - start)
    return 1e3 * sorted(times[2:])[calls // 2]


def scoring_ratio(k: int) -> float:
    """T(K+1 rows) / T(1 row) of an eager bf16 linear on this CPU: ~1 with native bf16
    (AVX-512-BF16, AMX), ~K+1 without (AVX2)."""
    return linear_ms(k + 1) / linear_ms(1)


def measured_scoring_ratio(k: int, cache: Path) -> float:
    """scoring_ratio(k) on this CPU, measured once per (CPU, torch capability, threads, K) and
    kept in `cache`."""
    from .provenance import cpu_columns

    cpu = cpu_columns()
    key = f"{cpu['cpu_kind']}|{cpu['cpu_isa']}|{torch.get_num_threads()} threads|k={k}"
    known = json.loads(cache.read_text()) if cache.is_file() else {}
    if key not in known:
        known[key] = scoring_ratio(k)
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        os.replace(tmp, cache)
    return known[key]


# cpu_auto's choices: the backend fields each one sets
AUTO_CHOICES = {
    "eager": {},
    "rows_kernel": {"rows_kernel": True, "prompt_fp32": True},
    "compiled": {"compile": True, "static_cache": True, "prompt_fp32": True},
}


def auto_choice(ratio: float) -> str:
    """cpu_auto: eager where an eager bf16 linear's T(K+1)/T(1) <= AUTO_RATIO (native bf16);
    otherwise the AVX2 row kernel where it runs, else compiled decode calls."""
    if ratio <= AUTO_RATIO:
        return "eager"
    return "rows_kernel" if unavailable() is None else "compiled"
