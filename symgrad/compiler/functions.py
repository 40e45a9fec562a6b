"""The math namespace users write models with: SymPy's functions plus symgrad's stable primitives.

Everything here builds SymPy expressions from symbols and numbers. ``where`` refuses Python booleans,
which is what ``x != 0`` on a SymPy symbol silently becomes. Called on an ``sg.Tensor`` or a NumPy array,
each function (but the conditions and constants, ``_SYMBOLIC_ONLY``) computes instead, through the handler
that type's stage registered in ``symgrad.dispatch`` (a tape op; the compiled elementwise kernel).
"""

from __future__ import annotations

import sympy
from sympy import (
    Abs,
    Eq,
    Heaviside,
    Max,
    Min,
    Mod,
    Ne,
    Piecewise,
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    ceiling,
    cos,
    cosh,
    erf,
    erfc,
    erfinv,
    exp,
    floor,
    frac,
    gamma,
    log,
    loggamma,
    pi,
    sign,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
)
from sympy import E as e  # noqa: N811  (Euler's number, as in numpy.e)
from sympy.codegen.cfunctions import exp2, log2, log10
from sympy.logic.boolalg import And, Not, Or

from symgrad import dispatch
from symgrad.compiler import dag
from symgrad.compiler.piecewise import piecewise
from symgrad.compiler.primitives import (
    expm1,
    log1p,
    logaddexp,
    logsigmoid,
    maximum,
    minimum,
    sigmoid,
    softplus,
    xlogy,
)
from symgrad.compiler.primitives import hypot as _hypot
from symgrad.compiler.special import (
    besseli,
    besselj,
    beta,
    betaln,
    cbrt,
    digamma,
    erfcx,
    i0e,
    i1e,
    polygamma,
    real_root,
    sinc,
    zeta,
)
from symgrad.errors import ModelError

abs = Abs  # noqa: A001  (sg.abs like numpy.abs / torch.abs)
lgamma = loggamma  # log|Gamma(x)| (sg.lgamma like torch.lgamma / math.lgamma)


def where(condition, x, y) -> sympy.Expr:
    """``x`` where ``condition`` holds, else ``y``; the untaken branch never leaks NaN into value or
    gradient."""
    if isinstance(condition, bool):
        raise ModelError(
            f"sg.where: the condition is the Python bool {condition}, not a symbolic comparison. "
            "`x != y` and `x == y` on SymPy symbols compare the expressions themselves; "
            "use sg.Ne(x, y) / sg.Eq(x, y)."
        )
    return piecewise((x, condition), (y, True))


def relu(x) -> sympy.Expr:
    """max(x, 0) with relu'(0) = 0."""
    return maximum(x, 0)


def clamp(x, lo, hi) -> sympy.Expr:
    """Clip ``x`` to [lo, hi]; gradient 1 at the boundaries, as ``torch.clamp``."""
    return piecewise((lo, x < lo), (hi, x > hi), (x, True))


def logsumexp(*args) -> sympy.Expr:
    """log(sum(exp(a))) over the arguments, or over the elements of one ``sg.Vector``/``sg.Matrix`` argument
    or list; stable, exact for -inf arguments."""
    if len(args) == 1 and isinstance(args[0], (sympy.MatrixBase, list, tuple)):
        args = tuple(args[0])
    result = sympy.sympify(args[0])
    for a in args[1:]:
        result = logaddexp(result, a)
    return result


def hypot(x, y) -> sympy.Expr:
    """sqrt(x**2 + y**2) without overflow or underflow (its scaled form), gradient x/hypot(x, y)."""
    return _hypot(x, y)


__all__ = [
    "Abs",
    "Heaviside",
    "Mod",
    "besseli",
    "besselj",
    "beta",
    "betaln",
    "cbrt",
    "digamma",
    "erfcx",
    "erfinv",
    "exp2",
    "frac",
    "gamma",
    "i0e",
    "i1e",
    "lgamma",
    "log10",
    "log2",
    "loggamma",
    "polygamma",
    "real_root",
    "sinc",
    "zeta",
    "Eq",
    "Max",
    "Min",
    "Ne",
    "Piecewise",
    "And",
    "Or",
    "Not",
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "ceiling",
    "clamp",
    "cos",
    "cosh",
    "e",
    "erf",
    "erfc",
    "exp",
    "expm1",
    "floor",
    "hypot",
    "log",
    "log1p",
    "logaddexp",
    "logsigmoid",
    "logsumexp",
    "maximum",
    "minimum",
    "pi",
    "relu",
    "sigmoid",
    "sign",
    "sin",
    "sinh",
    "softplus",
    "sqrt",
    "tan",
    "tanh",
    "where",
    "xlogy",
]

#: conditions and constants: no numeric form
_SYMBOLIC_ONLY = frozenset({"Eq", "Ne", "And", "Or", "Not", "Piecewise", "pi", "e"})
#: what builds expressions: SymPy objects and Python numbers (any other argument may have a numeric handler)
_SYMBOLIC = (sympy.Basic, sympy.MatrixBase, int, float, complex)


#: SymPy evaluates a function of a larger argument than this (nodes as a tree) unevaluated: its evaluation
#: (``tanh(u)`` looks for ``u = -v``, ``u = 0``, ...) asks assumption queries that walk ``u`` as a tree,
#: exponential in the depth of a network whose layers share their inputs
EVALUATE_NODES = 200


def _dispatching(name: str, symbolic):
    """``symbolic`` for SymPy objects and numbers, the registered handler for a Tensor or an array."""

    def math_function(*args, **kwargs):
        for a in args:
            if not isinstance(a, _SYMBOLIC):
                handler = dispatch.handler_for(args)
                if handler is not None:
                    return handler(name, args, **kwargs)
                break
        large = any(dag.larger_than(a, EVALUATE_NODES) for a in args)
        if large and isinstance(symbolic, sympy.FunctionClass):
            return symbolic(*args, evaluate=False, **kwargs)
        return symbolic(*args, **kwargs)

    math_function.__name__ = math_function.__qualname__ = name
    math_function.__doc__ = symbolic.__doc__
    math_function.symbolic = symbolic
    return math_function


for _name in __all__:
    if _name not in _SYMBOLIC_ONLY:
        globals()[_name] = _dispatching(_name, globals()[_name])
