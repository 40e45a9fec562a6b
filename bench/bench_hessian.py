"""Per-element value, gradient and Hessian: symgrad's fused ``value_jacobian_hessian`` against JAX and
PyTorch, in one run, for the Neo-Hookean tetrahedron of ``examples/neo_hookean.py`` (12 inputs) and a 2-D
spring (4 inputs).

    python bench/bench_hessian.py            # N = 1e3, 1e4, 1e5, 1e6
    python bench/bench_hessian.py --quick    # N = 1e3, 1e5, fewer repeats

What each computes per element: symgrad the value, the gradient and the Hessian (one C kernel);
JAX ``jit(vmap(f, grad(f), hessian(f)))``, the same three (one XLA program); PyTorch
``torch.func.vmap(torch.func.hessian(f))``, the Hessian only (eager, forward over reverse). All three
evaluate the same Python formula (explicit 3 x 3 determinant, no LU). Each thread count runs in a child
process (XLA's thread count is fixed at start): symgrad's OpenMP loops, PyTorch's intra-op threads and,
for 1 thread, XLA's (``intra_op_parallelism_threads=1``; with 2 XLA uses its default pool). Rows whose
Hessians exceed 200 MB per framework are not run for JAX and PyTorch (their intermediates are several
times that). Also: the operation count of the fused kernel against SymPy ``hessian`` + ``cse`` of the same
energy, the cold compile time of the tetrahedron (fresh cache directory, all programs, both dtypes, C
build included) and the hvp program's operations against the vjp's. Times: wall clock, the best single call
of several (``best_single``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from common import best_time, optional_jax, optional_torch  # noqa: E402
from neo_hookean import LAM, MU, neo_hookean, tet_energy  # noqa: E402

import symgrad as sg  # noqa: E402
from symgrad.backends import c as c_backend  # noqa: E402

FRAMEWORK_MAX_BYTES = 200e6  # the largest Hessian output JAX and PyTorch are run for
SPRING_K = 50.0


def spring_formula(x, rest, k, sqrt):
    """A 2-D spring between (x[0], x[1]) and (x[2], x[3]) of rest length ``rest``."""
    length = sqrt((x[2] - x[0]) ** 2 + (x[3] - x[1]) ** 2)
    return k / 2 * (length - rest) ** 2


@sg.function(nondiff=("rest", "k"), uniform=("k",))
def spring(x: sg.Vector(4), rest, k):
    return spring_formula(x, rest, k, sg.sqrt)


def tet_inputs(n: int, dtype, rng) -> tuple:
    """Perturbed unit-corner tetrahedra: x (n, 12), their rest inverse edge matrices and volumes."""
    rest = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float) + 0.1 * rng.normal(size=(n, 4, 3))
    dm = np.swapaxes(rest[:, 1:] - rest[:, :1], 1, 2)
    x = rest.reshape(n, 12) + 0.05 * rng.normal(size=(n, 12))
    return tuple(a.astype(dtype) for a in (x, np.linalg.inv(dm), np.abs(np.linalg.det(dm)) / 6))


def spring_inputs(n: int, dtype, rng) -> tuple:
    return tuple(a.astype(dtype) for a in (rng.normal(size=(n, 4)), rng.uniform(0.5, 1.5, n)))


# name, symgrad function, inputs, uniform constants, formula(x, *per-element, *uniform, elementary)
CASES = {
    "neo_hookean_tet": (
        tet_energy,
        tet_inputs,
        (MU, LAM),
        lambda x, d, v, lib: neo_hookean(x, d, v, MU, LAM, lib.log),
    ),
    "spring_2d": (
        spring,
        spring_inputs,
        (SPRING_K,),
        lambda x, r, lib: spring_formula(x, r, SPRING_K, lib.sqrt),
    ),
}


# -- one thread count (a child process) -------------------------------------------------------------------


def framework_calls(name: str, args: tuple, torch, jax, jnp) -> dict:
    formula = CASES[name][3]
    calls = {}
    if jax is not None:

        def f(*a):
            return formula(*a, jnp)

        def three(*a):
            return f(*a), jax.grad(f)(*a), jax.hessian(f)(*a)

        jitted = jax.jit(jax.vmap(three))
        jargs = [jnp.asarray(a) for a in args]
        calls["jax"] = lambda: jax.block_until_ready(jitted(*jargs))
    if torch is not None:
        targs = [torch.from_numpy(a) for a in args]
        hess = torch.func.vmap(torch.func.hessian(lambda *a: formula(*a, torch)))
        calls["torch"] = lambda: hess(*targs)
    return calls


def best_single(calls: dict, rounds: int, budget: float) -> dict:
    """Seconds per call of each of ``calls``: its best single call of up to ``rounds`` (after a warm-up call),
    within ``budget`` seconds each. On a shared machine the best single call is the least disturbed one (a
    batch of calls rarely is). Each runs in a block of its own: right after a PyTorch call its OpenMP
    threads still spin, which would starve a parallel kernel that followed at once."""
    best = {}
    for key, call in calls.items():
        call()
        best[key] = float("inf")
        deadline = time.perf_counter() + budget
        for _ in range(rounds):
            start = time.perf_counter()
            call()
            best[key] = min(best[key], time.perf_counter() - start)
            if start > deadline:
                break
    return best


def check(name: str, args: tuple, ours: np.ndarray, torch, jax) -> None:
    """The frameworks' Hessians agree with symgrad's (on the first 64 rows)."""
    tol = 1e-8 if ours.dtype == np.float64 else 2e-3
    small = tuple(a[:64] for a in args)
    for key, fn in framework_calls(name, small, torch, jax, jax and jax.numpy).items():
        result = fn()
        theirs = np.asarray(result[2] if key == "jax" else result.numpy())
        if not np.allclose(ours[:64], theirs, rtol=tol, atol=tol * np.abs(theirs).max()):
            raise SystemExit(f"{name}: symgrad's Hessian and {key}'s disagree")


def child(threads: int, sizes: list[int], repeats: int, budget: float) -> None:
    torch = optional_torch(threads=threads)
    jax, jnp = optional_jax(x64=True)
    c_backend.set_num_threads(threads)
    rng = np.random.default_rng(0)
    for name, (fn, make, uniform, _) in CASES.items():
        for dtype in (np.float64, np.float32):
            for n in sizes:
                args = make(n, dtype, rng)
                hess = fn.value_jacobian_hessian(*args, *uniform)[2]
                calls = {"symgrad": lambda: fn.value_jacobian_hessian(*args, *uniform)}
                if hess.nbytes <= FRAMEWORK_MAX_BYTES:
                    calls.update(framework_calls(name, args, torch, jax, jnp))
                    if n == sizes[0]:
                        check(name, args, hess, torch, jax)
                times = best_single(calls, repeats, budget)
                sym = times["symgrad"]
                cells = [
                    f"{times[k] * 1e3:.2f} ms | {times[k] / sym:.1f}x" if k in times else "- | -"
                    for k in ("jax", "torch")
                ]
                print(
                    f"| {name} | {np.dtype(dtype).name} | {n:.0e} | {threads} | {sym * 1e3:.2f} ms | "
                    f"{sym / n * 1e9:.0f} ns | {' | '.join(cells)} |",
                    flush=True,
                )


# -- the parent: static measures, then one child per thread count ------------------------------------------


def sympy_ops(name: str) -> int:
    """Operations of SymPy's ``hessian`` + ``cse`` of the energy: value, gradient and upper triangle."""
    import sympy

    fn = CASES[name][0]
    compiled = fn.compiled()
    shapes = dict(zip(compiled.arg_names, compiled.arg_shapes))
    if name == "neo_hookean_tet":
        x = sympy.symbols("x0:12", real=True)
        dm = sympy.Matrix(3, 3, sympy.symbols("d0:9", real=True))
        energy = neo_hookean(x, dm, sympy.Symbol("vol", positive=True), MU, LAM, sympy.log)
    else:
        x = sympy.symbols(f"x0:{shapes['x'][0]}", real=True)
        energy = spring_formula(x, sympy.Symbol("rest", positive=True), SPRING_K, sympy.sqrt)
    grad = [sympy.diff(energy, v) for v in x]
    hess = sympy.hessian(energy, x)
    upper = [hess[i, j] for i in range(len(x)) for j in range(i, len(x))]
    replacements, reduced = sympy.cse([energy, *grad, *upper])
    return int(sum(sympy.count_ops(e) for _, e in replacements) + sum(sympy.count_ops(e) for e in reduced))


