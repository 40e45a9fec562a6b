"""The display formulas as LaTeX, worked out at compile time and stored in the package's manifest
(``"latex"``), so that a compiled function shows typeset formulas in a notebook without SymPy at runtime.

Each formula's text (as ``symgrad.compiler.formulas.text`` writes it) is parsed back with SymPy, every bare
name as a Symbol (an argument called ``E`` or ``gamma`` stays a symbol); text that is not a formula (``''``,
``non_differentiable``) gets no LaTeX.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import sympy

_NAME = re.compile(r"\b([A-Za-z_]\w*)\b(?!\s*\()")

#: Formulas longer than this many characters get no LaTeX (unreadable typeset, and slow to parse back).
MAX_CHARS = 2000
#: What ``formulas.first`` writes in place of a formula: no derivative shown, a ``nondiff`` argument.
WORDS = frozenset({"", "non_differentiable"})


def formula_latex(text: str) -> str | None:
    """The LaTeX of formula ``text``, or None when it is not a formula or is longer than ``MAX_CHARS``."""
    if len(text) > MAX_CHARS:
        return None
    names = {n: sympy.Symbol(n) for n in _NAME.findall(text)}
    try:
        return sympy.latex(sympy.sympify(text, locals=names))
    except (sympy.SympifyError, SyntaxError, TypeError, ValueError, AttributeError):
        return None


def label_latex(label: str) -> str:
    """``out0`` -> ``out_{0}``, ``vjp x`` -> ``\\operatorname{vjp}_{x}``."""
    if label.startswith("vjp "):
        return rf"\operatorname{{vjp}}_{{{sympy.latex(sympy.Symbol(label[4:]))}}}"
    return sympy.latex(sympy.Symbol(label))


def rows(formulas: Iterable[tuple[str, str]], derivatives: Iterable[tuple[str, str]]) -> list[list]:
    """``[label, label LaTeX, formula LaTeX or None]`` per output formula, then per argument's vjp (labelled
    ``vjp <argument>``): the order ``symgrad.compiled.display.formula_rows`` shows them in."""
    labelled = list(formulas) + [(f"vjp {arg}", text) for arg, text in derivatives]
    return [[label, label_latex(label), _typeset(text)] for label, text in labelled]


def _typeset(text: str) -> str | None:
    return None if text in WORDS else formula_latex(text)
