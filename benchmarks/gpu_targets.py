"""Issue-6 GPU targets in one run that keeps every number it measures, however early it stops.

    PYTHONPATH=. python benchmarks/gpu_targets.py              # GPU: ~7 min, to results/gpu
    python benchmarks/gpu_targets.py --small --out /tmp/dry    # the same code on CPU, < 5 min
    python benchmarks/gpu_targets.py --summarize results/gpu   # the summary of what is there

Each measurement is appended to OUT/gpu_targets.jsonl (one JSON object a line, with the device
name and provenance) and printed, flushed, the moment it exists; the summary (OUT/summary.json,
printed last) is rebuilt from the latest run's lines. Phases run in order of value, each only if
its estimate fits what is left of --budget-s; at the budget a deadline stops the run cleanly:
1. bandwidth: device copy GB/s and the autoregressive floor (weight bytes / bandwidth).
2. our autoregressive ms/token, eager dynamic cache.
3. our eager speculative vs transformers' assisted generation at the first K (4), per draft.
4. the scoring profile: target and draft forward latency for q = 1..16 new tokens.
5. the compiled static-cache paths (AR, SpS at the first K); compile time is kept apart
   (compile_s: first call minus a timed call) from the decode time of the timed calls.
6. the other K values: eager SpS, assisted, compiled SpS.
Random-weight models of published shapes (specbench.shapes: latency does not depend on weight
values; both exact methods see the same acceptance), batch 1, greedy by default. Timed numbers
are medians of --repeats calls after one warm-up call; the device is synchronised.
Needs torch and transformers only (no hydra, pandas or wandb).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from budgeted import Log, Phase, read_rows, run_phases

from specbench import SamplingParams, autoregressive_generate, speculative_generate
from specbench.decoding.hf import hf_generate
from specbench.profile import profile_model
from specbench.provenance import provenance
from specbench.shapes import shape_model

LINES, SUMMARY = "gpu_targets.jsonl", "summary.json"
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}


@dataclass(frozen=True)
class Sizes:
    target: str
    drafts: tuple[str, ...]
    tokens: int  # new tokens per generation
    prompt: int  # prompt tokens
    repeats: int
    copy_gib: float  # bandwidth test buffer
    budget_s: float
    overrides: dict[str, Any] = field(default_factory=dict)  # shape fields, every model


SIZES = {
    "full": Sizes("llama2_7b", ("llama_160m", "tinyllama_1b"), 128, 128, 3, 4.0, 420),
    "small": Sizes("llama_160m", ("llama_68m",), 8, 16, 1, 0.25, 200),  # a CPU dry run
    "tiny": Sizes("llama_68m", ("llama_68m",), 8, 8, 1, 0.01, 120, TINY),  # the test's
}


class Bench:
    """Models built on first use; a fixed prompt, budget and sampling; timing helpers."""

    def __init__(self, args: argparse.Namespace, sizes: Sizes) -> None:
        self.args, self.sizes = args, sizes
        self.dtype = getattr(torch, args.dtype)
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 32000, (1, args.prompt), generator=gen).to(args.device)
        self.common = dict(max_new_tokens=args.tokens, sampling=SamplingParams(args.temperature))
        self.models: dict[str, torch.nn.Module] = {}
        self.seen: dict[str, float] = {}  # measured costs that later estimates scale from

    def model(self, name: str, seed: int) -> torch.nn.Module:
        key = f"{name}/{seed}"
        if key not in self.models:
            self.models[key] = shape_model(
                name, dtype=self.dtype, device=self.args.device, seed=seed,
                overrides=self.sizes.overrides,
            )  # fmt: skip
        return self.models[key]

    def call_s(self, fn: Callable[..., Any], models: tuple, kwargs: dict) -> tuple[Any, float]:
        """One generation and its wall time, outer clock (cache set-up and compiling included)."""
        gen = torch.Generator(self.args.device).manual_seed(0)
        sync(self.args.device)
        start = time.perf_counter()
        result = fn(*models, self.ids, generator=gen, **self.common, **kwargs)
        sync(self.args.device)
        return result, time.perf_counter() - start

    def timed(self, fn: Callable[..., Any], *models: torch.nn.Module, **kwargs: Any) -> dict:
        """A warm-up call, then `repeats` timed calls: medians, raw values, compile time apart."""
        _, first_s = self.call_s(fn, models, kwargs)
        runs = [self.call_s(fn, models, kwargs) for _ in range(self.args.repeats)]
        call_s = statistics.median(s for _, s in runs)
        ms = [r.ms_per_token for r, _ in runs]
        row = {
            "ms_per_token": statistics.median(ms),
            "raw_ms_per_token": ms,
            "call_s": call_s,
            "first_call_s": first_s,
            "new_tokens": [r.num_tokens for r, _ in runs],
            "target_calls": [r.target_calls for r, _ in runs],
            "accepted": [sum(r.accepted) for r, _ in runs],
        }
        if kwargs.get("compile"):
            row["compile_s"] = max(first_s - call_s, 0.0)
        return row


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bandwidth(bench: Bench) -> dict:
    """Device copy (bytes read + written per second, median of 5) and the AR floor."""
    src = torch.empty(
        int(bench.sizes.copy_gib * 2**30), dtype=torch.uint8, device=bench.args.device
    )
    dst = torch.empty_like(src)
    times = []
    for _ in range(6):
        sync(bench.args.device)
        start = time.perf_counter()
        dst.copy_(src)
        sync(bench.args.device)
        times.append(time.perf_counter() - start)
    gbs = 2 * src.numel() / statistics.median(times[1:]) / 1e9
    target = bench.model(bench.args.target, seed=1)
    weight_bytes = sum(p.numel() * p.element_size() for p in target.parameters())
    return {
        "copy_gbs": gbs,
        "weight_bytes": weight_bytes,
        "floor_ms": 1e3 * weight_bytes / gbs / 1e9,
    }


def decoding_phase(bench: Bench, method: str, draft: str | None, k: int, compile: bool) -> Phase:
    """One timed method: AR (draft None), our SpS or transformers' assisted generation."""
    mode = "compiled" if compile else "eager"
    name = f"{method}_{mode}" + (f"_{draft}_k{k}" if draft else "")
    target = lambda: bench.model(bench.args.target, seed=1)  # noqa: E731
    runs = {
        "autoregressive": lambda: bench.timed(autoregressive_generate, target(), compile=compile),
        "speculative": lambda: bench.timed(
            speculative_generate, target(), bench.model(draft, seed=2), k=k, compile=compile
        ),
        "hf_assisted": lambda: bench.timed(hf_generate, target(), draft=bench.model(draft, 2), k=k),
    }
    graphs = (k + 2) / 3 if draft else 1  # SpS: target T = 1..K+1 and draft T = 1..2, vs AR's T = 1

    def estimate() -> float:  # eager AR phase time x (1 + K); AR's compile time x graphs
        spent = bench.seen.get("ar_s", 0.0) * (1 + k)
        return spent + graphs * bench.seen.get("compile_s", bench.args.compile_guess_s) * compile

    fields = {"method": method, "draft": draft, "k": k if draft else 0, "compile": compile}
    return Phase(name, fields, runs[method], estimate, partial(remember, bench, name))


