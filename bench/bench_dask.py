"""float32 ``value_and_vjp`` over many rows: the in-process C kernel against Dask (threads scheduler, and a
LocalCluster of 1 and 2 worker processes), same run, chunks of 4e6 rows.

    python bench/bench_dask.py [--quick] [--max-rows 2e8] [--chunk 4e6]

Functions: a 28-op elementwise formula (7 x (multiply, add, sin, multiply by x)) and the ADBench bundle
adjustment residual (``examples/ba_model.py``: 11 + 3 + 1 + 2 numbers in, 2 out per row). Under Dask the
rows are made chunk by chunk on the workers; "data" is a pass that only makes and sums them, and the
per-chunk overhead is (Dask time - data time) x workers / chunks - the in-process kernel time of one
chunk (on one OpenMP thread, as under Dask), as a share of that kernel time. Peak RSS: the largest
worker's, after the run. In-process columns are left out ("-") where the arrays would not fit in
memory. Targets (issue 23): overhead <= 10% at chunks of 4e6; 2 workers >= 1.7x faster than 1 on a
2-core machine; worker memory a few chunks.
Skips (exit 0) when Dask or distributed is not installed.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from common import best_time, sg  # noqa: E402

from symgrad.backends.c import get_num_threads, set_num_threads  # noqa: E402

try:
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster
except ImportError:
    dask = None

F32 = np.float32


@sg.function
def formula28(x):
    y = x
    for _ in range(7):
        y = sg.sin(y * 1.1 + 0.2) * x
    return y


def _formula_rows(rows: int, chunk: int) -> tuple:
    x = da.linspace(-2, 2, rows, chunks=chunk, dtype=F32)
    return (x, da.ones(rows, chunks=chunk, dtype=F32))


def _ba_rows(rows: int, chunk: int) -> tuple:
    from bundle_adjustment import BASE_CAMERA, BASE_FEATURE, BASE_POINT

    def tiled(base: np.ndarray):
        return lambda i: np.tile(base.astype(F32), (len(i), 1))

    idx = da.arange(rows, chunks=chunk, dtype=np.int64)
    cols = [(BASE_CAMERA, 11), (BASE_POINT, 3), (BASE_FEATURE, 2)]
    cam, X, feat = (
        idx.map_blocks(tiled(b), new_axis=1, chunks=(idx.chunks[0], (n,)), dtype=F32) for b, n in cols
    )
    w = idx.map_blocks(lambda i: np.full(len(i), 0.8, F32), dtype=F32)
    return (cam, X, w, feat, da.ones((rows, 2), chunks=(chunk, 2), dtype=F32))


def _lazy(fn, inputs: tuple) -> list:
    outs, grads = fn.value_and_vjp(*inputs)
    return [o.sum() for o in (outs if isinstance(outs, tuple) else (outs,))] + [
        g.sum() for g in grads if g is not None
    ]


def _data(inputs: tuple) -> list:
    return [a.sum() for a in inputs]


def _timed(compute, values, repeats: int) -> float:
    """The best of ``repeats`` runs, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        compute(*values)
        best = min(best, time.perf_counter() - start)
    return best


def _peak_rss_mb(client) -> float:
    return max(client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss).values()) / 1024


def _cluster(workers: int):
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0")
    return cluster, Client(cluster)


def _row(name: str, fn, make, rows: int, chunk: int, clients: dict) -> str:
    inputs = make(rows, chunk)
    n_chunks, threads = inputs[0].numblocks[0], get_num_threads()
    one = tuple(a.blocks[0].compute() for a in make(min(rows, chunk), chunk))
    set_num_threads(1)  # as a chunk runs under Dask
    kernel = best_time(lambda: fn.value_and_vjp(*one), 2, 0.2)
    set_num_threads(threads)
    in_process = "-"
    if rows * sum(a.nbytes / a.shape[0] for a in inputs) < 6e9:  # in-process: every OpenMP thread
        full = dask.compute(*inputs)
        in_process = f"{best_time(lambda: fn.value_and_vjp(*full), 1, 0.1) * 1e3:9.1f}"
        del full
    repeats = 3 if rows <= 1e7 else 1
    threads = _timed(
        lambda *v: dask.compute(*v, scheduler="threads", num_workers=2), _lazy(fn, inputs), repeats
    )
    cells, rss = [], 0.0
    for workers, client in clients.items():
        run = lambda *v: client.gather(client.compute(list(v)))  # noqa: E731
        data = _timed(run, _data(inputs), repeats)
        wall = _timed(run, _lazy(fn, inputs), repeats)
        overhead = ((wall - data) * workers / n_chunks - kernel) / kernel
        cells.append((wall, overhead))
        rss = max(rss, _peak_rss_mb(client))
    (w1, o1), (w2, o2) = cells
    return (
        f"{name:>10} | {rows:>8.3g} | {in_process:>9} | {threads * 1e3:>9.1f} | {w1 * 1e3:>9.1f} | "
        f"{w2 * 1e3:>9.1f} | {w1 / w2:>6.2f}x | {kernel * 1e3:>8.1f} | {o1:>6.0%} {o2:>6.0%} | {rss:>7.0f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4e6 and 1.6e7 rows only")
    parser.add_argument("--max-rows", type=float, default=2e8)
    parser.add_argument("--chunk", type=float, default=4e6)
    args = parser.parse_args(argv)
    if dask is None:
        print("bench_dask: dask[array] and distributed are not installed; skipped")
        return 0
    import bundle_adjustment

    chunk = int(args.chunk)
    sizes = [n for n in ((4e6, 1.6e7) if args.quick else (4e6, 1e7, 1e8, 2e8)) if n <= args.max_rows]
    functions = [
        ("28-op", formula28.compiled(), _formula_rows),
        ("BA", bundle_adjustment.model().ba_residual, _ba_rows),
    ]
    for _, fn, make in functions:  # load the C kernels here (the OpenMP thread count is theirs)
        fn.value_and_vjp(*(a.compute() for a in make(8, 8)))
    print(
        f"dask {dask.__version__}, {os.cpu_count()} CPUs, float32 value_and_vjp, chunks of {chunk:.0e} rows, "
        f"1 OpenMP thread per chunk under Dask, {get_num_threads()} in-process; times in ms (best of 3 up to "
        "1e7 rows, else one run)"
    )
    header = (
        f"{'function':>10} | {'rows':>8} | {'in-proc':>9} | {'threads':>9} | {'1 worker':>9} | "
        f"{'2 workers':>9} | {'2w/1w':>7} | {'chunk ms':>8} | {'overhead 1w 2w':>14} | {'RSS MB':>7}"
    )
    clusters = {k: _cluster(k) for k in (1, 2)}
    clients = {k: c for k, (_, c) in clusters.items()}
    try:
        print(header)
        print("-" * len(header))
        for name, fn, make in functions:
            for client in clients.values():  # warm: the workers load the package
                client.gather(client.compute(_lazy(fn, make(1000, 1000))))
            for rows in sizes:
                print(_row(name, fn, make, int(rows), min(chunk, int(rows)), clients), flush=True)
    finally:
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
