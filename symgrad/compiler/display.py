"""Human-readable formulas: SymPy's str printer with ``where(...)`` for Piecewise, used in comments and `show`."""

from __future__ import annotations

import sympy
from sympy.printing.str import StrPrinter


class TermOrder:
    """Printer mixin: an Add's terms in SymPy's canonical argument order (deterministic, constants first).

    SymPy's display order sorts the terms on every print, a fifth of the time to emit a model, and evaluates
    compound constant terms numerically to do it (minutes for one like ``exp(exp(exp(40)))``, found by
    ``make fuzz``); the canonical order costs nothing and reads as well."""

    def _as_ordered_terms(self, expr, order=None):
        return list(expr.args)


class FormulaPrinter(TermOrder, StrPrinter):
    def _print_Piecewise(self, expr: sympy.Piecewise) -> str:
        *branches, (last, cond) = expr.args
        text = (
            self._print(last)
            if cond == sympy.true
            else f"where({self._print(cond)}, {self._print(last)}, nan)"
        )
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
