"""Rewrites applied to traced expressions before differentiation, each a named, documented rule.

Two families:
- *canonical*: ``Max``/``Min``/``Heaviside`` become ``Piecewise`` with PyTorch's kink conventions, so that
  ``diff`` never produces ``Heaviside(0) = 1/2`` and NaN propagates like ``torch.maximum``;
- *stability*: ``log(1 + exp(u))`` and ``log1p(exp(u))``, ``1/(1 + exp(-u))``, ``log(exp(a) + exp(b))``,
  ``log(1 + u)``, ``exp(u) - 1`` become the primitives ``softplus``, ``sigmoid``, ``logaddexp``, ``log1p``,
  ``expm1`` whose printed forms never overflow (see ``symgrad.compiler.primitives``); and the textbook
  forms of ``symgrad.compiler.textbook`` (``1 - sigmoid(u)``, softmax of two, log of a sum of exps,
  ``sqrt(x**2 + y**2)``).

``real-part`` (``re(u)`` -> ``u``: values are real), and ``hold-compared-piecewise``, which keeps a
Piecewise that those rules make inside a condition from being folded into it (see
``symgrad.compiler.piecewise``).
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
from sympy import Add, Eq, Heaviside, Max, Min, Mul, Piecewise, Pow, S, exp, log
from sympy.logic.boolalg import Boolean

from symgrad.compiler import dag
from symgrad.compiler.piecewise import operands, piecewise
from symgrad.compiler.primitives import (
    amax,
    amin,
    expm1,
    log1p,
    logaddexp,
    logsigmoid,
    maximum,
    minimum,
    sigmoid,
    softplus,
)
from symgrad.compiler.textbook import TEXTBOOK_RULES

Rule = Callable[[sympy.Expr], "sympy.Expr | None"]


def rewrite_max_min(e: sympy.Expr) -> sympy.Expr | None:
    """Max/Min of two arguments -> ``maximum``/``minimum``, of more -> ``amax``/``amin`` (kink and tie
    conventions in their fdiff)."""
    for sympy_class, binary, nary in ((Max, maximum, amax), (Min, minimum, amin)):
        if isinstance(e, sympy_class):
            return binary(*e.args) if len(e.args) == 2 else nary(*e.args)
    return None


def rewrite_heaviside(e: sympy.Expr) -> sympy.Expr | None:
    """Heaviside(a, h) -> where(a < 0, 0, where(a == 0, h, 1)); its derivative is then 0 everywhere."""
    if isinstance(e, Heaviside):
        a = e.args[0]
        h = e.args[1] if len(e.args) > 1 else S.Half
        return piecewise((S.Zero, a < 0), (h, Eq(a, 0)), (S.One, True))
    return None


def _one_plus(e: sympy.Expr) -> sympy.Expr | None:
    """If e == 1 + u, return u."""
    if isinstance(e, Add) and S.One in e.args:
        return e - 1
    return None


def rewrite_log(e: sympy.Expr) -> sympy.Expr | None:
    """log(sigmoid(u)) -> logsigmoid(u); log(1 + exp(u)) -> softplus(u);
    log(exp(a) + exp(b)) -> logaddexp(a, b); log(1 + u) -> log1p(u)."""
    if not isinstance(e, log):
        return None
    inner = e.args[0]
    if isinstance(inner, sigmoid):
        return logsigmoid(inner.args[0])
    rest = _one_plus(inner)
    if rest is not None:
        if isinstance(rest, exp):
            return softplus(rest.args[0])
        return log1p(rest)
    if isinstance(inner, Add) and len(inner.args) == 2 and all(isinstance(a, exp) for a in inner.args):
        return logaddexp(inner.args[0].args[0], inner.args[1].args[0])
    return None


def rewrite_log1p(e: sympy.Expr) -> sympy.Expr | None:
    """log1p(exp(u)) -> softplus(u) (log1p alone overflows once exp(u) does: u > 88 in float32)."""
    if isinstance(e, log1p) and isinstance(e.args[0], exp):
        return softplus(e.args[0].args[0])
    return None


def rewrite_sigmoid(e: sympy.Expr) -> sympy.Expr | None:
    """1/(1 + exp(-u)) -> sigmoid(u); exp(u)/(1 + exp(u)) and exp(u)*sigmoid(-u) -> sigmoid(u)."""
    if isinstance(e, Pow) and e.exp == -1:
        rest = _one_plus(e.base)
        if isinstance(rest, exp):
            return sigmoid(-rest.args[0])
    if isinstance(e, Mul):
        for factor in e.args:
            if isinstance(factor, sigmoid) and exp(-factor.args[0]) in e.args:
                others = [a for a in e.args if a is not factor and a != exp(-factor.args[0])]
                return Mul(*others) * sigmoid(-factor.args[0])
            if isinstance(factor, Pow) and factor.exp == -1:
                rest = _one_plus(factor.base)
                if isinstance(rest, exp) and rest in e.args:
                    others = [a for a in e.args if a is not factor and a != rest]
                    return Mul(*others) * sigmoid(rest.args[0])
    return None


def rewrite_expm1(e: sympy.Expr) -> sympy.Expr | None:
    """exp(u) - 1 -> expm1(u)."""
    if isinstance(e, Add) and S.NegativeOne in e.args:
        rest = e + 1
        if isinstance(rest, exp):
            return expm1(rest.args[0])
    return None


def rewrite_real_part(e: sympy.Expr) -> sympy.Expr | None:
    """re(u) -> u, im(u) -> 0: every value symgrad computes is real, and SymPy writes |exp(u)| as
    exp(re(u)) where it cannot prove u real (``Abs(exp(loggamma(x)))``)."""
    if isinstance(e, sympy.re):
        return e.args[0]
    if isinstance(e, sympy.im):
        return S.Zero
    return None


def hold_compared_piecewise(e: sympy.Basic) -> sympy.Basic | None:
    """A condition that compares a Piecewise (one a rule above made, as from ``Heaviside``) holds it as an
    operand, before SymPy folds it into the condition (see ``symgrad.compiler.piecewise``)."""
    if isinstance(e, Boolean) and not isinstance(e, sympy.Expr) and dag.has(e, Piecewise):
        return operands(e)
    return None


#: The rules, applied bottom-up in this order at every node.
RULES: tuple[tuple[str, Rule], ...] = (
    ("hold-compared-piecewise", hold_compared_piecewise),
    ("max-min-piecewise", rewrite_max_min),
    ("heaviside-piecewise", rewrite_heaviside),
    ("real-part", rewrite_real_part),
    *TEXTBOOK_RULES,
    ("stable-log", rewrite_log),
    ("stable-log1p", rewrite_log1p),
    ("stable-sigmoid", rewrite_sigmoid),
    ("expm1", rewrite_expm1),
)


def _apply_rules(e: sympy.Expr) -> sympy.Expr:
    for _, rule in RULES:
        new = rule(e)
        if new is not None:
            return new
    return e


def _non_real(value: sympy.Expr) -> bool:
    return value.is_number and value.is_extended_real is False


def stabilize(expr: sympy.Expr) -> sympy.Expr:
    """Apply every rule bottom-up until nothing changes (each rule strictly shrinks its pattern).

    SymPy's own ``zoo`` (complex infinity, e.g. ``1/0`` evaluated in a branch that Piecewise folding created
    but that can never be taken, as in ``where(Ne(u, 0), sin(u)/u, 1)`` with ``u`` itself a ``where``) becomes
    NaN, the value NumPy gives an undefined result; so does a branch whose whole value is a non-real number
    (``sqrt(-1) = I`` when ``sqrt`` of a clamped ``where`` is folded into the branches, as in
    ``where(u > 0, sqrt(u), 0)`` with ``u = clamp(y, -1, 1)``). ``check_supported`` still rejects both outside
    a branch. Every walk visits each distinct sub-expression once (``symgrad.compiler.dag``): linear in the
    size of the expression's DAG, not of its tree."""
    if dag.has(expr, S.ComplexInfinity):
        expr = dag.xreplace(expr, {S.ComplexInfinity: S.NaN})
    if dag.has(expr, S.ImaginaryUnit) and dag.has(expr, Piecewise):
        expr = dag.replace(
            expr,
            lambda e: isinstance(e, Piecewise) and any(_non_real(v) for v, _ in e.args),
            lambda e: Piecewise(*[(S.NaN if _non_real(v) else v, c) for v, c in e.args]),
        )
    for _ in range(8):
        new = dag.bottom_up(expr, _apply_rules)
        if new == expr:
            return new
        expr = new
    return expr
