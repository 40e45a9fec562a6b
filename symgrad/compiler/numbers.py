"""Numbers as the user wrote them: a factor ``1.0`` (``1.0*r``, from ``r * 1.0`` or a folded ``where(c, 1.0,
...)``) is dropped and ``-1.0`` becomes a negation. Both are exact in floating point, so results do not
change; formulas and generated code read ``r`` instead of ``1.0*r``."""

from __future__ import annotations

import sympy

from symgrad.compiler import dag

_UNITS = (sympy.Float(1.0), sympy.Float(-1.0))


def _drop(expr: sympy.Basic) -> sympy.Basic:
    if isinstance(expr, sympy.Mul) and expr.args[0] in _UNITS:
        rest = sympy.Mul(*expr.args[1:])
        return rest if expr.args[0] > 0 else -rest
    return expr


def drop_unit_floats(expr: sympy.Basic) -> sympy.Basic:
    """``expr`` without a ``1.0`` factor anywhere (``-1.0*x`` -> ``-x``)."""
    if not any(isinstance(n, sympy.Float) for n in dag.nodes(expr)):
        return expr
    return dag.bottom_up(expr, _drop)
