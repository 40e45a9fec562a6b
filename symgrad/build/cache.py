"""Where symgrad keeps compiled artifacts, and how it writes them without ever exposing half a file."""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import os
import shutil
import signal
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_fallback: Path | None = None


def cache_root() -> Path:
    """``$SYMGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/symgrad``, else ``~/.cache/symgrad``; a temporary
    directory (with one warning) when that is not writable."""
    if _fallback is not None:
        return _fallback
    env = os.environ.get("SYMGRAD_CACHE_DIR")
    root = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "symgrad"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=root, prefix=".probe-")
        probe.close()
        return root
    except OSError as exc:
        return _fall_back(root, exc)


def _remove_at_exit(path: Path, owner: int) -> None:
    """Remove ``path`` when the process that made it exits (not a forked child, which inherits the hook)."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def _fall_back(root: Path, exc: OSError) -> Path:
    global _fallback
    _fallback = Path(tempfile.mkdtemp(prefix="symgrad-cache-"))
    atexit.register(_remove_at_exit, _fallback, os.getpid())  # it serves this process only
    warnings.warn(
        f"symgrad: cache directory {root} is not usable ({exc}); using {_fallback} for this "
        "process. Set SYMGRAD_CACHE_DIR to a writable directory.",
        RuntimeWarning,
        stacklevel=3,
    )
    return _fallback


#: Write failures that mean "this directory cannot take the build" rather than a bug.
_UNWRITABLE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})


def in_cache(build: Callable[[Path], T]) -> T:
    """``build(cache_root())``; when the cache directory fails a write part-way (disk full, quota, turned
    read-only), the process switches to a temporary cache (one warning) and builds there instead."""
    root = cache_root()
    try:
        return build(root)
    except OSError as exc:
        if _fallback is not None or exc.errno not in _UNWRITABLE:
            raise
        return build(_fall_back(root, exc))


def digest_text(text: str) -> str:
    """The digest recorded for a generated file, to detect truncated or edited files before trusting them."""
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def _sigint_deferred():
    """Hold SIGINT back (delivered on exit) so that Ctrl-C cannot fall between two renames."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def publish_dir(build: Path, dest: Path) -> None:
    """Atomically move the finished directory ``build`` to ``dest`` (replacing an older one).

    Readers see the old complete directory or the new complete one, never a mix; an interrupt leaves one
    of the two in place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _sigint_deferred():
        _swap_in(build, dest)
    for old in dest.parent.glob(f".old-{dest.name}-*"):
        shutil.rmtree(old, ignore_errors=True)


def _swap_in(build: Path, dest: Path) -> None:
    if dest.exists():
        trash = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".old-{dest.name}-"))
        try:
            os.replace(dest, trash / dest.name)
        except OSError:
            pass  # another process replaced it first; ours goes in below
    try:
        os.replace(build, dest)
    except OSError as exc:
        # only a concurrent writer that published the same content first is a success; a destination that
        # cannot be replaced (a mount point, an immutable or foreign directory) is an error
        if not (dest.exists() and _same_files(build, dest)):
            raise OSError(exc.errno, f"cannot replace {dest} ({exc.strerror or exc})") from None
        shutil.rmtree(build, ignore_errors=True)


def _same_files(a: Path, b: Path) -> bool:
    """Whether directories ``a`` and ``b`` hold the same files with the same bytes."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    if files != sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()):
        return False
    return all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def staging_dir(parent: Path, name: str) -> Path:
    """A fresh private directory next to where ``name`` will be published."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=parent, prefix=f".tmp-{name}-"))
