"""What a long build tells the user: one line on stderr (never stdout, which threads, notebooks and Dask
workers may own) when a build from Python takes longer than ``NOTICE_AFTER`` seconds, and the CLI's line per
function.

``SYMGRAD_QUIET=1`` (or ``quiet=True`` where an API takes it) silences the notices from Python.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator

from symgrad.debug import printable

#: Seconds a build from Python runs before it says so.
NOTICE_AFTER = 2.0


def quiet_by_default() -> bool:
    """``SYMGRAD_QUIET`` set to anything but ``0`` or nothing."""
    return os.environ.get("SYMGRAD_QUIET", "0") not in ("", "0")


def say(text: str, end: str = "\n") -> None:
    """Write ``text`` on stderr, without control characters from user text (file and function names)."""
    stream = sys.stderr
    if stream is None:  # pythonw, a daemon without streams
        return
    try:
        stream.write(printable(text) + end)
        stream.flush()
    except (OSError, ValueError):  # a closed stream: the build itself goes on
        pass


_scope = threading.local()
_pending: set[str] = set()  # builds some thread is announcing: threads that wait on the same build stay quiet
_pending_lock = threading.Lock()


@contextlib.contextmanager
def notice(what: str, quiet: bool | None = None) -> Iterator[None]:
    """Say ``symgrad: compiling <what>...`` on stderr once the block has run ``NOTICE_AFTER`` seconds
    (nothing when it ends sooner, or when ``quiet``; None: ``SYMGRAD_QUIET``). Inside another notice's
    block (same thread), or while another thread announces the same ``what``, it says nothing: one line
    per long build."""
    if getattr(_scope, "active", False) or (quiet if quiet is not None else quiet_by_default()):
        yield
        return
    with _pending_lock:
        first = what not in _pending
        _pending.add(what)
    timer = threading.Timer(NOTICE_AFTER, say, (f"symgrad: compiling {what}...",))
    timer.daemon = True
    _scope.active = True  # also where another thread announces: the builds this call waits on are its
    if first:
        timer.start()
    try:
        yield
    finally:
        timer.cancel()
        _scope.active = False
        if first:
            with _pending_lock:
                _pending.discard(what)


class FunctionLines:
    """The CLI's progress on stderr, one line per function: ``[2/6] name`` when it starts (so that a function
    that hangs is named), `` (0.41 s)`` appended when it is done."""

    def __init__(self) -> None:
        self._since: float | None = None

    def __call__(self, i: int, total: int, name: str) -> None:
        """``compile_model``'s progress callback: function ``i`` of ``total`` starts (``i == total``: all
        are done)."""
        self.end()
        if i < total:
            say(f"[{i + 1}/{total}] {name}", end="")
            self._since = time.perf_counter()

    def end(self) -> None:
        """Finish the line of the function that is running, with its time."""
        if self._since is not None:
            say(f" ({time.perf_counter() - self._since:.2f} s)")
            self._since = None
