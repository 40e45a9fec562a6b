"""Dask arrays through every array entry point (``symgrad.interop.dask``), and compiled functions pickled as
small references (``symgrad.compiled.reference``): processes, threads and a 2-worker Dask cluster."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
from symgrad.compiled import reference

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

ROOT = Path(__file__).resolve().parents[1]

MODEL = """
import symgrad as sg

@sg.function(nondiff=("feat",), uniform=("t",))
def fit(x, p: sg.Vector(3), feat, t):
    return sg.exp(-x * p[0]) * p[1] + feat * t + sg.sin(x) * p[2]

@sg.function
def pair(x, y):
    return sg.sin(x) * y, sg.log1p(x * x) + y

@sg.function
def rotate(v: sg.Vector(2), angle):
    c, s = sg.cos(angle), sg.sin(angle)
    return [c * v[0] - s * v[1], s * v[0] + c * v[1]]
"""
#: against the whole batch in one call, per dtype (relative, and absolute for values of order 1): a C
#: kernel's SIMD and two-row loops round a row by its position in the call, which chunking moves, and a
#: broadcast argument's gradient is Dask's tree sum over chunks, not one np.sum. A chunk's rows are exactly
#: those of one NumPy-path call on that chunk: ``test_each_chunk_is_exactly_the_numpy_path_on_it``.
RTOL = {np.float64: 1e-12, np.float32: 1e-5}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("dask_model") / "dmodel.py"
    path.write_text(MODEL)
    return sg.compile(path)


def _compute(*values):
    return dask.compute(*values, scheduler="threads")


def _same(lazy, eager):
    assert isinstance(lazy, da.Array) and lazy.dtype == eager.dtype and lazy.shape == eager.shape
    tol = RTOL[eager.dtype.type]
    np.testing.assert_allclose(lazy.compute(scheduler="threads"), eager, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_program_equals_the_numpy_path(model, dtype):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (6, 50)).astype(dtype)
    feat = rng.uniform(-1, 1, 50).astype(dtype)  # broadcast along the first axis
    p = np.array([0.5, 1.5, -2.0], dtype)  # no batch axes: goes to every chunk
    xd, featd = da.from_array(x, chunks=(4, 16)), da.from_array(feat, chunks=7)
    g = np.ones((6, 50), dtype)
    f = model.fit
    _same(f(xd, p, featd, 2.0), f(x, p, feat, 2.0))
    _same(f.forward(xd, p, feat, 2.0)[0], f.forward(x, p, feat, 2.0)[0])
    for lazy, eager in zip(f.vjp(xd, p, featd, 2.0, g), f.vjp(x, p, feat, 2.0, g)):
        assert (lazy is None) == (eager is None)  # feat is nondiff
        if eager is not None:
            _same(lazy, eager)
    value, grads = f.value_and_vjp(xd, p, featd, 2.0, g)
    value_np, grads_np = f.value_and_vjp(x, p, feat, 2.0, g)
    _same(value, value_np)
    _same(grads[0], grads_np[0])
    _same(grads[1], grads_np[1])  # p: summed over every chunk
    _same(grads[3], grads_np[3])  # the uniform t: a scalar
    assert grads[1].shape == (3,) and grads[3].shape == ()
    tangents = (np.ones_like(x), np.ones(3, dtype), None, 1.0)
    (out, tan), (out_np, tan_np) = f.jvp((xd, p, featd, 2.0), tangents), f.jvp((x, p, feat, 2.0), tangents)
    _same(out, out_np)
    _same(tan, tan_np)
    value, jac = f.value_and_jacobian(xd, p, featd, 2.0)
    value_np, jac_np = f.value_and_jacobian(x, p, feat, 2.0)
    _same(value, value_np)
    _same(jac, jac_np)
    _same(f.jacobian(xd, p, featd, 2.0), jac_np)
    y = rng.uniform(1, 2, 50).astype(dtype)  # a differentiable argument broadcast along the first axis
    for lazy, eager in zip(model.pair.vjp(xd, da.from_array(y, 9), g, g), model.pair.vjp(x, y, g, g)):
        _same(lazy, eager)  # y's: a Dask sum over the chunks of the first axis
    gy = model.pair.vjp(xd, y[None], g, g)[1]
    assert gy.shape == (1, 50) and gy.chunks[0] == (1,)
    _same(gy, model.pair.vjp(x, y[None], g, g)[1])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_each_chunk_is_exactly_the_numpy_path_on_it(model, dtype):
    x = np.random.default_rng(1).uniform(-1, 1, 1000).astype(dtype)
    p = np.array([0.5, 1.5, -2.0], dtype)
    xd = da.from_array(x, chunks=300)
    pieces = [x[i : i + 300] for i in range(0, 1000, 300)]
    value, grads = _compute(*model.fit.value_and_vjp(xd, p, 0.25, 2.0, xd))
    eager = [model.fit.value_and_vjp(c, p, 0.25, 2.0, c) for c in pieces]
    np.testing.assert_array_equal(value, np.concatenate([v for v, _ in eager]))
    np.testing.assert_array_equal(grads[0], np.concatenate([g[0] for _, g in eager]))
    assert value.dtype == grads[0].dtype == dtype
    for lazy, eager in zip(model.pair(xd, 2.0), zip(*(model.pair(c, 2.0) for c in pieces))):
        np.testing.assert_array_equal(lazy.compute(), np.concatenate(eager))


def test_tuple_outputs_vector_arguments_and_one_kernel_call_per_chunk(model, monkeypatch):
    from symgrad.interop import dask as sg_dask

    calls = []
    real = sg_dask._value_and_vjp
    monkeypatch.setattr(sg_dask, "_value_and_vjp", lambda *a: calls.append(len(a[1][0])) or real(*a))
    x, y = np.linspace(0.1, 2, 40), np.linspace(-1, 1, 40)
    xd, yd = da.from_array(x, chunks=10), da.from_array(y, chunks=10)
    for lazy, eager in zip(model.pair(xd, yd), model.pair(x, y)):
        _same(lazy, eager)
    outs, grads = model.pair.value_and_vjp(xd, yd, np.ones(40), np.ones(40))
    outs_np, grads_np = model.pair.value_and_vjp(x, y, np.ones(40), np.ones(40))
    for lazy, eager in zip(outs + grads, outs_np + grads_np):
        _same(lazy, eager)
    del calls[:]
    _compute(*outs, *grads)
    assert calls == [10] * 4  # one fused kernel call per chunk for all four results

    @sg.function
    def local(x, y):
        return sg.sin(x) * y

    _same(local.value_and_vjp(xd, yd, 1.0)[1][0], local.value_and_vjp(x, y, 1.0)[1][0])  # an @sg.function
    v = np.stack([x, y], axis=-1)
    vd = da.from_array(v, chunks=(8, 1))  # the per-element axis is put in one chunk
    angle = da.from_array(np.linspace(0, 3, 40), chunks=13)
    _same(model.rotate(vd, angle), model.rotate(v, np.linspace(0, 3, 40)))
    gv, ga = model.rotate.vjp(vd, 0.5, np.ones((40, 2)))
    gv_np, ga_np = model.rotate.vjp(v, 0.5, np.ones((40, 2)))
    _same(gv, gv_np)
    _same(ga, ga_np)


def test_float32_stays_float32_and_errors_are_the_numpy_paths(model):
    x = da.ones(30, chunks=8, dtype=np.float32)
    lazy = model.pair(x, x)[0]
    assert isinstance(lazy, da.Array) and lazy.dtype == np.float32 and lazy.compute().dtype == np.float32
    with pytest.raises(sg.ArgumentError, match="do not broadcast"):
        model.pair(x, da.ones(7, chunks=3))
    with pytest.raises(sg.ArgumentError, match="dtype int64"):
        model.pair(x, da.ones(30, chunks=8, dtype=np.int64))
    with pytest.raises(sg.ArgumentError, match="trailing shape"):
        model.rotate(da.ones((30, 3), chunks=8), 1.0)
    with pytest.raises(sg.ArgumentError, match="out="):
        model.pair.forward(x, x, out=(np.empty(30, np.float32),) * 2)


def test_numpy_calls_never_import_dask(tmp_path):
    code = f"""
