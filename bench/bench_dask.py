"""float32 ``value_and_vjp`` over many rows: the in-process C kernel against Dask (threads scheduler, and a
LocalCluster of 1 and 2 worker processes), same run, chunks of 4e6 rows.

    python bench/bench_dask.py [--quick] [--max-rows 2e8] [--chunk 4e6]

Functions: a 28-op elementwise formula (7 x (multiply, add, sin, multiply by x)) and the ADBench bundle
adjustment residual (``examples/ba_model.py``: 11 + 3 + 1 + 2 numbers in, 2 out per row); the cotangent is
one number (``np.ones``) per output element, passed by value. Every graph sums each output and gradient per
chunk, then over the chunks, on the workers: only scalars reach the client.

Data: each process makes one chunk's rows once (random around plausible values; ``make_instance`` for BA)
and every chunk of that length reads them, so the timings are the kernels' and the scheduling's, not data
generation's (NumPy's random numbers or ``linspace`` cost a fifth to a third of the 28-op kernel).
In-process: the same rows tiled to the whole batch, on every OpenMP thread ("-": it would not fit).

Columns: wall ms; "t/ch": tasks per chunk as ``client.compute`` runs the graph (fused tasks count once;
each costs the scheduler and the worker's event loop about a millisecond of CPU on this 2-core machine);
"chunk": one chunk's kernel plus the sums of its results in this process on one thread (as a chunk runs
under Dask, with the cotangent already filled out to the chunk's rows), wall and CPU ms; per-chunk overhead
(issue 23: at most 10% at chunks of 4e6): (Dask time x workers - chunks x chunk time) / chunks, as a share
of the chunk time, from wall times ("wall") and from the workers' CPU times ("cpu": less moved than wall by
other processes on the machine, though not unmoved); "use": the 2 workers' CPU time / (2 x wall), well
below 100% when other processes hold the cores (then no 2w/1w ratio means anything); "sched": CPU ms per
chunk of this process (the scheduler and the client) during the 2-worker runs, taken from the same 2 cores;
"gap": ms a worker's thread waits between the end of a task and the start of its next (1 worker: Dask's
handling of each finished task, from ``get_task_stream``; times tasks per chunk, most of the overhead);
peak RSS: the largest worker's during the row's runs (VmHWM, reset before them: it includes the pool of
result buffers, ``SYMGRAD_POOL_MB``). Target: 2 workers >= 1.7x faster than 1 on a quiet 2-core machine.
Skips (exit 0) when Dask or distributed is not installed.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
#: a BA chunk's results (4e6 rows: 272 MB) do not fit symgrad's default 256 MB pool of result buffers: the
#: in-process reference calls would page-fault their results in afresh each time (+20-60% CPU). Dask's
#: chunks grow their process's pool to what they hold at once by themselves (symgrad.interop.dask); this
#: fixed size (inherited by the workers) keeps the two paths comparable.
os.environ.setdefault("SYMGRAD_POOL_MB", "2048")

from common import best_time, sg  # noqa: E402

from symgrad.backends.c import get_num_threads, set_num_threads  # noqa: E402

try:
    import dask
    import dask.array as da
    from dask._expr import FinalizeCompute
    from dask.base import collections_to_expr
    from distributed import Client, LocalCluster, get_task_stream
except ImportError:
    dask = None

F32 = np.float32
#: per-element shapes of each function's arguments
TAILS = {"28-op": ((),), "BA": ((11,), (3,), (), (2,))}
#: each process's rows by (function, chunk length), read-only; at most a few chunks' worth
_BLOCKS: dict[tuple, tuple] = {}


@sg.function
def formula28(x):
    y = x
    for _ in range(7):
        y = sg.sin(y * 1.1 + 0.2) * x
    return y


def _ba_residual():
    import bundle_adjustment

    return bundle_adjustment.model().ba_residual


FUNCTIONS = {"28-op": lambda: formula28.compiled(), "BA": _ba_residual}


def _make(kind: str, rows: int) -> tuple:
    rng = np.random.default_rng(rows)
    if kind == "28-op":
        return (rng.uniform(-2, 2, rows).astype(F32),)
    from bundle_adjustment import make_instance

    cams, X, w, feats, obs = make_instance(20, 2000, rows, seed=rows)
    return tuple(a.astype(F32) for a in (cams[obs[:, 0]], X[obs[:, 1]], w, feats))


def block(kind: str, rows: int) -> tuple:
    """``rows`` rows of ``kind``'s arguments, made once per process (see the module docstring)."""
    key = (kind, rows)
    if key not in _BLOCKS:
        if len(_BLOCKS) >= 3:
            _BLOCKS.clear()
        arrays = _make(kind, rows)
        for a in arrays:
            a.flags.writeable = False
        _BLOCKS[key] = arrays
    return _BLOCKS[key]


def piece(kind: str, j: int, block_info: dict | None = None) -> np.ndarray:
    """Argument ``j`` of one chunk (``da.map_blocks`` passes the chunk's shape)."""
    return block(kind, block_info[None]["chunk-shape"][0])[j]


