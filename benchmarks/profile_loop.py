"""Where the time goes: torch.profiler over our speculative loop and transformers' assisted
generation at the same K, on the same prompt, pair and sampling (defaults: the offline pair).

    python benchmarks/profile_loop.py [--k 4] [--tokens 32] [--sampling t1] [--task xsum]

Prints, per method: wall time, the share of time in model forwards (aten ops under the model
modules) vs everything else, and the top ops by self CPU time. One warm-up call per method
runs first (excluded). Writes nothing unless --out is given (then one text file).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from torch.profiler import ProfilerActivity, profile, record_function

from specbench.methods.registry import register_configs
from specbench.models import ModelPool
from specbench.prepare import generate, prepare
from specbench.runner import to_config

CONF = Path(__file__).resolve().parents[1] / "conf"
PAIR = ["model@target=qwen25_coder_15b_instruct_gguf", "model@draft=qwen25_coder_05b_instruct_gguf"]


def load(args: argparse.Namespace):
    register_configs()
    overrides = [*PAIR, "backend=cpu_bf16", f"task={args.task}", f"sampling={args.sampling}"]
    overrides += [f"decoder.k={args.k}", "bench.num_prompts=1", "bench.fixed_length=true"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        job = to_config(compose(config_name="config", overrides=overrides))
    prep = prepare(job)
    models = ModelPool().get(job.target, job.draft, job.backend)
    ids = prep.tokenizer(prep.prompts[0].text, return_tensors="pt").input_ids
    return prep, models, ids


def profile_method(method: str, prep, models, ids, tokens: int) -> str:
    """Profile one timed generation of `method`; return its summary text."""
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    generate(method, prep, models, ids, gen(), tokens)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof, record_function("generation"):
        res = generate(method, prep, models, ids, gen(), tokens)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MODEL_OPS)
    lines = [
        f"== {method}: {res.wall_s:.2f} s for {res.num_tokens} tokens "
        f"({res.ms_per_token:.1f} ms/token), {res.target_calls} target calls",
        f"   linear/matmul/attention kernels: {100 * matmul / total:.1f}% of self CPU time",
    ]
    table = events.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40)
    return "\n".join(lines) + "\n" + table


MODEL_OPS = {
    "aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::mkldnn_linear",
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--sampling", default="t1")
    parser.add_argument("--task", default="xsum")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    prep, models, ids = load(args)
    text = "\n".join(
        profile_method(m, prep, models, ids, args.tokens) for m in ("speculative", "hf_assisted")
    )
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
