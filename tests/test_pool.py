"""The C backend's pool of large result blocks: results are ordinary private arrays with the right values, a
dead result's block serves the next result of its size, and the cap and ``release`` bound what is kept."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends.c import pool

LARGE = pool.POOL_MIN // 8 + 1000  # float64 elements: above the pool's threshold
needs_pool = pytest.mark.skipif(pool._CAPACITY < 4 * LARGE * 8, reason="$SYMGRAD_POOL_MB turns the pool off")


@sg.function
def blend(x, y):
    return sg.sin(x) * sg.exp(-(y**2)) + sg.log(1 + x**2 * y**2)


@pytest.fixture
def c_blend():
    previous = sg.get_backend()
    sg.set_backend("c")
    f = blend.compiled()
    if f.backend != "c":
        sg.set_backend(previous)
        pytest.skip("the C backend is unavailable")
    gc.collect()  # no result of an earlier test comes back to the pool in the middle of this one
    yield f
    sg.set_backend(previous)


def test_large_results_are_private_writeable_arrays_with_the_right_values(c_blend):
    rng = np.random.default_rng(1)
    x, y, g = (rng.normal(size=LARGE) for _ in range(3))
    out, (gx, gy) = c_blend.value_and_vjp(x, y, g)
    results = (out, gx, gy)
    for r in results:
        assert r.flags.c_contiguous and r.flags.aligned and r.flags.writeable and r.dtype == np.float64
        assert r.shape == (LARGE,)
    for i, a in enumerate(results):
        assert not any(np.shares_memory(a, b) for b in results[i + 1 :] + (x, y, g))
    np.testing.assert_allclose(out, np.sin(x) * np.exp(-(y**2)) + np.log1p(x**2 * y**2), rtol=1e-12)
    np.testing.assert_allclose(
        gx, g * (np.cos(x) * np.exp(-(y**2)) + 2 * x * y**2 / (1 + x**2 * y**2)), rtol=1e-10, atol=1e-14
    )
    matrix = c_blend(x.reshape(-1, 8), y.reshape(-1, 8))  # a 2-d batch keeps its shape
    assert matrix.shape == (LARGE // 8, 8)
    np.testing.assert_array_equal(matrix.ravel(), c_blend(x, y))  # the same program: bit for bit


@needs_pool
def test_a_dead_results_block_serves_the_next_result_of_its_size(c_blend):
    x = np.linspace(-1, 1, LARGE)
    first = c_blend(x, x)
    address = first.ctypes.data
    del first
    second = c_blend(x, x)
    assert second.ctypes.data == address and not second.flags.owndata  # the pooled block: no new page faults
    third = c_blend(x, x)  # while `second` lives, another block
    assert third.ctypes.data != address
    np.testing.assert_array_equal(second, third)


@needs_pool
def test_pooled_results_start_on_a_cache_line_whatever_malloc_returns():
    """Blocks of odd sizes from the heap (after a large free raises glibc's mmap threshold) were only
    16-byte aligned: half the 512-bit stores of a kernel then straddled two cache lines."""
    gc.collect()
    pool.release()
    big = np.ones(pool.POOL_MIN)  # 2 MiB, mmapped; freeing it raises glibc's mmap threshold
    del big
    for dtype in (np.float64, np.float32):
        arrays = [pool.empty((n, 3), np.dtype(dtype)) for n in range(LARGE, LARGE + 24)]
        assert [a.ctypes.data % 64 for a in arrays] == [0] * len(arrays)
        for a in arrays:
            assert a.flags.c_contiguous and a.flags.writeable and a.nbytes == a.size * a.itemsize
            a.fill(1.5)  # the whole view lies inside its block
        assert all(float(a.sum()) == 1.5 * a.size for a in arrays)
        del arrays
    pool.release()


def test_small_results_are_plain_numpy_arrays(c_blend):
    x = np.linspace(-1, 1, 100)
    assert c_blend(x, x).flags.owndata


@needs_pool
def test_release_hands_unused_blocks_back():
    gc.collect()
    pool.release()
    a = pool.empty((LARGE,), np.dtype(np.float64))
    del a
    assert pool.release() == LARGE * 8
    assert pool.release() == 0


def test_threads_never_share_a_block():
    """Four threads take and drop blocks of one size: a block is never live in two arrays at once."""
    pool.release()
    live: set = set()
    shared = []
    lock = threading.Lock()

    def work():
        for _ in range(300):
            a = pool.empty((LARGE,), np.dtype(np.float64))
            with lock:
                shared.append(a.ctypes.data in live)
                live.add(a.ctypes.data)
            a.fill(threading.get_ident())
            ok = bool((a == threading.get_ident()).all())
            with lock:
                live.discard(a.ctypes.data)
                shared.append(not ok)
            del a

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(shared) == 2 * 4 * 300 and not any(shared)


@pytest.mark.parametrize("value, pooled", [("0", False), ("64", True)])
def test_the_cap_comes_from_the_environment(value, pooled):
    code = (
        "import numpy as np; from symgrad.backends.c import pool\n"
        f"a = pool.empty(({LARGE},), np.dtype(np.float64)); print(a.flags.owndata)"
    )
    env = {**os.environ, "SYMGRAD_POOL_MB": value}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(not pooled)


def test_a_bad_cap_names_the_variable():
    env = {**os.environ, "SYMGRAD_POOL_MB": "lots"}
    r = subprocess.run(
        [sys.executable, "-c", "import symgrad.backends.c.pool"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode != 0 and "SYMGRAD_POOL_MB='lots' is not a number of MiB" in r.stderr


@needs_pool
def test_a_block_over_the_cap_evicts_the_oldest_blocks_not_all_of_them(monkeypatch):
    """A call whose results together exceed the cap (a BA chunk: 16 MB of values, 256 MB of Jacobian) kept
    nothing: the block that did not fit emptied the whole pool, and every call page-faulted fresh memory."""
    gc.collect()
    pool.release()
    monkeypatch.setattr(pool, "_CAPACITY", 9 * LARGE * 4)  # 4.5 blocks
    small = [pool.empty((LARGE,), np.dtype(np.float64)) for _ in range(2)]
    big = pool.empty((3 * LARGE,), np.dtype(np.float64))
    small_addresses = {a.ctypes.data for a in small}
    big_address = big.ctypes.data
    del small, big  # the two small blocks come back first, then the big one, which does not fit beside both
    gc.collect()
    assert pool._held == 4 * LARGE * 8  # one small block was evicted, the other and the big one kept
    again = pool.empty((3 * LARGE,), np.dtype(np.float64))
    assert again.ctypes.data == big_address
    other = pool.empty((LARGE,), np.dtype(np.float64))
    assert other.ctypes.data in small_addresses
    del again, other
    pool.release()
