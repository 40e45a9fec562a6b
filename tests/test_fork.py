"""A child forked after a parallel C kernel runs its kernels on one thread: libgomp's thread pool does not
survive ``fork``, and the child's next parallel loop on the forking thread used to wait forever for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import symgrad as sg

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import os, signal, sys, threading
import numpy as np
import symgrad as sg
from symgrad.backends.c import get_num_threads, set_num_threads

@sg.function
def blend(x, y):
    return sg.sin(x) * sg.exp(-(y**2)) + sg.log(1 + x**2 * y**2)

@sg.function
def wave(x):
    return sg.cos(x) * sg.exp(-(x**2)) + sg.sqrt(1 + x**2)

sg.set_backend("c")
f = blend.compiled()
if f.backend != "c":
    sys.exit(77)
set_num_threads(2)  # a parallel loop even on one core
N = 1_000_000  # above every loop's parallel threshold
x, y = np.linspace(-2, 2, N), np.linspace(1, 3, N)
ref = np.sin(x) * np.exp(-(y**2)) + np.log1p(x**2 * y**2)
assert np.allclose(f(x, y), ref, rtol=1e-12)  # the parent's thread pool exists now

pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a hung child dies of SIGALRM instead of hanging the test
    code = 0
    try:
        assert np.allclose(f(x, y), ref, rtol=1e-12)  # hung here before the fix
        assert get_num_threads() == 1
        set_num_threads(4)  # stays serial in a forked child
        assert get_num_threads() == 1
        assert np.allclose(f(x, y), ref, rtol=1e-12)
        g = wave.compiled()  # a module first loaded in the child
        assert np.allclose(g(x), np.cos(x) * np.exp(-(x**2)) + np.sqrt(1 + x**2), rtol=1e-12)
        results = []
        worker = threading.Thread(target=lambda: results.append(np.allclose(f(x, y), ref, rtol=1e-12)))
        worker.start()  # a thread started in the child gets a pool of its own
        worker.join()
        assert results == [True]
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
assert get_num_threads() == 2  # the parent keeps its threads
assert np.allclose(f(x, y), ref, rtol=1e-12)
print("parent ok")
"""


def test_a_forked_child_runs_parallel_kernels_serially(tmp_path):
    if "c" not in sg.available_backends():
        pytest.skip("the C backend is unavailable")
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    script = tmp_path / "fork_child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: a hung forked child goes with it below
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the forked child hung (and so did its parent)")
    if proc.returncode == 77:
        pytest.skip("the C backend is unavailable")
    assert out.splitlines() == ["child 0", "parent ok"], (out, err)  # child -14: it hung (SIGALRM)
    assert proc.returncode == 0, err
