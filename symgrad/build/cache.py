"""Where symgrad keeps compiled artifacts, and how it writes them without ever exposing half a file."""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import os
import shutil
import signal
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_fallback: Path | None = None

#: The directories of a cache root: packages of model files, of traced functions, and C builds.
KINDS = ("models", "jit", "c")
#: Name prefixes of what builds and removals leave beside the entries while they run.
STAGING = (".tmp-", ".trash-", ".old-")


def cache_root() -> Path:
    """``$SYMGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/symgrad``, else ``~/.cache/symgrad``, with its ``KINDS``
    subdirectories (created for this user only).

    A temporary directory (with one warning) replaces a root that is not writable, that has a non-directory
    in place of one of ``KINDS``, or that another user could write: one owned by another user or writable by
    group/others (whoever writes the cache chooses the code that is loaded from it), unless
    ``SYMGRAD_CACHE_SHARED=1`` says that it is meant to be shared."""
    if _fallback is not None:
        return _fallback
    env = os.environ.get("SYMGRAD_CACHE_DIR")
    root = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "symgrad"
    shared = os.environ.get("SYMGRAD_CACHE_SHARED", "0") not in ("", "0")
    try:
        root.mkdir(mode=0o777 if shared else 0o700, parents=True, exist_ok=True)
        for path in (root, *(root / kind for kind in KINDS)):
            _check_dir(path, shared)
        probe = tempfile.NamedTemporaryFile(dir=root, prefix=".probe-")
        probe.close()
        return root
    except _Untrusted as exc:
        return _fall_back(
            root,
            exc,
            "Set SYMGRAD_CACHE_DIR to a directory that only you can write, or SYMGRAD_CACHE_SHARED=1 to "
            "trust everyone who can write this one.",
        )
    except OSError as exc:
        return _fall_back(root, exc)


class _Untrusted(PermissionError):
    """A cache directory that someone other than this user can write."""


def _check_dir(path: Path, shared: bool) -> None:
    """Create ``path`` (this user's only, unless ``shared``) if missing; raise OSError unless it is a
    directory that only this user can write (any directory when ``shared``)."""
    try:
        path.mkdir(mode=0o777 if shared else 0o700)
    except FileExistsError:
        pass
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    if shared or os.name != "posix":
        return
    if st.st_uid != os.geteuid():
        raise _Untrusted(errno.EPERM, f"owned by uid {st.st_uid}, not by this user", str(path))
    if st.st_mode & 0o022:
        raise _Untrusted(errno.EPERM, f"writable by group or others (mode {st.st_mode & 0o777:o})", str(path))


def _remove_at_exit(path: Path, owner: int) -> None:
    """Remove ``path`` when the process that made it exits (not a forked child, which inherits the hook)."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def private_dir(prefix: str) -> Path:
    """A fresh temporary directory for this process only, removed when it exits (not when a forked child
    that inherited it exits)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(_remove_at_exit, path, os.getpid())
    return path


def _fall_back(
    root: Path, exc: OSError, advice: str = "Set SYMGRAD_CACHE_DIR to a writable directory."
) -> Path:
    global _fallback
    _fallback = private_dir("symgrad-cache-")  # it serves this process only
    warnings.warn(
        f"symgrad: cache directory {root} is not usable ({exc}); using {_fallback} for this "
        f"process. {advice}",
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
    """A fresh private directory next to where ``name`` will be published, named for this process
    (``.tmp-<name>-<pid>-*``: a parent that kills a compiling child removes the child's)."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=parent, prefix=f".tmp-{name}-{os.getpid()}-"))


def remove_aside(path: Path) -> None:
    """Rename ``path`` into a fresh trash directory beside it, then delete that: a reader sees ``path`` whole
    or not at all, never half deleted. Nothing happens when ``path`` is already gone."""
    try:
        trash = Path(tempfile.mkdtemp(dir=path.parent, prefix=".trash-"))
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        os.replace(path, trash / path.name)
    except FileNotFoundError:
        pass
    except OSError:  # cannot be renamed (a mount point): deleted in place
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    shutil.rmtree(trash, ignore_errors=True)


def clear(kinds: tuple[str, ...] = KINDS, stale_after: float = 3600.0) -> int:
    """Empty the ``kinds`` directories of ``cache_root()``; returns the number of entries removed.

    Each entry, failed build, toolchain probe and staging leftover (``STAGING``) is renamed into one trash
    directory, then the trash is deleted, so a process using the cache meanwhile finds an entry whole or
    gone (and rebuilds it). Staging leftovers younger than ``stale_after`` seconds belong to running builds:
    kept."""
    root = cache_root()
    removed = 0
    now = time.time()
    for kind in kinds:
        directory = root / kind
        try:
            children = list(directory.iterdir())
            trash = Path(tempfile.mkdtemp(dir=directory, prefix=".trash-"))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for child in children:
            try:
                if child.name.startswith(STAGING) and now - child.lstat().st_mtime < stale_after:
                    continue
                os.replace(child, trash / child.name)
            except FileNotFoundError:  # another clear, or a build that published or removed it
                continue
            removed += not child.name.startswith(".")
        shutil.rmtree(trash, ignore_errors=True)
    return removed
