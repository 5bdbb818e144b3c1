"""Draft variants side by side on the offline pair: cost c, acceptance, scoring cost, speedup.

    python benchmarks/draft_variants.py                      # all variants, writes the table
    python benchmarks/draft_variants.py --variants bf16,int4 --speedup-prompts 0   # quick look
    python benchmarks/draft_variants.py --variants int4,int4+prompt8 --backend cpu_avx2 \
        --speedup-prompts 0 --no-compile      # AVX2-only CPUs: the draft's prefill, fp32 vs int8

One process, one target (bf16, never modified) and every draft variant loaded side by side:
1. latency: cached one-token decode steps, variants and target interleaved round by round;
   a draft token costs its forward plus turning its logits into a token under each setting's
   sampling; c = that / the target's one-token forward; s(K) = T(K+1) / T(1) for the target.
2. acceptance: alpha as mean beta = sum_x min(target, draft) along the target's own sampled
   continuations (teacher forcing: one forward per model per prompt), per paper setting.
3. speedup: speculative at each K against one autoregressive run per prompt, on the same prompt
   and seed, methods in rotating order (paired ratios of ms/token).
Also each model's prefill of a few prompts (a fresh cache each). Writes latency.csv, prefill.csv,
acceptance.csv, speedup.csv and table.csv under --out; prints the table.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from hydra import compose, initialize_config_dir

from specbench import stats
from specbench.decoding.common import CachedLM
from specbench.methods.registry import register_configs
from specbench.models import load_model
from specbench.prepare import Prepared, generate, prepare
from specbench.provenance import provenance
from specbench.records import write_table
from specbench.runner import to_config
from specbench.sampling import expected_acceptance, logits_to_probs, next_token

CONF = Path(__file__).resolve().parents[1] / "conf"
INT4 = {"quantize": "int4", "quantize_group": 32, "draft_vocab": None, "prompt_int8": False}
VARIANTS = {  # name -> the draft ModelConfig fields it sets (all of them: the experiments'
    # default draft is already a variant, so nothing may be inherited from it)
    "bf16": INT4 | {"quantize": "none"},
    "int8": INT4 | {"quantize": "int8"},
    "int4": INT4,
    "int4+vocab64k": INT4 | {"draft_vocab": 65536},
    "int4+vocab32k": INT4 | {"draft_vocab": 32768},
    "int4g128": INT4 | {"quantize_group": 128},
    "int4g128+vocab64k": INT4 | {"quantize_group": 128, "draft_vocab": 65536},
    # the int4 draft on aten's int4 kernel (activations kept in the model's dtype) instead of
    # specbench's row kernel (activations rounded to int8 per group; one C++ call a step)
    "int4torch": INT4,
    "int4+prompt8": INT4 | {"prompt_int8": True},  # the prefill on int8 GEMMs
}
BACKENDS = {"int4torch": {"int4_kernel": "torch"}}  # variants' backend fields
COMPILED = ("int4",)  # variants also timed compiled (static cache + torch.compile), with the target
STATIC_LEN = 1024  # static cache positions for the compiled steps
SETTINGS = ("paper_xsum_greedy", "paper_xsum_nucleus", "paper_humaneval")  # paper experiments


def prepared(experiment: str, prompts: int, tokens: int, backend: str | None = None) -> Prepared:
    """The experiment's job (pair, task, sampling), fixed-length, `prompts` prompts; `backend`
    replaces the experiment's (conf/backend/<name>.yaml)."""
    overrides = [f"+experiment={experiment}", "hydra.mode=RUN", f"bench.num_prompts={prompts}"]
    overrides += [f"bench.max_new_tokens={tokens}", "bench.fixed_length=true"]
    overrides += [f"backend={backend}"] if backend else []
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return prepare(to_config(compose(config_name="config", overrides=overrides)))


def encode(prep: Prepared, i: int) -> torch.Tensor:
    return prep.tokenizer(prep.prompts[i].text, return_tensors="pt").input_ids


def step_ms(lm: CachedLM, token: torch.Tensor, q: int, steps: int, sample=None) -> list[float]:
    """ms of `steps` forwards of q tokens after the cached prefix (each rolled back), plus
    sample(logits) when given: a draft token's full cost."""
    out = []
    for _ in range(steps):
        start = time.perf_counter()
        logits = lm.forward(token.expand(1, q), keep=1)[:, -1]
        if sample is not None:
            sample(logits)
        out.append(1e3 * (time.perf_counter() - start))
        lm.rollback(q)
    return out


def cached_models(target, drafts: dict) -> dict[str, CachedLM]:
    """Eager models, plus "+compile" versions of the target and of the COMPILED variants."""
    lms = {"target": CachedLM(target)} | {name: CachedLM(m) for name, m in drafts.items()}
    compiled = {"target": target} | {v: drafts[v] for v in COMPILED if v in drafts}
    return lms | {f"{n}+compile": CachedLM(m, None, STATIC_LEN, True) for n, m in compiled.items()}


