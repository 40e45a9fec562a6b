"""``symgrad show --format latex`` and ``--order 2``: closed-form formulas straight from the compiler (each
function traced and derived here, no program laid out), as one-line text or as LaTeX."""

from __future__ import annotations

import sympy

from symgrad.compiler import dag
from symgrad.compiler.display import FORMULA_NODES, formula


def display_formulas(fn, order: int) -> dict[str, list]:
    """The display formulas of an untraced ``@sg.function`` (``lower.display_formulas``)."""
    from symgrad.compiler.derive import derive
    from symgrad.compiler.lower import display_formulas as shown

    return shown(derive(fn.trace()), order)


def _name(text: str) -> str:
    return sympy.latex(sympy.Symbol(text))


def _second_label(label: str) -> tuple[str, str, str]:
    """``d2out/dx dy`` -> ('out', 'x', 'y')."""
    out, wrt = label[2:].split("/", 1)
    a, b = (w[1:] for w in wrt.split(" "))
    return out, a, b


def latex_lines(shown: dict[str, list]) -> list[str]:
    """One ``label = formula`` line of LaTeX per output element, argument (element) vjp and Hessian entry; a
    formula too large to show, or kept as a program only, as a ``%`` comment."""
    items: list[tuple[str, object]] = [(_name(n), e) for n, e in shown["outputs"]]
    for arg, value in shown["first"]:
        if isinstance(value, tuple):
            items += [(rf"\operatorname{{vjp}}_{{{_name(f'{arg}_{k}')}}}", v) for k, v in enumerate(value)]
        else:
            items.append((rf"\operatorname{{vjp}}_{{{_name(arg)}}}", value))
    for label, e in shown["second"]:
        out, a, b = _second_label(label)
        den = rf"\partial {_name(a)}^{{2}}" if a == b else rf"\partial {_name(a)}\, \partial {_name(b)}"
        items.append((rf"\frac{{\partial^{{2}} {_name(out)}}}{{{den}}}", e))
    lines = []
    for label, e in items:
        if isinstance(e, str):
            lines.append(f"% {label}: {e or 'derived program only (see --program vjp)'}")
        elif dag.tree_size(e) > FORMULA_NODES:
            lines.append(f"% {label}: {formula(e)}")
        else:
            lines.append(f"{label} = {sympy.latex(e)}")
    return lines


def second_lines(shown: dict[str, list]) -> list[str]:
    """``d2out/dx dy = formula`` per Hessian entry (the upper triangle), or why there are none."""
    if not shown["second"]:
        return ["second derivatives: none shown (a function this large is a program only: --program hessian)"]
    return [f"{label} = {formula(e)}" for label, e in shown["second"]]
