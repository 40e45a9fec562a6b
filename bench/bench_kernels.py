"""Value + vjp throughput of symgrad's C and NumPy kernels against hand-written NumPy (and PyTorch / JAX).

For each function, dtype and N, one call computes the outputs and every input gradient given a cotangent.
Columns are times relative to hand-written NumPy (lower is better), the bandwidth the 1-thread C kernel
achieves against a STREAM-style triad (``a = b + s*c``, one C loop) measured in the same run, and the
speedups the targets are stated in (PyTorch's and JAX's time over symgrad C's on 2 threads). The last
table is the fixed per-call cost at N=10 through the public API and through the raw backend ``run``; the
very last, ns per element of the vector math the kernels call: scalar libm, glibc's libmvec and SLEEF
(Debian ``libsleef-dev``, when installed: its ``libsleefgnuabi`` has libmvec's symbol names).

    python bench/bench_kernels.py            # N = 1e3 .. 1e7
    python bench/bench_kernels.py --quick    # N = 1e3 .. 1e6, fewer repeats (< 3 minutes)
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.special

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import best_time, optional_jax, optional_torch  # noqa: E402

# what symgrad sets when its C kernels load first: here torch loads libgomp (which the kernels then share)
# before them, and libgomp reads the policy once, at load. Spinning threads on the shared 2-core machine
# made the two-thread softplus (N=1e6) 3-8x slower than one thread.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import symgrad as sg  # noqa: E402
from symgrad.backends import c as c_backend  # noqa: E402
from symgrad.backends.c import cffi_build as build_c  # noqa: E402

#: PyTorch's threads, set again before each torch timing: torch's wheel ships libgomp.so.1, which the C
#: kernels then share, so ``c_backend.set_num_threads(2)`` also gave torch two threads (its softplus at
#: N=1e6 ran ~2x faster than the "1 thread" the table states, and halved the speedups).
TORCH_THREADS = 1
torch = optional_torch(threads=TORCH_THREADS)
jax, jnp = optional_jax(x64=True)

SQRT_2_PI = math.sqrt(2 / math.pi)


# -- the functions: symgrad definition, hand-written NumPy value+vjp, torch/jax forward --------------------


@sg.function
def softplus(x):
    return sg.log(1 + sg.exp(x))


def softplus_np(x, g):
    e = np.exp(-np.abs(x))
    value = np.maximum(x, 0) + np.log1p(e)
    return value, (g * np.where(x >= 0, 1, e) / (1 + e),)


@sg.function
def gelu_tanh(x):
    return 0.5 * x * (1 + sg.tanh(SQRT_2_PI * (x + 0.044715 * x**3)))


def gelu_tanh_np(x, g):
    x2 = x * x
    t = np.tanh(SQRT_2_PI * (x + 0.044715 * x2 * x))
    value = 0.5 * x * (1 + t)
    d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_PI * (1 + 3 * 0.044715 * x2)
    return value, (g * d,)


@sg.function
def gelu_erf(x):
    return 0.5 * x * (1 + sg.erf(x / math.sqrt(2)))


def gelu_erf_np(x, g):
    e = scipy.special.erf(x * (1 / math.sqrt(2)))
    return 0.5 * x * (1 + e), (g * (0.5 * (1 + e) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)),)


@sg.function
def blend(x, y):
    return sg.sin(x) * sg.exp(-(y**2)) + sg.log(1 + x**2 * y**2)


def blend_np(x, y, g):
    e = np.exp(-y * y)
    s = np.sin(x)
    xy2 = x * x * y * y
    r = 1 / (1 + xy2)
    value = s * e + np.log1p(xy2)
    return value, (g * (np.cos(x) * e + 2 * x * y * y * r), g * (-2 * y * s * e + 2 * x * x * y * r))


@sg.function
def neo_relu(x):
    return sg.where(x > 0, x, -0.1)


def neo_relu_np(x, g):
    pos = x > 0
    return np.where(pos, x, x.dtype.type(-0.1)), (np.where(pos, g, 0),)


@sg.function
def big(x, y):
    """28 operations: tanh, exp, log1p, sigmoid, sqrt, cos, quotients."""
    return (
        sg.tanh(x * y + 1) * sg.exp(-(x**2) / 4)
        + sg.log1p(x**2 + y**2) * sg.sigmoid(x - y)
        + sg.sqrt(1 + x**2 * y**2)
        - sg.cos(x + 2 * y) / (1 + y**2)
    )


def big_np(x, y, g):
    a, e = np.tanh(x * y + 1), np.exp(-x * x / 4)
    q = 1 + x * x + y * y
    lg = np.log1p(x * x + y * y)
    s = 1 / (1 + np.exp(-(x - y)))
    c = np.sqrt(1 + x * x * y * y)
    w = 1 / (1 + y * y)
    cs, sn = np.cos(x + 2 * y), np.sin(x + 2 * y)
    value = a * e + lg * s + c - cs * w
    da = (1 - a * a) * e
    ds = lg * s * (1 - s)
    gx = da * y - a * e * x / 2 + 2 * x / q * s + ds + x * y * y / c + sn * w
    gy = da * x + 2 * y / q * s - ds + x * x * y / c + 2 * sn * w + cs * 2 * y * w * w
    return value, (g * gx, g * gy)


def _torch_forms():
    t = torch
    return {
        "softplus": lambda x: t.nn.functional.softplus(x),
        "gelu_tanh": lambda x: t.nn.functional.gelu(x, approximate="tanh"),
        "gelu_erf": lambda x: t.nn.functional.gelu(x),
        "blend": lambda x, y: t.sin(x) * t.exp(-(y**2)) + t.log1p(x**2 * y**2),
        "neo_relu": lambda x: t.where(x > 0, x, t.full_like(x, -0.1)),
        "big": lambda x, y: (
            t.tanh(x * y + 1) * t.exp(-(x**2) / 4)
            + t.log1p(x**2 + y**2) * t.sigmoid(x - y)
            + t.sqrt(1 + x**2 * y**2)
            - t.cos(x + 2 * y) / (1 + y**2)
        ),
    }


def _jax_forms():
    j = jnp
    return {
        "softplus": jax.nn.softplus,
        "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
        "gelu_erf": lambda x: jax.nn.gelu(x, approximate=False),
        "blend": lambda x, y: j.sin(x) * j.exp(-(y**2)) + j.log1p(x**2 * y**2),
        "neo_relu": lambda x: j.where(x > 0, x, -0.1),
        "big": lambda x, y: (
            j.tanh(x * y + 1) * j.exp(-(x**2) / 4)
            + j.log1p(x**2 + y**2) * jax.nn.sigmoid(x - y)
            + j.sqrt(1 + x**2 * y**2)
            - j.cos(x + 2 * y) / (1 + y**2)
        ),
    }


CASES = [
    ("softplus", softplus, softplus_np, 1),
    ("gelu_tanh", gelu_tanh, gelu_tanh_np, 1),
    ("gelu_erf", gelu_erf, gelu_erf_np, 1),
    ("blend", blend, blend_np, 2),
    ("neo_relu", neo_relu, neo_relu_np, 1),
    ("big", big, big_np, 2),
]


# -- timing ---------------------------------------------------------------------------------------------


def triad_gbps(n: int, min_time: float, repeats: int) -> float:
    """STREAM triad a = b + s*c in one C loop (1 thread): bytes 3*8*n per call."""
    src = (
        "#include <stdint.h>\n"
        "void triad(int64_t n, const double *restrict b, const double *restrict c, double *restrict a)\n{\n"
        "#pragma omp simd\n    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0*c[i];\n}\n"
    )
    m = build_c.load(src, "void triad(int64_t, const double *, const double *, double *);", label="triad")
    b, c, a = np.ones(n), np.ones(n), np.empty(n)
    pb, pc, pa = (m.ffi.from_buffer("double[]", v) for v in (b, c, a))
    t = best_time(lambda: m.lib.triad(n, pb, pc, pa), repeats, min_time)
    return 24 * n / t / 1e9


def quiet_time(fn, repeats: int, min_time: float) -> float:
    """``best_time`` over 20x as many batches, each 1/20 as long (same total time): on a shared machine, the
    best of many short batches finds moments when every core is free, which the two-thread times need."""
    return best_time(fn, 20 * repeats, min_time / 20)


def inputs(n: int, n_args: int, dtype, rng) -> list[np.ndarray]:
    return [rng.normal(scale=2.0, size=n).astype(dtype) for _ in range(n_args + 1)]  # args, then cotangent


def check(name, sym_result, hand_result, dtype):
    (sv, sg_grads), (hv, h_grads) = sym_result, hand_result
    tol = 2e-3 if dtype == np.float32 else 1e-9
    for a, b in zip((sv, *sg_grads), (hv, *h_grads)):
        if not np.allclose(a, b, rtol=tol, atol=tol):
            raise SystemExit(
                f"{name}: symgrad and hand-written NumPy disagree (max diff {np.max(np.abs(a - b))})"
            )


def run_case(name, fn, hand, n_args, dtype, sizes, min_time, repeats, rng):
    torch_f = _torch_forms()[name] if torch else None
    jax_f = None
    if jax:
        f = _jax_forms()[name]
        jax_f = jax.jit(lambda *a: (lambda v, back: (v, back(a[-1])))(*jax.vjp(f, *a[:-1])))
    rows = []
    for n in sizes:
        arrays = inputs(n, n_args, dtype, rng)
        times = {}
        sg.set_backend("numpy")
        times["sg-numpy"] = quiet_time(lambda: fn.value_and_vjp(*arrays), repeats, min_time)
        sym_np = fn.value_and_vjp(*arrays)
        sg.set_backend("c")
        check(name, fn.value_and_vjp(*arrays), hand(*arrays), dtype)
        check(name, sym_np, hand(*arrays), dtype)
        for threads in (1, 2):
            c_backend.set_num_threads(threads)
            times[f"sg-c {threads}t"] = quiet_time(lambda: fn.value_and_vjp(*arrays), repeats, min_time)
        times["hand-numpy"] = quiet_time(lambda: hand(*arrays), repeats, min_time)
        if torch_f is not None:

            def torch_call():
                ts = [torch.from_numpy(a).requires_grad_() for a in arrays[:-1]]
                out = torch_f(*ts)
                out.backward(torch.from_numpy(arrays[-1]))
                return out.detach(), [t.grad for t in ts]

            torch.set_num_threads(TORCH_THREADS)  # (shared with the C kernels' OpenMP)
            times["torch"] = quiet_time(torch_call, repeats, min_time)
        if jax_f is not None:
            jarrays = [jnp.asarray(a) for a in arrays]
            times["jax"] = quiet_time(lambda: jax.block_until_ready(jax_f(*jarrays)), repeats, min_time)
        moved = (2 * n_args + 2) * n * np.dtype(dtype).itemsize  # args + cotangent in, value + grads out
        rows.append((n, times, moved / times["sg-c 1t"] / 1e9))
    return rows


def overhead_table(min_time: float, repeats: int) -> list[str]:
    x, g = np.linspace(-1, 1, 10), np.ones(10)
    lines = ["| per call at N=10 | symgrad C | symgrad NumPy | hand NumPy |", "|---|---|---|---|"]
    results = {}
    for backend in ("c", "numpy"):
        sg.set_backend(backend)
        compiled = softplus.compiled()
        results[backend, "api"] = best_time(lambda: compiled.value_and_vjp(x, g), repeats, min_time)
        _, kernels = compiled._kernel_set()
        run = kernels.program(compiled.ident, "value_and_vjp", np.dtype(np.float64))
        results[backend, "run"] = best_time(lambda: run((x, g), (10,)), repeats, min_time)
    hand = best_time(lambda: softplus_np(x, g), repeats, min_time)
    lines.append(
        f"| softplus value_and_vjp (public API) | {results['c', 'api'] * 1e6:.1f} us | "
        f"{results['numpy', 'api'] * 1e6:.1f} us | {hand * 1e6:.1f} us |"
    )
    lines.append(
        f"| backend run() only | {results['c', 'run'] * 1e6:.1f} us | "
        f"{results['numpy', 'run'] * 1e6:.1f} us | |"
    )
    sg.set_backend("c")
    x3, g3 = np.linspace(-1, 1, 1000), np.ones(1000)
    run = (
        softplus.compiled()
        ._kernel_set()[1]
        .program(softplus.compiled().ident, "value_and_vjp", np.dtype(np.float64))
    )
    t = best_time(lambda: run((x3, g3), (1000,)), repeats, min_time)
    lines.append(f"| backend run() at N=1e3 | {t * 1e6:.1f} us | | |")
    return lines


_VECTOR_MATH_C = r"""
#include <math.h>
#include <stdio.h>
#include <time.h>
static double now(void)
{ struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec*1e-9; }
#define F(f, T, lo, hi, SIMD) SIMD T f(T); T x_##f[4096], y_##f[4096]; /* extern: the loops are kept */ \
static void l_##f(void) { _Pragma("omp simd") for (int i = 0; i < 4096; ++i) y_##f[i] = f(x_##f[i]); } \
static void b_##f(void) { for (int i = 0; i < 4096; ++i) x_##f[i] = lo + (hi - lo)*(i + 0.5)/4096; \
    double best = 1e9; for (int r = 0; r < 300; ++r) { double t = now(); l_##f(); t = now() - t; \
    if (t < best) best = t; } printf("%s %.2f\n", #f, best/4096*1e9); }
#define V _Pragma("omp declare simd notinbranch")
#ifdef SLEEF
#define G V
#else
#define G
#endif
F(exp, double, -20, 20, V) F(log1p, double, 0, 1, V) F(tanh, double, -5, 5, V) F(erf, double, -4, 4, V)
F(expf, float, -20, 20, V) F(log1pf, float, 0, 1, V) F(tanhf, float, -5, 5, V) F(erff, float, -4, 4, V)
F(lgamma, double, 0.1, 30, G) F(lgammaf, float, 0.1, 30, G) F(tgamma, double, 0.1, 30, G)
int main(void) { b_exp(); b_log1p(); b_tanh(); b_erf(); b_expf(); b_log1pf(); b_tanhf(); b_erff();
    b_lgamma(); b_lgammaf(); b_tgamma(); return 0; }
"""


def vector_math_table(tc) -> list[str]:
    """ns per element of each vector math function, 4096 in-cache values, best of 300 (one process each):
    scalar libm, libmvec and SLEEF, at the toolchain's flags (its vector width)."""
    flags = [f for f in tc.flags if f not in ("-fPIC", "-fopenmp")]
    builds = {
        "scalar libm": ([f for f in flags if f != "-fopenmp-simd"], ["-lm"]),
        "libmvec": (flags, ["-lmvec", "-lm"]),
        "SLEEF 3.x (gnuabi)": ([*flags, "-DSLEEF"], ["-lsleefgnuabi", "-lm"]),
    }
    columns: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "vm.c").write_text(_VECTOR_MATH_C)
        for name, (fl, libs) in builds.items():
            exe = Path(d) / "vm"
            r = subprocess.run(
                [*tc.cc, *fl, str(Path(d) / "vm.c"), "-o", str(exe), *libs], capture_output=True
            )
            out = (
                subprocess.run([str(exe)], capture_output=True, text=True).stdout if r.returncode == 0 else ""
            )
            columns[name] = dict(line.split() for line in out.splitlines())
    width = "512 bits" if tc.wide else "gcc's default"
    lines = [f"| ns/element, vector width {width} | " + " | ".join(columns) + " |"]
    lines.append("|---|" + "---|" * len(columns))
    for f in next(iter(columns.values())):
        lines.append(f"| {f} | " + " | ".join(c.get(f, "n/a") for c in columns.values()) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N up to 1e6 and fewer repeats")
    args = ap.parse_args()
    sizes = [10**3, 10**5, 10**6] if args.quick else [10**3, 10**5, 10**6, 10**7]
    min_time, repeats = (0.02, 3) if args.quick else (0.1, 5)
    rng = np.random.default_rng(0)
    started = time.perf_counter()

    sg.set_backend("c")
    t0 = time.perf_counter()
    for _, fn, _, n_args in CASES:  # build everything first (cached on disk after the first run)
        fn.value_and_vjp(*inputs(4, n_args, np.float64, rng))
    build_s = time.perf_counter() - t0
    if softplus.compiled().backend != "c":
        print("warning: the C backend is unavailable; 'sg-c' columns measure the NumPy fallback")
    tc = build_c.toolchain()
    triad = triad_gbps(10**7, min_time, repeats)
    print(f"# symgrad kernel benchmark ({'quick' if args.quick else 'full'})")
    print(
        f"compiler: {tc.version}; flags: {' '.join(tc.flags)}; OpenMP {'on' if tc.openmp else 'off'}; "
        f"libmvec tier {tc.libmvec}; 512-bit vectors {'on' if tc.wide else 'off'}; CPUs: {os.cpu_count()}; "
        f"first compile/load of {len(CASES)} functions: "
        f"{build_s:.1f} s"
    )
    print(f"STREAM-style triad (1 thread, N=1e7, f64): {triad:.1f} GB/s")
    print(
        f"torch: {torch.__version__ + ' (1 thread, eager autograd)' if torch else 'not installed'}; "
        f"jax: {jax.__version__ + ' (jit(vjp))' if jax else 'not installed'}"
    )
    print(
        "\nTimes relative to hand-written NumPy (lower is better); "
        "GB/s and % of triad: symgrad C, 1 thread.\n"
    )
    methods = ["sg-c 1t", "sg-c 2t", "sg-numpy"] + (["torch"] if torch else []) + (["jax"] if jax else [])
    rivals = [m for m in ("torch", "jax") if m in methods]  # the targets: their time over sg-c 2t's
    print(
        "| function | dtype | N | hand NumPy | "
        + " | ".join(methods)
        + " | C GB/s | % triad | "
        + "".join(f"{m} / sg-c 2t | " for m in rivals)
    )
    print("|---|---|---|---|" + "---|" * len(methods) + "---|---|" + "---|" * len(rivals))
    for name, fn, hand, n_args in CASES:
        for dtype in (np.float64, np.float32):
            for n, times, gbps in run_case(name, fn, hand, n_args, dtype, sizes, min_time, repeats, rng):
                base = times["hand-numpy"]
                cells = " | ".join(f"{times[m] / base:.2f}" if m in times else "-" for m in methods)
                speedups = "".join(f"{times[m] / times['sg-c 2t']:.1f}x | " for m in rivals)
                print(
                    f"| {name} | {np.dtype(dtype).name} | {n:.0e} | {base * 1e3:.3f} ms | {cells} | "
                    f"{gbps:.1f} | {100 * gbps / triad:.0f} | {speedups}",
                    flush=True,
                )
    c_backend.set_num_threads(os.cpu_count() or 1)
    print()
    print("\n".join(overhead_table(min_time, repeats)))
    print()
    print("\n".join(vector_math_table(tc)))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
