"""Calibration: predict speculative sampling's speedup on this machine before a long sweep.

Measures the terms of Leviathan et al.'s Thm 3.8 with the job's own models and kernels: the
target's cost of one cached call of 1..K+1 new tokens (s(K) = T(K+1) / T(1)), the draft's step
(c = T_draft(1) / T(1)), alpha (the mean expected acceptance beta of a short speculative run) and
both models' prefill of a prompt; then predicts the wall-clock speedup over N new tokens for
K = 1..profile.max_k:

    AR  = P_target + N T(1)
    SpS = P_target + P_draft + N / E[tokens per loop] * (K T_draft(1) + T(K+1))

N is the job's budget, or for a task with stops (HumanEval) each calibration prompt's expected
completion length from the alpha run: a completion cut at the run's length goes on with the
per-token stop rate of all the run's completions (a geometric tail, censored at the budget).
Short completions carry more of the prefill per token, which the decode loop does not speed
up, so the predicted speedup is what the runs report: the geometric mean over prompts of the
per-prompt ratio AR / SpS, one N per prompt (the ratio at the mean N over-predicted HumanEval
by 16% on Zen 4: results/calibrate_zen4_pad/README.md).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from . import stats
from .analysis.theory import expected_speedup, expected_tokens_per_loop
from .config import ConfigError, SpecBenchConfig
from .decoding.common import CachedLM, Clock, GenerationResult, model_device, static_cache_len
from .kernels import PROMPT_BLOCK, can_pack, pads_decode
from .methods import Generate, method
from .packaged import cache_root
from .prepare import Prepared, bind, encode, warm_kernels
from .profile import profile_model
from .quantize import int4_kernel
from .records import CALIBRATION, write_job, write_text

log = logging.getLogger(__name__)
SPECULATIVE = "speculative"  # the registry method whose loop is predicted


@dataclass(frozen=True)
class Costs:
    """Measured terms of the prediction (milliseconds; alpha in [0, 1])."""

    target_ms: dict[int, float]  # q new tokens -> median ms of one cached target call
    draft_ms: float  # one cached draft step
    target_prefill_ms: float  # mean over the calibration prompts
    draft_prefill_ms: float
    alpha: float
    # each calibration prompt's expected completion length; None: the job's budget for all
    lengths: list[float] | None = None

    def call_ms(self, q: int) -> tuple[float, bool]:
        """T(q), measured or extrapolated linearly from the two widest measured calls."""
        if q in self.target_ms:
            return self.target_ms[q], True
        top = max(self.target_ms)
        below = self.target_ms.get(top - 1, self.target_ms[top])
        return self.target_ms[top] + (q - top) * (self.target_ms[top] - below), False


def predict(costs: Costs, k: int, lengths: Sequence[float]) -> dict[str, Any]:
    """One K's prediction: s(K), c, the decode-only (Thm 3.8) speedup, and the wall-clock one
    over prompts of these completion lengths (geometric mean of per-prompt AR / SpS)."""
    step, (scoring, measured) = costs.target_ms[1], costs.call_ms(k + 1)
    s, c = scoring / step, costs.draft_ms / step
    loop_ms = k * costs.draft_ms + scoring  # one draft-and-verify iteration
    per_loop = float(expected_tokens_per_loop(costs.alpha, k))  # tokens it emits
    prefills = costs.target_prefill_ms + costs.draft_prefill_ms
    logs = []
    for tokens in lengths:
        autoregressive = costs.target_prefill_ms + tokens * step
        logs.append(math.log(autoregressive / (prefills + tokens / per_loop * loop_ms)))
    return {
        "k": k, "target_step_ms": step, "draft_step_ms": costs.draft_ms, "scoring_cost": s,
        "scoring_measured": measured, "c": c, "alpha": costs.alpha,
        "decode_speedup": float(expected_speedup(costs.alpha, k, c, s)),
        "predicted_speedup": float(stats.ratio_interval(logs)["ratio"]),  # the runs' headline
    }  # fmt: skip


def prefill_ms(model: torch.nn.Module, ids: torch.Tensor) -> float:
    """One eager prefill of the prompt ids, in ms (a fresh dynamic cache)."""
    lm = CachedLM(model)
    clock = Clock(model_device(model))
    with torch.inference_mode():
        lm.forward(ids.to(model_device(model)), keep=1)
    clock.lap("prefill")
    return 1e3 * clock.total()


def measure_costs(prep, models: tuple, generate, encoded: list[torch.Tensor]) -> Costs:
    """The terms for this job: step costs on the first prompt, prefill and alpha on the
    calibration prompts (`generate` is the bound speculative method)."""
    job, (target, draft) = prep.job, models
    backend, profile = job.backend, job.profile
    k = max(job.decoder.ks())
    widest = k + 1 if backend.compile else profile.max_k + 1  # compiled: the warmed widths only
    prefix = encoded[0]  # the cache length below is one runner.warm_kernels compiled
    cached = backend.static_cache or backend.compile
    max_len = static_cache_len(prefix.shape[1] + job.max_new_tokens + k + 1) if cached else None
    rows = profile_model(target, prefix, widest, profile.cost_repeats, backend.compile, max_len)
    target_ms = {q: _median([r["ms"] for r in rows if r["q"] == q]) for q in range(1, widest + 1)}
    draft_rows = profile_model(draft, prefix, 1, profile.cost_repeats, backend.compile, max_len)
    prompts = encoded[: profile.alpha_prompts]
    betas: list[float] = []
    results: list[GenerationResult] = []
    for i, ids in enumerate(prompts):
        gen = torch.Generator(model_device(target)).manual_seed(job.bench.seed_for(i))
        result = generate(ids, alpha_tokens(job), gen)
        betas += result.expected_acceptance
        results.append(result)
    return Costs(
        target_ms=target_ms,
        draft_ms=_median([r["ms"] for r in draft_rows]),
        target_prefill_ms=sum(prefill_ms(target, ids) for ids in prompts) / len(prompts),
        draft_prefill_ms=sum(prefill_ms(draft, ids) for ids in prompts) / len(prompts),
        alpha=sum(betas) / max(len(betas), 1),
        lengths=None if job.bench.fixed_length else expected_lengths(results, job.max_new_tokens),
    )


def alpha_tokens(job: SpecBenchConfig) -> int:
    """New tokens per prompt of the alpha run: profile.alpha_tokens, else the job's budget."""
    return job.profile.alpha_tokens or job.max_new_tokens