def remember(bench: Bench, name: str, result: dict, spent_s: float) -> None:
    """The costs later estimates scale from: the eager AR phase, AR's compile time."""
    if name == "autoregressive_eager":
        bench.seen["ar_s"] = spent_s
    if name == "autoregressive_compiled":
        bench.seen["compile_s"] = result["compile_s"]


def profile_phase(bench: Bench, role: str, name: str, seed: int) -> Phase:
    def run() -> dict:
        rows = profile_model(bench.model(name, seed), bench.ids, 16, bench.args.repeats)
        by_q = {q: statistics.median(r["ms"] for r in rows if r["q"] == q) for q in range(1, 17)}
        return {"ms_by_q": by_q, "raw": rows}

    fields = {"method": "scoring_profile", "model": role, "shape": name}
    return Phase(f"profile_{role}", fields, run, lambda: bench.seen.get("ar_s", 0.0))


def plan(bench: Bench) -> list[Phase]:
    """Every phase, most valuable first."""
    args, (first, *rest) = bench.args, bench.args.ks
    phases = [Phase("bandwidth", {"method": "bandwidth"}, lambda: bandwidth(bench), lambda: 0)]
    phases.append(decoding_phase(bench, "autoregressive", None, 0, False))
    for d in args.drafts:
        phases += [
            decoding_phase(bench, m, d, first, False) for m in ("speculative", "hf_assisted")
        ]
    phases.append(profile_phase(bench, "target", args.target, 1))
    phases += [profile_phase(bench, f"draft_{d}", d, 2) for d in args.drafts]
    if args.compile:
        phases.append(decoding_phase(bench, "autoregressive", None, 0, True))
        phases += [decoding_phase(bench, "speculative", d, first, True) for d in args.drafts]
    for k in rest:
        for d in args.drafts:
            phases += [
                decoding_phase(bench, m, d, k, False) for m in ("speculative", "hf_assisted")
            ]
            if args.compile:
                phases.append(decoding_phase(bench, "speculative", d, k, True))
    return phases


