"""The timing loop: warm-up before any clock, then every method on every (prompt, repeat).

Seed policy: every (prompt, repeat) gets its own seed (`BenchConfig.seed_for`), and each method
timed on that prompt and repeat starts a fresh torch.Generator from that same seed (common random
numbers: the methods see the same stream). Nothing is reseeded inside a decoding loop. The
order of methods rotates between consecutive (prompt, repeat) pairs to cancel drift.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from . import stats
from .calibrate import calibrate_first
from .decoding import GenerationResult
from .methods import Generate
from .prepare import Prepared, Timed, bind_methods, encode, warm_kernels
from .records import PARTIAL_ITERATIONS, PARTIAL_RECORDS, write_table
from .tasks import Prompt

log = logging.getLogger(__name__)

# Warm-up runs (bench.warmup) generate WARMUP_TOKENS after the last WARMUP_PROMPT tokens of the
# first prompt (dynamic cache): every kernel, weight page and cache path runs once, without
# paying a long document's prefill per method (an XSum prompt's fp32 prefill is ~12 s on 2 AVX2
# cores).
WARMUP_PROMPT = 32
WARMUP_TOKENS = 16


@dataclass(frozen=True)
class Warm:
    """A job ready to time: its methods bound and warmed up, prompts encoded, forecast made."""

    bound: dict[str, Generate]  # Timed.label -> generate
    encoded: list[torch.Tensor]  # every prompt of the job, (1, T) ids
    predicted: dict[str, Any]  # bench.calibrate: the forecast's columns, put on every row
    calibration: list[dict[str, Any]]  # bench.calibrate: its per-K predictions
    fixed: dict[str, Generate] = field(default_factory=dict)  # match_lengths: stops off


def warm(prep: Prepared, models: tuple) -> Warm:
    """Bind, encode, compile and warm up every method (and calibrate, with bench.calibrate):
    everything before the first clock."""
    job, device = prep.job, prep.job.backend.device
    bound = bind_methods(prep, models)
    encoded = encode(prep)
    warm_kernels(prep, models, encoded)
    # a static cache's length follows the prompt's: the full prompt keeps the compiled graphs
    prompt = encoded[0] if job.backend.static_cache else encoded[0][:, -WARMUP_PROMPT:]
    for _ in range(job.bench.warmup):
        for generate in bound.values():
            gen = torch.Generator(device).manual_seed(job.bench.seed)
            generate(prompt, min(job.max_new_tokens, WARMUP_TOKENS), gen)
    fixed = bind_methods(prep, models, fixed=True) if job.bench.match_lengths else {}
    return Warm(bound, encoded, *calibrate_first(prep, models, bound, encoded), fixed)


@dataclass(frozen=True)
class Checkpoint:
    """A timing job's finished (prompt, repeat) runs in its folder, saved after each one, so a
    killed job resumes after its last finished prompt; rows of another config are not reused.
    Each saved row carries the columns of the session that timed it (`stamp`: git sha,
    versions, machine, start time), so a resumed row keeps its own provenance."""

    job_dir: Path
    key: str  # digest of the job's whole config
    stamp: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, prep: Prepared, job_dir: Path, stamp: dict[str, Any] | None = None) -> Checkpoint:
        key = hashlib.sha256(repr(prep.job).encode()).hexdigest()[:16]
        return cls(job_dir, key, dict(stamp or {}))

    def load(self) -> tuple[list[dict], list[dict]]:
        """The saved rows and the iterations of their runs ([] and [] when none fit)."""
        path = self.job_dir / PARTIAL_RECORDS
        saved = pd.read_parquet(path) if path.is_file() else pd.DataFrame()
        if saved.empty or set(saved.resume_key) != {self.key}:
            if not saved.empty:
                log.warning("not resuming from %s: another config made it", path)
            return [], []
        rows = saved.drop(columns="resume_key").to_dict("records")
        done = {(r["prompt_id"], r["repeat"]) for r in rows}
        its = self.job_dir / PARTIAL_ITERATIONS
        iterations = pd.read_parquet(its).to_dict("records") if its.is_file() else []
        return rows, [it for it in iterations if (it["prompt_id"], it["repeat"]) in done]

    def save(self, rows: list[dict], iterations: list[dict]) -> None:
        """Iterations first, records last (they say which runs are done), each atomically."""
        write_table(self.job_dir / PARTIAL_ITERATIONS, pd.DataFrame(iterations))
        table = pd.DataFrame([self.stamp | row for row in rows])  # a resumed row's own stamp wins
        write_table(self.job_dir / PARTIAL_RECORDS, table.assign(resume_key=self.key))

    def clear(self) -> None:
        for name in (PARTIAL_RECORDS, PARTIAL_ITERATIONS):
            (self.job_dir / name).unlink(missing_ok=True)


def time_runs(
    prep: Prepared, warmed: Warm, prompts: range, checkpoint: Checkpoint | None = None
) -> tuple[list[dict], list[dict]]:
    """Time every timed variant on each (prompt, repeat) of the local prompt indices `prompts`
    (those a checkpoint holds are kept, not retimed); rows for both tables."""
    job, device = prep.job, prep.job.backend.device
    bound, encoded, predicted = warmed.bound, warmed.encoded, warmed.predicted
    rows, iterations = checkpoint.load() if checkpoint else ([], [])
    wanted = {prep.prompts[i].id for i in prompts}  # a finished block's leftovers are not ours
    rows = [r for r in rows if r["prompt_id"] in wanted]
    iterations = [it for it in iterations if it["prompt_id"] in wanted]
    done = {(r["prompt_id"], r["repeat"]) for r in rows}
    cells = [(i, r) for i in prompts for r in range(job.bench.repeats)
             if (prep.prompts[i].id, r) not in done]  # fmt: skip
    if done:
        log.info("resuming: %d runs timed before this start, %d to go", len(done), len(cells))
    bar = tqdm(cells, desc=f"{job.experiment} {job.decoder.name}", unit="run")
    timed = prep.timed
    for i, repeat in bar:
        seed = prep.seed(i, repeat)
        budget, leader = job.max_new_tokens, ""
        for variant in rotated(timed, i * job.bench.repeats + repeat):
            gen = torch.Generator(device).manual_seed(seed)
            generate = warmed.fixed[variant.label] if leader else bound[variant.label]
            res = generate(encoded[i], budget, gen)
            row = result_row(prep, variant, prep.prompts[i], repeat, seed, res) | predicted
            rows.append(row | ({"length_from": leader} if job.bench.match_lengths else {}))
            iterations += iteration_rows(rows[-1], res)
            if job.bench.match_lengths and not leader:  # the others generate as many tokens
                budget, leader = max(res.num_tokens, 1), variant.label
        if checkpoint:
            checkpoint.save(rows, iterations)
        bar.set_postfix_str(progress_text(rows))
    return rows, iterations


def measure(
    prep: Prepared, models: tuple, checkpoint: Checkpoint | None = None
) -> tuple[list[dict], list[dict], list[dict]]:
    """Warm up, then time every method on every prompt x repeat of the job (resuming from a
    checkpoint): rows of the records, iterations and (bench.calibrate) calibration tables."""
    warmed = warm(prep, models)
    return *time_runs(prep, warmed, range(len(prep.prompts)), checkpoint), warmed.calibration


def rotated(items: list, step: int) -> list:
    """items in the order of run `step`: the first method moves one place per run (two methods
    alternate), so drift over a job spreads evenly over them."""
    shift = step % len(items) if items else 0
    return items[shift:] + items[:shift]


def score_rows(prep: Prepared, rows: list[dict]) -> None:
    """Add the task's quality columns (ROUGE, pass/fail) to each row, after all timing."""
    by_id = {p.id: p for p in prep.prompts}
    for row in tqdm(rows, desc=f"scoring {prep.job.task.name}", unit="row", leave=False):
        if not row.get("length_from"):  # a match_lengths follower stops where its leader did
            row.update(prep.score(prep.job.task, by_id[row["prompt_id"]], row["completion"]))


