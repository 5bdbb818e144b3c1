"""Acceptance-trace replay: the real speculative loop, accepted counts from a recorded run.

Acceptance is a property of the pair and the task; cost is a property of the models' shapes and
the hardware. Replay runs `speculative_generate` unchanged (draft K, score K+1 in one target
call, crop both caches) on any pair, but its `verify_fn` returns the number accepted that the
recorded run had at the same iteration (the `iterations` table every timing job writes). The
next token is drawn as `verify` draws it (the residual at the first rejection, or the bonus
token), so the per-iteration work matches; which token it is does not matter.

Matching a timed run to its recording: each (prompt, repeat) is timed with a generator seeded by
the job's seed policy, so the generator's seed names the run (see `BenchConfig.seed_for`).
Replay ignores EOS and stop strings (the trace decides the length). A run that stopped early is
replayed to its recorded token count; the loop must not draft more tokens at an iteration than
were recorded (same decoder.k and token budget), or it stops with a ReplayError. Where it drafts
fewer (the warm-up's shorter budget), the recorded count is capped at what was drafted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from ..config import ConfigError, DecoderConfig
from ..sampling import residual, sample
from .common import GenerationResult, StopCondition
from .speculative import speculative_generate

ITERATIONS_FILE = "iterations.parquet"


@dataclass
class ReplayConfig(DecoderConfig):
    """decoder=replay; k must be the recording's K (see README, Scale-out)."""

    name: str = "replay"
    trace: str = ""  # a results dir (experiment or job) or an iterations parquet file
    trace_job: str = ""  # which job of a trace holding several (its folder name)


class ReplayError(ValueError):
    """The loop and the trace disagree (another K or budget, prompts the trace lacks)."""


@dataclass(frozen=True)
class Step:
    """One recorded iteration: drafts proposed and drafts accepted."""

    k: int
    accepted: int


RunKey = tuple[str, int]  # (prompt_id, repeat)


def trace_file(path: str | Path) -> Path:
    """The iterations parquet a trace path names: the file itself or `<dir>/iterations.parquet`."""
    if not str(path):
        raise ConfigError("decoder=replay needs decoder.trace=PATH (a results dir or a parquet)")
    path = Path(path).expanduser()
    found = path / ITERATIONS_FILE if path.is_dir() else path
    if not found.is_file():
        raise ConfigError(
            f"decoder.trace: no {ITERATIONS_FILE} at {path} (give a results dir of a timing "
            "job or experiment, or the parquet file itself)"
        )
    return found


def _pick_job(frame: pd.DataFrame, cfg: ReplayConfig) -> pd.DataFrame:
    jobs = sorted(frame.job.unique()) if "job" in frame else []
    if cfg.trace_job:
        if cfg.trace_job not in jobs:
            raise ConfigError(f"decoder.trace_job={cfg.trace_job!r} not in the trace: {jobs}")
        return frame[frame.job == cfg.trace_job]
    if len(jobs) > 1:
        raise ConfigError(f"the trace holds {len(jobs)} jobs; choose one: decoder.trace_job=NAME")
    return frame


def load_trace(cfg: ReplayConfig) -> dict[RunKey, list[Step]]:
    """Recorded steps per (prompt_id, repeat), in iteration order; ConfigError if unusable."""
    frame = pd.read_parquet(trace_file(cfg.trace))
    frame = _pick_job(frame, cfg)  # only our drafting methods write iterations
    if frame.empty:
        raise ConfigError(f"decoder.trace {cfg.trace}: no speculative iterations recorded")
    recorded_k = int(frame.k.max())
    if recorded_k != cfg.k:
        raise ConfigError(f"the trace was recorded at K={recorded_k}; pass decoder.k={recorded_k}")
    runs = {}
    for (prompt_id, repeat), run in frame.groupby(["prompt_id", "repeat"]):
        run = run.sort_values("iteration")
        runs[(str(prompt_id), int(repeat))] = [
            Step(int(k), int(a)) for k, a in zip(run.k, run.accepted, strict=True)
        ]
    return runs


class ReplayVerifier:
    """A `verify_fn` returning the recorded accepted counts, one iteration per call."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.calls = 0

    def __call__(
        self,
        draft_ids: torch.Tensor,
        draft_probs: torch.Tensor,
        target_probs: torch.Tensor,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        k_now = draft_ids.shape[1]
        if self.calls >= len(self.steps):
            raise ReplayError(f"the loop ran past the trace's {len(self.steps)} iterations")
        step = self.steps[self.calls]
        if k_now > step.k:
            raise ReplayError(
                f"iteration {self.calls}: the loop drafted {k_now} tokens, the trace {step.k}; "
                "replay with the recording's decoder.k and token budget"
            )
        self.calls += 1
        accepted = min(step.accepted, k_now)
        # The same work as `verify`: K uniforms, then a draw from the residual or the bonus law.
        torch.rand((1, k_now), generator=generator, device=draft_probs.device)
        padded = torch.nn.functional.pad(draft_probs, (0, 0, 0, 1))  # (1, K+1, V)
        law = residual(target_probs[:, accepted], padded[:, accepted])  # (1, V)
        return torch.tensor([accepted], device=draft_ids.device), sample(law, generator)


@dataclass
class Replay:
    """A loaded trace and the seed -> (prompt_id, repeat) map of the job replaying it."""

    runs: dict[RunKey, list[Step]]
    seeds: dict[int, RunKey] = field(default_factory=dict)

    def steps_for(self, generator: torch.Generator | None) -> list[Step]:
        key = self.seeds.get(generator.initial_seed()) if generator is not None else None
        if key not in self.runs:
            raise ReplayError(
                f"no recorded run for (prompt_id, repeat) = {key}; the trace has "
                f"{sorted(self.runs)[:6]}...: replay the recording's task, prompts and repeats"
            )
        return self.runs[key]

    def generate(
        self,
        target: torch.nn.Module,
        draft: torch.nn.Module,
        input_ids: torch.Tensor,
        *,
        max_new_tokens: int,
        generator: torch.Generator | None,
        stop: StopCondition | None = None,
        **common,
    ) -> GenerationResult:
        """`speculative_generate` with the recorded accepted counts; `stop` is ignored."""
        steps = self.steps_for(generator)
        budget = min(max_new_tokens, sum(s.accepted + 1 for s in steps))
        return speculative_generate(
            target,
            draft,
            input_ids,
            max_new_tokens=budget,
            generator=generator,
            verify_fn=ReplayVerifier(steps),
            **common,
        )


def open_replay(
    cfg: ReplayConfig,
    prompt_ids: Iterable[str],
    repeats: int,
    seed_of: Callable[[int, int], int],
    warmup_seed: int,
) -> Replay:
    """Load the trace and map every timed run's seed (and the warm-up's) to its recorded run."""
    ids = list(prompt_ids)
    seeds = {warmup_seed: (ids[0], 0)}  # the warm-up runs on the first prompt
    seeds |= {seed_of(i, r): (pid, r) for i, pid in enumerate(ids) for r in range(repeats)}
    replay = Replay(load_trace(cfg), seeds)
    missing = sorted(set(seeds.values()) - set(replay.runs))
    if missing:
        raise ConfigError(
            f"decoder.trace lacks {len(missing)} of this job's (prompt_id, repeat) runs, e.g. "
            f"{missing[0]}: use the recording's task, bench.num_prompts and bench.repeats"
        )
    return replay