def _inputs(kind: str, rows: int, chunk: int) -> tuple:
    """``kind``'s arguments as Dask arrays of ``rows`` rows, each chunk made on the worker that runs it."""
    import bench_dask  # by its module name: workers import it (PYTHONPATH) and keep one _BLOCKS

    sizes = (chunk,) * (rows // chunk) + ((rows % chunk,) if rows % chunk else ())
    return tuple(
        da.map_blocks(
            bench_dask.piece,
            kind,
            j,
            chunks=(sizes, *((n,) for n in tail)),
            dtype=F32,
            meta=np.empty((0,) * (1 + len(tail)), F32),
            name=f"rows-{kind}-{j}-{rows}-{chunk}",
        )  # fmt: skip
        for j, tail in enumerate(TAILS[kind])
    )


def _cotangent(fn, rows: int | None = None) -> tuple:
    """One number per output element, by value; with ``rows``, already filled out to ``rows`` rows, as a
    chunk's task reads it (made once per process, ``symgrad.interop.dask._filled``): the in-memory path
    would fill a fresh copy per call (page faults: +10% of a 28-op chunk), which no Dask chunk pays."""
    if rows is None:
        return tuple(np.ones(shape, F32) for shape in fn.out_shapes)
    return tuple(np.ones((rows, *shape), F32) for shape in fn.out_shapes)


def _sums(outs, grads) -> list:
    """Each result summed, in a tree of up to 32 chunks' sums a task: Dask's default of 4 a task for 2-d
    arrays makes about 3 small tasks per chunk for BA's 4 results."""
    results = [*(outs if isinstance(outs, tuple) else (outs,)), *(g for g in grads if g is not None)]
    return [r.sum(split_every=32) for r in results]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := VmRSS


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cluster(workers: int):
    paths = [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)  # the workers import this module (``piece``)
    # CRITICAL: on a loaded machine a worker's heartbeat can race the scheduler's close and log an ERROR; a
    # failing task still raises in ``gather`` (silence_logs restores the level on close)
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
        silence_logs=logging.CRITICAL,
    )  # fmt: skip
    return cluster, Client(cluster)


def _on_cluster(client, lazy: list, repeats: int) -> tuple[float, float, float, float, float]:
    """(best wall s, mean workers' CPU s, mean CPU s of this process: the scheduler and the client, largest
    worker peak RSS MB, mean gap s between a worker thread's tasks) of computing ``lazy`` on ``client``."""
    if repeats > 1:
        client.gather(client.compute(lazy))  # warm: the workers make their rows (a one-off, like reading)
    client.run(_reset_peak)
    best, cpu, here, gaps = float("inf"), 0.0, 0.0, []
    for _ in range(repeats):
        before, here_before = client.run(_cpu), _cpu()
        start = time.perf_counter()
        with get_task_stream(client) as stream:
            client.gather(client.compute(lazy))
        best = min(best, time.perf_counter() - start)
        here += _cpu() - here_before
        cpu += sum(client.run(_cpu).values()) - sum(before.values())
        gaps += _gaps(stream.data)
    gap = sum(gaps) / len(gaps) if gaps else float("nan")
    return best, cpu / repeats, here / repeats, max(client.run(_peak_mb).values()), gap


