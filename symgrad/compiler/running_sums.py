"""Running sums while tracing: ``e = e + term`` in a loop, in time linear in the terms added, not quadratic.

SymPy's ``Add.flatten`` rebuilds every term of ``e + term`` (its coefficient split off and multiplied back:
a ``Mul`` evaluated again, free only while SymPy's cache of 1,000 entries holds it) and sorts all of them
again (one recursive ``Basic.compare`` per term already in order). A sum built one pair at a time, such as
a Lennard-Jones cluster's energy (435 pairs for 30 atoms, 4,950 for 100), cost time quadratic in its
length, and past the cache's size each step rebuilt every term: 40 atoms traced in 250 s.

While ``appending()`` is entered, ``running_sum + new`` where the running sum has ``MIN_TERMS`` terms or
more, and the new terms are plain commutative terms none of which has a like term in it, is flattened by
inserting the new terms by bisection into the running sum's terms (remembered for the last few sums built).
The result is the ``Add`` SymPy's flatten builds (the same terms, in the order its stable sort by the same
key gives); anything else (like terms to combine, numbers, orders, matrices, infinities) is SymPy's own.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

import sympy
from sympy.core.basic import _args_sortkey

from symgrad.compiler.patching import Patch

#: sums shorter than this are flattened by SymPy (nothing to gain)
MIN_TERMS = 16

_sympy_flatten = sympy.Add.__dict__["flatten"]
_PLAIN = (sympy.Symbol, sympy.Mul, sympy.Pow, sympy.Function)


class _Sum:
    """A sum's terms (its coefficient apart) in order, and the set of their parts without a coefficient
    (``as_coeff_Mul``: what ``Add.flatten`` combines like terms by)."""

    __slots__ = ("args", "coeff", "terms", "keys")

    def __init__(self, args: tuple, coeff: sympy.Expr, terms: list, keys: set) -> None:
        self.args, self.coeff, self.terms, self.keys = args, coeff, terms, keys


_recent: deque[_Sum] = deque(maxlen=4)  # the last sums built by ``_appended``; any thread's


def _key(term: sympy.Basic) -> sympy.Basic | None:
    """``term`` without its numeric coefficient, as ``Add.flatten`` files it; None where flatten would do
    more than file it (a number, a power of a number, an order, a matrix, a non-commutative term)."""
    if not isinstance(term, _PLAIN) or not term.is_commutative:
        return None
    if isinstance(term, sympy.Pow) and term.base.is_Number:
        return None
    if isinstance(term, sympy.Mul):
        c, s = term.as_coeff_Mul()
        return None if c.is_zero or s is term and c is not sympy.S.One else s
    return term


def _sum(a: sympy.Add) -> _Sum | None:
    """``a``'s terms, remembered or split off now; None where its coefficient is not a finite number."""
    for known in list(_recent):
        if len(known.args) == len(a.args) and known.args == a.args:
            return known
    coeff = a.args[0] if a.args[0].is_Number else sympy.S.Zero
    if not coeff.is_finite:
        return None
    terms = list(a.args[1:] if a.args[0].is_Number else a.args)
    keys = {_key(t) for t in terms}
    return None if None in keys or len(keys) != len(terms) else _Sum(a.args, coeff, terms, keys)


def _appended(a: sympy.Basic, b: sympy.Basic) -> list | None:
    """The flattened arguments of ``a + b`` for a long running sum ``a`` and new terms ``b`` none of which
    combines with a term of ``a``; None otherwise."""
    if not isinstance(a, sympy.Add) or len(a.args) < MIN_TERMS or not a.is_commutative:
        return None
    new = list(b.args) if isinstance(b, sympy.Add) else [b]
    keys = [_key(t) for t in new]
    if None in keys or len(set(keys)) != len(keys):
        return None
    known = _sum(a)
    if known is None or not known.keys.isdisjoint(keys):
        return None
    terms = list(known.terms)
    lo = 0
    for term in sorted(new, key=_args_sortkey):  # each after equal terms and the new one before it
        lo = bisect_right(terms, _args_sortkey(term), lo=lo, key=_args_sortkey) + 1
        terms.insert(lo - 1, term)
    args = [known.coeff, *terms] if known.coeff is not sympy.S.Zero else terms
    _recent.append(_Sum(tuple(args), known.coeff, terms, known.keys | set(keys)))
    return args


def _flatten(cls: type, seq: list) -> tuple:
    if len(seq) == 2 and cls is sympy.Add:
        args = _appended(*seq)
        if args is not None:
            return args, [], None
    return _sympy_flatten.__func__(cls, seq)


def _install() -> None:
    sympy.Add.flatten = classmethod(_flatten)


def _remove() -> None:
    sympy.Add.flatten = _sympy_flatten
    _recent.clear()


#: While entered (by any thread, nested or not), ``Add`` flattens a running sum plus new terms with
#: ``_appended``; SymPy's own flatten comes back when the last one leaves.
appending = Patch(_install, _remove).held
