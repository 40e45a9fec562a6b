"""A symgrad-compiled 20-op elementwise formula as one PyTorch op, against the same formula as PyTorch eager
ops and under ``torch.compile``: forward + backward per call, N = 1e3 .. 1e7 elements.

    python bench/bench_interop.py [--quick] [--dtype float32|float64] [--threads K] [--repeat 3] [--max-n 1e7]

The formula is ``bench_runtime``'s: 5 x (multiply, add, sin, multiply by x). symgrad compiles it ahead of time
(``@sg.function`` -> C kernels, cached on disk), so its op needs no warm-up; ``torch.compile`` (inductor,
``dynamic=True``, compiled once for every N) is timed after warm-up and its compile time is reported
separately. Targets: >= 5x faster than eager PyTorch, within 1.5x of warm ``torch.compile``.
Skips (exit 0) when PyTorch is not installed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from common import best_time, chain20, formula, optional_torch  # noqa: E402

torch = optional_torch()


def fwd_bwd(fn: Callable, x: torch.Tensor, seed: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        x.grad = None
        fn(x).backward(seed)

    return step


def fmt_time(seconds: float) -> str:
    if seconds != seconds:
        return "-"
    return f"{seconds * 1e3:9.3f}" if seconds < 10 else f"{seconds:8.1f}s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N up to 1e6 only")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved timing rounds (best of)")
    parser.add_argument("--max-n", type=float, default=None, help="largest N (default 1e7, 1e6 with --quick)")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile column")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for PyTorch and for symgrad's OpenMP loops alike (default: PyTorch's)",
    )
    args = parser.parse_args(argv)
    if torch is None:
        print("bench_interop: PyTorch is not installed; skipped")
        return 0
    dtype = getattr(torch, args.dtype)
    max_n = int(args.max_n or (1e6 if args.quick else 1e7))
    sizes = [n for n in (10**3, 10**4, 10**5, 10**6, 10**7) if n <= max_n]

    start = time.perf_counter()
    compiled = chain20.compiled()
    build = time.perf_counter() - start
    op = compiled.to_torch()
    eager = lambda t: formula(t, torch.sin)  # noqa: E731

    # Agreement first (values and gradients), on a small input.
    xs = torch.linspace(-3, 3, 1001, dtype=dtype, requires_grad=True)
    seed0 = torch.linspace(1, 2, 1001, dtype=dtype)
    start = time.perf_counter()
    out = op(xs)
    out.backward(seed0)
    first_call = time.perf_counter() - start
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    if compiled.backend == "c":
        from symgrad.backends.c import set_num_threads

        set_num_threads(threads)
    ours = (out.detach().clone(), xs.grad.clone())
    xs.grad = None
    ref = eager(xs)
    ref.backward(seed0)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours[0], ref.detach(), **tol)
    torch.testing.assert_close(ours[1], xs.grad, **tol)

    print(
        f"torch {torch.__version__}, {threads} threads (PyTorch and symgrad), {os.cpu_count()} CPUs; "
        f"symgrad backend {compiled.backend}; {args.dtype}; forward + backward per call"
    )
    print(
        f"symgrad: trace and package {build:.2f} s, first call {first_call * 1e3:.2f} ms "
        f"(loads the C kernels, building them on a cache miss), then no warm-up"
    )

    tc = None
    if not args.no_compile:
        torch._dynamo.reset()
        tc = torch.compile(eager, dynamic=True)

    header = (
        f"{'N':>9} | {'symgrad op ms':>13} | {'eager ms':>9} | {'compile ms':>10} | "
        f"{'eager/symgrad':>13} | {'symgrad/compile':>15} | {'first compiled call':>19}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for n in sizes:
        x = torch.randn(n, dtype=dtype, requires_grad=True)
        seed = torch.randn(n, dtype=dtype)
        steps = {"symgrad": fwd_bwd(op, x, seed), "eager": fwd_bwd(eager, x, seed)}
        first = float("nan")
        if tc is not None:
            start = time.perf_counter()
            fwd_bwd(tc, x, seed)()  # compiles (first N) or re-guards (later N)
            first = time.perf_counter() - start
            for _ in range(3):
                fwd_bwd(tc, x, seed)()  # warm-up
            steps["compile"] = fwd_bwd(tc, x, seed)
        best = {k: float("inf") for k in steps}
        for _ in range(args.repeat):  # interleaved rounds: a busy machine hurts every column alike
            for k, step in steps.items():
                best[k] = min(best[k], best_time(step, 1, 0.25))
        t_sg, t_eager, t_tc = best["symgrad"], best["eager"], best.get("compile", float("nan"))
        rows.append((n, t_sg, t_eager, t_tc))
        ratio = f"{t_sg / t_tc:>14.2f}x" if tc is not None else f"{'-':>15}"
        first_s = f"{first:>17.2f} s" if tc is not None else f"{'-':>19}"
        print(
            f"{n:>9.0e} | {fmt_time(t_sg):>13} | {fmt_time(t_eager):>9} | {fmt_time(t_tc):>10} | "
            f"{t_eager / t_sg:>12.1f}x | {ratio} | {first_s}",
            flush=True,
        )

    fast = [n for n, s, e, _ in rows if e / s >= 5]
    close = [n for n, s, _, c in rows if s / c <= 1.5]
    print(f"target >= 5x faster than eager: met at N = {', '.join(f'{n:.0e}' for n in fast) or 'none'}")
    if tc is not None:
        met = ", ".join(f"{n:.0e}" for n in close) or "none"
        print(f"target within 1.5x of warm torch.compile: met at N = {met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
