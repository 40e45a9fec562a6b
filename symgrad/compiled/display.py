"""How a compiled function shows itself in a notebook (``_repr_html_``, ``_repr_latex_``): its formulas, the
op count of each program and the generated NumPy source, collapsed, highlighted by pygments when installed.

No SymPy here: the formulas' LaTeX was worked out when the package was compiled (the manifest's ``"latex"``,
``symgrad.compiler.latex``); a formula without it (too long, or a package written before) shows as text.
"""

from __future__ import annotations

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


def typeset_rows(fn) -> list[tuple[str, str | None, str, str | None]]:
    """(label, its LaTeX, formula text, its LaTeX) per row of ``formula_rows``; the LaTeX is None where the
    manifest has none."""
    compiled = {label: (label_tex, tex) for label, label_tex, tex in getattr(fn, "formulas_latex", ())}
    rows = []
    for label, text in formula_rows(fn):
        label_tex, tex = compiled.get(label, (None, None))
        rows.append((label, label_tex, text, tex))
    return rows


def _cell(text: str, tex: str | None) -> str:
    """A formula's HTML: its LaTeX for MathJax (``\\(...\\)``) or its text as ``<code>``, escaped."""
    return f"<code>{escape(text)}</code>" if tex is None else escape(r"\(" + tex + r"\)")


def html(fn) -> str:
    """The HTML of compiled function ``fn``."""
    rows = "".join(
        f"<tr><td>{escape(label)}</td><td style='text-align:left'>{_cell(text, tex)}</td></tr>"
        for label, _, text, tex in typeset_rows(fn)
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


def latex(fn) -> str:
    """An ``aligned`` block of ``label = formula`` lines (text as ``\\texttt`` where there is no LaTeX)."""
    lines = r" \\ ".join(
        f"{label_tex or latex_text(label)} &= {tex or latex_text(text)}"
        for label, label_tex, text, tex in typeset_rows(fn)
    )
    return rf"$\displaystyle \begin{{aligned}} {lines} \end{{aligned}}$"


class Notebook:
    """``_repr_html_`` and ``_repr_latex_`` of ``CompiledFunction`` (a mixin: the rendering lives here)."""

    _entry: dict  # the function's manifest entry

    @property
    def formulas_latex(self) -> list[list]:
        """``[label, label LaTeX, formula LaTeX or None]`` per formula, as compiled into the manifest
        (empty for a package written before it held them)."""
        return self._entry.get("latex", [])

    def _repr_html_(self) -> str:
        return html(self)

    def _repr_latex_(self) -> str:
        return latex(self)