def latency(lms: dict[str, CachedLM], prefix: torch.Tensor, settings: dict, rounds: int) -> list:
    """Rows (model, what, round, ms), every model timed once per round in turn."""
    for lm in lms.values():
        lm.forward(prefix, keep=1)
    token, gen, rows = prefix[:, -1:], torch.Generator().manual_seed(0), []

    def sampler(params):
        return lambda logits: next_token(logits_to_probs(logits, params), params, gen)

    for r in range(-1, rounds):  # round -1 warms up, not recorded
        for name, lm in lms.items():
            is_target = name.startswith("target")
            cases = [(f"forward_q{q}", q, None) for q in ((1, 3, 5, 7) if is_target else (1,))]
            cases += [(f"token_{s}", 1, sampler(p)) for s, p in settings.items()]
            for what, q, sample in cases:
                for ms in step_ms(lm, token, q, 5, sample) if r >= 0 else []:
                    rows.append({"model": name, "what": what, "round": r, "ms": ms})
    return rows


def prefill(models: dict, prompts: list[torch.Tensor], rounds: int) -> list:
    """Rows (model, prompt_tokens, round, ms): each prompt prefilled into a fresh cache, every
    model in turn per round (round -1 warms up, not recorded)."""
    rows = []
    for r in range(-1, rounds):
        for ids in prompts:
            for name, model in models.items():
                start = time.perf_counter()
                CachedLM(model).forward(ids, keep=1)
                ms = 1e3 * (time.perf_counter() - start)
                if r >= 0:
                    rows.append(
                        {"model": name, "prompt_tokens": ids.shape[1], "round": r, "ms": ms}
                    )
    return rows


