"""The derivative conventions, as one table, and the check that only printable constructs go on.

SymPy's ``diff`` leaves distributions and unevaluated derivatives at non-smooth points. The subgradient
table below replaces each with PyTorch's convention (torch 2.13's gradients):

| construct after ``diff``                       | becomes            | torch analogue          |
|------------------------------------------------|--------------------|-------------------------|
| ``DiracDelta(u)`` (from sign, Heaviside)       | 0                  | sign' = 0               |
| ``Derivative(floor/ceiling/sign/Heaviside(u))``| 0                  | floor' = 0              |
| ``Derivative(frac(u))``, ``Derivative(Mod(u, c))`` | ``du - floor(u/c)*dc`` | frac' = 1, remainder |
| ``re(u)`` / ``im(u)`` (``diff(Abs(u))`` when SymPy cannot prove ``u`` real) | ``u`` / 0 | values are real |

Kinks and ties, handled before ``diff`` (see ``symgrad.compiler.primitives``), the one table of them:

| construct                               | at the kink or tie                        | torch analogue |
|-----------------------------------------|-------------------------------------------|----------------|
| ``relu(x)``, ``Max(x, c)`` (c constant) | 0 at x == c                               | relu'(0) = 0   |
| ``relu6``: ``Min(Max(x, 0), 6)``        | 0 at 0 and at 6                           | relu6          |
| ``Abs(x)``                              | 0 at 0 (``sign(0) = 0``)                  | abs'(0) = 0    |
| ``sg.clamp(x, lo, hi)``                 | 1 at lo and at hi                         | clamp          |
| ``Max``/``Min`` of two inputs           | 1/2 : 1/2 at a tie                        | maximum        |
| ``Max``/``Min`` of three or more inputs | 1/j to each of the j tied (constants too) | amax, amin     |
| ``where(x > 0, ...)``                   | follows the user's inequality             |                |
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
from sympy import (
    Abs,
    Add,
    And,
    Derivative,
    DiracDelta,
    Heaviside,
    Mod,
    Mul,
    Not,
    Or,
    Piecewise,
    Pow,
    Subs,
    Symbol,
    ceiling,
    floor,
    frac,
    im,
    re,
    sign,
)
from sympy.core.relational import Relational
from sympy.functions.elementary.piecewise import ExprCondPair
from sympy.logic.boolalg import ITE, BooleanFalse, BooleanTrue

from symgrad.compiler import dag
from symgrad.compiler.display import formula
from symgrad.compiler.nonfinite import NonFinite
from symgrad.compiler.piecewise import PiecewiseOperand, branches
from symgrad.compiler.primitives import PRIMITIVES
from symgrad.compiler.special import MAX_POLYGAMMA, SPECIAL_PRIMITIVES, SYMPY_SPECIAL
from symgrad.errors import UnsupportedError

_ZERO_DERIVATIVE = (floor, ceiling, sign, Heaviside)


def _subgradient(e: sympy.Basic) -> sympy.Basic | None:
    if isinstance(e, DiracDelta):
        return sympy.S.Zero
    if isinstance(e, re):  # every value symgrad computes is real
        return e.args[0]
    if isinstance(e, im):
        return sympy.S.Zero
    if isinstance(e, Derivative):
        inner = e.expr
        if isinstance(inner, _ZERO_DERIVATIVE + (im,)):
            return sympy.S.Zero
        if isinstance(inner, Mod) and len(e.variables) == 1:  # a - c*floor(a/c), floor' = 0
            a, c = inner.args
            return sympy.diff(a, *e.variables) - floor(a / c) * sympy.diff(c, *e.variables)
        if isinstance(inner, (frac, Mod, re)):
            return sympy.diff(inner.args[0], *e.variables)
    if isinstance(e, Subs) and not e.expr.has(Derivative):
        return e.doit()
    return None


def apply_subgradients(expr: sympy.Expr) -> sympy.Expr:
    """Replace what the table covers; anything unprintable left afterwards is caught by
    ``check_supported``."""
    if not dag.has(expr, DiracDelta, Derivative, Subs, re, im):
        return expr

    def visit(e: sympy.Basic) -> sympy.Basic:
        new = _subgradient(e)
        return e if new is None else new

    return sympy.bottom_up(expr, visit)


#: Function classes every emitter prints. Extending symgrad with a function means adding it here and a
#: ``_print_<Class>`` method to each emitter's printer.
SUPPORTED_FUNCTIONS: tuple[type, ...] = (
    sympy.exp,
    sympy.log,
    sympy.sin,
    sympy.cos,
    sympy.tan,
    sympy.asin,
    sympy.acos,
    sympy.atan,
    sympy.atan2,
    sympy.sinh,
    sympy.cosh,
    sympy.tanh,
    sympy.asinh,
    sympy.acosh,
    sympy.atanh,
    sympy.erf,
    sympy.erfc,
    Abs,
    sign,
    floor,
    ceiling,
    Piecewise,
    *PRIMITIVES,
    *SPECIAL_PRIMITIVES,
    *SYMPY_SPECIAL,
)
_STRUCTURAL = (
    Add,
    Mul,
    Pow,
    Symbol,
    Relational,
    And,
    Or,
    Not,
    ITE,
    BooleanTrue,
    BooleanFalse,
    ExprCondPair,
    PiecewiseOperand,
    NonFinite,  # x + 1e400 (symgrad.compiler.nonfinite)
)
_UNPRINTABLE_ATOMS = (sympy.zoo, sympy.nan, sympy.I)
_POLYGAMMA_ORDERS = frozenset(sympy.Integer(n) for n in range(MAX_POLYGAMMA + 1))


def _describe(node: sympy.Basic) -> str:
    if isinstance(node, Derivative):
        return f"unevaluated derivative {node} (SymPy cannot differentiate {node.expr.func.__name__})"
    if isinstance(node, Subs):
        return f"{node} (derivative of an undefined function)"
    if isinstance(node, sympy.Function):
        return f"unsupported function {node.func.__name__} in {node}"
    return f"unsupported construct {type(node).__name__}: {node}"


def _in_branches(expr: sympy.Basic) -> set:
    """Sub-expressions that are (inside) the value of a Piecewise branch: only selected, never combined."""
    selects = [node for node in dag.nodes(expr) if isinstance(node, (Piecewise, PiecewiseOperand))]
    return set(dag.nodes(*[value for node in selects for value, _ in branches(node)]))


def check_supported(expr: sympy.Basic, where: str | Callable[[], str]) -> None:
    """Raise UnsupportedError naming ``where`` (function and role) and the first unsupported sub-expression.
    ``where`` may be a function giving the text, built only for the error (printing costs).

    NaN is accepted inside a Piecewise branch value (an undefined value there is what the branch computes
    when it is taken, like NumPy's 0/0; see ``rewrite.stabilize``), never outside one."""
    problem = _first_unsupported(expr)
    if problem is not None:
        raise UnsupportedError(f"{where() if callable(where) else where}: {problem}")


#: Sub-expressions without NaN found supported, each with its whole subtree: not walked again.
_SUPPORTED: set[sympy.Basic] = set()


def _first_unsupported(expr: sympy.Basic) -> str | None:
    nan = dag.has(expr, sympy.nan)
    branches = _in_branches(expr) if nan else set()
    skip = set() if nan else _SUPPORTED
    if len(skip) > dag.MEMO_LIMIT:
        skip.clear()
    walked = []
    for node in dag.preorder(expr, skip):  # each distinct sub-expression once: linear in the DAG
        walked.append(node)
        if node.is_Number or node.is_NumberSymbol:
            if node is sympy.nan and node in branches:
                continue
            if node in _UNPRINTABLE_ATOMS:
                return f"cannot compile the constant {node} (in {formula(expr)})"
            continue
        if node is sympy.I:
            return f"complex values are not supported (in {formula(expr)})"
        if isinstance(node, sympy.polygamma) and node.args[0] not in _POLYGAMMA_ORDERS:
            return f"polygamma of order {node.args[0]} in {node} (symgrad compiles orders 0..{MAX_POLYGAMMA})"
        if isinstance(node, SUPPORTED_FUNCTIONS) or isinstance(node, _STRUCTURAL):
            continue
        if node in (sympy.oo, -sympy.oo):
            continue
        return _describe(node)
    skip.update(walked)
    return None
