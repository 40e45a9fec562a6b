"""How an ``@sg.function`` shows itself in a notebook: as its compiled function does
(``symgrad.compiled.display``: the formulas typeset from the LaTeX compiled into its package, op counts per
program, the generated source collapsed). It compiles on first use."""

from __future__ import annotations

from symgrad.compiled import display


def html(fn) -> str:
    """The HTML of ``@sg.function`` ``fn``."""
    return display.html(fn.compiled())


def latex(fn) -> str:
    """An ``aligned`` LaTeX block of ``label = formula`` lines of ``@sg.function`` ``fn``."""
    return display.latex(fn.compiled())
