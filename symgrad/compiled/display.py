"""How a compiled function shows itself in a notebook (``_repr_html_``, ``_repr_latex_``): its formulas, the
op count of each program and the generated NumPy source, collapsed, highlighted by pygments when installed.

No SymPy here: the formulas are the manifest's text. ``symgrad.notebook`` renders an ``@sg.function``'s as
LaTeX and passes them to ``html`` in their place.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

#: LaTeX's special characters, as ``\texttt`` text shows them
_LATEX_TEXT = {c: "\\" + c for c in "#$%&_{}"} | {
    "\\": r"\textbackslash{}",
    "^": r"\^{}",
    "~": r"\~{}",
}


def formula_rows(fn) -> list[tuple[str, str]]:
    """(label, formula text) per output element and per argument's vjp (``vjp x``), as in the manifest."""
    rows = list(fn.formulas.items())
    rows += [
        (f"vjp {arg}", text or "(derived program only: see the source)")
        for arg, text in fn.derivatives.items()
    ]
    return rows


def highlighted(source: str) -> str:
    """``source`` as HTML: highlighted by pygments (inline styles) when installed, else ``<pre>``."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        return f"<pre>{escape(source)}</pre>"
    return highlight(source, PythonLexer(), HtmlFormatter(noclasses=True))


def signature(fn) -> str:
    """``name(x, q[4]) -> (out0, out1)`` as escaped HTML."""
    args = ", ".join(f"{n}{list(s) if s else ''}" for n, s in zip(fn.arg_names, fn.arg_shapes))
    outs = [f"{list(s)}" if s else "scalar" for s in fn.out_shapes]
    result = f"({', '.join(outs)})" if fn.returns_tuple else outs[0]
    return escape(f"{fn.name}({args}) -> {result}")


def html(fn, formulas: Sequence[tuple[str, str]] | None = None) -> str:
    """The HTML of compiled function ``fn``; ``formulas``: (label, cell HTML) rows in place of its manifest's
    formulas as ``<code>`` (the caller escapes them)."""
    if formulas is None:
        formulas = [(escape(label), f"<code>{escape(text)}</code>") for label, text in formula_rows(fn)]
    rows = "".join(
        f"<tr><td>{label}</td><td style='text-align:left'>{cell}</td></tr>" for label, cell in formulas
    )
    programs = "".join(f"<th>{escape(p)}</th>" for p in fn.op_counts)
    counts = "".join(f"<td>{n}</td>" for n in fn.op_counts.values())
    return (
        f"<div class='symgrad-function'><p><b>{signature(fn)}</b> <small>from {escape(fn.origin)}</small></p>"
        f"<table><tr><th>formula</th><th></th></tr>{rows}</table>"
        f"<p>operations per program:</p><table><tr>{programs}</tr><tr>{counts}</tr></table>"
        f"<details><summary>generated NumPy source</summary>{highlighted(fn.source('numpy'))}</details></div>"
    )


def latex_text(text: str) -> str:
    """``text`` as LaTeX typewriter text."""
    return r"\texttt{" + "".join(_LATEX_TEXT.get(c, c) for c in text) + "}"


def latex(fn, formulas: Sequence[tuple[str, str]] | None = None) -> str:
    """An ``aligned`` block of ``label = formula`` lines; ``formulas``: (label, formula) LaTeX pairs in place
    of the manifest's text."""
    if formulas is None:
        formulas = [(latex_text(label), latex_text(text)) for label, text in formula_rows(fn)]
    lines = r" \\ ".join(f"{label} &= {body}" for label, body in formulas)
    return rf"$\displaystyle \begin{{aligned}} {lines} \end{{aligned}}$"


class Notebook:
    """``_repr_html_`` and ``_repr_latex_`` of ``CompiledFunction`` (a mixin: the rendering lives here)."""

    def _repr_html_(self) -> str:
        return html(self)

    def _repr_latex_(self) -> str:
        return latex(self)
