"""Compile time per stage as functions grow: a Lennard-Jones cluster written as one ``sg.Matrix(N, 3)``
function (N atoms, N(N-1)/2 pairs), tanh MLPs written as one function (weights as Python floats) and the
bundle adjustment residual (examples/ba_model.py).

    python bench/bench_compile.py            # LJ 5, 10, 20, 30 atoms, both MLPs, BA (a few minutes)
    python bench/bench_compile.py --quick    # LJ 5, 10, 20, the small MLP, BA (under a minute)

Stages, seconds of CPU time: trace, derive (the forward program), lower (every program: vjp, jvp, Jacobian,
Hessian where it fits, hvp), emit per target, and gcc (the C backend's cold build of the package, in a cache
directory of its own: this process's CPU time and its compiler processes'). CPU time, not wall time: other
load on a shared machine does not inflate it (gcc's units run in parallel, so gcc's wall time is shorter).
Last column: each cluster's value_and_vjp in microseconds per row (float64, one thread), which shows what
the -O0 build of a function past 1 MB of C (``SYMGRAD_O0_BYTES``) costs at run time.
"""

# no `from __future__ import annotations`: the annotations sg.Matrix(n, 3) read the closure's n
import argparse
import importlib.util
import os
import resource
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np
from common import sg

import emitters
from symgrad.backends import backend
from symgrad.build.package import Package, write_package
from symgrad.compiler import derive, lower

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from large_models import lennard_jones, tanh_mlp  # noqa: E402


def ba_residual():
    spec = importlib.util.spec_from_file_location("ba_model", ROOT / "examples" / "ba_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ba_residual


def cpu_time() -> float:
    """CPU seconds of this process and of its finished child processes (the compiler)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def stages(fn, tmp: Path) -> dict[str, float]:
    """CPU seconds per stage for one function, its C build cold."""
    times: dict[str, float] = {}
    start = cpu_time()
    spec = fn.trace()
    times["trace"] = cpu_time() - start
    start = cpu_time()
    d = derive(spec)
    times["derive"] = cpu_time() - start
    start = cpu_time()
    kernel = lower(d)
    times["lower"] = cpu_time() - start
    info = emitters.ModelInfo(source="bench", symgrad_version=sg.__version__)
    for name in ("c", "numpy"):
        start = cpu_time()
        emitters.get(name).emit_module([kernel], info)
        times[f"emit {name}"] = cpu_time() - start
    path = tmp / f"{spec.name}_symgrad"
    write_package([kernel], path, "bench", spec.name)
    start = cpu_time()
    backend("c").load(Package(path, quiet=True))
    times["gcc"] = cpu_time() - start
    return times


def lj_row_us(fn, n: int, tmp: Path) -> float:
    """value_and_vjp of an n-atom cluster's package (built by ``stages``), float64, one thread: best
    microseconds per row (atoms on a jittered grid, so no pair is near r = 0)."""
    from symgrad.backends.c import set_num_threads
    from symgrad.compiled import load_package

    f = load_package(tmp / f"{fn.name}_symgrad", quiet=True)[fn.name]
    rows = 2000
    rng = np.random.default_rng(0)
    grid = np.stack(np.meshgrid(*[np.arange(5)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n] * 1.5
    x = grid + 0.1 * rng.normal(size=(rows, n, 3))
    set_num_threads(1)
    best = min(timeit.repeat(lambda: f.value_and_vjp(x, np.ones(rows)), number=1, repeat=5))
    return best / rows * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the smaller functions only (under a minute)")
    args = ap.parse_args()
    cases = [(f"LJ {n} atoms", lennard_jones(n)) for n in ((5, 10, 20) if args.quick else (5, 10, 20, 30))]
    cases.append(("tanh MLP 3x20", tanh_mlp(3, 20)))
    if not args.quick:
        cases += [("tanh MLP 10x20", tanh_mlp(10, 20)), ("tanh MLP 3x60", tanh_mlp(3, 60))]
    cases.append(("BA residual", ba_residual()))
    columns = ["trace", "derive", "lower", "emit c", "emit numpy", "gcc"]
    print(f"# compile time per stage, seconds of CPU time ({'quick' if args.quick else 'full'}); us/row: a")
    print("# cluster's value_and_vjp, float64, one thread (functions past 1 MB of C build at -O0)")
    print(f"| function | {' | '.join(columns)} | total | us/row |")
    print("|---" * (len(columns) + 3) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SYMGRAD_CACHE_DIR"] = str(Path(tmp) / "cache")  # every C build cold
        for label, fn in cases:
            t = stages(fn, Path(tmp))
            cells = " | ".join(f"{t[c]:.2f}" for c in columns)
            atoms = int(label.split()[1]) if label.startswith("LJ") else 0
            row = f"{lj_row_us(fn, atoms, Path(tmp)):.2f}" if atoms else "-"
            print(f"| {label} | {cells} | {sum(t.values()):.2f} | {row} |", flush=True)


if __name__ == "__main__":
    main()