import sys, numpy as np, symgrad as sg
m = sg.compile({str(tmp_path / "m.py")!r})
m.pair(np.ones(3), np.ones(3)); m.pair.value_and_vjp(np.ones(3), 2.0, np.ones(3), np.ones(3))
assert "dask" not in sys.modules, "dask imported"
"""
    (tmp_path / "m.py").write_text(MODEL)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=300)


def test_a_compiled_function_pickles_small_and_comes_back_as_itself(model):
    blob = pickle.dumps(model.fit)
    assert len(blob) < 4000 and b"cffi" not in blob
    assert pickle.loads(blob) is model.fit


def test_a_reference_builds_from_the_model_text_where_the_package_is_not(model, tmp_path):
    ref = reference.reference(model.pair)
    assert ref.files and ref.files[0][0] == "dmodel.py"
    moved = dataclasses.replace(ref, package_hash="elsewhere", path=str(tmp_path / "gone"))
    f = reference.restore(moved)
    assert f is not model.pair and f.package.path != model.pair.package.path
    np.testing.assert_array_equal(f(np.ones(4), 2.0)[1], model.pair(np.ones(4), 2.0)[1])
    gone = dataclasses.replace(moved, package_hash="nowhere", files=())
    with pytest.raises(sg.PackageError, match="cannot unpickle"):
        reference.restore(gone)


def _spawn_pool():
    return concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))


@pytest.mark.slow
def test_process_pools_map_compiled_and_importable_functions(model, tmp_path, monkeypatch):
    (tmp_path / "pickled_model.py").write_text(MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")
    import pickled_model

    assert pickle.loads(pickle.dumps(pickled_model.pair)) is pickled_model.pair
    xs = [np.linspace(0, 1, 5) * k for k in range(4)]
    with _spawn_pool() as pool:
        got = list(pool.map(model.pair, xs, xs))
        got_sym = list(pool.map(pickled_model.pair, xs, xs))
    for x, r, s in zip(xs, got, got_sym):
        np.testing.assert_array_equal(r[0], model.pair(x, x)[0])
        np.testing.assert_array_equal(s[1], model.pair(x, x)[1])
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert np.array_equal(pool.starmap(model.pair, [(xs[1], xs[2])])[0][0], model.pair(xs[1], xs[2])[0])


def test_threads_unpickle_and_first_call_at_once(tmp_path):
    """8 threads unpickle one function (not yet loaded in the process) and call it first at once."""
    (tmp_path / "m.py").write_text(MODEL)
    code = f"""
