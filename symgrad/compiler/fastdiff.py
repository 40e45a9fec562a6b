"""``sympy.diff(expr, x)`` for the expressions of a straight-line program, with SymPy's own rules but
without the costs that ``Derivative`` adds at every level of the recursion.

``Derivative.__new__`` walks the free symbols of its expression as a tree, asks ``is_zero`` of every
intermediate result (an assumption query that walks it again), rewrites it with ``replace`` (a third walk)
and re-differentiates shared sub-expressions; a chain-rule factor such as ``1 - tanh(u)**2`` is rebuilt,
and its assumptions asked again, for every argument an assignment is differentiated with respect to, and
``(b**n)' `` builds ``0*log(b)``, whose ``is_finite`` query expands ``b``. Here the sums, products, numeric
powers and plain functions (``Function._eval_derivative``) are differentiated by the same formulas SymPy
applies, term by term and only where ``x`` occurs, with the free symbols of each node and each function's
``fdiff`` computed once; anything else (a class with a rule of its own: ``Abs``, ``Piecewise``, the
primitives that define ``_eval_derivative``) goes to ``sympy.diff``.
"""

from __future__ import annotations

from functools import lru_cache

import sympy
from sympy import Add, Function, Mul, Pow, S
from sympy.core.basic import Basic
from sympy.core.function import ArgumentIndexError

#: entries of the caches below: enough for the distinct nodes of a program of a few 100k operations
_CACHE = 1 << 18


@lru_cache(maxsize=_CACHE)
def free(expr: sympy.Basic) -> frozenset[sympy.Basic]:
    """The symbols of ``expr`` (``free_symbols`` for expressions without bound variables), each node's
    set computed once from its arguments' sets."""
    if expr.is_Symbol:
        return frozenset((expr,))
    if not expr.args:
        return frozenset()
    return frozenset().union(*map(free, expr.args))


@lru_cache(maxsize=_CACHE)
def _terms_with(expr: Add) -> dict[sympy.Basic, tuple[sympy.Expr, ...]]:
    """The terms of ``expr`` that hold each of its symbols, in the order of ``expr.args``: a sum's
    derivative with respect to each of its n symbols then costs the terms that hold it, not n each (the
    energy of a 45-atom cluster is a sum of 990 pair terms, differentiated with respect to each)."""
    holders: dict[sympy.Basic, list[sympy.Expr]] = {}
    for a in expr.args:
        for symbol in free(a):
            holders.setdefault(symbol, []).append(a)
    return {symbol: tuple(terms) for symbol, terms in holders.items()}


@lru_cache(maxsize=_CACHE)
def _fdiff(expr: sympy.Function, i: int) -> sympy.Expr:
    """``expr.fdiff(i)``, as ``Function._eval_derivative`` asks for it (one object, so its assumptions are
    asked once)."""
    try:
        return expr.fdiff(i)
    except ArgumentIndexError:
        return Function.fdiff(expr, i)


def _plain_function(expr: sympy.Basic) -> bool:
    cls = type(expr)
    return (
        isinstance(expr, Function)
        and cls._eval_derivative is Function._eval_derivative
        and cls._eval_derivative_n_times is Basic._eval_derivative_n_times
    )


def _product(expr: Mul, wrt: sympy.Symbol) -> sympy.Expr:
    """``Mul._eval_derivative_n_times`` for n = 1 (Leibniz): one product per factor that holds ``wrt``."""
    args = expr.args
    terms = []
    for i, a in enumerate(args):
        d = diff(a, wrt)
        if d is not S.Zero:
            terms.append(Mul(*args[:i], d, *args[i + 1 :]))
    return Add(*terms)


def _function(expr: sympy.Function, wrt: sympy.Symbol) -> sympy.Expr:
    """``Function._eval_derivative``: the sum of ``fdiff(i) * d(arg_i)``."""
    terms = []
    for i, a in enumerate(expr.args, 1):
        da = diff(a, wrt)
        if da is S.Zero or da.is_zero:
            continue
        terms.append(_fdiff(expr, i) * da)
    return Add(*terms)


@lru_cache(maxsize=_CACHE)
def diff(expr: sympy.Expr, wrt: sympy.Symbol) -> sympy.Expr:
    """``sympy.diff(expr, wrt)`` for a real symbol ``wrt`` (the same expression, built by the same rules)."""
    if expr == wrt:
        return S.One
    if wrt not in free(expr):
        return S.Zero
    if isinstance(expr, Add):  # the terms that hold wrt (a long sum: through an index, not a scan)
        return Add(*[diff(a, wrt) for a in _terms_with(expr).get(wrt, ())])
    if type(expr) is Mul:
        return _product(expr, wrt)
    if type(expr) is Pow and expr.exp.is_Number:
        # Pow._eval_derivative with d(exp) = 0: without its 0*log(base) (an is_finite query on log(base))
        return expr * (diff(expr.base, wrt) * expr.exp / expr.base)
    if _plain_function(expr):
        return _function(expr, wrt)
    return sympy.diff(expr, wrt)
