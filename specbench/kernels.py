"""CPU kernels for the decode, scoring and prompt shapes (issue 23).

On a CPU without native bf16 dot products (AVX2 only) eager bf16 matmuls are compute-bound from
two rows on: scoring K+1 tokens costs about K+1 single steps and a 512-token prompt 6.7x its fp32
time. Two levers, both chosen per backend (conf/backend/cpu_compiled.yaml, cpu_auto.yaml):

- compiled decode and scoring calls: inductor with `freezing` (weights become constants) and
  `max_autotune` (its CPP micro-GEMM templates, which read bf16 weights once and accumulate in
  fp32), one graph per call width, kept in a persistent cache (`inductor_cache`);
- prompt-width matmuls (> PROMPT_ROWS rows) in fp32, the bf16 weight upcast per call
  (`PromptFp32Linear`): an fp32 GEMM on MKL is compute-efficient where bf16 is not.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

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
PROMPT_ROWS = 8  # calls with more rows than this are prompts (prefill): fp32 under prompt_fp32
AUTO_RATIO = 2.0  # cpu_auto compiles when an eager bf16 linear's T(K+1)/T(1) exceeds this


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


class PromptFp32Linear(nn.Module):
    """A linear layer (nn.Linear or a weight-only one) whose prompt-width calls run in fp32.

    Rows <= PROMPT_ROWS (decode, scoring) go to the wrapped layer unchanged; more rows upcast
    the float weight per call (27 MB -> 55 MB for a 1.5B MLP, a few ms against a GEMM of
    hundreds) and cast the output back to the activations' dtype."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.in_features, self.out_features = inner.in_features, inner.out_features

    def float_weight(self) -> torch.Tensor:
        """The layer's float weight: nn.Linear's own, or a weight-only layer's dense copy."""
        return self.inner.dense if hasattr(self.inner, "dense") else self.inner.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 or x.shape[:-1].numel() <= PROMPT_ROWS:
            return self.inner(x)
        bias = self.inner.bias
        out = nn.functional.linear(
            x.float(), self.float_weight().float(), None if bias is None else bias.float()
        )
        return out.to(x.dtype)


def prompt_fp32(model: nn.Module) -> nn.Module:
    """Wrap every linear layer of `model` (in place) so that prompts are computed in fp32."""
    from .quantize import WeightOnly

    targets = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear | WeightOnly)
    ]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, PromptFp32Linear(module))
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


def auto_compile(k: int, cache: Path) -> tuple[bool, float]:
    """cpu_auto's choice: compile (and fp32 prompts) when scoring_ratio(k) > AUTO_RATIO on this
    CPU; the ratio is measured once per (CPU, torch capability, threads, K) and kept in `cache`."""
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
    return known[key] > AUTO_RATIO, known[key]
