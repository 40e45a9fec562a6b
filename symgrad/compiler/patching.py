"""A process-wide change to SymPy held while any trace runs: ``Patch(install, remove).held()`` installs it
when the first thread enters and removes it when the last one leaves (nested and concurrent traces share
one installation). Tracing uses it for non-finite floats (``nonfinite``) and running sums
(``running_sums``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class Patch:
    """``install`` and ``remove``, run under one lock when the count of holders leaves and reaches zero."""

    def __init__(self, install: Callable[[], None], remove: Callable[[], None]) -> None:
        self._install, self._remove = install, remove
        self._lock = threading.Lock()
        self._holders = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._install()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    self._remove()
