"""Compiled functions: a package's kernels as NumPy-level callables (no SymPy; see ``docs/contracts.md``)."""

from __future__ import annotations

import warnings
from pathlib import Path

from symgrad.build.compile import compile_model_in_cache
from symgrad.build.package import Package
from symgrad.compiled.arguments import sum_to_shape
from symgrad.compiled.function import CompiledFunction, register_tensor_hook
from symgrad.errors import StalePackageWarning


def load_package(location: str | Path) -> dict[str, CompiledFunction]:
    """The functions of a compiled package, by name (``location``: its directory or its ``__init__.py``)."""
    path = Path(location)
    if path.is_file():
        path = path.parent
    package = Package(path)
    changed = package.changed_sources()
    if changed:
        names = ", ".join(p.name for p in changed)
        warnings.warn(
            f"{names} changed since {path.name} was compiled: its functions are the old ones; rerun "
            f"`symgrad compile {changed[0].name}` (sg.compile recompiles by itself)",
            StalePackageWarning,
            stacklevel=2,
        )
    return {entry["name"]: CompiledFunction(package, entry) for entry in package.manifest["functions"]}


def load_model(path: str | Path) -> dict[str, CompiledFunction]:
    """The compiled functions of the model file at ``path``, compiled into the cache when it changed."""
    return load_package(compile_model_in_cache(path))


__all__ = ["CompiledFunction", "load_package", "load_model", "register_tensor_hook", "sum_to_shape"]
