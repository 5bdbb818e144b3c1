"""CPU kernels side by side (issue 23): the calibration of one pair under each CPU backend.

Runs `+experiment=calibrate` once per backend in one invocation (same machine, same prompts),
then prints each backend's target step, s(K), c, alpha and predicted speedup next to the
issue's target (s(4) <= 1.7 on the chosen backend where eager bf16 has s(4) > 3):

    python benchmarks/cpu_kernels.py                       # cpu_bf16 vs cpu_avx2
    python benchmarks/cpu_kernels.py --backends cpu_bf16 cpu_avx2 cpu_compiled
    python benchmarks/cpu_kernels.py --avx2                # the same with torch held to AVX2
    python benchmarks/cpu_kernels.py --backends cpu_bf16 cpu_auto -- task=humaneval

--avx2 sets ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2,
which restrict torch to its AVX2 kernels on an AVX-512 machine (check that eager s(4) > 3 before
trusting the restricted numbers). The first compiled run compiles for minutes; later ones load
the cached graphs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from specbench.kernels import AVX2_ENV

ROOT = Path(__file__).resolve().parents[1]
TARGET_S4 = 1.7


def calibrate(backend: str, results: Path, extra: list[str], env: dict[str, str]) -> pd.DataFrame:
    """One calibrate job under `backend`; its calibration table."""
    out = results / backend
    cmd = [sys.executable, "-m", "specbench", "+experiment=calibrate", f"backend={backend}"]
    subprocess.run(
        [*cmd, f"results_dir={out}", "overwrite=true", *extra], cwd=ROOT, env=env, check=True
    )
    return pd.read_parquet(next(out.rglob("calibration.parquet"))).assign(backend=backend)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["cpu_bf16", "cpu_avx2"])
    parser.add_argument("--avx2", action="store_true", help="restrict torch to AVX2 kernels")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "cpu_kernels")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    args = parser.parse_args()
    env = os.environ | (AVX2_ENV if args.avx2 else {})
    results = args.results / ("avx2_restricted" if args.avx2 else "native")
    tables = [calibrate(b, results, args.overrides, env) for b in args.backends]
    table = pd.concat(tables, ignore_index=True)
    columns = ["backend", "cpu_kind", "k", "target_step_ms", "scoring_cost", "c", "alpha"]
    columns += ["predicted_speedup"]
    wide = table[table.k == 4][columns].round(3)
    print(wide.to_string(index=False))
    for _, row in wide.iterrows():
        verdict = "meets" if row.scoring_cost <= TARGET_S4 else "misses"
        print(f"{row.backend}: s(4) = {row.scoring_cost:.2f} ({verdict} <= {TARGET_S4})")


if __name__ == "__main__":
    main()
