"""``set_grad_enabled`` and ``inference_mode``: the grad-mode switches beside ``no_grad``/``enable_grad``.

``set_grad_enabled(flag)`` sets the mode as soon as it is called (a plain call works as in PyTorch) and, used
with ``with`` or as a decorator, restores the previous mode afterwards. ``inference_mode()`` is ``no_grad``
here: nothing inside is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from symgrad.runtime import autograd
from symgrad.runtime.autograd import _SetGradMode


class set_grad_enabled(_SetGradMode):  # noqa: N801  (torch's spelling)
    """Turn recording on or off now; as a context manager or decorator, restore the previous mode on exit."""

    def __init__(self, enabled: bool) -> None:
        self._prev = autograd.mode.enabled
        self._value = bool(enabled)
        autograd.mode.enabled = self._value

    def __enter__(self) -> None:
        autograd.mode.enabled = self._value

    def __call__(self, fn: Callable) -> Callable:
        autograd.mode.enabled = self._prev  # decorating is not entering: the mode applies inside calls only
        return super().__call__(fn)


class inference_mode(_SetGradMode):  # noqa: N801
    """Operations inside do not record (``no_grad``) when ``mode`` is true; a no-op otherwise."""

    def __init__(self, mode: bool = True) -> None:
        self._mode = bool(mode)

    def __enter__(self) -> None:
        self._prev = autograd.mode.enabled
        if self._mode:
            autograd.mode.enabled = False

    def __call__(self, fn: Callable) -> Callable:
        if not self._mode:
            return fn
        self._value = False
        return super().__call__(fn)

    def __exit__(self, *exc: Any) -> None:
        autograd.mode.enabled = self._prev
