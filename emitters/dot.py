"""Graph view of a kernel program: its dataflow as Graphviz DOT text, for ``symgrad show --format dot``.

One node per input element (the arguments; the cotangent or tangent seeds) and per assignment (labelled with
its formula over the earlier nodes), one edge per use. Assignments that depend on a seed are the backward
(or tangent) part and are coloured apart from the forward part; results have a double border. A display
printer over the IR, like the others it never differentiates; it writes no file into compiled packages.
"""

from __future__ import annotations

import re

import sympy

from symgrad.compiler.display import formula
from symgrad.compiler.ir import Kernel, Program

#: fill colours: forward assignments, seed-dependent (backward or tangent) ones, and inputs by role
COLORS = {
    "forward": "#d6e6f5",
    "backward": "#fbdcc0",
    "arg": "#ffffff",
    "cotangent": "#f6b26b",
    "tangent": "#f6b26b",
}
#: formulas in node labels are cut to this many characters
LABEL_CHARS = 72


def quote(text: str) -> str:
    """``text`` as a DOT double-quoted string: control characters dropped, backslashes and quotes escaped."""
    text = re.sub(r"[\x00-\x1f\x7f]", "", text)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _node(ident: str, label: str, fill: str, shape: str = "box", peripheries: int = 1) -> str:
    return (
        f"  {ident} [label={quote(label)}, shape={shape}, fillcolor={quote(fill)}"
        + (f", peripheries={peripheries}" if peripheries > 1 else "")
        + "];"
    )


def program_graph(kernel: Kernel, name: str = "value_and_vjp") -> str:
    """The dataflow graph of ``kernel``'s program ``name`` as DOT text."""
    program = kernel.program(name)
    ids: dict[sympy.Symbol, str] = {}
    seeded: set[sympy.Symbol] = set()
    lines = [
        f"digraph {quote(f'{kernel.public_name}.{name}')} {{",
        f"  label={quote(_title(kernel, program))};",
        '  labelloc=t; fontname="Helvetica"; fontsize=12;',
        '  node [style="rounded,filled", fontname="Helvetica", fontsize=11];',
        '  edge [color="#666666", arrowsize=0.6];',
    ]
    for slot in program.inputs:
        for k, symbol in enumerate(slot.symbols):
            ids[symbol] = f"n{len(ids)}"
            if slot.role != "arg":
                seeded.add(symbol)
            label = slot.name if slot.size == 1 else f"{slot.name}[{k}]"
            lines.append(_node(ids[symbol], label, COLORS[slot.role], shape="ellipse"))
    results = {s: slot for slot in program.outputs for s in slot.symbols}
    for a in program.body:
        uses = sorted(a.expr.free_symbols & ids.keys(), key=lambda s: int(ids[s][1:]))
        ids[a.target] = f"n{len(ids)}"
        if any(u in seeded for u in uses):
            seeded.add(a.target)
        part = "backward" if a.target in seeded else "forward"
        label = f"{a.target} = {formula(a.expr, LABEL_CHARS)}"
        lines.append(_node(ids[a.target], label, COLORS[part], peripheries=2 if a.target in results else 1))
        lines += [f"  {ids[u]} -> {ids[a.target]};" for u in uses]
    lines.append("}")
    return "\n".join(lines)


def _title(kernel: Kernel, program: Program) -> str:
    seeds = [s.name for s in program.inputs if s.role != "arg"]
    key = f"; blue: forward, orange: depends on {', '.join(seeds)}" if seeds else ""
    return f"{program.name} of {kernel.public_name} [{kernel.origin}]{key}"
