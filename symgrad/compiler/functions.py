"""The math namespace users write models with: SymPy's functions plus symgrad's stable primitives.

Everything here builds SymPy expressions; nothing evaluates numbers. ``where`` refuses Python booleans,
which is what ``x != 0`` on a SymPy symbol silently becomes.
"""

from __future__ import annotations

import sympy
from sympy import (
    Abs,
    Eq,
    Max,
    Min,
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
    exp,
    floor,
    log,
    pi,
    sign,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
)
from sympy import E as e  # noqa: N811  (Euler's number, as in numpy.e)
from sympy.logic.boolalg import And, Not, Or

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
from symgrad.errors import ModelError

abs = Abs  # noqa: A001  (sg.abs like numpy.abs / torch.abs)


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
    """log(sum(exp(a))) over the arguments, stable, exact for -inf arguments."""
    result = sympy.sympify(args[0])
    for a in args[1:]:
        result = logaddexp(result, a)
    return result


def hypot(x, y) -> sympy.Expr:
    """sqrt(x**2 + y**2)."""
    return sqrt(x**2 + y**2)


__all__ = [
    "Abs",
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
