"""What both decoders share: the result record, stop conditions, a cached forward, a clock."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import CompileConfig, DynamicCache, StaticCache

from ..kernels import cpu_inductor, inductor_cache, keep_cache_as_input
from .lean import LeanCache, lean_forward

# Fixed shapes per decode call; "reduce-overhead" captures CUDA graphs on GPU. On CPU the default
# mode, with kernels.INDUCTOR_CPU (freezing + CPP GEMM templates) patched in around each call.
COMPILE_CONFIG = CompileConfig(fullgraph=True, dynamic=False, mode="reduce-overhead")
CPU_COMPILE_CONFIG = CompileConfig(fullgraph=True, dynamic=False, mode=None)
# Graphs dynamo may keep per code object. Every model's compiled __call__ is the same code
# (nn.Module's), so target and draft share one cache: target T = 1..K+1 for each K swept, draft
# T = 1..2, per model pair; dynamo's default of 8 fails at K = 4 (FailOnRecompileLimitHit).
RECOMPILE_LIMIT = 64


def compiled_call(model: torch.nn.Module) -> Callable[..., Any]:
    """The compiled decode step of `model` (transformers' one compiled call per model, kept on
    it), with dynamo's recompile limit raised to RECOMPILE_LIMIT: the one place that sets up
    compiled decoding, for the runner and the benchmark scripts alike (both through CachedLM)."""
    dynamo = torch._dynamo.config
    dynamo.recompile_limit = max(dynamo.recompile_limit, RECOMPILE_LIMIT)
    if model_device(model).type != "cpu":
        return model.get_compiled_call(COMPILE_CONFIG)
    from ..packaged import cache_root  # here: the GPU benchmark's machine has no omegaconf

    inductor_cache(cache_root())
    step = model.get_compiled_call(CPU_COMPILE_CONFIG)
    wrapped = getattr(model, "_specbench_cpu_step", None)
    if wrapped is None or wrapped.step is not step:  # one wrapper per compiled call, kept on it

        def wrapped(**kwargs: Any) -> Any:
            with cpu_inductor():
                return step(**kwargs)

        wrapped.step = step  # type: ignore[attr-defined]
        model._specbench_cpu_step = wrapped
    return wrapped


@dataclass
class GenerationResult:
    """New tokens of one generation plus everything needed to time and explain it."""

    tokens: list[int]  # new token ids, stop included, nothing past it
    wall_s: float  # whole call, prefill included, device synchronised
    target_calls: int
    draft_calls: int = 0
    draft_s: float = 0.0  # draft forwards + draft sampling
    target_s: float = 0.0  # target forwards
    overhead_s: float = 0.0  # logits -> probs, verify, cache rollback, stop checks
    accepted: list[int] = field(default_factory=list)  # per iteration: drafts accepted
    proposed: list[int] = field(default_factory=list)  # per iteration: drafts proposed (K)
    expected_acceptance: list[float] = field(default_factory=list)  # per tested position: beta
    stopped_by: str = "length"  # "length", "eos" or "stop_string"
    # Time to first token: wall time until the first iteration's tokens were emitted (the
    # prompt's prefill, with a drafter's prefill and first drafts), and how many it emitted.
    first_s: float = float("nan")
    first_tokens: int = 0
    # an external engine's own counters (llama.cpp): row columns, over those computed here
    engine: dict[str, Any] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def ms_per_token(self) -> float:
        return 1e3 * self.wall_s / max(self.num_tokens, 1)

    @property
    def decode_ms_per_token(self) -> float:
        """ms per token after the first emission (prefill excluded); NaN if nothing followed."""
        after = self.num_tokens - self.first_tokens
        return 1e3 * (self.wall_s - self.first_s) / after if after > 0 else float("nan")

    def mark_first(self, clock_s: float, tokens: int) -> None:
        """Record the first emission (time to first token) once: later calls keep it."""
        if self.first_tokens == 0:
            self.first_s, self.first_tokens = clock_s, tokens

    @property
    def acceptance_rate(self) -> float:
        """Accepted / proposed draft tokens (NaN for the autoregressive baseline)."""
        total = sum(self.proposed)
        return sum(self.accepted) / total if total else float("nan")

    @property
    def tokens_per_target_call(self) -> float:
        return self.num_tokens / max(self.target_calls, 1)

    @property
    def mean_expected_acceptance(self) -> float:
        """Mean beta over tested draft positions: a low-variance estimate of alpha."""
        beta = self.expected_acceptance
        return sum(beta) / len(beta) if beta else float("nan")


@dataclass(frozen=True)
class StopCondition:
    """EOS ids and stop strings; a generation ends on the token that completes either."""

    eos_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    tokenizer: Any = None  # needed only with stop_strings

    def __post_init__(self) -> None:
        if self.stop_strings and self.tokenizer is None:
            raise ValueError("stop_strings need a tokenizer to decode the generated text")
        if any(not s for s in self.stop_strings):
            raise ValueError("stop strings must be non-empty")

    def find(self, tokens: list[int], start: int) -> tuple[int, str] | None:
        """First stop among tokens[start:], as (length to keep, reason), or None."""
        for i in range(start, len(tokens)):
            if tokens[i] in self.eos_token_ids:
                return i + 1, "eos"
            if self.stop_strings and self._completes_stop_string(tokens, i + 1):
                return i + 1, "stop_string"
        return None

    def _completes_stop_string(self, tokens: list[int], end: int) -> bool:
        # Tokens are >= 1 byte, so a stop string of n chars spans at most n + 4 tokens.
        window = max(len(s) for s in self.stop_strings) + 4
        text = self.tokenizer.decode(tokens[max(0, end - window) : end])
        return any(s in text for s in self.stop_strings)


def static_cache_len(tokens: int) -> int:
    """Positions to preallocate: the next power of two >= max(tokens, 512), so that prompts of
    different lengths share one cache shape (and one compiled graph per decode shape)."""
    return 1 << max(tokens - 1, 511).bit_length()


class CachedLM:
    """A causal LM with its own KV cache: feed new tokens, get the last positions' logits.

    max_len=None keeps a DynamicCache that is cropped on rollback. With max_len set, a
    StaticCache of that many positions is preallocated and rollback only moves the write
    position back (stale entries past it are masked and later overwritten), as in gpt-fast.
    compile=True (static cache only) runs decode calls (cache non-empty, T <= COMPILED_MAX_T)
    through transformers' `get_compiled_call` (torch.compile, CUDA graphs on GPU; on CPU one
    graph dynamic in T for the scoring widths 2..COMPILED_MAX_T, single tokens eager); prefill
    stays eager so prompt lengths never trigger recompiles.
    lean (default: on CPU with a dynamic cache) runs the model's `lean.lean_forward` with its
    own cache instead of transformers' forward where there is one: the same modules, less
    per-call overhead.
    """

    COMPILED_MAX_T = 17  # draft steps (1-2 tokens) and target scoring (K+1 <= 17)

    def __init__(
        self,
        model: torch.nn.Module,
        vocab_size: int | None = None,
        max_len: int | None = None,
        compile: bool = False,
        lean: bool | None = None,
    ) -> None:
        if compile and max_len is None:
            raise ValueError("compile=True needs a static cache: pass max_len")
        self.model = model
        self.device = model_device(model)  # where inputs go; logits are returned here too
        self.vocab_size = vocab_size
        self.max_len = max_len
        if lean is None:
            lean = max_len is None and self.device.type == "cpu"
        self.lean = lean_forward(model) if lean else None
        if self.lean is not None:
            self.cache = LeanCache()
        elif max_len is None:
            self.cache = DynamicCache(config=model.config)
        else:
            self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self._step = compiled_call(model) if compile else model
        self.compiled_cpu = compile and self.device.type == "cpu"
        params = inspect.signature(model.forward).parameters
        # transformers >= 5.2x renamed past_key_values -> cache; accept both.
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" in params
        self.length = 0  # cached positions, tracked on the host: reading it never syncs
        self.calls = 0

    def forward(self, input_ids: torch.Tensor, keep: int, **tree: torch.Tensor) -> torch.Tensor:
        """(B, T) new ids -> (B, keep, V) logits of the last `keep` positions. `tree` passes
        position_ids and a 4D attention_mask for a token tree (eager, dynamic cache)."""
        new = input_ids.shape[1]
        if self.lean is not None:
            return self._finish(self.lean(input_ids.to(self.device), self.cache, keep, **tree), new)
        if self.max_len is not None and self.length + new > self.max_len:
            raise ValueError(f"static cache of {self.max_len} positions is full")
        kwargs = {self._cache_kw: self.cache, "use_cache": True, **tree}
        # On CPU only scoring widths (2..COMPILED_MAX_T) are compiled: a frozen single-token
        # graph measured slower than eager there (1.5B: 267 vs 236 ms; the int4 draft 92 vs
        # 59 ms), while five tokens cost 450 ms compiled against 876 eager (AVX2).
        decode = self.length > 0 and new <= self.COMPILED_MAX_T and not tree
        decode = decode and not (self.compiled_cpu and new == 1)
        call = self._step if decode else self.model
        if self._keep_kw:
            kwargs["logits_to_keep"] = keep
        if decode and self._step is not self.model:
            # A slice of the caller's token buffer has that buffer's stride, which dynamo
            # guards on: a fresh contiguous copy keeps every generation on the same graphs.
            input_ids = input_ids.clone(memory_format=torch.contiguous_format)
        if decode and self.compiled_cpu and new > 1:
            # One graph for every scoring width 2..COMPILED_MAX_T: a frozen CPU graph holds its
            # own packed copy of the weights (~2.5x their bf16 size), so a graph per width runs
            # a 1.5B model out of memory. The width is dynamic, and every position's logits are
            # kept (0 = all; a changing int would be specialised), cut to `keep` below.
            torch._dynamo.maybe_mark_dynamic(input_ids, 1)
            if self._keep_kw:
                kwargs["logits_to_keep"] = 0
        logits = call(input_ids=input_ids, **kwargs).logits[:, -keep:]
        if self.compiled_cpu and self.length == 0:  # the prefill has just allocated the cache
            keep_cache_as_input(self.cache)
        return self._finish(logits, new)

    def _finish(self, logits: torch.Tensor, new: int) -> torch.Tensor:
        """Count the call's new positions; logits on self.device, cut to the vocabulary."""
        self.length += new
        self.calls += 1
        # A target split over devices (device_map) computes its lm_head on the last one.
        logits = logits.to(self.device)
        return logits if self.vocab_size is None else logits[..., : self.vocab_size]

    def rollback(self, n_tokens: int) -> None:
        """Forget the last n_tokens cached positions."""
        if n_tokens > 0:
            if self.lean is not None:
                self.cache.length -= n_tokens
            else:
                self.cache.crop(-n_tokens)
            self.length -= n_tokens

    def keep_positions(self, start: int, offsets: list[int]) -> None:
        """Keep the cached positions before `start` and start + offsets (ascending), drop the
        rest: a scored token tree's branches off the accepted path. The kept positions are
        moved down in place and the cache cropped: the prefix is never copied. Dynamic cache."""
        if self.max_len is not None:
            raise ValueError("keep_positions needs a dynamic cache (max_len=None)")
        kept = len(offsets)
        if self.lean is not None:
            self.cache.keep_positions(start, offsets)
            self.length = start + kept
            return
        if offsets != list(range(kept)):  # not already in place: move them down
            index = torch.tensor([start + o for o in offsets])
            for layer in self.cache.layers:
                if getattr(layer, "is_initialized", False):
                    for part in (layer.keys, layer.values):  # (B, H, T, D)
                        moved = part.index_select(-2, index.to(part.device))
                        part[..., start : start + kept, :] = moved
        self.rollback(self.length - (start + kept))


