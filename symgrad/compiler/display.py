"""Human-readable formulas: SymPy's str printer with ``where(...)`` for Piecewise, for comments and `show`.

Also the printer mixins the emitters share: ``TermOrder`` (an Add's terms in canonical order) and
``PiecewiseSelects`` (a Piecewise as nested selects, each printer writing one select its own way).
"""

from __future__ import annotations

from functools import lru_cache

import sympy
from sympy.printing.str import StrPrinter

from symgrad.compiler import dag


class TermOrder:
    """Printer mixin: an Add's terms in SymPy's canonical argument order (deterministic, constants first).

    SymPy's display order sorts the terms on every print (its cost: docs/performance.md), and evaluates
    compound constant terms numerically to do it (minutes for one like ``exp(exp(exp(40)))``, found by
    ``make fuzz``); the canonical order costs nothing and reads as well."""

    def _as_ordered_terms(self, expr, order=None):
        return list(expr.args)


class PiecewiseSelects:
    """Printer mixin: a Piecewise as nested selects, ``select(c1, v1, select(c2, v2, ...))``.

    The pairs are taken in order, the first true condition choosing its value; a final ``True`` condition
    is the innermost value, otherwise the last select falls back to the printer's NaN. Each printer that
    mixes it in defines ``_select(cond, then, other) -> str``: how it writes one select, the three operands
    already printed. Conditions print before their values, as SymPy's printers do."""

    def _print_Piecewise(self, expr: sympy.Piecewise) -> str:
        *branches, (last, cond) = expr.args
        if cond == sympy.true:
            text = self._print(last)
        else:
            text = self._select(self._print(cond), self._print(last), self._print(sympy.nan))
        for value, c in reversed(branches):
            text = self._select(self._print(c), self._print(value), text)
        return text


class FormulaPrinter(TermOrder, PiecewiseSelects, StrPrinter):
    def _select(self, cond: str, then: str, other: str) -> str:
        return f"where({cond}, {then}, {other})"

    def _print_ITE(self, expr) -> str:
        c, a, b = expr.args
        return self._select(self._print(c), self._print(a), self._print(b))


#: Formulas with more nodes than this (as a tree) are shown as their size only.
FORMULA_NODES = 20000


@lru_cache(maxsize=64)
def _line(expr: sympy.Basic) -> str:
    """``formula`` without a limit, remembered: lowering shows each output twice (a comment, shortened, and
    the kernel's formula), and printing a large one sorts every sum's terms."""
    size = dag.tree_size(expr)
    if size > FORMULA_NODES:  # printing writes the tree, exponentially larger than a shared DAG
        return f"<a formula of {size} terms, too long to show>"
    return FormulaPrinter().doprint(expr)


def formula(expr: sympy.Basic, limit: int = 0) -> str:
    """The expression as one line; shortened with '...' past ``limit`` characters when ``limit`` > 0."""
    text = _line(expr)
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
