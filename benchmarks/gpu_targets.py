"""Issue-6 GPU targets in one prepared run (about 5-8 minutes on an H200); results to --out.

    python benchmarks/gpu_targets.py --out $OUT            # on the GPU machine
    python benchmarks/gpu_targets.py --small --device cpu  # dry run of the same code on CPU

Random-weight models of published shapes (specbench.shapes; latency does not depend on weight
values, and both exact methods see the same acceptance for the same pair), bf16, batch 1:
1. HBM bandwidth (device copy) and the autoregressive floor: weight bytes / bandwidth.
2. Our autoregressive ms/token: eager dynamic cache, and the compiled static-cache path
   (backend.compile=true), against the floor (target: compiled <= 1.3x floor).
3. Our speculative tokens/s vs transformers' assisted generation at equal K (2, 4, 6), for the
   160M- and 1.1B-shaped drafts under a 7B-shaped target (target: >= 1.3x), plus SpS loop
   latency per K.
4. The scoring profile: target and draft forward latency for q = 1..16 new tokens.
Every timed number is a median of --repeats runs after one warm-up; the device is synchronised.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specbench import SamplingParams, autoregressive_generate, speculative_generate
from specbench.decoding.hf import hf_generate
from specbench.profile import profile_model
from specbench.shapes import shape_model

FULL = {"target": "llama2_7b", "drafts": ["llama_160m", "tinyllama_1b"]}
SMALL = {"target": "llama_160m", "drafts": ["llama_68m"]}  # a CPU dry run of the same code


def bandwidth_gbs(device: str, gib: float) -> float:
    """Device-to-device copy: bytes read + written per second (GB/s), median of 5."""
    src = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(6):
        sync(device)
        start = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - start)
    return 2 * src.numel() / statistics.median(times[1:]) / 1e9


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(args: argparse.Namespace) -> dict:
    names = SMALL if args.small else FULL
    dtype = getattr(torch, args.dtype)
    target = shape_model(names["target"], dtype=dtype, device=args.device, seed=1)
    ids = torch.randint(0, 32000, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    bench = Bench(args, ids.to(args.device))
    out = {"target": names["target"], **autoregressive_floor(bench, target)}
    out["profile_target"] = profile_model(target, bench.ids, 16, args.repeats)
    for name in names["drafts"]:
        draft = shape_model(name, dtype=dtype, device=args.device, seed=2)
        out[f"profile_{name}"] = profile_model(draft, bench.ids, 16, args.repeats)
        for k in args.ks:
            out[f"{name}_k{k}"] = row = bench.speculative_vs_assisted(target, draft, k)
            print(f"{name} K={k}: sps_vs_hf {row['sps_vs_hf']:.2f}x", flush=True)
        del draft
    return out


def autoregressive_floor(bench: Bench, target: torch.nn.Module) -> dict:
    """Copy bandwidth, weight bytes / bandwidth, and our AR eager and compiled ms/token."""
    weight_bytes = sum(p.numel() * p.element_size() for p in target.parameters())
    gbs = bandwidth_gbs(bench.args.device, 0.25 if bench.args.small else 4)
    out = {"weight_bytes": weight_bytes, "copy_gbs": gbs}
    out["floor_ms_per_token"] = 1e3 * weight_bytes / (gbs * 1e9)
    for mode, extra in {"eager": {}, "compiled": {"compile": True}}.items():
        out[f"ar_{mode}"] = bench.timed(autoregressive_generate, target, **extra)
    out["ar_compiled_over_floor"] = out["ar_compiled"]["ms_per_token"] / out["floor_ms_per_token"]
    return out


class Bench:
    """Fixed prompt, budget and sampling; a fresh generator per call."""

    def __init__(self, args: argparse.Namespace, ids: torch.Tensor) -> None:
        self.args, self.ids = args, ids
        self.common = dict(max_new_tokens=args.tokens, sampling=SamplingParams(args.temperature))

    def timed(self, fn, *models, **kwargs) -> dict:
        """One warm-up call, then `repeats` timed calls: median ms/token and the raw values."""
        gen = lambda: torch.Generator(self.args.device).manual_seed(0)  # noqa: E731
        call = lambda: fn(*models, self.ids, generator=gen(), **self.common, **kwargs)  # noqa: E731
        call()
        results = [call() for _ in range(self.args.repeats)]
        ms = [r.ms_per_token for r in results]
        calls = [r.target_calls for r in results]
        return {
            "ms_per_token": statistics.median(ms),
            "raw_ms_per_token": ms,
            "target_calls": calls,
        }

    def speculative_vs_assisted(self, target, draft, k: int) -> dict:
        """Our SpS compiled and eager, and transformers' assisted generation, at the same K."""
        row = {
            "speculative": self.timed(speculative_generate, target, draft, k=k, compile=True),
            "speculative_eager": self.timed(speculative_generate, target, draft, k=k),
            "hf_assisted": self.timed(hf_generate, target, draft=draft, k=k),
        }
        ours = row["speculative"]["ms_per_token"]
        row["sps_vs_hf"] = row["hf_assisted"]["ms_per_token"] / ours
        loops = statistics.median(row["speculative"]["target_calls"])
        row["loop_ms"] = ours * self.args.tokens / loops
        return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--small", action="store_true", help="tiny shapes: a dry run on CPU")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=128, help="prompt length in tokens")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 4, 6])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--out", type=Path, help="folder for gpu_targets.json")
    args = parser.parse_args()
    result = run(args)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_targets.json").write_text(text)
    summary = {k: v for k, v in result.items() if not isinstance(v, dict | list)}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
