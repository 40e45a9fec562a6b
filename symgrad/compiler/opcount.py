"""``sympy.count_ops(expr)`` (the number, not the visual form) without building expressions.

SymPy's count negates each negative product (``-a``) and splits it into numerator and denominator
(``fraction``), building new products whose assumptions it deduces again: for a compiled program's
assignments that was most of lowering and C emission (a 5-layer tanh net: 275 of 680 s). Here the same
rules are applied to each product's factors as they are, and each distinct node is counted once (shared
between the programs of a kernel, which repeat the forward's assignments). A product this does not handle
exactly as SymPy would rebuild it (a coefficient next to a single sum, a Float coefficient of -1, a
denominator whose power SymPy would evaluate again) is counted by ``sympy.count_ops`` itself.
"""

from __future__ import annotations

from functools import lru_cache

import sympy
from sympy import Pow, S, exp
from sympy.core.operations import LatticeOp

_COUNTED = (sympy.Derivative, sympy.Integral, sympy.Sum)


class _Unsure(Exception):
    """A node whose count SymPy would get from an expression it rebuilds differently."""


def count_ops(expr: sympy.Basic) -> int:
    """``int(sympy.count_ops(expr))``."""
    if not isinstance(expr, sympy.Expr) or expr.is_Relational:
        return int(sympy.count_ops(expr))
    try:
        return _node(expr)
    except _Unsure:
        return int(sympy.count_ops(expr))


def _coeff_isneg(a: sympy.Basic) -> bool:
    """``sympy.core.function._coeff_isneg`` for commutative expressions, reading a Float's sign from its mpf
    tuple: asking ``is_extended_negative`` of each new Float runs SymPy's fact deduction (tens of us)."""
    c = a.args[0] if a.is_Mul else a
    if c.is_Float:
        return c._mpf_[0] == 1  # mpmath's sign bit: negative numbers and -inf (zero and NaN have 0)
    return bool(c.is_Number and c.is_extended_negative)


def _rational(a: sympy.Basic) -> int:
    return 0 if a is S.One else int(a.p < 0) + int(a.q != 1)


@lru_cache(maxsize=1 << 18)
def _node(a: sympy.Basic) -> int:
    """The operations SymPy counts for ``a`` popped from its work list, and under it."""
    if a.is_Rational:
        return _rational(a)
    if a.is_Mul:
        if any(f.is_Number for f in a.args[1:]):
            raise _Unsure  # not SymPy's canonical form (one coefficient, first): built unevaluated
        if not _coeff_isneg(a):
            return _product(a.args)
        return 1 + _product(_negated(a))
    if a.is_Add:
        terms = a.args
        negative = [_coeff_isneg(t) for t in terms]
        ops = len(terms) - 1 + int(all(negative))
        return ops + sum(_negated_term(t) if neg else _node(t) for t, neg in zip(terms, negative))
    return _other(a)


def _other(a: sympy.Basic) -> int:
    """A node that is neither a Rational, a product nor a sum (one popped after a negated product too)."""
    if a.is_Pow and a.exp is S.NegativeOne:
        return 1 + _node(a.base)
    if a == S.Exp1:
        return 1
    if a.is_Pow and a.base == S.Exp1:
        return 1 + _node(a.exp)
    if isinstance(a, LatticeOp):
        ops = len(a.args) - 1
    elif a.args and (a.is_Pow or a.is_Function or isinstance(a, _COUNTED)):
        ops = 1
    else:
        ops = 0
    return ops if a.is_Symbol else ops + sum(map(_node, a.args))


def _negated(a: sympy.Mul) -> tuple:
    """The factors of ``-a`` for a product with a negative coefficient."""
    c = a.args[0]
    if any(f.is_Number for f in a.args[1:]):
        raise _Unsure
    if c is S.NegativeOne:
        return a.args[1:]
    if c.is_Float and c == -1 or (len(a.args) == 2 and a.args[1].is_Add):
        raise _Unsure
    return (-c, *a.args[1:])


def _negated_term(t: sympy.Basic) -> int:
    """A negative term of a sum: SymPy counts ``-t``, as a node of its own."""
    if t.is_Number:
        return _node(-t)
    factors = _negated(t)
    return _node(factors[0]) if len(factors) == 1 else _product(factors)


def _product(factors: tuple) -> int:
    """A product with a non-negative coefficient, given by its factors: ``fraction``'s numerator and
    denominator, or (without a denominator) one operation per factor after the first."""
    numer, denom = [], []
    for f in factors:
        if f.is_Pow or isinstance(f, exp):
            base, e = f.as_base_exp()
            if e.is_negative:
                if e is not S.NegativeOne and (isinstance(f, exp) or base.is_Mul or base.is_Pow):
                    raise _Unsure
                power = base if e is S.NegativeOne else Pow(base, -e)
                if power is not base and not (power.is_Pow and power.base == base):
                    raise _Unsure  # evaluated to something else: |x|**2 to x**2
                denom.append(power)
            elif e.is_positive or not e.is_Mul:
                numer.append(f)
            else:
                raise _Unsure  # SymPy: as_numer_denom
        elif f.is_Rational and not f.is_integer:
            numer += [] if f.p == 1 else [sympy.Integer(f.p)]
            denom.append(sympy.Integer(f.q))
        else:
            numer.append(f)
    if _distributes(numer) or _distributes(denom):
        raise _Unsure
    if all(f.is_Integer for f in numer):
        return 1 + _as_node(denom)
    if denom:
        return 1 + _as_node(denom) + _as_node(numer)
    if len(numer) == 1 and (numer[0].is_Add or numer[0].is_Rational):
        raise _Unsure  # SymPy skips the sum's own rule here
    return len(numer) - 1 + sum(map(_node, numer)) if len(numer) > 1 else _other(numer[0])


def _distributes(factors: list) -> bool:
    """Whether ``Mul(*factors)`` is not the product of these factors (a number times one sum)."""
    return len(factors) == 2 and any(f.is_Number for f in factors) and any(f.is_Add for f in factors)


def _as_node(factors: list) -> int:
    """``Mul(*factors)`` (positive factors, no denominator) as a node of SymPy's work list."""
    if not factors:
        return 0
    if len(factors) == 1:
        return _node(factors[0])
    return len(factors) - 1 + sum(map(_node, factors))
