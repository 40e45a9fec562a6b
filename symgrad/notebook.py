"""How an ``@sg.function`` shows itself in a notebook: as its compiled function does
(``symgrad.compiled.display``: op counts per program, the generated source collapsed), with the formulas
typeset as LaTeX (MathJax reads ``\\(...\\)`` in HTML output).

The manifest's formula text is parsed back with SymPy here, every bare name as a Symbol (an argument called
``E`` or ``gamma`` stays a symbol); text that does not parse (``derived program of N ops ...``) is shown as it
is.
"""

from __future__ import annotations

import re
from html import escape

import sympy

from symgrad.compiled import display

_NAME = re.compile(r"\b([A-Za-z_]\w*)\b(?!\s*\()")


def formula_latex(text: str) -> str | None:
    """The LaTeX of formula ``text`` (as the manifest writes it), or None when it is not a formula."""
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


def _rows(compiled) -> list[tuple[str, str, str | None]]:
    """(label, manifest text, its LaTeX or None) per formula."""
    return [(label, text, formula_latex(text)) for label, text in display.formula_rows(compiled)]


def html(fn) -> str:
    """The HTML of ``@sg.function`` ``fn`` (compiled on first use)."""
    compiled = fn.compiled()
    cells = [
        (escape(label), f"<code>{escape(text)}</code>" if tex is None else escape(rf"\({tex}\)"))
        for label, text, tex in _rows(compiled)
    ]
    return display.html(compiled, cells)


def latex(fn) -> str:
    """An ``aligned`` LaTeX block of ``label = formula`` lines of ``@sg.function`` ``fn``."""
    compiled = fn.compiled()
    pairs = [
        (label_latex(label), display.latex_text(text) if tex is None else tex)
        for label, text, tex in _rows(compiled)
    ]
    return display.latex(compiled, pairs)