def cold_compile_seconds() -> tuple[float, float, float, float]:
    """Wall clock and processor seconds (the compiler's included: on a busy machine the steadier figure) of
    the two stages of the tetrahedron's cold compile: tracing, deriving, lowering and emitting its package
    (``compiled()``), then building its C module (the first call), in a fresh cache directory, on a machine
    where symgrad has run before (the toolchain probe and the direct-call module, once per machine, are
    built first, by the spring)."""
    code = (
        f"import sys, time; sys.path[:0] = {[str(ROOT), str(ROOT / 'examples'), str(ROOT / 'bench')]!r}\n"
        "import resource\n"
        "def cpu():\n"
        "    use = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]\n"
        "    return sum(u.ru_utime + u.ru_stime for u in use)\n"
        "import numpy as np\n"
        "from bench_hessian import spring\n"
        "from neo_hookean import tet_energy\n"
        "spring.compiled().forward(np.ones(4), 1.0, 1.0)\n"
        "c0, t0 = cpu(), time.perf_counter()\n"
        "c = tet_energy.compiled()\n"
        "c1, t1 = cpu(), time.perf_counter()\n"
        "c.value_jacobian_hessian(np.eye(4)[:, 1:].reshape(12), np.eye(3), 1.0, 1.0, 1.0)\n"
        "print(t1 - t0, c1 - c0, time.perf_counter() - t1, cpu() - c1)\n"
    )
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, SYMGRAD_CACHE_DIR=cache)
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
    package, package_cpu, build, build_cpu = map(float, out.stdout.split()[-4:])
    return package, package_cpu, build, build_cpu


