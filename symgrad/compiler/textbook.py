"""Stability rewrites of textbook formulas into symgrad's stable primitives (rules of ``rewrite.RULES``).

Each formula is how a person writes it, and each overflows or cancels somewhere its true value and gradient
are representable:

| written                                  | becomes                       | breaks at (float64)           |
|------------------------------------------|-------------------------------|-------------------------------|
| ``sqrt(x**2 + y**2)``                    | ``hypot(x, y)``               | 1e200 (inf), 1e-200 (0)       |
| ``1 - sigmoid(u)``                       | ``sigmoid(-u)``               | u > 37 (0, cancellation)      |
| ``exp(a)/(exp(a) + exp(b))``             | ``sigmoid(a - b)``            | a > 709 (inf/inf)             |
| ``log(1 + exp(a) + exp(b))``, ``log`` of a sum of three or more exps | nested ``logaddexp`` | 709 |

``log(1 - sigmoid(u))`` (the textbook binary cross-entropy's second term) then becomes ``logsigmoid(-u)``
through ``rewrite.rewrite_log``.
"""

from __future__ import annotations

import sympy
from sympy import Add, Mul, Pow, S, exp, log

from symgrad.compiler.primitives import hypot, logaddexp, sigmoid


def rewrite_hypot(e: sympy.Expr) -> sympy.Expr | None:
    """sqrt(a**2 + b**2) -> hypot(a, b)."""
    if isinstance(e, Pow) and e.exp == S.Half and isinstance(e.base, Add) and len(e.base.args) == 2:
        terms = e.base.args
        if all(isinstance(t, Pow) and t.exp == 2 for t in terms):
            return hypot(terms[0].base, terms[1].base)
    return None


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
    ("stable-one-minus-sigmoid", rewrite_one_minus_sigmoid),
    ("stable-softmax", rewrite_softmax),
    ("stable-logsumexp", rewrite_logsumexp),
)
