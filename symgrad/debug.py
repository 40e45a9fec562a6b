"""``SYMGRAD_DEBUG``: what symgrad prints about its own work, on stderr.

- ``1``: the kernel IR of every function it compiles, with the time of each stage (trace, derive, lower
  per program, emit per target); cache entries it finds broken and rebuilds; why a fast path is
  unavailable; the CLI's tracebacks.
- ``2``: also the generated source of every function and every compiler command.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


def debug(level: int) -> bool:
    """True when ``SYMGRAD_DEBUG`` is at least ``level`` (read on every call, so tests can set it)."""
    try:
        return int(os.environ.get("SYMGRAD_DEBUG", "0")) >= level
    except ValueError:
        return False


@contextmanager
def timed(label: str) -> Iterator[None]:
    """At ``SYMGRAD_DEBUG=1``: ``label: 0.123 s`` once the block is done (the time of one compile stage)."""
    if not debug(1):
        yield
        return
    started = time.perf_counter()
    yield
    say(f"{label}: {time.perf_counter() - started:.3f} s")


def say(text: str) -> None:
    """One ``symgrad:`` message (or block) on stderr, user text in it made ``printable``."""
    print(f"symgrad: {printable(text)}", file=sys.stderr, flush=True)


def printable(text: str) -> str:
    """``text`` safe to write to a terminal: line breaks kept, every other character that Python's ``repr``
    escapes (C0 and C1 controls such as the ESC that starts an ANSI sequence, ``\\r``, BEL and NUL; bidi
    overrides and isolates and other format characters; line separators; lone surrogates) written the way
    ``repr`` writes it (``\\x1b``, ``\\u202e``). Printable text, non-ASCII letters included, is unchanged."""
    lines = text.split("\n")
    if all(line.isprintable() for line in lines):
        return text
    return "\n".join(
        line if line.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
        for line in lines
    )
