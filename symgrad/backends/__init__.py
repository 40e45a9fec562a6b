"""Backends run a compiled package's kernels: ``numpy`` (the generated .py) and ``c`` (cffi), by name.

The active backend comes from ``sg.set_backend(name)``, else ``$SYMGRAD_BACKEND``, else ``c``. A backend
that cannot work here (no C compiler) makes symgrad fall back to NumPy with one warning.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

from symgrad.backends.base import Backend, KernelSet
from symgrad.build.package import Package
from symgrad.errors import BackendUnavailable

_FACTORIES: dict[str, Callable[[], Backend]] = {}
_INSTANCES: dict[str, Backend] = {}
_chosen: str | None = None
_warned: set[str] = set()


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Make ``factory()`` (an object with ``load(package) -> KernelSet``) the backend called ``name``."""
    _FACTORIES[name] = factory


def _ensure_registered() -> None:
    """Register the built-in backends on first use (the C one only where cffi imports)."""
    if "numpy" in _FACTORIES:
        return
    from symgrad.backends.numpy import NumPyBackend

    register_backend("numpy", NumPyBackend)
    try:
        from symgrad.backends.c import CBackend
    except ImportError:
        return
    register_backend("c", CBackend)


def available() -> list[str]:
    _ensure_registered()
    return sorted(_FACTORIES)


def set_backend(name: str) -> None:
    """Choose the backend for every compiled function from now on: 'c' or 'numpy'."""
    global _chosen
    if name not in available():
        raise ValueError(f"unknown symgrad backend {name!r}; choose one of {', '.join(available())}")
    _chosen = name


def get_backend_name() -> str:
    """The chosen backend: ``set_backend``, else ``$SYMGRAD_BACKEND`` (read on first use, like PyTorch's
    environment switches), else 'c' (or 'numpy' without a C backend)."""
    global _chosen
    if _chosen is None:  # every compiled call asks: resolve the environment once
        _ensure_registered()
        name = os.environ.get("SYMGRAD_BACKEND") or ("c" if "c" in _FACTORIES else "numpy")
        if name not in _FACTORIES:
            raise ValueError(
                f"SYMGRAD_BACKEND={name!r} is not a backend; choose one of {', '.join(available())}"
            )
        _chosen = name
    return _chosen


def chosen_name() -> str:
    """``get_backend_name()`` without the first-use resolution once it is done (every kernel lookup asks)."""
    return _chosen or get_backend_name()


def backend(name: str) -> Backend:
    if name not in _INSTANCES:
        _ensure_registered()
        _INSTANCES[name] = _FACTORIES[name]()
    return _INSTANCES[name]


def load_kernels(package: Package, name: str) -> tuple[str, KernelSet]:
    """Load ``package`` on backend ``name``, falling back to NumPy (one warning) when it is unavailable."""
    try:
        return name, backend(name).load(package)
    except BackendUnavailable as exc:
        if name == "numpy":
            raise
        if name not in _warned:
            _warned.add(name)
            warnings.warn(
                f"symgrad: the {name} backend is unavailable ({exc}); using the numpy backend.",
                RuntimeWarning,
                stacklevel=3,
            )
        return "numpy", backend("numpy").load(package)
