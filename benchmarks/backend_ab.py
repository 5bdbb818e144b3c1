"""One backend switch on and off, side by side on the paper pair (the decode paths' A/B).

    python benchmarks/backend_ab.py                  # lean decode vs transformers' forward
    python benchmarks/backend_ab.py --flag pack_weights   # oneDNN-packed vs plain bf16 linears
    python benchmarks/backend_ab.py --flag rows_kernel    # AVX-512-BF16: our row kernel vs packed
    python benchmarks/backend_ab.py --flag pad_decode     # packed one-row calls padded or not
    python benchmarks/backend_ab.py --setting xsum_greedy --prompts 4 --tokens 128
    python benchmarks/backend_ab.py --backend cpu_avx2    # AVX2-only CPUs: the row kernels
    python benchmarks/backend_ab.py --flag pack_weights --prefill --setting xsum_greedy

One process, the paper regime's pair (bf16 1.5B target, int4 0.5B draft, `--backend`) loaded
twice (pad_decode: once, switched in place): once with `backend.<flag>=true`, once false
(`lean_decode`: specbench.decoding.lean; `pack_weights`: specbench.kernels.PackedLinear;
`pad_decode`: its one-row calls padded). Per prompt, autoregressive and speculative sampling (K
= 4) with the switch on and off, the four runs in a rotating order on the same seed (fixed
length, so each pair of runs decodes the same number of tokens). Prints per method the paired
ratio off / on of ms per token (geometric mean over prompts, 95% t interval on log ratios,
`specbench.stats`), and the speculative speedup over autoregressive either way.
--prefill times each model's prompt instead (one cached forward over the whole prompt, target and
draft, switch on and off, rotating order, 3 calls each, median), paired per prompt. Writes
nothing unless --out is given (rows as CSV; the column `on` is the switch).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from hydra import compose, initialize_config_dir

from specbench import stats
from specbench.calibrate import prefill_ms
from specbench.kernels import PackedLinear
from specbench.methods.registry import register_configs
from specbench.models import load_model
from specbench.prepare import generate, prepare
from specbench.provenance import provenance
from specbench.runner import to_config

CONF = Path(__file__).resolve().parents[1] / "conf"
METHODS = ("autoregressive", "speculative")
# backend switches (config.BackendConfig)
FLAGS = ("lean_decode", "pack_weights", "rows_kernel", "pad_decode")
SWITCHED = ("pad_decode",)  # switched in place on one loaded pair: the same weights in memory


def load(setting: str, backend: str, prompts: int, tokens: int, flag: str):
    """The paper_table1 job of `setting` (fixed length) and its pair with `flag` on and off."""
    register_configs()
    overrides = ["+experiment=paper_table1", f"+setting={setting}", f"backend={backend}"]
    overrides += ["hydra.mode=RUN"]
    overrides += [f"bench.num_prompts={prompts}", f"bench.max_new_tokens={tokens}"]
    overrides += ["bench.fixed_length=true", "bench.require_clean=false"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        job = to_config(compose(config_name="config", overrides=overrides))
    prep = prepare(job)
    if flag in SWITCHED:
        pair = (load_model(job.target, job.backend), load_model(job.draft, job.backend))
        return prep, {True: pair, False: pair}
    pairs = {}
    for on in (True, False):
        backend = replace(job.backend, **{flag: on})
        pairs[on] = (load_model(job.target, backend), load_model(job.draft, backend))
    return prep, pairs


def switch(pairs, flag: str, on: bool):
    """The pair for `on`; a SWITCHED flag is set in place first (pad_decode: the target's
    packed layers, the only ones load_model pads)."""
    if flag == "pad_decode":
        for module in pairs[on][0].modules():
            if isinstance(module, PackedLinear):
                module.pad_one_row = on
    return pairs[on]


def run(prep, pairs, count: int, tokens: int, flag: str) -> pd.DataFrame:
    """The first `count` prompts: switch on / off x 2 methods, rotating order, after one
    untimed warm-up pass of every variant on the first prompt."""
    variants = [(on, method) for on in (True, False) for method in METHODS]
    encoded = [prep.tokenizer(p.text, return_tensors="pt").input_ids for p in prep.prompts[:count]]
    for on, method in variants:
        pair = switch(pairs, flag, on)
        generate(method, prep, pair, encoded[0], torch.Generator().manual_seed(0), tokens)
    rows = []
    for index, (prompt, ids) in enumerate(zip(prep.prompts[:count], encoded, strict=True)):
        for on, method in variants[index % 4 :] + variants[: index % 4]:
            gen = torch.Generator().manual_seed(prep.seed(index, 0))
            res = generate(method, prep, switch(pairs, flag, on), ids, gen, tokens)
            draft_ms = 1e3 * res.draft_s / max(res.draft_calls, 1)
            rows.append({"prompt_id": prompt.id, "on": on, "method": method,
                         "ms_per_token": res.ms_per_token, "new_tokens": res.num_tokens,
                         "draft_ms_per_call": draft_ms})  # fmt: skip
            print(f"{prompt.id} {'on' if on else 'off'} {method}: {res.ms_per_token:.1f} ms/token")
    return pd.DataFrame(rows)


def median_prefill_ms(model: torch.nn.Module, ids: torch.Tensor, calls: int = 3) -> float:
    """Median of `calls` prompt forwards into a fresh cache (calibrate.prefill_ms)."""
    return float(np.median([prefill_ms(model, ids) for _ in range(calls)]))


def run_prefill(prep, pairs, count: int) -> pd.DataFrame:
    """The first `count` prompts: target and draft prompt forwards, switch on / off, rotating
    order, after one untimed warm-up of each on the first prompt."""
    variants = [(on, role) for on in (True, False) for role in (0, 1)]  # 0 target, 1 draft
    encoded = [prep.tokenizer(p.text, return_tensors="pt").input_ids for p in prep.prompts[:count]]
    for on, role in variants:
        prefill_ms(pairs[on][role], encoded[0])
    rows = []
    for index, (prompt, ids) in enumerate(zip(prep.prompts[:count], encoded, strict=True)):
        for on, role in variants[index % 4 :] + variants[: index % 4]:
            ms = median_prefill_ms(pairs[on][role], ids)
            name = ("target", "draft")[role]
            rows.append({"prompt_id": prompt.id, "on": on, "method": name,
                         "prompt_tokens": ids.shape[1], "prefill_ms": ms})  # fmt: skip
            print(
                f"{prompt.id} ({ids.shape[1]} tokens) {'on' if on else 'off'} {name}: {ms:.0f} ms"
            )
    return pd.DataFrame(rows)


def report_prefill(frame: pd.DataFrame) -> str:
    """Paired off / on prefill ratios per model, with the median ms either way."""
    wide = frame.pivot_table(index="prompt_id", columns=["method", "on"], values="prefill_ms")
    lines = [
        f"n = {len(wide)} prompts, {frame.prompt_tokens.min()}-{frame.prompt_tokens.max()} tokens"
    ]
    for model in ("target", "draft"):
        off, on = wide[(model, False)], wide[(model, True)]
        lines.append(f"{model} prefill: off / on = {ratio(off / on)}; median ms off "
                     f"{off.median():.0f}, on {on.median():.0f}")  # fmt: skip
    return "\n".join(lines)


def ratio(values: pd.Series) -> str:
    """Geometric mean of per-prompt ratios with its labelled interval (`stats.ratio_interval`)."""
    r = stats.ratio_interval(np.log(values))
    low, high = r["ratio_low"], r["ratio_high"]
    return f"{r['ratio']:.3f}x [{low:.3f}, {high:.3f}] ({r['ratio_interval']})"


def report(frame: pd.DataFrame) -> str:
    """Paired ratios per prompt, geometric means with 95% t intervals on log ratios."""
    wide = frame.pivot_table(index="prompt_id", columns=["method", "on"], values="ms_per_token")
    lines = [f"n = {len(wide)} prompts"]
    for method in METHODS:
        est = ratio(wide[(method, False)] / wide[(method, True)])
        lines.append(f"{method}: off / on ms per token = {est}")
    for on in (False, True):
        est = ratio(wide[("autoregressive", on)] / wide[("speculative", on)])
        lines.append(f"speculative speedup, switch {'on' if on else 'off'}: {est}")
    draft = frame[frame.method == "speculative"].groupby("on").draft_ms_per_call.median()
    lines.append(f"draft ms per call, median: on {draft[True]:.1f}, off {draft[False]:.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--flag", default="lean_decode", choices=FLAGS, help="the switch")
    parser.add_argument("--setting", default="humaneval")
    parser.add_argument("--backend", default="cpu_bf16", help="cpu_avx2 on AVX2-only CPUs")
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prefill", action="store_true", help="time prompt forwards only")
    parser.add_argument("--out", type=Path, help="write the rows here (CSV) with provenance")
    args = parser.parse_args()
    prep, pairs = load(args.setting, args.backend, args.prompts, args.tokens, args.flag)
    if args.prefill:
        frame = run_prefill(prep, pairs, args.prompts)
        print(report_prefill(frame))
    else:
        frame = run(prep, pairs, args.prompts, args.tokens, args.flag)
        print(report(frame))
    if args.out:
        frame.assign(flag=args.flag, **provenance("cpu")).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
