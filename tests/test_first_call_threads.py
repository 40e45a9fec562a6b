"""The first call of an @sg.function from several threads at once."""

from __future__ import annotations

import sys
import threading

import numpy as np

import symgrad as sg


def test_threads_calling_a_new_function_at_once_all_get_it(monkeypatch, tmp_path):
    """Threads compiling one function at once failed (PackageError: missing manifest, OSError errno 39), or
    left ``sys.stdout`` replaced by the StringIO a C build redirected it to for the rest of the process."""
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    stdout = sys.stdout

    @sg.function
    def f(x):
        return sg.sin(x) * sg.exp(-x * x) + sg.log1p(x * x) + 0.125

    errors, results = [], []

    def work():
        try:
            results.append(f(np.ones(3)))
        except Exception as exc:  # collected: the assertion below shows them all
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 8
    want = np.sin(1.0) * np.exp(-1.0) + np.log1p(1.0) + 0.125
    for r in results:
        np.testing.assert_allclose(r, np.full(3, want))
    assert sys.stdout is stdout
