"""Value and gradient over hundreds of millions of rows on a Dask cluster (``symgrad.interop.dask``).

Part 1: a least-squares fit of ``a * exp(-b * x) + c`` to 2e8 float32 rows in chunks of 4e6: one fused
``value_and_vjp`` per chunk gives each row's loss and its gradient with respect to ``theta``; Dask sums
both over all rows (a tree reduction across the workers: no row reaches the client). Prints throughput
and the per-chunk overhead against the same kernel on one chunk in this process.

Part 2: ADBench bundle adjustment (``ba_model.py``) replicated to 1e7 observations: the residuals and the
values of the sparse Jacobian (2 x 15 per observation, exactly the CSR data of ``bundle_adjustment.py``)
from one fused ``value_and_jacobian`` per chunk; the Gauss-Newton gradient J^T r is reduced per chunk.

    python examples/dask_scale.py                       # LocalCluster, 2 worker processes
    python examples/dask_scale.py --rows 2e7 --obs 1e6  # smaller
    python examples/dask_scale.py --scheduler tcp://host:8786   # the same code on a real cluster

The functions travel to the workers as small references (package path, content hash, name; a model
file's text besides), and each worker loads the compiled package from its cache (or compiles it once).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
#: room for a BA chunk's results in symgrad's pool of result buffers (default 256 MB) for the kernel-only
#: reference call made here: its Jacobian values alone are 240 MB, and results that do not fit are
#: page-faulted in afresh each call. (Dask's chunks grow their worker's pool by themselves.)
os.environ.setdefault("SYMGRAD_POOL_MB", "1024")

import dask  # noqa: E402
import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster, progress  # noqa: E402

import symgrad as sg  # noqa: E402
from symgrad.backends.c import set_num_threads  # noqa: E402

F32 = np.float32


@sg.function(nondiff=("x", "y"))
def sq_loss(x, y, theta: sg.Vector(3)):
    """Half the squared residual of one row: 0.5 * (a * exp(-b * x) + c - y)**2."""
    return 0.5 * (theta[0] * sg.exp(-theta[1] * x) + theta[2] - y) ** 2


def _rows(n: int, chunk: int) -> tuple[da.Array, da.Array]:
    """x on [0, 4] and noisy-free y = 2 exp(-0.7 x) + 0.3, made chunk by chunk on the workers."""
    x = da.linspace(0, 4, n, chunks=chunk, dtype=F32)
    y = x.map_blocks(lambda b: (2 * np.exp(-0.7 * b) + 0.3).astype(F32), dtype=F32)
    return x, y


def _run(client: Client, *lazy):
    futures = client.compute(list(lazy))
    progress(futures)
    print()
    return client.gather(futures)


def least_squares(client: Client, rows: int, chunk: int, workers: int) -> None:
    theta = np.array([1.5, 0.5, 0.0], F32)
    x, y = _rows(rows, chunk)
    loss, (_, _, g_theta) = sq_loss.value_and_vjp(x, y, theta, np.ones((), F32))
    objective = loss.sum(dtype=F32)
    start = time.perf_counter()
    total, grad = _run(client, objective, g_theta)
    wall = time.perf_counter() - start
    start = time.perf_counter()
    _run(client, (x + y).sum(dtype=F32))  # the data alone: made, read and summed
    data = time.perf_counter() - start
    xs, ys = (a.compute() for a in _rows(chunk, chunk))
    set_num_threads(1)  # as a chunk runs under Dask (symgrad.interop.dask.set_chunk_threads)
    # a chunk's task reads the cotangent filled out to its rows once per worker, not once per call
    ones = np.ones(len(xs), F32)
    sq_loss.value_and_vjp(xs, ys, theta, ones)  # warm
    start = time.perf_counter()
    sq_loss.value_and_vjp(xs, ys, theta, ones)
    kernel = time.perf_counter() - start
    n_chunks = x.numblocks[0]
    per_chunk = (wall - data) * workers / n_chunks  # worker-seconds per chunk beyond making the data
    print(f"objective {total:.6g}, gradient {grad} ({grad.dtype}) over {rows:.3g} rows")
    print(
        f"{rows / wall / 1e6:.1f} M rows/s on {workers} worker(s) ({wall:.2f} s; the data alone "
        f"{data:.2f} s); per chunk of {chunk:.3g}: {per_chunk * 1e3:.1f} ms under Dask vs "
        f"{kernel * 1e3:.1f} ms for the kernel in this process: overhead {(per_chunk - kernel) * 1e3:.1f} ms "
        f"({(per_chunk - kernel) / kernel:.0%} of the kernel)"
    )


def bundle_adjustment(client: Client, obs: int, chunk: int) -> None:
    import bundle_adjustment as ba

    cams, X, w, feats, pairs = ba.make_instance(20, 2000, 10_000, seed=0)
    idx = da.arange(obs, chunks=chunk) % len(w)  # the observations, replicated (made on the workers)
    cam_o = idx.map_blocks(
        lambda i: cams[pairs[i, 0]], new_axis=1, chunks=(idx.chunks[0], (11,)), dtype=float
    )
    X_o = idx.map_blocks(lambda i: X[pairs[i, 1]], new_axis=1, chunks=(idx.chunks[0], (3,)), dtype=float)
    w_o = idx.map_blocks(lambda i: w[i], dtype=float)
    feat_o = idx.map_blocks(lambda i: feats[i], new_axis=1, chunks=(idx.chunks[0], (2,)), dtype=float)
    reproj, J = ba.model().ba_residual.value_and_jacobian(cam_o, X_o, w_o, feat_o)  # J: (obs, 2, 15)
    g_blocks = da.einsum("pij,pi->pj", J, reproj)  # this observation's share of J^T r
    scatter = dask.delayed(
        lambda g, i: np.stack([np.bincount(pairs[i, 0], g[:, k], len(cams)) for k in range(11)], 1)
    )
    parts = [scatter(g, i) for g, i in zip(g_blocks.to_delayed().ravel(), idx.to_delayed().ravel())]
    g_cams = da.stack([da.from_delayed(q, (len(cams), 11), float) for q in parts]).sum(axis=0)  # J_cam^T r
    start = time.perf_counter()
    r2, j_norm, g = _run(client, (reproj**2).sum(), (J**2).sum(), g_cams)
    wall = time.perf_counter() - start
    print(
        f"BA: {obs:.3g} observations in {wall:.2f} s ({obs / wall / 1e6:.2f} M obs/s): |r|^2 = {r2:.6g}, "
        f"|J values|^2 = {j_norm:.6g}, |J_cam^T r| = {np.linalg.norm(g):.6g}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=2e8)
    parser.add_argument("--chunk", type=float, default=4e6)
    parser.add_argument("--obs", type=float, default=1e7)
    parser.add_argument("--obs-chunk", type=float, default=1e6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scheduler", default=None, help="address of a running Dask scheduler")
    args = parser.parse_args(argv)
    sq_loss.compiled()  # compile once here: the workers load the package from the cache
    if args.scheduler:
        client = Client(args.scheduler)
        workers = len(client.scheduler_info()["workers"])
    else:
        logging.getLogger("distributed").setLevel(logging.ERROR)  # its INFO lines would bury the output
        cluster = LocalCluster(
            n_workers=args.workers, threads_per_worker=1, dashboard_address=":0", silence_logs=logging.ERROR
        )
        client, workers = Client(cluster), args.workers
    with client, dask.config.set({"array.slicing.split_large_chunks": False}):
        least_squares(client, int(args.rows), int(args.chunk), workers)
        bundle_adjustment(client, int(args.obs), int(args.obs_chunk))


if __name__ == "__main__":
    main()
