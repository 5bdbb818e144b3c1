"""Prefill under `prompt_fp32`: the float weight upcast in blocks (`kernels.fp32_linear`) against
upcast whole, side by side in one process (issue 23).

For the paper pair on `backend=cpu_avx2` (or any backend with prompt_fp32), times each model's
prefill of the first prompts of two settings, the two ways interleaved (first call of each
dropped), and prints medians and their ratio:

    python benchmarks/prompt_blocks.py --avx2      # torch held to AVX2 (AVX-512 CPUs)
    python benchmarks/prompt_blocks.py --prompts 4 --repeats 6
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"
WHOLE = 1 << 40  # one block: the whole weight upcast at once


def prefill_s(model, ids, block: int) -> float:
    """Seconds of one prefill of ids with prompt matmuls upcast `block` weight rows at a time."""
    import torch

    from specbench import kernels
    from specbench.decoding.common import CachedLM

    kernels.PROMPT_BLOCK = block
    lm = CachedLM(model, None)
    start = time.perf_counter()
    with torch.inference_mode():
        lm.forward(ids, keep=1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--avx2", action="store_true", help="restrict torch to AVX2 kernels")
    parser.add_argument("--prompts", type=int, default=2, help="per setting")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--backend", default="cpu_avx2")
    args = parser.parse_args()
    if args.avx2:
        from specbench.kernels import rerun_held_to_avx2

        rerun_held_to_avx2(__file__, [a for a in sys.argv[1:] if a != "--avx2"])

    import torch
    from hydra import compose, initialize_config_dir

    from specbench import kernels
    from specbench.methods.registry import register_configs
    from specbench.models import ModelPool
    from specbench.prepare import prepare
    from specbench.runner import to_config

    register_configs()
    blocked = kernels.PROMPT_BLOCK
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"{'setting':>12} {'tokens':>6} {'model':>6} {'whole s':>8} {'blocks s':>9} {'ratio':>6}")
    for setting in ("humaneval", "xsum_greedy"):
        overrides = ["+experiment=paper_regime", f"+setting={setting}", "allow_dirty=true"]
        overrides += [f"backend={args.backend}", "backend.prompt_fp32=true"]
        overrides += [f"bench.num_prompts={args.prompts}"]
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            job = to_config(compose(config_name="config", overrides=overrides))
        prep = prepare(job)
        target, draft = ModelPool().get(job.target, job.draft, job.backend)[:2]
        for prompt in prep.prompts[: args.prompts]:
            ids = prep.tokenizer(prompt.text, return_tensors="pt").input_ids
            for name, model in (("target", target), ("draft", draft)):
                times: dict[int, list[float]] = {WHOLE: [], blocked: []}
                for repeat in range(args.repeats + 1):
                    for block in times:
                        seconds = prefill_s(model, ids, block)
                        if repeat:  # the first call of each is a warm-up
                            times[block].append(seconds)
                whole, blocks = (statistics.median(times[b]) for b in (WHOLE, blocked))
                print(f"{setting:>12} {ids.shape[1]:>6} {name:>6} {whole:>8.3f} {blocks:>9.3f}"
                      f" {whole / blocks:>6.2f}")  # fmt: skip
    kernels.PROMPT_BLOCK = blocked


if __name__ == "__main__":
    main()
