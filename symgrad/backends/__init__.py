"""Backends run a compiled package's kernels: ``numpy`` (the generated .py) and ``c`` (cffi), by name.

The active backend comes from ``sg.set_backend(name)``, else ``$SYMGRAD_BACKEND``, else ``c``. A backend
that cannot work here (no C compiler) makes symgrad fall back to NumPy with one warning.
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from ..cache import digest_text
from ..errors import PackageError

Run = Callable[..., tuple]   # run(inputs, batch, out=None) -> results (written into ``out`` when given)


class BackendUnavailable(Exception):
    """Raised by a backend's ``load`` when it cannot work on this machine (the caller falls back)."""


@dataclass(frozen=True)
class Package:
    """A compiled package directory and its manifest."""

    path: Path

    @cached_property
    def manifest(self) -> dict:
        try:
            manifest = json.loads((self.path / "manifest.json").read_text())
            manifest["functions"], manifest["digests"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PackageError(f"{self.path} is not a usable symgrad package (manifest.json: {exc}); "
                               "rerun `symgrad compile` on its model") from None
        return manifest

    def read(self, emitter: str) -> str:
        """The text of the file ``emitter`` generated, after checking it against the recorded digest."""
        filename = self.manifest["files"][emitter]
        try:
            text = (self.path / filename).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            text, problem = None, str(exc)
        else:
            problem = "truncated or edited since it was generated"
        if text is None or digest_text(text) != self.manifest["digests"].get(filename):
            raise PackageError(f"{self.path / filename}: {problem}; rerun `symgrad compile` on its model")
        return text

    def file(self, emitter: str) -> Path:
        """The path of the file ``emitter`` generated, checked as in ``read``."""
        self.read(emitter)
        return self.path / self.manifest["files"][emitter]


class KernelSet(Protocol):
    def program(self, function: str, program: str, dtype: np.dtype) -> Run: ...


class Backend(Protocol):
    name: str

    def load(self, package: Package) -> KernelSet: ...


_FACTORIES: dict[str, Callable[[], Backend]] = {}
_INSTANCES: dict[str, Backend] = {}
_chosen: str | None = None
_warned: set[str] = set()


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    _FACTORIES[name] = factory


def _ensure_registered() -> None:
    if "numpy" in _FACTORIES:
        return
    from . import numpy as _numpy  # noqa: F401  (registers 'numpy')
    try:
        from . import c as _c  # noqa: F401  (registers 'c')
    except ImportError:
        pass


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
    if _chosen is None:          # every compiled call asks: resolve the environment once
        _ensure_registered()
        name = os.environ.get("SYMGRAD_BACKEND") or ("c" if "c" in _FACTORIES else "numpy")
        if name not in _FACTORIES:
            raise ValueError(f"SYMGRAD_BACKEND={name!r} is not a backend; choose one of {', '.join(available())}")
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
            warnings.warn(f"symgrad: the {name} backend is unavailable ({exc}); using the numpy backend.",
                          RuntimeWarning, stacklevel=3)
        return "numpy", backend("numpy").load(package)