@torch.inference_mode()
def warm_compiled(
    model: torch.nn.Module, max_lens: set[int], widths: list[tuple[int, int]]
) -> None:
    """Compile (or load from the cache) every decode graph a job will call before any clock
    starts: one per (new tokens, kept logits) in `widths` at each static cache length."""
    ids = torch.zeros(1, max(w for w, _ in widths), dtype=torch.long, device=model_device(model))
    name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    shapes = [(max_len, w, keep) for max_len in sorted(max_lens) for w, keep in widths]
    lms: dict[int, CachedLM] = {}
    for max_len, width, keep in tqdm(shapes, desc=f"compiling {Path(name).name}", unit="graph"):
        if max_len not in lms:
            lms[max_len] = CachedLM(model, None, max_len, compile=True)
            lms[max_len].forward(ids[:, :1], keep=1)  # eager prefill: decode needs a prefix
        lms[max_len].forward(ids[:, :width], keep=keep)
        lms[max_len].rollback(width)


class Clock:
    """Splits wall time into named buckets; synchronises CUDA before every reading."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.buckets: dict[str, float] = {}
        self._sync()
        self.start = self._last = time.perf_counter()

    def lap(self, bucket: str) -> None:
        self._sync()
        now = time.perf_counter()
        self.buckets[bucket] = self.buckets.get(bucket, 0.0) + now - self._last
        self._last = now

    def total(self) -> float:
        return self._last - self.start


def check_inputs(input_ids: torch.Tensor, max_new_tokens: int) -> None:
    """Batch-1 prompt of at least one token, and a positive budget."""
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(
            f"input_ids must have shape (1, T) (batch 1), got {tuple(input_ids.shape)}"
        )
    if input_ids.shape[1] < 1:
        raise ValueError("the prompt is empty: give at least one token (e.g. BOS)")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


def head_width(model: torch.nn.Module) -> int:
    """Rows of the model's lm_head (its logits' width), whatever module implements it."""
    head = model.get_output_embeddings()
    return getattr(head, "out_features", None) or head.weight.shape[0]


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device
