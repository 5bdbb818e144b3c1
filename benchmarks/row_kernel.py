"""specbench's AVX2 bf16 row kernel against eager bf16 F.linear, side by side (issue 23).

For the 1.5B target's matmul shapes and 1..17 rows (a decode step, scoring K+1 tokens), prints
ms per call of each kernel, T(M)/T(1) per kernel, and kernel/eager per M, interleaved call by
call so that both see the same machine state:

    python benchmarks/row_kernel.py            # the target's shapes, 2 threads
    python benchmarks/row_kernel.py --avx2     # torch held to its AVX2 kernels (AVX-512 CPUs)
    python benchmarks/row_kernel.py --int4     # the int4 draft's shapes: torch's int4 vs ours
    python benchmarks/row_kernel.py --step     # every linear of one decode step, in order
    python benchmarks/row_kernel.py --dot --step   # AVX-512-BF16 CPUs: oneDNN packed vs ours
    python benchmarks/row_kernel.py --pad --step   # oneDNN packed: one row as is vs padded

Per shape, the same weight is called again and again, so a shape that fits the CPU's cache
(everything but lm_head) runs from cache. --step calls every layer of a whole step (28 layers of
the target, 24 of the draft with q/k/v and gate/up fused, then lm_head) once per pass: the
weights stream from memory, as in decoding.

Target (issue 23): T(5)/T(1) <= 1.7 on the chosen kernel where eager bf16 has > 3. With --int4
the "eager" column is torch's int4 kernel (`Int4Linear`), "kernel" specbench's (`Int4RowsLinear`).
With --dot (CPUs with avx512_bf16) "eager" is oneDNN's packed bf16 linear (`PackedLinear`, what
backend=cpu_bf16 runs) and "kernel" specbench's AVX-512-BF16 row kernel (`bf16_dot_linear`).
With --pad both are packed; "kernel" runs a one-row call padded to kernels.PAD_ROWS rows
(`backend.pad_decode`); only the M = 1 line differs.
"""

from __future__ import annotations

import argparse
import sys
import time

ROWS = (1, 2, 3, 5, 9, 17)
INT4_ROWS = (1, 2, 3, 5, 8)  # the int path's widths (quantize.DENSE_TOKENS)
SHAPES = {  # (out, in) of Qwen2.5-1.5B's linears; lm_head once per step
    "q/o_proj": (1536, 1536),
    "gate/up_proj": (8960, 1536),
    "down_proj": (1536, 8960),
    "lm_head": (151936, 1536),
}
STEP = [(1536, 1536), (256, 1536), (256, 1536), (1536, 1536), (8960, 1536), (8960, 1536),
        (1536, 8960)] * 28 + [(151936, 1536)]  # fmt: skip
INT4_STEP = [(1152, 896), (896, 896), (9728, 896), (896, 4864)] * 24 + [(151936, 896)]
INT4_SHAPES = {  # Qwen2.5-0.5B's, the int4 draft
    "q/o_proj": (896, 896),
    "gate/up_proj": (4864, 896),
    "down_proj": (896, 4864),
    "lm_head": (151936, 896),
}


def layers(out_f: int, in_f: int, int4: bool, gen, dot: bool = False, pad: bool = False):
    """(eager, kernel) callables on x for one shape: bf16 F.linear vs the bf16 row kernel,
    torch's int4 layer vs specbench's, (dot) oneDNN's packed bf16 vs the AVX-512-BF16 one, or
    (pad) oneDNN's packed bf16 without and with one-row calls padded."""
    import torch

    from specbench.cpu_gemm import bf16_dot_linear, bf16_linear
    from specbench.kernels import PackedLinear
    from specbench.quantize import Int4Linear, Int4RowsLinear

    linear = torch.nn.Linear(in_f, out_f, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(out_f, in_f, generator=gen))
    linear = linear.to(torch.bfloat16)
    if int4:
        theirs, ours = Int4Linear(linear), Int4RowsLinear(linear)
        return theirs._int_forward, ours._int_forward
    weight = linear.weight.detach()
    if pad:
        return PackedLinear(weight), PackedLinear(weight, pad_one_row=True)
    if dot:
        return PackedLinear(weight), lambda x: bf16_dot_linear(x, weight).to(torch.bfloat16)
    return (
        lambda x: torch.nn.functional.linear(x, weight),
        lambda x: bf16_linear(x.float(), weight).to(torch.bfloat16),
    )


