"""symgrad: write forward functions with SymPy; get derived, stable, compiled gradients and a tape runtime.

    import symgrad as sg

    @sg.function
    def softplus(x):
        return sg.log(1 + sg.exp(x))

    softplus.value_and_vjp(x, grad_out)        # compiled on first use
    m = sg.compile("model.py")                  # or a whole model file

The API: ``sg.function``, ``sg.compile``, ``sg.Vector``/``sg.Matrix`` (argument shapes), the errors, the
tape runtime (``sg.Tensor``, ``sg.no_grad``, ``sg.grad``, factories like ``sg.zeros``), ``sg.nn``,
``sg.optim``, ``sg.viz`` (graphs) and the backend switches (``sg.set_backend``).

The math that models are written with, SymPy's functions and symgrad's stable primitives (on symbols each
builds a SymPy expression; on an ``sg.Tensor`` or a NumPy array it computes elementwise; ``help(sg.exp)``
describes one), is these names:

    Abs, abs, acos, acosh, And, asin, asinh, atan, atan2, atanh, besseli, besselj, beta, betaln,
    cbrt, ceiling, clamp, cos, cosh, digamma, e, Eq, erf, erfc, erfcx, erfinv, exp, exp2, expm1,
    floor, frac, gamma, Heaviside, hypot, i0e, i1e, lgamma, log, log10, log1p, log2, logaddexp,
    loggamma, logsigmoid, logsumexp, Max, maximum, Min, minimum, Mod, Ne, Not, Or, pi, Piecewise,
    polygamma, real_root, relu, sigmoid, sign, sin, sinc, sinh, softplus, sqrt, tan, tanh, where,
    xlogy, zeta

Names are loaded lazily so that importing a compiled package imports neither SymPy nor the tape runtime.
The runtime's names and the math names are those of ``symgrad.runtime.__all__`` and
``symgrad.compiler.functions.__all__``.
"""

import importlib as _importlib
import importlib.util as _importlib_util

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
_SUBMODULES = ("nn", "optim", "viz", "func")
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
    return [n for ns in _NAMESPACES for n in _importlib.import_module(f".{ns}", __name__).__all__]


def _from_namespaces(name: str) -> object:
    for ns in _NAMESPACES:
        module = _importlib.import_module(f".{ns}", __name__)
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(f"module 'symgrad' has no attribute {name!r}")


def _is_submodule(name: str) -> bool:
    """``from symgrad import abi`` asks for the attribute first: a submodule must not import SymPy."""
    return _importlib_util.find_spec(f"{__name__}.{name}") is not None


def __getattr__(name: str) -> object:
    if name in _LAZY:
        module, _, attr = _LAZY[name].partition(":")
        value = getattr(_importlib.import_module(f".{module}", __name__), attr or name)
    elif name in _SUBMODULES:
        value = _importlib.import_module(f".{name}", __name__)
    elif name == "__all__":  # what help(sg) documents: the math names are one list in the docstring
        value = [*_ERRORS, *_LAZY, *_SUBMODULES, *_importlib.import_module(".runtime", __name__).__all__]
    elif not name.startswith("_") and not _is_submodule(name):
        value = _from_namespaces(name)
    else:
        raise AttributeError(f"module 'symgrad' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the module's dunders; not its own helpers, nor the internal submodules
    (``symgrad.compiler``, ...) that importing adds as attributes."""
    dunders = [n for n in globals() if n.startswith("__")]
    return sorted({*dunders, *_ERRORS, *_LAZY, *_SUBMODULES, *_namespace_names()})