def _gaps(tasks: list) -> list:
    """The idle time between consecutive tasks on each worker thread (s): a task's end to the next's start,
    which is the scheduler's and the worker's own handling of a finished task (Dask, not the kernels)."""
    runs: dict = {}
    for task in tasks:
        for part in task["startstops"]:
            if part["action"] == "compute":
                spans = runs.setdefault((task["worker"], task.get("thread")), [])
                spans.append((part["start"], part["stop"]))
    gaps = []
    for spans in runs.values():
        spans.sort()
        gaps += [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    return gaps


def _tasks(lazy: list) -> int:
    """The number of tasks ``client.compute(lazy)`` runs (the graph optimized as ``distributed`` does: fused
    tasks count once)."""
    return len(FinalizeCompute(collections_to_expr(lazy)).optimize().__dask_graph__())


def _chunk_times(fn, kind: str, chunk: int) -> tuple[float, float]:
    """(wall s, CPU s) of one chunk's kernel and sums in this process, on one OpenMP thread."""
    args, cot = block(kind, chunk), _cotangent(fn, chunk)
    threads = get_num_threads()  # (main loaded the kernels: before, this is 1 and setting it does nothing)
    set_num_threads(1)
    try:
        work = lambda: [np.sum(r) for r in _flat(fn.value_and_vjp(*args, *cot))]  # noqa: E731
        wall = best_time(work, 3, 0.3)
        cpu = float("inf")
        for _ in range(3):
            start = time.thread_time()
            work()
            cpu = min(cpu, time.thread_time() - start)
    finally:
        set_num_threads(threads)
    return wall, cpu


def _flat(results) -> list:
    outs, grads = results
    return [*(outs if isinstance(outs, tuple) else (outs,)), *(g for g in grads if g is not None)]


def _in_process(fn, kind: str, rows: int, chunk: int) -> str:
    """The whole batch in one call on every OpenMP thread (ms), or "-" when it would not fit in memory."""
    per_row = 4 * sum(max(1, int(np.prod(t))) for t in TAILS[kind]) * 2  # inputs, and about as much out
    if rows * per_row > 6e9:
        return "-"
    args = [np.resize(a, (rows, *a.shape[1:])) for a in block(kind, min(rows, chunk))]
    cot = _cotangent(fn, rows)
    wall = best_time(lambda: [np.sum(r) for r in _flat(fn.value_and_vjp(*args, *cot))], 1, 0.1)
    return f"{wall * 1e3:.1f}"


def _row(name: str, fn, rows: int, chunk: int, clients: dict) -> str:
    inputs = _inputs(name, rows, chunk)
    n_chunks = inputs[0].numblocks[0]
    lazy = _sums(*fn.value_and_vjp(*inputs, *_cotangent(fn)))
    chunk_wall, chunk_cpu = _chunk_times(fn, name, min(rows, chunk))
    in_process = _in_process(fn, name, rows, chunk)
    repeats = 3 if rows <= 4e7 else 1
    threads = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dask.compute(*lazy, scheduler="threads", num_workers=2)
        threads = min(threads, time.perf_counter() - start)
    runs = {k: _on_cluster(client, lazy, repeats) for k, client in clients.items()}
    (w1, c1, _, r1, gap), (w2, c2, s2, r2, _) = runs[1], runs[2]
    wall_o = [(w * k / n_chunks - chunk_wall) / chunk_wall for k, (w, *_) in runs.items()]
    cpu_o = [(c / n_chunks - chunk_cpu) / chunk_cpu for c in (c1, c2)]
    return (
        f"{name:>6} | {rows:>7.2g} | {n_chunks:>3} | {_tasks(lazy) / n_chunks:>4.1f} | {in_process:>8} | "
        f"{threads * 1e3:>8.1f} | "
        f"{w1 * 1e3:>8.1f} | {w2 * 1e3:>8.1f} | {w1 / w2:>5.2f}x | "
        f"{chunk_wall * 1e3:>6.1f} {chunk_cpu * 1e3:>6.1f} | "
        f"{wall_o[0]:>5.0%} {wall_o[1]:>5.0%} | {cpu_o[0]:>5.0%} {cpu_o[1]:>5.0%} | {c2 / (2 * w2):>4.0%} | "
        f"{s2 / n_chunks * 1e3:>5.1f} | {gap * 1e3:>4.1f} | "
        f"{r1:>5.0f} {r2:>5.0f}"
    )


HEADER = (
    f"{'fn':>6} | {'rows':>7} | {'chk':>3} | {'t/ch':>4} | {'in-proc':>8} | {'threads':>8} | "
    f"{'1 worker':>8} | {'2 worker':>8} | {'2w/1w':>6} | {'chunk wall cpu':>13} | {'ovh wall 1w 2w':>11} | "
    f"{'ovh cpu 1w 2w':>11} | {'use':>4} | {'sched':>5} | {'gap':>4} | {'RSS MB 1w 2w':>11}"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 and 10 chunks' rows only (1.6e7 and 4e7)")
    parser.add_argument("--max-rows", type=float, default=2e8)
    parser.add_argument("--chunk", type=float, default=4e6)
    parser.add_argument("--only", choices=sorted(TAILS), help="one function only")
    args = parser.parse_args(argv)
    if dask is None:
        print("bench_dask: dask[array] and distributed are not installed; skipped")
        return 0
    chunk = int(args.chunk)
    quick = (
        4 * chunk,
        10 * chunk,
    )  # one chunk would time the graph's submission and gathering, not a chunk's
    sizes = [int(n) for n in (quick if args.quick else (1e6, 1e7, 1e8, 2e8)) if n <= args.max_rows]
    functions = [(name, FUNCTIONS[name]()) for name in FUNCTIONS if args.only in (None, name)]
    for _, fn in functions:
        fn.backend  # loads the C kernels: the OpenMP thread count is theirs
    print(
        f"dask {dask.__version__}, {os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f}), float32 "
        f"value_and_vjp, chunks of {chunk:.0e} rows, 1 OpenMP thread per chunk under Dask, "
        f"{get_num_threads()} in-process; ms, best of 3 up to 4e7 rows, else one run"
    )
    clusters = {k: _cluster(k) for k in (1, 2)}
    clients = {k: c for k, (_, c) in clusters.items()}
    try:
        print(HEADER + "\n" + "-" * len(HEADER))
        for name, fn in functions:
            warm = _sums(*fn.value_and_vjp(*_inputs(name, 4 * chunk, chunk), *_cotangent(fn)))
            for client in clients.values():  # the workers load the package and make their rows
                client.gather(client.compute(warm))
            for rows in sizes:
                print(_row(name, fn, rows, min(chunk, rows), clients), flush=True)
    finally:
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