def timed_pair(eager, kernel, calls: int) -> tuple[float, float]:
    """Median ms of each, calls alternating (after two warm-up calls of each)."""
    times: dict[str, list[float]] = {"eager": [], "kernel": []}
    for i in range(calls + 2):
        for name, fn in (("eager", eager), ("kernel", kernel)):
            start = time.perf_counter()
            fn()
            if i >= 2:
                times[name].append(time.perf_counter() - start)
    return tuple(1e3 * sorted(t)[len(t) // 2] for t in times.values())  # type: ignore[return-value]


def widths_arg(text: str) -> tuple[int, ...]:
    """Call widths from "1,5,6,7"; argparse turns the ValueError into one usage line."""
    widths = tuple(int(m) for m in text.split(","))
    if min(widths) < 1:
        raise ValueError(text)
    return widths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--avx2", action="store_true", help="restrict torch to AVX2 kernels")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--int4", action="store_true", help="the int4 draft's shapes and kernels")
    parser.add_argument("--step", action="store_true", help="all of one step's linears per call")
    parser.add_argument("--dot", action="store_true", help="oneDNN packed vs AVX-512-BF16 kernel")
    parser.add_argument("--pad", action="store_true", help="oneDNN packed: one row padded or not")
    parser.add_argument(
        "--rows", type=widths_arg, help="call widths, e.g. 1,5,6,7 (default: ROWS, or INT4_ROWS)"
    )
    args = parser.parse_args()
    if args.avx2:
        from specbench.kernels import rerun_held_to_avx2

        rerun_held_to_avx2(__file__, [a for a in sys.argv[1:] if a != "--avx2"])

    import torch

    from specbench.cpu_gemm import load_kernel

    torch.set_num_threads(args.threads)
    load_kernel()
    torch.set_grad_enabled(False)  # PackedLinear is an nn.Module: no autograd graphs
    cap = torch.backends.cpu.get_cpu_capability()
    print(f"torch {torch.__version__}, CPU capability {cap}, {args.threads} threads")
    print(f"{'shape':>14} {'M':>3} {'eager ms':>9} {'kernel ms':>10} {'kernel/eager':>13}"
          f" {'eager T(M)/T(1)':>16} {'kernel T(M)/T(1)':>17}")  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    shapes, widths = (INT4_SHAPES, INT4_ROWS) if args.int4 else (SHAPES, ROWS)
    widths = args.rows or widths
    runs = {name: [shape] for name, shape in shapes.items()}  # name -> the layers of one call
    if args.step:
        runs = {"step": INT4_STEP if args.int4 else STEP}
    for name, layer_shapes in runs.items():
        calls = [(layers(o, i, args.int4, gen, args.dot, args.pad), i) for o, i in layer_shapes]
        first = None
        for rows in widths:
            xs = {i: torch.randn(rows, i, generator=gen).to(torch.bfloat16) for _, i in calls}
            eager, kernel = timed_pair(
                lambda: [fns[0](xs[i]) for fns, i in calls],  # noqa: B023
                lambda: [fns[1](xs[i]) for fns, i in calls],  # noqa: B023
                args.calls,
            )
            first = first or (eager, kernel)
            print(f"{name:>14} {rows:>3} {eager:>9.2f} {kernel:>10.2f} {kernel / eager:>13.2f}"
                  f" {eager / first[0]:>16.2f} {kernel / first[1]:>17.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