def static_table() -> None:
    print(
        "| function | inputs | fused value+J+H ops | SymPy hessian+cse ops | SymPy / fused | vjp ops | "
        "hvp ops | hvp / vjp |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, (fn, *_rest) in CASES.items():
        ops = dict(fn.compiled().op_counts)
        ref = sympy_ops(name)
        n_in = fn.compiled().programs["value_jacobian_hessian"]["outputs"][1]["shape"][1]
        fused = ops["value_jacobian_hessian"]
        print(
            f"| {name} | {n_in} | {fused} | {ref} | {ref / fused:.2f} | {ops['vjp']} | {ops['hvp']} | "
            f"{ops['hvp'] / ops['vjp']:.2f} |"
        )


def write_floor(n: int = 10**5) -> str:
    """The time one thread takes merely to write the spring's 21 outputs a row (value, 1 x 4 gradient, 4 x 4
    Hessian): ``fill`` of preallocated arrays, the least any kernel that returns them can take."""
    cells = []
    for dtype in (np.float64, np.float32):
        arrays = [np.empty(shape, dtype) for shape in ((n,), (n, 1, 4), (n, 4, 4))]
        seconds = best_time(lambda: [a.fill(1.0) for a in arrays], 10, 0.05)
        cells.append(f"{np.dtype(dtype).name} {seconds / n * 1e9:.1f} ns")
    return f"\nwrite floor of the spring's 21 outputs a row, N = 1e5, one thread: {', '.join(cells)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 1e3, 1e5 and fewer repeats")
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)  # a child: one thread count
    args = ap.parse_args()
    sizes = [10**3, 10**5] if args.quick else [10**3, 10**4, 10**5, 10**6]
    repeats, budget = (10, 1.0) if args.quick else (30, 3.0)
    if args.threads:
        child(args.threads, sizes, repeats, budget)
        return
    started = time.perf_counter()
    torch, (jax, _) = optional_torch(), optional_jax()
    print(f"# per-element Hessians ({'quick' if args.quick else 'full'}); CPUs: {os.cpu_count()}")
    print(
        f"torch: {torch.__version__ + ' vmap(hessian), Hessian only' if torch else 'not installed'}; "
        f"jax: {jax.__version__ + ' jit(vmap(value, grad, hessian))' if jax else 'not installed'}\n"
    )
    for fn, *_ in CASES.values():  # build before timing anything (the cache keeps it for the children)
        fn.compiled()
    package, package_cpu, build, build_cpu = cold_compile_seconds()
    print(
        f"cold compile of the tetrahedron (12 x 12 Hessian; all programs, 2 dtypes; {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}): {package + build:.2f} s wall, {package_cpu + build_cpu:.2f} s "
        f"processor (trace, derive, emit {package:.2f} s wall, {package_cpu:.2f} s processor; C build "
        f"{build:.2f} s wall, {build_cpu:.2f} s processor)\n"
    )
    static_table()
    print(write_floor())
    print(
        "\n| function | dtype | N | threads | symgrad value+J+H | per element | jax | jax / symgrad | "
        "torch (H only) | torch / symgrad |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for threads in (1, 2):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        if threads == 1:
            env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        command = [sys.executable, __file__, "--threads", str(threads)] + (["--quick"] if args.quick else [])
        subprocess.run(command, env=env, check=True)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