def stepwise_logits(model, ids: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """(1, N, V) logits predicting each of `new` (1, N) after `ids`, computed the way the draft
    runs in the loop: the prompt prefilled, then one token per cached step."""
    lm = CachedLM(model)
    out = [lm.forward(ids, keep=1)]
    out += [lm.forward(new[:, j : j + 1], keep=1) for j in range(new.shape[1] - 1)]
    return torch.cat(out, 1)


@torch.inference_mode()
def acceptance(target, drafts: dict, prep: Prepared, setting: str, gen_seed: int) -> list:
    """Rows (variant, setting, prompt, alpha): mean beta along the target's own continuation."""
    params, vocab, rows = prep.job.sampling.params(), prep.vocab_size, []
    for i, prompt in enumerate(prep.prompts):
        ids = encode(prep, i)
        gen = torch.Generator().manual_seed(gen_seed + i)
        res = generate("autoregressive", prep, (target, None), ids, gen, prep.job.max_new_tokens)
        new = torch.tensor([res.tokens])  # (1, N)
        seq = torch.cat([ids, new], 1)  # (1, P + N)
        window = slice(ids.shape[1] - 1, seq.shape[1] - 1)  # positions that predict the new N
        target_probs = logits_to_probs(target(seq).logits[:, window, :vocab], params)
        for name, draft in drafts.items():
            logits = stepwise_logits(draft, ids, new)[..., :vocab]
            beta = expected_acceptance(target_probs, logits_to_probs(logits, params))  # (1, N)
            row = {"variant": name, "setting": setting, "prompt_id": prompt.id}
            rows.append(row | {"alpha": float(beta.mean())})
    return rows


def speedup(target, drafts: dict, prep: Prepared, setting: str, ks: list[int]) -> list:
    """Rows (variant, setting, prompt, k, method, ms_per_token): one AR per prompt, then every
    (variant, K) speculative run on the same prompt and seed, order rotated per prompt."""
    runs = [("autoregressive", None, 0)] + [("speculative", v, k) for v in drafts for k in ks]
    rows = []
    for i in range(-1, len(prep.prompts)):  # prompt -1: an untimed warm-up of every run
        ids = encode(prep, max(i, 0))
        shift = max(i, 0) % len(runs)
        for method, variant, k in runs[shift:] + runs[:shift]:
            job = replace(prep.job, decoder=replace(prep.job.decoder, k=max(k, 1)))
            models = (target, drafts[variant] if variant else None)
            gen = torch.Generator().manual_seed(prep.job.bench.seed + i)
            tokens = job.max_new_tokens if i >= 0 else 8
            res = generate(method, replace(prep, job=job), models, ids, gen, tokens)
            if i < 0:
                continue
            rows.append({
                "setting": setting, "prompt_id": prep.prompts[i].id, "variant": variant or "-",
                "k": k, "method": method, "tokens": res.num_tokens,
                "ms_per_token": res.ms_per_token, "acceptance_rate": res.acceptance_rate,
            })  # fmt: skip
    return rows


def table(lat: pd.DataFrame, acc: pd.DataFrame, spd: pd.DataFrame) -> pd.DataFrame:
    """One row per variant: ms, c, alpha per setting, paired speedup per (setting, K)."""
    med = lat.groupby(["model", "what"]).ms.median()
    target_ms = med["target", "forward_q1"]
    out = pd.DataFrame(index=[m for m in lat.model.unique() if not m.startswith("target")])
    out["draft_ms"] = [med[v, "forward_q1"] for v in out.index]
    out["target_ms"] = target_ms
    out["c"] = out.draft_ms / target_ms
    if ("target+compile", "forward_q1") in med:
        out["target_compiled_ms"] = med["target+compile", "forward_q1"]
    for q in (3, 5, 7):
        out[f"s{q - 1}"] = med["target", f"forward_q{q}"] / target_ms  # s(K) at K = q - 1
    for setting in SETTINGS:
        token = [med[v, f"token_{setting}"] for v in out.index]
        out[f"c_token_{setting}"] = pd.Series(token, index=out.index) / target_ms
        alpha = acc[acc.setting == setting].groupby("variant").alpha.mean()
        out[f"alpha_{setting}"] = [alpha[v.removesuffix("+compile")] for v in out.index]
    if len(spd):
        wide = spd.pivot_table(index=["setting", "prompt_id"], columns=["variant", "k"],
                               values="ms_per_token")  # fmt: skip
        base = wide["-", 0]
        for variant, k in [c for c in wide.columns if c[0] != "-"]:
            logs = np.log(base / wide[variant, k])
            for setting, mine in logs.groupby(level="setting"):
                value = stats.ratio_interval(mine)["ratio"]  # geometric mean over prompts
                out.loc[variant, f"speedup_{setting}_k{k}"] = value
    return out.rename_axis("variant").reset_index()


def parse_args() -> argparse.Namespace:
    """The command line (see --help)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help="names from VARIANTS")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per setting (alpha)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per generation")
    parser.add_argument("--rounds", type=int, default=6, help="latency rounds (5 steps each)")
    parser.add_argument("--speedup-prompts", type=int, default=3, help="0 skips phase 3")
    parser.add_argument("--speedup-variants", default="bf16,int4")
    parser.add_argument("--ks", default="2,4,6")
    parser.add_argument(
        "--backend",
        help="conf/backend name for both models (default: the experiments' own); "
        "cpu_avx2 on AVX2-only CPUs",
    )
    parser.add_argument(
        "--no-compile",
        dest="compile",
        action="store_false",
        help="skip the compiled latency rows (compiling costs ~1 min per model)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/draft_variants"))
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    register_configs()
    meta = provenance("cpu") | {"tokens": args.tokens, "prompts": args.prompts}  # before any work
    preps = {s: prepared(s, args.prompts, args.tokens, args.backend) for s in SETTINGS}
    job = preps[SETTINGS[0]].job
    with torch.inference_mode():
        target = load_model(job.target, job.backend)
        drafts = {
            v: load_model(
                replace(job.draft, **VARIANTS[v]), replace(job.backend, **BACKENDS.get(v, {}))
            )
            for v in args.variants.split(",")
        }
        params = {s: p.job.sampling.params() for s, p in preps.items()}
        prefix = encode(preps["paper_humaneval"], 0)
        lms = cached_models(target, drafts) if args.compile else {}
        lms = lms or {"target": CachedLM(target)} | {n: CachedLM(m) for n, m in drafts.items()}
        lat = pd.DataFrame(latency(lms, prefix, params, args.rounds))
        prompts = [encode(p, i) for p in preps.values() for i in range(min(2, args.prompts))]
        pre = pd.DataFrame(prefill({"target": target} | drafts, prompts, args.rounds))
    print(lat.groupby(["model", "what"]).ms.median().unstack().round(2), flush=True)
    print(pre.groupby(["model", "prompt_tokens"]).ms.median().unstack().round(1), flush=True)
    acc = pd.DataFrame(
        [r for s, p in preps.items() for r in acceptance(target, drafts, p, s, gen_seed=1000)]
    )
    print(acc.groupby(["variant", "setting"]).alpha.mean().unstack().round(3), flush=True)
    chosen = {v: drafts[v] for v in args.speedup_variants.split(",") if v in drafts}
    ks = [int(k) for k in args.ks.split(",")]
    spd = pd.DataFrame(
        [
            row
            for s in SETTINGS
            if args.speedup_prompts
            for row in speedup(
                target, chosen, prepared(s, args.speedup_prompts, args.tokens, args.backend), s, ks
            )
        ]
    )
    for name, frame in [("latency", lat), ("prefill", pre), ("acceptance", acc), ("speedup", spd)]:
        if len(frame):
            write_table(args.out / f"{name}.csv", frame.assign(**meta))
    summary = table(lat, acc, spd)
    write_table(args.out / "table.csv", summary)
    print(summary.round(3).T.to_string())


if __name__ == "__main__":
    main()
