"""symgrad: write forward functions with SymPy; get derived, stable, compiled gradients and a tape runtime.

    import symgrad as sg

    @sg.function
    def softplus(x):
        return sg.log(1 + sg.exp(x))

    softplus.value_and_vjp(x, grad_out)        # compiled on first use
    m = sg.compile("model.py")                  # or a whole model file

Names are loaded lazily so that importing a compiled package does not import SymPy.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

from .backends import available as available_backends  # noqa: E402
from .backends import get_backend_name as get_backend  # noqa: E402
from .backends import set_backend  # noqa: E402
from .errors import (ArgumentError, CompileError, ExpressionTooLarge, ModelError, PackageError,  # noqa: E402
                     SymgradError, UnsupportedError)

_MATH = (
    "Abs", "Eq", "Max", "Min", "Ne", "Piecewise", "And", "Or", "Not", "abs", "acos", "acosh", "asin", "asinh",
    "atan", "atan2", "atanh", "ceiling", "clamp", "cos", "cosh", "e", "erf", "erfc", "exp", "expm1", "floor",
    "hypot", "log", "log1p", "logaddexp", "logsigmoid", "logsumexp", "maximum", "minimum", "pi", "relu", "sigmoid",
    "sign", "sin", "sinh", "softplus", "sqrt", "tan", "tanh", "where", "xlogy",
)
_LAZY: dict[str, str] = {
    **{name: "functions" for name in _MATH},
    "function": "frontend", "Vector": "frontend", "Matrix": "frontend", "SymbolicFunction": "frontend",
    "compile": "jit", "CompiledFunction": "compiled", "load_package": "compiled",
}
_RUNTIME = ("Tensor", "tensor", "from_numpy", "as_tensor", "no_grad", "enable_grad", "is_grad_enabled", "grad", "Function")
_SUBMODULES = ("nn", "optim")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif name in _RUNTIME:
        value = getattr(importlib.import_module(".runtime", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'symgrad' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_RUNTIME) | set(_SUBMODULES))


__all__ = ["set_backend", "get_backend", "available_backends", "SymgradError", "ModelError", "UnsupportedError",
           "ArgumentError", "CompileError", "ExpressionTooLarge", "PackageError", *_LAZY, *_RUNTIME, *_SUBMODULES]
