"""The ``symgrad`` command as the tests run it: ``python -m symgrad`` on this checkout, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_symgrad(
    *args: str, cwd: Path, env_extra: dict | None = None, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``symgrad ARGS`` in ``cwd``; ``env`` replaces the environment, else ``env_extra`` adds to it."""
    if env is None:
        # quiet: a slow machine's "compiling ..." notice on stderr would break tests that read stderr
        env = dict(os.environ, PYTHONPATH=str(ROOT), **{"SYMGRAD_QUIET": "1", **(env_extra or {})})
    return subprocess.run(
        [sys.executable, "-m", "symgrad", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
