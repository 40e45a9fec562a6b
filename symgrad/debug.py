"""``SYMGRAD_DEBUG``: what symgrad prints about its own work, on stderr.

- ``1``: the kernel IR of every function it compiles, with the time of each stage (trace, derive, lower,
  emit); cache entries it finds broken and rebuilds; why a fast path is unavailable; the CLI's tracebacks.
- ``2``: also the generated source of every function and every compiler command.
"""

from __future__ import annotations

import os
import sys


def debug(level: int) -> bool:
    """True when ``SYMGRAD_DEBUG`` is at least ``level`` (read on every call, so tests can set it)."""
    try:
        return int(os.environ.get("SYMGRAD_DEBUG", "0")) >= level
    except ValueError:
        return False


def say(text: str) -> None:
    """One ``symgrad:`` message (or block) on stderr."""
    print(f"symgrad: {text}", file=sys.stderr, flush=True)