def expected_lengths(results: list[GenerationResult], budget: int) -> list[float]:
    """Each prompt's expected new tokens in a timed run with this budget: a stopped completion's
    own length; one cut at the run's length L, L plus a geometric tail at the run's stop rate,
    up to the budget (the censored-data estimate: stops per token generated)."""
    stops = sum(r.stopped_by != "length" for r in results)
    rate = stops / max(sum(r.num_tokens for r in results), 1)  # per-token stop hazard
    lengths = []
    for r in results:
        rest = 0 if r.stopped_by != "length" else max(budget - r.num_tokens, 0)
        tail = rest if rate == 0 else (1 - (1 - rate) ** rest) / rate  # sum_t (1-rate)^(t-1)
        lengths.append(min(r.num_tokens, budget) + tail)
    return lengths


def verdict(rows: list[dict[str, Any]], k: int, backend: str) -> str:
    """One plain paragraph: the prediction at the job's K, the best K, and what to try if < 1."""
    at_k = next(r for r in rows if r["k"] == k)
    best = max(rows, key=lambda r: r["predicted_speedup"])
    text = (
        f"calibration: predicted speedup {at_k['predicted_speedup']:.2f}x at K = {k} "
        f"(alpha {at_k['alpha']:.2f}, c {at_k['c']:.2f}, s(K) {at_k['scoring_cost']:.2f}); "
        f"best K = {best['k']} at {best['predicted_speedup']:.2f}x"
    )
    if at_k["predicted_speedup"] >= 1:
        return text
    why = (
        f"scoring {k + 1} tokens costs {at_k['scoring_cost']:.1f} target steps"
        if at_k["scoring_cost"] > 1.5
        else f"a draft step costs {at_k['c']:.2f} target steps"
    )
    chosen = backend.split(":")[0] in ("cpu_avx2", "cpu_compiled", "cpu_auto")  # cpu_auto:<choice>
    if not chosen and at_k["scoring_cost"] > 1.5:
        hint = "try backend=cpu_auto (or cpu_avx2, cpu_compiled)"
    elif best["predicted_speedup"] > 1:
        hint = f"try decoder.k={best['k']} (predicted {best['predicted_speedup']:.2f}x)"
    else:
        hint = "try a cheaper draft (a quantized or smaller model@draft=...)"
    return f"{text}. Speculative sampling is predicted SLOWER here: {why}; {hint}."


