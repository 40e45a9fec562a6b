"""Human-readable formulas: SymPy's str printer with ``where(...)`` for Piecewise, used in comments and `show`."""
from __future__ import annotations

import sympy
from sympy.printing.str import StrPrinter


class TermOrder:
    """Printer mixin: an Add's terms in SymPy's usual display order, except when a term is a compound
    constant. Ordering evaluates such terms numerically (``complex(term)``), which takes minutes for one
    like ``exp(exp(exp(40)))`` (found by ``make fuzz``); those Adds keep SymPy's canonical argument order."""

    def _as_ordered_terms(self, expr, order=None):
        if any(not f.is_Atom and f.is_number for t in expr.args for f in sympy.Mul.make_args(t)):
            return list(expr.args)
        return super()._as_ordered_terms(expr, order)


class FormulaPrinter(TermOrder, StrPrinter):
    def _print_Piecewise(self, expr: sympy.Piecewise) -> str:
        *branches, (last, cond) = expr.args
        text = self._print(last) if cond == sympy.true else f"where({self._print(cond)}, {self._print(last)}, nan)"
        for value, c in reversed(branches):
            text = f"where({self._print(c)}, {self._print(value)}, {text})"
        return text

    def _print_ITE(self, expr) -> str:
        c, a, b = expr.args
        return f"where({self._print(c)}, {self._print(a)}, {self._print(b)})"


def formula(expr: sympy.Basic, limit: int = 0) -> str:
    """The expression as one line; shortened with '...' past ``limit`` characters when ``limit`` > 0."""
    text = FormulaPrinter().doprint(expr)
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
