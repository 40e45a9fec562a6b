"""Stability rewrites of textbook formulas into symgrad's stable primitives (rules of ``rewrite.RULES``).

Each formula is how a person writes it, and each overflows or cancels somewhere its true value and gradient
are representable:

| written                                  | becomes                       | breaks at (float64)           |
|------------------------------------------|-------------------------------|-------------------------------|
| ``sqrt(x**2 + y**2)``, ``sqrt(1 + x**2)`` | ``hypot(x, y)``, ``hypot(1, x)`` | 1e200 (inf), 1e-200 (0)    |
| ``log(1 + u**2)``                        | ``log1p(u**2)`` or ``2 log|u| + log1p(u**-2)`` | 1e154 (inf) |
| ``1 - sigmoid(u)``                       | ``sigmoid(-u)``               | u > 37 (0, cancellation)      |
| ``exp(a)/(exp(a) + exp(b))``             | ``sigmoid(a - b)``            | a > 709 (inf/inf)             |
| ``log(1 + exp(a) + exp(b))``, ``log`` of a sum of three or more exps | nested ``logaddexp`` | 709 |

``log(1 - sigmoid(u))`` (the textbook binary cross-entropy's second term) then becomes ``logsigmoid(-u)``
through ``rewrite.rewrite_log``.
"""

from __future__ import annotations

import sympy
from sympy import Add, Mul, Pow, S, exp, log

from symgrad.compiler.piecewise import held, piecewise
from symgrad.compiler.primitives import hypot, log1p, logaddexp, sigmoid


def square_root(t: sympy.Expr) -> sympy.Expr | None:
    """``u`` with ``u**2 == t`` where ``t`` is visibly a square: a positive number, an even power, or a
    product of those (SymPy's form of the user's ``(x*y)**2``); else None."""
    if t.is_number:
        return sympy.sqrt(t) if t.is_positive else None
    if isinstance(t, Pow) and t.exp.is_Integer and t.exp.is_even:
        return t.base ** (t.exp / 2)
    if isinstance(t, Mul):
        roots = [square_root(f) for f in t.args]
        return None if any(r is None for r in roots) else Mul(*roots)
    return None


def rewrite_hypot(e: sympy.Expr) -> sympy.Expr | None:
    """sqrt(a**2 + b**2) -> hypot(a, b), and 1/sqrt(a**2 + b**2) -> 1/hypot(a, b), for any visible
    squares (``sqrt(1 + x**2)``: asinh's derivative, 0 beyond 1e154 as written)."""
    if not (
        isinstance(e, Pow) and abs(e.exp) == S.Half and isinstance(e.base, Add) and len(e.base.args) == 2
    ):
        return None
    roots = [square_root(t) for t in e.base.args]
    if any(r is None for r in roots):
        return None
    return hypot(*roots) if e.exp > 0 else 1 / hypot(*roots)


def _log_abs(u: sympy.Expr) -> sympy.Expr:
    """log|u| as a sum over the factors of ``u`` (|x*y| overflows where log|x| + log|y| does not)."""
    terms = []
    for f in Mul.make_args(u):
        base, k = f.as_base_exp() if isinstance(f, Pow) and f.exp.is_Integer else (f, S.One)
        terms.append(k * log(sympy.Abs(base)))
    return Add(*terms)


def rewrite_log_one_plus_square(e: sympy.Expr) -> sympy.Expr | None:
    """log(1 + u**2) -> log1p(u**2) where |u| <= 1, else 2*log|u| + log1p((1/u)**2): u**2 overflows from
    1e154, where the true value is about 708. ``u`` is held whole (``piecewise.held``): SymPy
    would square a product factor by factor, inf*0 at x = 1e200, y = 1e-200 in ``log(1 + x**2*y**2)``."""
    if not (isinstance(e, log) and isinstance(e.args[0], Add) and S.One in e.args[0].args):
        return None
    u = square_root(e.args[0] - 1)
    if u is None or u.is_number:
        return None
    big = 2 * _log_abs(u) + log1p(held(u) ** -2)
    return piecewise((log1p(held(u) ** 2), sympy.Abs(u) <= 1), (big, True))


def rewrite_one_minus_sigmoid(e: sympy.Expr) -> sympy.Expr | None:
    """1 - sigmoid(u) -> sigmoid(-u) (inside a longer sum too)."""
    if not (isinstance(e, Add) and S.One in e.args):
        return None
    for term in e.args:
        coeff, rest = term.as_coeff_Mul()
        if coeff == -1 and isinstance(rest, sigmoid):
            return e - 1 - term + sigmoid(-rest.args[0])
    return None


def rewrite_softmax(e: sympy.Expr) -> sympy.Expr | None:
    """exp(a)/(exp(a) + exp(b)) -> sigmoid(a - b) (times any other factors)."""
    if not isinstance(e, Mul):
        return None
    for factor in e.args:
        if not (isinstance(factor, Pow) and factor.exp == -1 and isinstance(factor.base, Add)):
            continue
        terms = factor.base.args
        if len(terms) == 2 and all(isinstance(t, exp) for t in terms):
            for num, other in (terms, terms[::-1]):
                if num in e.args:
                    rest = [a for a in e.args if a is not factor and a != num]
                    return Mul(*rest) * sigmoid(num.args[0] - other.args[0])
    return None


def rewrite_logsumexp(e: sympy.Expr) -> sympy.Expr | None:
    """log(e1 + e2 + e3 + ...) with three or more terms, each exp(u) or 1 (exp(0)) -> nested logaddexp."""
    if not (isinstance(e, log) and isinstance(e.args[0], Add) and len(e.args[0].args) >= 3):
        return None
    terms = e.args[0].args
    if not all(isinstance(t, exp) or t == 1 for t in terms):
        return None
    exponents = [t.args[0] if isinstance(t, exp) else S.Zero for t in terms]
    result = exponents[0]
    for u in exponents[1:]:
        result = logaddexp(result, u)
    return result


#: (name, rule) rows for ``rewrite.RULES``; ``stable-logsumexp`` must come before ``stable-log`` (which
#: would make log(1 + exp(a) + exp(b)) a log1p of a sum that overflows).
TEXTBOOK_RULES = (
    ("stable-hypot", rewrite_hypot),
    ("stable-log-one-plus-square", rewrite_log_one_plus_square),
    ("stable-one-minus-sigmoid", rewrite_one_minus_sigmoid),
    ("stable-softmax", rewrite_softmax),
    ("stable-logsumexp", rewrite_logsumexp),
)
