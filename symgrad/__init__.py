"""symgrad: write forward functions with SymPy; get derived, stable, compiled gradients and a tape runtime.

    import symgrad as sg

    @sg.function
    def softplus(x):
        return sg.log(1 + sg.exp(x))

    softplus.value_and_vjp(x, grad_out)        # compiled on first use
    m = sg.compile("model.py")                  # or a whole model file

Names are loaded lazily so that importing a compiled package imports neither SymPy nor the tape runtime.
The runtime's names (``sg.Tensor``, ...) and the math names (``sg.exp``, ``sg.where``, ...) are those of
``symgrad.runtime.__all__`` and ``symgrad.compiler.functions.__all__``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__version__ = "0.1.0"

from symgrad.errors import ArgumentError as ArgumentError  # noqa: E402
from symgrad.errors import CompileError as CompileError  # noqa: E402
from symgrad.errors import ExpressionTooLarge as ExpressionTooLarge  # noqa: E402
from symgrad.errors import ModelError as ModelError  # noqa: E402
from symgrad.errors import PackageError as PackageError  # noqa: E402
from symgrad.errors import StalePackageWarning as StalePackageWarning  # noqa: E402
from symgrad.errors import SymgradError as SymgradError  # noqa: E402
from symgrad.errors import UnsupportedError as UnsupportedError  # noqa: E402

#: public name -> its module, ``module:attribute`` where the names differ (imported on first use)
_LAZY: dict[str, str] = {
    "function": "api",
    "SymbolicFunction": "api",
    "compile": "compiled:compile_module",
    "Vector": "compiler.trace",
    "Matrix": "compiler.trace",
    "CompiledFunction": "compiled",
    "load_package": "compiled",
    "set_backend": "backends",
    "get_backend": "backends:get_backend_name",
    "available_backends": "backends:available",
}
_SUBMODULES = ("nn", "optim")
#: modules whose ``__all__`` are public names of ``sg`` too, looked up in this order on first use: the tape
#: runtime (``sg.Tensor``, ``sg.no_grad``, ...; no SymPy), then the math that models are written with
_NAMESPACES = ("runtime", "compiler.functions")
_ERRORS = [
    "SymgradError",
    "ModelError",
    "UnsupportedError",
    "ArgumentError",
    "CompileError",
    "ExpressionTooLarge",
    "PackageError",
    "StalePackageWarning",
]


def _namespace_names() -> list[str]:
    return [n for ns in _NAMESPACES for n in importlib.import_module(f".{ns}", __name__).__all__]


def _from_namespaces(name: str) -> Any:
    for ns in _NAMESPACES:
        module = importlib.import_module(f".{ns}", __name__)
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(f"module 'symgrad' has no attribute {name!r}")


def _is_submodule(name: str) -> bool:
    """``from symgrad import abi`` asks for the attribute first: a submodule must not import SymPy."""
    return importlib.util.find_spec(f"{__name__}.{name}") is not None


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, _, attr = _LAZY[name].partition(":")
        value = getattr(importlib.import_module(f".{module}", __name__), attr or name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    elif name == "__all__":
        value = [*_ERRORS, *_LAZY, *_SUBMODULES, *_namespace_names()]
    elif not name.startswith("_") and not _is_submodule(name):
        value = _from_namespaces(name)
    else:
        raise AttributeError(f"module 'symgrad' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES) | set(_namespace_names()))