def costs_key(job: SpecBenchConfig) -> str:
    """What a calibration's measured costs depend on: this CPU and torch, the pair, the
    kernels, the setting, the widths and the alpha run."""
    from .cpu_gemm import source_digest
    from .provenance import cpu_columns

    backend, profile = job.backend, job.profile
    parts = {
        "cpu": cpu_columns(), "threads": torch.get_num_threads(), "torch": torch.__version__,
        "models": [(m.name, m.source, m.quantize, m.quantize_group, m.draft_vocab,
                    m.prompt_int8, m.torch_dtype_name(backend.dtype))
                   for m in (job.target, job.draft)],
        "backend": [backend.name, backend.compile, backend.static_cache,
                    backend.prompt_fp32 and f"blocks of {PROMPT_BLOCK}",
                    backend.rows_kernel and source_digest(), backend.lean_decode,
                    int4_kernel(job) == "rows" and source_digest(),
                    can_pack(backend), pads_decode(backend)],
        "setting": [job.task.name, job.task.prompt_format, job.sampling.name, job.max_new_tokens],
        "widths": [max(job.decoder.ks()), profile.max_k, profile.alpha_prompts,
                   alpha_tokens(job), profile.cost_repeats, job.bench.seed],
    }  # fmt: skip
    return json.dumps(parts, sort_keys=True, default=str)


def reused_costs(prep, models: tuple, generate, encoded: list[torch.Tensor]) -> tuple[Costs, bool]:
    """The job's costs: measured, or with profile.reuse the ones measured before for the same
    costs_key (kept in the specbench cache). -> (costs, whether they were reused)."""
    job = prep.job
    if not job.profile.reuse:
        return measure_costs(prep, models, generate, encoded), False
    path = cache_root() / "calibration.json"
    known = json.loads(path.read_text()) if path.is_file() else {}
    key = costs_key(job)
    if "lengths" in known.get(key, {}):  # (entries saved before they were measured: redo)
        saved = known[key]
        return Costs(
            **saved | {"target_ms": {int(q): v for q, v in saved["target_ms"].items()}}
        ), True
    costs = measure_costs(prep, models, generate, encoded)
    write_text(path, json.dumps(known | {key: asdict(costs)}, indent=1))
    return costs, False


def forecast(prep, models: tuple, generate, encoded: list[torch.Tensor]) -> dict[str, Any]:
    """Measure, predict for K = 1..max_k, log the verdict; the summary's calibration columns."""
    job = prep.job
    costs, reused = reused_costs(prep, models, generate, encoded)
    if reused:
        log.info("calibration: costs measured earlier for this machine, pair and kernels")
    lengths = costs.lengths or [float(job.max_new_tokens)]
    ks = sorted({*range(1, job.profile.max_k + 1), job.decoder.k})
    rows = [predict(costs, k, lengths) for k in ks]
    log.warning(verdict(rows, job.decoder.k, job.backend.name))
    at_k = next(r for r in rows if r["k"] == job.decoder.k)
    best = max(rows, key=lambda r: r["predicted_speedup"])
    return {
        "rows": rows,
        "predicted_speedup": at_k["predicted_speedup"],
        "predicted_best_k": best["k"],
        "calibration_c": at_k["c"],
        "calibration_alpha": costs.alpha,
        "calibration_scoring_cost": at_k["scoring_cost"],
        "target_step_ms": costs.target_ms[1],
        "target_prefill_ms": costs.target_prefill_ms,
        "draft_prefill_ms": costs.draft_prefill_ms,  # paid by speculative sampling alone
        "calibration_new_tokens": sum(lengths) / len(lengths),
        "calibration_reused": reused,
    }


def calibrate_first(
    prep: Prepared, models: tuple, bound: dict[str, Generate], encoded: list[torch.Tensor]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """bench.calibrate: the predicted speedup (logged before timing starts) as row columns, and
    the per-K predictions (the job's calibration table: Fig. 1's Thm 3.8 overlay)."""
    if not prep.job.bench.calibrate or SPECULATIVE not in bound or models[1] is None:
        return {}, []
    result = forecast(prep, models, bound[SPECULATIVE], encoded)
    return result, result.pop("rows")


def run_calibrate(prep: Prepared, models: tuple, job_dir: Path, shared: dict) -> dict:
    """The calibrate job: the forecast for the job's pair and kernels, in its own table."""
    if models[1] is None:
        raise ConfigError("bench.kind=calibrate needs a draft model (decoder=speculative)")
    encoded = encode(prep)
    warm_kernels(prep, models, encoded)
    result = forecast(prep, models, bind(prep, models, method(SPECULATIVE)), encoded)
    table = pd.DataFrame([shared | row for row in result.pop("rows")])
    write_job(job_dir, {CALIBRATION: table}, result | {"finished": time.time()})
    return result


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]
