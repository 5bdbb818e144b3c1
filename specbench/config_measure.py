"""Config schemas of how a job measures: timing budget, audit, profile and calibration,
tracking (the rest of the schema: specbench.config)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import require as _require

TRACKING_MODES = ("disabled", "offline", "online")
# bench.kind: timing, exactness audit, scoring profile, calibration (predicted speedup per K)
JOB_KINDS = ("time", "audit", "profile", "calibrate")


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
    # With the task's stops: per (prompt, repeat) the first method (the order rotates) decodes
    # up to its stop, and every other method then generates exactly as many tokens, stops off.
    # Each pair has equal token counts, each count a draw from the target's law, so prefill
    # is amortised alike in both (sampled completions of unequal length scatter the ratio).
    # Those followers' quality is not scored (their length was set by another method).
    match_lengths: bool = False
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
        _require(
            not (self.match_lengths and self.fixed_length),
            "bench.match_lengths and bench.fixed_length both set the token counts: pick one",
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
    # calibration: prompts of the speculative run behind alpha (the job's first ones; capped by
    # bench.num_prompts). 3 were too few: per-prompt alpha and length vary (HumanEval's first 3
    # problems: alpha 0.77 and 13 tokens, against 0.885 and 55 over all 164)
    alpha_prompts: int = 8
    # calibration: new tokens per prompt of that run; None: the job's budget. Acceptance rises
    # along a completion (XSum greedy, 128 tokens: 0.69 over the first 16, 0.91 over the last),
    # so a shorter run predicts a lower alpha than the timed run has
    alpha_tokens: int | None = None
    cost_repeats: int = 5  # calibration: timed calls per width behind each step cost (median)
    # calibration: reuse the costs measured earlier for the same machine, pair, kernels and
    # setting (kept in the specbench cache) instead of measuring again (the demo does)
    reuse: bool = False
    # scoring profile: token trees [n, K] (n branches of depth K, 1 + n*K nodes, multidraft's
    # shape) timed in one target call under a tree mask, beside the chains; dynamic cache only
    trees: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        _require(
            all(len(t) == 2 and min(t) >= 1 for t in self.trees),
            f"profile.trees holds [n, K] pairs, each >= 1; got {self.trees}",
        )
        _require(self.max_q >= 1, f"profile.max_q must be >= 1, got {self.max_q}")
        _require(self.max_k >= 1, f"profile.max_k must be >= 1, got {self.max_k}")
        _require(self.alpha_prompts >= 1, "profile.alpha_prompts must be >= 1")
        _require(
            self.alpha_tokens is None or self.alpha_tokens >= 2,
            "profile.alpha_tokens must be >= 2 (or null: the job's token budget)",
        )
        _require(self.cost_repeats >= 1, "profile.cost_repeats must be >= 1")


@dataclass
class TrackingConfig:
    """Experiment tracking with wandb; disabled by default."""

    mode: str = "disabled"
    project: str = "specbench"

    def __post_init__(self) -> None:
        _require(self.mode in TRACKING_MODES, f"tracking.mode must be one of {TRACKING_MODES}")
