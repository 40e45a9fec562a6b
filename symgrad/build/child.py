"""Compiling a model file under a deadline: in a child process that is killed when time is up.

A signal or a thread cannot stop a model that loops in C (a long SymPy or NumPy call) or that catches
``Exception`` around a loop; killing a process can. The child (``python -m symgrad.build.worker``) imports,
traces, derives and emits, and publishes the package atomically (``cache.publish_dir``), so a kill leaves the
old package or the new one; the parent removes the child's staging directory. Errors come back to the parent
as the same symgrad error class with the same message.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from symgrad import errors
from symgrad.errors import ModelError, SymgradError


def compile_model_bounded(
    path: Path,
    dest: Path,
    *,
    timeout: float,
    force: bool = False,
    progress: bool = False,
    option: str = "timeout",
) -> bool:
    """``compile_model(path, dest, force=force)`` in a child process killed after ``timeout`` seconds
    (ModelError naming the model, the timeout and the ``option`` that set it); ``progress``: the child prints
    ``FunctionLines`` on stderr. Returns whether the package was rebuilt."""
    with tempfile.TemporaryDirectory(prefix="symgrad-child-") as scratch:
        result = Path(scratch) / "result.json"
        command = [sys.executable, "-m", "symgrad.build.worker", str(result), str(path), str(dest)]
        command += ["--force"] * force + ["--progress"] * progress
        proc = subprocess.Popen(command, env=_child_env(), stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            status = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill(proc, dest)
            if progress:
                print(file=sys.stderr)  # end the child's unfinished progress line
            raise ModelError(
                f"{path}: gave up after {timeout:g} s ({option}); does the model loop forever?"
            ) from None
        except BaseException:  # Ctrl-C while waiting: the child goes too
            _kill(proc, dest)
            raise
        return _outcome(path, result, status)


def _child_env() -> dict[str, str]:
    """The environment, with this symgrad first on the child's path (whatever the working directory)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _kill(proc: subprocess.Popen, dest: Path) -> None:
    """Kill the child and whatever it started, and remove its unpublished staging directory."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):  # AttributeError: no process groups
        proc.kill()
    proc.wait()
    for stage in dest.parent.glob(f".tmp-{dest.name}-{proc.pid}-*"):
        shutil.rmtree(stage, ignore_errors=True)


def _outcome(path: Path, result: Path, status: int) -> bool:
    """What the child reported: rebuilt or not, or its error raised again here."""
    try:
        outcome = json.loads(result.read_text())
    except (OSError, ValueError):
        raise ModelError(f"{path}: the compiling process failed (exit status {status})") from None
    if "rebuilt" in outcome:
        return bool(outcome["rebuilt"])
    if outcome["error"] == "OSError":  # errno kept: a full cache directory falls back (cache.in_cache)
        raise OSError(outcome["errno"], outcome["message"])
    kind = getattr(errors, outcome["error"], None)
    if not (isinstance(kind, type) and issubclass(kind, SymgradError)):
        kind = ModelError
    raise kind(outcome["message"])
