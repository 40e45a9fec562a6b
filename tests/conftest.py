"""Shared fixtures: an isolated cache directory and parametrisation over every available backend."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest


def _remove_run_cache(path: str, owner: int) -> None:
    if os.getpid() == owner:  # not a forked child that exits normally
        shutil.rmtree(path, ignore_errors=True)


# no "compiling ..." notice on stderr when a build takes over 2 s (on a loaded machine it would break tests
# that read stderr); the tests of the notice itself unset it
os.environ.setdefault("SYMGRAD_QUIET", "1")
if "SYMGRAD_CACHE_DIR" not in os.environ:  # a fresh cache for this run, removed when it ends
    os.environ["SYMGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="symgrad-test-cache-")
    atexit.register(_remove_run_cache, os.environ["SYMGRAD_CACHE_DIR"], os.getpid())

import symgrad as sg  # noqa: E402

BACKENDS = sg.available_backends()
DTYPES = ("float64", "float32")


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Run the test once per backend (numpy, c), restoring the previous choice afterwards."""
    previous = sg.get_backend()
    sg.set_backend(request.param)
    yield request.param
    sg.set_backend(previous)


@pytest.fixture(params=DTYPES)
def dtype(request):
    return request.param