import pickle, sys, threading, numpy as np, symgrad as sg
m = sg.compile({str(tmp_path / "m.py")!r})
blob = pickle.dumps(m.fit)
from symgrad.compiled import reference
reference._functions.clear()
stdout, got, errors = sys.stdout, [], []
def work():
    try:
        f = pickle.loads(blob)
        got.append((f, f(np.full(10, 0.5, np.float32), np.ones(3, np.float32), 1.0, 2.0)))
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
assert not errors, errors
assert len({{id(f) for f, _ in got}}) == 1 and got[0][0] is not m.fit
want = m.fit(np.full(10, 0.5, np.float32), np.ones(3, np.float32), 1.0, 2.0)
assert all(np.array_equal(r, want) and r.dtype == np.float32 for _, r in got)
assert sys.stdout is stdout
"""
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, cwd=ROOT, timeout=300)


def test_a_chunk_runs_openmp_on_one_thread_by_default(model, monkeypatch):
    from symgrad.backends import c as c_backend
    from symgrad.interop import dask as sg_dask

    seen = []
    real = sg_dask._forward
    monkeypatch.setattr(sg_dask, "_forward", lambda *a: seen.append(c_backend.get_num_threads()) or real(*a))
    x = da.ones(20, chunks=10)
    model.pair.forward(x, x)[0].compute(scheduler="sync")
    assert seen[1:] == [1, 1]  # seen[0]: the checks on the client, outside Dask
    sg_dask.set_chunk_threads(0)
    try:
        model.pair.forward(x, 1.0)[0].compute(scheduler="sync")
    finally:
        sg_dask.set_chunk_threads(1)
    assert seen[4:] == [c_backend.get_num_threads()] * 2


@pytest.mark.slow
def test_a_two_process_cluster_computes_values_and_gradients(model):
    distributed = pytest.importorskip("distributed")
    x = da.from_array(np.linspace(0.1, 1, 4000).astype(np.float32), chunks=500)  # sums without cancellation
    p = np.array([0.5, 1.5, -2.0], np.float32)
    g = da.ones(4000, chunks=500, dtype=np.float32)
    lazy = model.fit.value_and_vjp(x, p, 0.25, 2.0, g)
    eager = model.fit.value_and_vjp(x.compute(), p, 0.25, 2.0, g.compute())
    assert isinstance(lazy[0], da.Array) and isinstance(lazy[1][1], da.Array)  # nothing ran yet
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    with cluster, distributed.Client(cluster) as client:
        ((value, grads),) = client.compute([lazy], sync=True)
        pids = client.run(lambda: __import__("os").getpid())
    assert len(set(pids.values())) == 2
    tol = RTOL[np.float32]
    for got, want in zip((value, grads[0], grads[1]), (eager[0], eager[1][0], eager[1][1])):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert grads[2] is None and grads[3].dtype == np.float32


def test_a_by_value_argument_reaches_every_chunk_as_one_full_array(model, monkeypatch):
    """A cotangent of 1 or a parameter vector given by value is filled out to a chunk's shape once per
    process and shape, not copied afresh for each chunk (a page-faulted copy per chunk: +13% of a kernel)."""
    f, seen = model.fit, []
    real = f.kernel

    def spy(*key):
        return lambda arrays, *rest: seen.append(arrays) or real(*key)(arrays, *rest)

    monkeypatch.setattr(f, "kernel", spy)
    x = np.linspace(0.1, 1, 40)
    p = np.array([0.5, 1.5, -2.0])
    lazy = f.value_and_vjp(da.from_array(x, chunks=10), p, 0.25, 2.0, np.ones(()))
    value, grads = dask.compute(*lazy, scheduler="sync")
    chunks = seen[1:]  # seen[0]: the checks on the client
    assert len(chunks) == 4
    for k, shape in ((1, (10, 3)), (2, (10,)), (4, (10,))):  # p, feat, the cotangent
        assert all(c[k].shape == shape and c[k] is chunks[0][k] for c in chunks)
    assert chunks[0][4].flags.writeable is False
    eager = [f.value_and_vjp(x[i : i + 10], p, 0.25, 2.0, np.ones(())) for i in range(0, 40, 10)]
    np.testing.assert_array_equal(value, np.concatenate([v for v, _ in eager]))  # the NumPy path's chunks
    np.testing.assert_array_equal(grads[0], np.concatenate([g[0] for _, g in eager]))
    np.testing.assert_allclose(grads[1], sum(g[1] for _, g in eager), rtol=RTOL[np.float64])
    assert grads[1].shape == (3,) and grads[2] is None


def _run_script(*command: str) -> str:
    run = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "distributed." not in run.stdout + run.stderr  # the scheduler's and workers' INFO lines
    return run.stdout


@pytest.mark.slow
def test_the_example_and_the_benchmark_run_small_without_distributed_log_lines():
    pytest.importorskip("distributed")
    small = ["--rows", "4e5", "--chunk", "1e5", "--obs", "2e4", "--obs-chunk", "1e4", "--workers", "1"]
    out = _run_script("examples/dask_scale.py", *small)
    assert "objective" in out and "BA: 2e+04 observations" in out
    table = _run_script(
        "bench/bench_dask.py", "--quick", "--max-rows", "1e6", "--chunk", "2.5e5"
    ).splitlines()
    assert [line.split("|")[:4] for line in table[3:]] == [
        [f"{name:>6} ", "   1e+06 ", "   4 ", f"  {tasks} "]
        for name, tasks in (("28-op", "4.0"), ("BA", "7.0"))
    ]


def test_a_vector_arguments_chunk_reaches_the_kernel_without_a_copy(model, monkeypatch):
    """blockwise lists the blocks along per-element axes; concatenating even one copied every vector
    argument once per chunk (a memmove into fresh pages: +50% of a bundle-adjustment chunk's time)."""
    f, seen = model.rotate, []
    real = f.kernel

    def spy(*key):
        return lambda arrays, *rest: seen.append(arrays) or real(*key)(arrays, *rest)

    monkeypatch.setattr(f, "kernel", spy)
    v = np.stack([np.linspace(0, 1, 40), np.linspace(1, 2, 40)], axis=-1)

    def view(block_info):  # each block a view of v
        return v[slice(*block_info[None]["array-location"][0])]

    rows = da.map_blocks(view, chunks=((10,) * 4, (2,)), dtype=float)
    outs, (gv, ga) = f.value_and_vjp(rows, 0.5, np.ones(2))
    got = dask.compute(outs, gv, ga, scheduler="sync")
    assert len(seen) == 5 and all(np.shares_memory(arrays[0], v) for arrays in seen[1:])
    eager = [f.value_and_vjp(v[i : i + 10], 0.5, np.ones(2)) for i in range(0, 40, 10)]
    np.testing.assert_array_equal(got[0], np.concatenate([o for o, _ in eager]))
    np.testing.assert_array_equal(got[1], np.concatenate([g[0] for _, g in eager]))
    np.testing.assert_allclose(got[2], sum(g[1] for _, g in eager), rtol=RTOL[np.float64])


def test_the_tasks_making_a_chunks_arguments_fuse_into_its_kernel_task(model):
    """A vector argument's per-element axis was an index the kernel's blockwise layer dropped (a
    contraction), where Dask stops fusing: each chunk of each argument made by ``map_blocks`` was a task of
    its own (4 more per bundle-adjustment chunk), which a 2-worker cluster could run on the other worker
    than the kernel's (about one transfer of up to 176 MB per chunk, page-faulted in on arrival)."""
    v = np.stack([np.linspace(0, 1, 40), np.linspace(1, 2, 40)], axis=-1)

    def view(block_info):
        return v[slice(*block_info[None]["array-location"][0])]

    def angles(block_info):
        return np.linspace(0, 3, 40)[slice(*block_info[None]["array-location"][0])]

    rows = da.map_blocks(view, chunks=((10,) * 4, (2,)), dtype=float, name="rows")
    angle = da.map_blocks(angles, chunks=((10,) * 4,), dtype=float, name="angle")
    outs, (gv, ga) = model.rotate.value_and_vjp(rows, angle, np.ones(2))
    optimized = dask.optimize(outs, gv, ga)
    graph = {}
    for collection in optimized:
        graph.update(dict(collection.__dask_graph__()))
    names = {key[0] if isinstance(key, tuple) else key for key in graph}
    assert not {"rows", "angle"} & names
    got = dask.compute(outs, gv, ga, scheduler="sync")
    eager = model.rotate.value_and_vjp(v, np.linspace(0, 3, 40), np.ones(2))
    for lazy, want in zip(got, (eager[0], *eager[1])):
        np.testing.assert_allclose(lazy, want, rtol=RTOL[np.float64])


@pytest.mark.parametrize("explicit", [False, True])
def test_a_workers_pool_grows_to_hold_its_chunks_results_unless_symgrad_pool_mb_is_set(
    model, monkeypatch, explicit
):
    """Chunks whose results exceed the result pool's cap page-faulted them in afresh, every chunk (bundle
    adjustment at 4e6 rows: 272 MB a chunk against the default 256 MB, +50% CPU a chunk). The pool now
    grows to the most chunk results alive at once plus one chunk's, so that a worker's later chunks
    allocate nothing; a cap set with SYMGRAD_POOL_MB is kept."""
    from symgrad.backends import get_backend_name
    from symgrad.backends.c import pool
    from symgrad.interop import dask as sg_dask

    if get_backend_name() != "c":
        pytest.skip("the result pool is the C backend's")
    rows = pool.POOL_MIN // 8 * 2  # 512 KiB per float64 result: pooled
    monkeypatch.setattr(pool, "_CAPACITY", pool.POOL_MIN * 2)
    monkeypatch.setattr(pool, "_EXPLICIT", explicit)
    monkeypatch.setattr(sg_dask, "_alive", [0, 0])
    pool.release()
    allocated = []
    alloc = pool._alloc
    monkeypatch.setattr(pool, "_alloc", lambda kind, size: allocated.append(size) or alloc(kind, size))
    x = da.from_array(np.linspace(0.1, 1.0, 4 * rows), chunks=rows)
    y = da.from_array(np.linspace(1.0, 2.0, 4 * rows), chunks=rows)

    def run():
        outs, grads = model.pair.value_and_vjp(x, y, 1.0, 1.0)
        return dask.compute(*(o.sum() for o in outs), *(g.sum() for g in grads), scheduler="sync")

    first = run()
    before = len(allocated)
    assert run() == first
    if explicit:
        assert pool._CAPACITY == pool.POOL_MIN * 2 and len(allocated) > before
    else:
        assert pool._CAPACITY >= 2 * 4 * rows * 8  # four results a chunk, two chunks
        assert len(allocated) == before, "a later chunk allocated its results afresh"
    pool.release()