def result_row(
    prep: Prepared, variant: Timed, prompt: Prompt, repeat: int, seed: int, res: GenerationResult
) -> dict[str, Any]:
    """One tidy row: what ran, its raw timings and counts, the completion."""
    return {
        "method": variant.method.name,
        "paired_with": variant.method.baseline or "",
        "k": variant.method.k(variant.config),
        "n_drafts": getattr(variant.config, "n_drafts", 1),  # multidraft: sequences per call
        "drafts_mode": getattr(variant.config, "drafts", ""),  # multidraft: iid | without_...
        "prompt_id": prompt.id,
        "repeat": repeat,
        "seed": seed,
        "new_tokens": res.num_tokens,
        "wall_s": res.wall_s,
        "ms_per_token": res.ms_per_token,
        "first_s": res.first_s,  # time to first token (prefill)
        "decode_ms_per_token": res.decode_ms_per_token,  # after it
        "target_calls": res.target_calls,
        "draft_calls": res.draft_calls,
        "accepted": sum(res.accepted),
        "proposed": sum(res.proposed),
        "drafts": sum(1 for p in res.proposed if p > 0),
        "tokens_per_call": res.tokens_per_target_call,
        "alpha": res.mean_expected_acceptance,
        "draft_s": res.draft_s,
        "target_s": res.target_s,
        "overhead_s": res.overhead_s,
        "stopped_by": res.stopped_by,
        "load_1m": os.getloadavg()[0],  # other work beside the timing shows here
        # Scored text: cut at the first EOS (fixed-length runs generate past it), specials
        # dropped; the raw text keeps every token, special ones included, for re-scoring.
        "completion": prep.tokenizer.decode(
            cut_at_eos(res.tokens, prep.eos_token_ids), skip_special_tokens=True
        ),
        "completion_raw": prep.tokenizer.decode(res.tokens, skip_special_tokens=False),
    } | res.engine  # an external engine's own counts and timings (llama.cpp)


def cut_at_eos(tokens: list[int], eos_token_ids: tuple[int, ...]) -> list[int]:
    """tokens up to (excluding) the first EOS id."""
    end = next((i for i, t in enumerate(tokens) if t in eos_token_ids), len(tokens))
    return tokens[:end]


def iteration_rows(row: dict[str, Any], res: GenerationResult) -> list[dict]:
    """One row per drafting iteration of a result: drafts proposed (`k`) and accepted; `run_k`
    is the run's K (a K sweep times one method at several K on the same prompt)."""
    head = {name: row[name] for name in ("method", "prompt_id", "repeat")} | {"run_k": row["k"]}
    return [
        head | {"iteration": it, "k": k, "accepted": acc}
        for it, (acc, k) in enumerate(zip(res.accepted, res.proposed, strict=True))
    ]


def progress_text(rows: list[dict]) -> str:
    """'spec 120.3ms/tok auto 230.1ms/tok acc 0.81' for the progress bar."""
    frame = pd.DataFrame(rows)
    parts = [
        f"{m[:4]}{f'@{k}' if k else ''} {g.ms_per_token.mean():.1f}ms/tok"
        for (m, k), g in frame.groupby(["method", "k"], sort=False)
    ]
    drafting = frame[frame.proposed > 0]
    if len(drafting):
        parts.append(f"acc {stats.acceptance_rate(drafting):.2f}")
    return " ".join(parts)
