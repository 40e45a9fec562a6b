"""The ``sg.`` math functions on NumPy arrays: ``sg.exp(a)`` runs the compiled kernel of ``sg.exp`` (one
symgrad function per math function and arity, compiled into the cache on first use) and returns an array.

Registered in ``symgrad.dispatch`` for ``numpy.ndarray``. Boolean and integer arrays (a ``where`` condition,
integer data) join as floats of the other arguments' dtype, as PyTorch promotes them.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from symgrad import dispatch
from symgrad.build.elementwise import compile_elementwise
from symgrad.build.package import Package
from symgrad.compiled.function import CompiledFunction

_compiled: dict[tuple, CompiledFunction] = {}
_lock = threading.Lock()


def elementwise(name: str, arity: int, constants: tuple[tuple[int, int], ...] = ()) -> CompiledFunction:
    """The compiled ``sg.<name>`` of ``arity`` per-element scalar arguments (built on first use), with the
    Python integers ``constants`` ((position, value)) compiled in."""
    key = (name, arity, constants)
    fn = _compiled.get(key)
    if fn is None:
        with _lock:
            fn = _compiled.get(key)
            if fn is None:
                package = Package(compile_elementwise(name, arity, constants))
                fn = _compiled[key] = CompiledFunction(package, package.manifest["functions"][0])
    return fn


def as_floats(arrays: tuple, default: Any = np.float64) -> tuple:
    """``arrays`` with boolean and integer arrays as floats of the float arrays' dtype (else ``default``)."""
    kinds = [a.dtype.kind for a in arrays if isinstance(a, np.ndarray)]
    if not any(k in "biu" for k in kinds):
        return arrays
    floats = [a.dtype for a in arrays if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    dtype = np.result_type(*floats) if floats else np.dtype(default)
    return tuple(
        a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind in "biu" else a for a in arrays
    )


def split_integers(args: tuple) -> tuple[tuple[tuple[int, int], ...], tuple]:
    """Python integers among ``args`` (orders, roots: ``sg.polygamma(1, a)``), as (position, value), and
    the other arguments, the kernel's data."""
    constants = tuple((k, a) for k, a in enumerate(args) if type(a) is int)
    return constants, tuple(a for a in args if type(a) is not int)


def apply(name: str, args: tuple) -> Any:
    """``sg.<name>(*args)`` on arrays and numbers: the compiled kernel's result."""
    constants, data = split_integers(args)
    return elementwise(name, len(args), constants)(*as_floats(data))


dispatch.register(np.ndarray, apply)
