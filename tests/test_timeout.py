"""``sg.compile(path, timeout=...)`` and ``symgrad compile --timeout`` stop any model: one that catches
``Exception`` around a loop (a SIGALRM handler's exception is swallowed) and one stuck in a C call (no Python
signal handler runs until it returns). The build runs in a child process that is killed at the deadline
(issue 26, "tracing that never ends")."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_symgrad

import symgrad as sg
from symgrad.build.cache import cache_root
from symgrad.errors import ModelError, UnsupportedError

TIMEOUT = 3.0
#: a child process starts Python and imports symgrad before it runs the model (contended machine: generous)
SLACK = 15.0

SWALLOW = "    while True:\n        try:\n            {}\n        except Exception:\n            pass\n"
HANGS = {
    "swallowing": SWALLOW.format("x = x + 0"),
    "sleeping": SWALLOW.format("time.sleep(100)"),
    "c_loop": "    try:\n        sum(range(10**14))\n    except Exception:\n        pass\n    return x\n",
}


def _model(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"hang_{kind}.py"
    path.write_text(f"import time\nimport symgrad as sg\n\n@sg.function\ndef f(x):\n{HANGS[kind]}")
    return path


def _leftovers() -> list[str]:
    """Package entries and staging directories in the cache's models/ directory."""
    return sorted(p.name for p in (cache_root() / "models").iterdir())


@pytest.mark.parametrize("kind", list(HANGS))
def test_sg_compile_timeout_stops_any_model(tmp_path, monkeypatch, kind):
    # a cache of its own: other test workers add entries to the shared one meanwhile
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path / "cache"))
    model = _model(tmp_path, kind)
    before = _leftovers()
    start = time.monotonic()
    with pytest.raises(ModelError, match=rf"hang_{kind}\.py: gave up after 3 s \(timeout\)"):
        sg.compile(model, timeout=TIMEOUT)
    assert time.monotonic() - start < TIMEOUT + SLACK
    assert _leftovers() == before  # no entry, no staging directory


@pytest.mark.parametrize("kind", ["swallowing", "c_loop"])
def test_cli_timeout_stops_any_model(tmp_path, kind):
    _model(tmp_path, kind)
    start = time.monotonic()
    r = run_symgrad("compile", f"hang_{kind}.py", "--timeout", "3", cwd=tmp_path, timeout=120)
    assert r.returncode == 1 and "gave up after 3 s (--timeout)" in r.stderr, r.stderr
    assert "[1/1] f" in r.stderr  # the progress line names the function that hangs
    assert time.monotonic() - start < TIMEOUT + SLACK
    assert not (tmp_path / f"hang_{kind}_symgrad").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_timeout_compiles_a_model_that_finishes(tmp_path, monkeypatch):
    model = tmp_path / "quick.py"
    model.write_text("import symgrad as sg\n\n@sg.function\ndef square(x):\n    return x * x\n")
    m = sg.compile(model, timeout=120)
    np.testing.assert_array_equal(m.square.vjp(np.array([3.0]), np.array([1.0]))[0], [6.0])

    def no_child(*args, **kwargs):
        raise AssertionError("an up-to-date model needs no child process")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    assert sg.compile(model, timeout=120).square.package.path == m.square.package.path


def test_errors_of_the_child_keep_their_class_and_message(tmp_path):
    model = tmp_path / "broken.py"
    model.write_text("import symgrad as sg\n\n@sg.function\ndef g(x):\n    return sg.floor(x) + 1 / 0\n")
    with pytest.raises(ModelError, match=r"broken\.py:3: g \(line 5\): ZeroDivisionError") as bounded:
        sg.compile(model, timeout=120)
    with pytest.raises(ModelError) as direct:
        sg.compile(model)
    assert str(bounded.value) == str(direct.value)
    (tmp_path / "unsupported.py").write_text(
        "import sympy\nimport symgrad as sg\n\n@sg.function\ndef h(x):\n    return sympy.Function('F')(x)\n"
    )
    with pytest.raises(UnsupportedError):
        sg.compile(tmp_path / "unsupported.py", timeout=120)
