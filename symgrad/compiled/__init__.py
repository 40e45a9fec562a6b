"""Compiled functions: a package's kernels as NumPy-level callables (no SymPy; see ``docs/contracts.md``)."""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Callable
from pathlib import Path

from symgrad.build.compile import compile_model_in_cache, model_key
from symgrad.build.package import Package
from symgrad.compiled import elementwise as elementwise  # registers sg.exp(array) & co. (symgrad.dispatch)
from symgrad.compiled import reference as reference  # CompiledFunction pickles as a reference
from symgrad.compiled.arguments import sum_to_shape
from symgrad.compiled.function import CompiledFunction, register_tensor_hook
from symgrad.errors import StalePackageWarning


def load_package(
    location: str | Path, *, quiet: bool | None = None, rebuild: Callable[[], Path] | None = None
) -> dict[str, CompiledFunction]:
    """The functions of a compiled package, by name (``location``: its directory or its ``__init__.py``);
    ``quiet`` and ``rebuild``: see ``symgrad.build.package.Package``."""
    path = Path(location)
    if path.is_file():
        path = path.parent
    package = Package(path, quiet, rebuild)
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


def load_model(
    path: str | Path, *, force: bool = False, timeout: float | None = None, quiet: bool | None = None
) -> dict[str, CompiledFunction]:
    """The compiled functions of the model file at ``path``, compiled into the cache when it changed (and
    again if its cache entry vanishes while in use: ``symgrad cache clear``)."""

    def build(force: bool = False) -> Path:
        return compile_model_in_cache(path, force=force, timeout=timeout, quiet=quiet)

    return load_package(build(force), quiet=quiet, rebuild=build)


def compile_module(
    path: str | Path, *, force: bool = False, timeout: float | None = None, quiet: bool | None = None
) -> types.ModuleType:
    """``sg.compile``: compile ``path`` (a model file) if it changed, and return the compiled module.

    The module's attributes are the compiled functions; same object as ``import <model>_symgrad`` gives
    after ``symgrad compile``, but built in the cache directory. Neither SymPy nor the tape runtime is
    imported when the model is unchanged. ``timeout``: seconds before compiling gives up (ModelError; the
    model runs in a child process that is killed then). A build that takes more than 2 s says so in one
    line on stderr unless ``quiet`` (default: ``SYMGRAD_QUIET=1``)."""
    path = Path(path).resolve()
    functions = load_model(path, force=force, timeout=timeout, quiet=quiet)
    name = f"{path.stem}_symgrad_{model_key(path)}"
    module = types.ModuleType(name, f"symgrad-compiled functions of {path.name}")
    module.__file__ = str(next(iter(functions.values())).package.path / "__init__.py")
    module.__dict__.update(functions)
    module.__all__ = list(functions)
    sys.modules[name] = module
    return module


__all__ = [
    "CompiledFunction",
    "compile_module",
    "load_package",
    "load_model",
    "register_tensor_hook",
    "sum_to_shape",
]
