"""Does replaying a trace reproduce the wall time of the run it was recorded from?

On the same real models, each (prompt, repeat) is timed twice, seconds apart in one process:
the real speculative run, then `Replay` of that run's own accepted counts (order alternating),
so machine drift cancels in the paired ratio replay / recorded. Any hydra overrides pick the
pair, backend, task and budget, e.g.

    python experiments/replay_validation/validate.py bench.num_prompts=2 bench.repeats=3
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import torch
from hydra import compose, initialize_config_dir

from specbench.decoding.replay import Replay, Step
from specbench.methods.registry import register_configs
from specbench.models import ModelPool
from specbench.prepare import Prepared, generate, prepare
from specbench.runner import to_config

CONF = Path(__file__).resolve().parents[2] / "conf"
DEFAULTS = [
    "backend=cpu_bf16", "backend.num_threads=1", "task=xsum", "bench.fixed_length=true",
    "bench.max_new_tokens=32", "decoder.k=4", "bench.warmup=1",
]  # fmt: skip


def timed(method: str, prep: Prepared, models: tuple, ids: torch.Tensor, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return generate(method, prep, models, ids, gen, prep.job.max_new_tokens)


def paired_runs(prep: Prepared, models: tuple) -> pd.DataFrame:
    """Per (prompt, repeat): record, replay it; on odd repeats also rerun the recording after
    the replay (same seed, same tokens) and compare with that one: the order alternates."""
    job, rows = prep.job, []
    for i, prompt in enumerate(prep.prompts):
        ids = prep.tokenizer(prompt.text, return_tensors="pt").input_ids
        for repeat in range(job.bench.repeats):
            seed = job.bench.seed_for(i, repeat)
            rec = timed("speculative", prep, models, ids, seed)
            steps = [Step(k, a) for k, a in zip(rec.proposed, rec.accepted, strict=True)]
            prep.replay = Replay({(prompt.id, repeat): steps}, {seed: (prompt.id, repeat)})
            rep = timed("replay", prep, models, ids, seed)
            if repeat % 2:
                rec = timed("speculative", prep, models, ids, seed)
            assert rep.accepted == rec.accepted and rep.draft_calls == rec.draft_calls
            row = {
                "prompt_id": prompt.id,
                "repeat": repeat,
                "target_calls": rec.target_calls,
                "draft_calls": rec.draft_calls,
                "recorded_s": rec.wall_s,
                "replay_s": rep.wall_s,
                "ratio": rep.wall_s / rec.wall_s,
            }
            rows.append(row)
            print(row, flush=True)
    return pd.DataFrame(rows)


def main(overrides: list[str]) -> None:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        job = to_config(compose(config_name="config", overrides=DEFAULTS + overrides))
    prep = prepare(job)
    if job.backend.num_threads:
        torch.set_num_threads(job.backend.num_threads)
    models = ModelPool().get(job.target, job.draft, job.backend)
    warm = prep.tokenizer(prep.prompts[0].text, return_tensors="pt").input_ids
    generate("speculative", prep, models, warm, torch.Generator().manual_seed(0), 16)
    frame = paired_runs(prep, models)
    print(frame.to_string())
    total = frame.replay_s.sum() / frame.recorded_s.sum()
    print(f"replay / recorded wall time: median {frame.ratio.median():.3f}, total {total:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
