"""In-process compilation: ``sg.compile(path)`` for a model file, ``compile_function`` for one
``@sg.function`` called directly on arrays. Both build into the cache directory and reuse what is there."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING

from .build import compile_model, intact_manifest, source_hash, write_package
from .cache import in_cache
from .compiled import CompiledFunction, load_package

if TYPE_CHECKING:
    from .frontend import SymbolicFunction


def compile(path: str | Path, *, force: bool = False) -> types.ModuleType:  # noqa: A001  (sg.compile)
    """Compile ``path`` (a model file) if it changed, and return the compiled module.

    The module's attributes are the compiled functions; same object as ``import <model>_symgrad`` gives
    after ``symgrad compile``, but built in the cache directory."""
    path = Path(path).resolve()
    where = hashlib.sha256(str(path).encode()).hexdigest()[:12]

    def build(root: Path) -> Path:
        dest = root / "models" / f"{path.stem}-{where}"
        compile_model(path, dest, force=force)
        return dest

    dest = in_cache(build)
    name = f"{path.stem}_symgrad_{where}"
    module = types.ModuleType(name, f"symgrad-compiled functions of {path.name}")
    module.__file__ = str(dest / "__init__.py")
    functions = load_package(dest)
    module.__dict__.update(functions)
    module.__all__ = list(functions)
    sys.modules[name] = module
    return module


def compile_function(fn: "SymbolicFunction") -> CompiledFunction:
    """Compile one function, keyed by what tracing produced (so closures over constants are respected)."""
    import sympy

    from .lower import lower
    spec = fn.trace()
    key = source_hash(repr((spec.name, [(a.name, a.shape, a.diff, a.uniform) for a in spec.args],
                            [(o.shape, [sympy.srepr(e) for e in o.exprs]) for o in spec.outputs],
                            spec.returns_tuple)).encode())
    kernels = []

    def build(root: Path) -> Path:
        dest = root / "jit" / f"{spec.name}-{key[:16]}"
        if intact_manifest(dest) is None:
            kernels[:] = kernels or [lower(spec)]
            write_package(kernels, dest, spec.origin, key)
        return dest

    return load_package(in_cache(build))[spec.name]
