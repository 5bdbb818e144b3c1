"""specbench's llama.cpp driver against llama-bench (issue 27): does the harness add overhead?

Same GGUF, same threads, side by side in one invocation: llama-bench's tg (decode tokens/s, no
prompt), then llama-server driven by specbench's request code on a short prompt, per request
(a) llama.cpp's own decode clock (predicted_ms) and (b) specbench's wall clock around the HTTP
request minus llama.cpp's prompt time. Target: (b) within 10% of llama-bench.

    python benchmarks/llamacpp_overhead.py                   # the offline pair's 1.5B target
    python benchmarks/llamacpp_overhead.py --model draft --tokens 64 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from statistics import median

from specbench.llamacpp.build import require_binary
from specbench.llamacpp.server import LlamaServer
from specbench.methods.llamacpp import repack, request
from specbench.packaged import gguf_file
from specbench.provenance import cpu_columns
from specbench.sampling import SamplingParams

MODELS = {
    "target": "qwen2.5-coder-1.5b-instruct-q4_k_m",
    "draft": "qwen2.5-coder-0.5b-instruct-q4_k_m",
}
TARGET = 0.10  # at most 10% slower than llama-bench


def llama_bench(model: Path, tokens: int, threads: int, repeats: int, packed: bool) -> float:
    """llama-bench's decode tokens/s (tg<tokens>, no prompt)."""
    out = subprocess.run(
        [str(require_binary("llama-bench")), "-m", str(model), "-t", str(threads), "-p", "0",
         "-n", str(tokens), "-r", str(repeats), "--repack", str(int(packed)), "-o", "json"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return float(json.loads(out.stdout)[0]["avg_ts"])


def served(
    model: Path, tokens: int, threads: int, repeats: int, packed: bool
) -> tuple[float, float]:
    """(llama.cpp's own decode tokens/s, ours from the wall clock) over `repeats` requests."""
    args = ["-m", str(model), "-c", "1024", "--parallel", "1", "--no-webui", "--cache-ram", "0"]
    args += [] if packed else ["--no-repack"]
    own, wall = [], []
    with (
        tempfile.TemporaryDirectory() as tmp,
        LlamaServer(require_binary(), args, Path(tmp) / "server.log", threads) as server,
    ):
        prompt = [9707, 11, 1879, 0]  # "Hello, world!" in Qwen2.5's vocabulary
        sampling = SamplingParams(0.0)
        for repeat in range(repeats + 1):  # the first request is a warm-up
            start = time.perf_counter()
            reply = server.post("/completion", request(prompt, tokens, sampling, repeat, None))
            seconds = time.perf_counter() - start
            timings = reply["timings"]
            if repeat:
                own.append(timings["predicted_n"] / timings["predicted_ms"] * 1e3)
                wall.append(timings["predicted_n"] / (seconds - timings["prompt_ms"] / 1e3))
    return median(own), median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="target")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = gguf_file(MODELS[args.model])
    packed = repack(None)  # as the engines experiment runs it on this CPU
    bench = llama_bench(model, args.tokens, args.threads, args.repeats, packed)
    own, wall = served(model, args.tokens, args.threads, args.repeats, packed)
    setup = f"{args.threads} threads, repack {packed}, tg{args.tokens}, median of {args.repeats}"
    cpu = cpu_columns()
    print(f"{model.name}, cpu_kind {cpu['cpu_kind']} ({cpu['cpu_model']}), {setup}:")
    print(f"  llama-bench                      {bench:7.2f} tok/s")
    for name, value in (("its own clock", own), ("specbench's clock", wall)):
        print(f"  llama-server, {name:<18} {value:7.2f} tok/s  ({value / bench:.3f}x llama-bench)")
    verdict = "meets" if wall >= (1 - TARGET) * bench else "MISSES"
    print(f"  {verdict} the target: within {TARGET:.0%} of llama-bench")


if __name__ == "__main__":
    main()