def summarize(rows: list[dict]) -> dict[str, Any]:
    """Headline numbers from whatever rows exist: floor, AR over floor, SpS vs assisted."""
    out: dict[str, Any] = (
        {k: rows[0][k] for k in ("run_id", "device_name", "target")} if rows else {}
    )
    done = {r["phase"]: r for r in rows if r["kind"] == "measure"}
    out["measured"] = len(done)
    out["not_measured"] = [f"{r['phase']} ({r['kind']})" for r in rows if r["kind"] != "measure"]
    floor = done.get("bandwidth", {}).get("floor_ms")
    for name, r in done.items():
        if r["method"] == "bandwidth":
            out |= {k: r[k] for k in ("copy_gbs", "weight_bytes", "floor_ms")}
        elif r["method"] == "scoring_profile":
            ms = r["ms_by_q"]
            out[f"{name}_ms_q1"], out[f"{name}_q16_over_q1"] = ms["1"], ms["16"] / ms["1"]
        else:
            out[f"{name}_ms_per_token"] = r["ms_per_token"]
            if "compile_s" in r:
                out[f"{name}_compile_s"] = r["compile_s"]
        if r["method"] == "autoregressive" and floor:
            out[f"{name}_over_floor"] = r["ms_per_token"] / floor
        hf = done.get(f"hf_assisted_eager_{r.get('draft')}_k{r.get('k')}")
        if r["method"] == "speculative" and hf:
            out[f"{name}_vs_hf"] = hf["ms_per_token"] / r["ms_per_token"]
            loops = statistics.median(r["target_calls"])
            out[f"{name}_loop_ms"] = r["ms_per_token"] * statistics.median(r["new_tokens"]) / loops
    return out


def write_summary(out: Path) -> dict[str, Any]:
    summary = summarize(read_rows(out / LINES))
    tmp = out / f".{SUMMARY}.tmp"
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(out / SUMMARY)
    return summary


def measure(args: argparse.Namespace, sizes: Sizes) -> int:
    """Every phase that fits in the budget into args.out; returns the number that raised."""
    args.out.mkdir(parents=True, exist_ok=True)
    shared = {
        "run_id": f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}",
        "sizes": args.sizes,
        "device": args.device,
    }
    shared |= {k: getattr(args, k) for k in ("target", "dtype", "tokens", "prompt", "repeats")}
    log = Log(
        args.out / LINES, shared | {"temperature": args.temperature} | provenance(args.device)
    )
    bench = Bench(args, sizes)
    return run_phases(plan(bench), log, args.budget_s)


def parse(argv: list[str] | None) -> argparse.Namespace:
    # fmt: off
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--small", dest="sizes", action="store_const", const="small",
                       help="small shapes, 200 s: the dry run (on CPU when CUDA is absent)")
    which.add_argument("--tiny", dest="sizes", action="store_const", const="tiny",
                       help="toy shapes: the test's seconds-long run")
    p.add_argument("--device", help="default: cuda if available, else cpu with --small/--tiny")
    p.add_argument("--dtype", help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--budget-s", type=float, help="wall budget (default 420)")
    p.add_argument("--tokens", type=int, help="new tokens per generation")
    p.add_argument("--prompt", type=int, help="prompt length in tokens")
    p.add_argument("--repeats", type=int, help="timed calls per measurement")
    p.add_argument("--ks", type=int, nargs="+", default=[4, 2, 6], help="the first K goes first")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--no-compile", dest="compile", action="store_false", help="eager paths only")
    p.add_argument("--out", type=Path, default=Path("results/gpu"), help="folder for the lines")
    p.add_argument("--summarize", action="store_true", help="only rebuild OUT's summary")
    p.set_defaults(sizes="full")
    # fmt: on
    return p.parse_args(argv)


def resolve(args: argparse.Namespace) -> Sizes:
    """Fills the defaults that depend on the sizes and the device."""
    sizes = SIZES[args.sizes]
    for name in ("tokens", "prompt", "repeats", "budget_s"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(sizes, name))
    if args.device is None:
        if not torch.cuda.is_available() and args.sizes == "full":
            sys.exit("no CUDA device: add --small for the CPU dry run, or --device cpu")
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    args.compile_guess_s = 60.0 if args.device.startswith("cuda") else 30.0
    args.target, args.drafts = sizes.target, sizes.drafts
    return sizes


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    failed = 0 if args.summarize else measure(args, resolve(args))
    print(json.dumps(write_summary(args.out), indent=1), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
