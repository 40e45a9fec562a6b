"""``sg.viz.graph(tensor)``: the tape behind a Tensor as Graphviz DOT text, in the style of torchviz's
``make_dot``.

One node per recorded operation (its backward's name, the shapes of its outputs, the shapes of the arrays it
saved for backward; a compiled ``@sg.function`` is one node, named after it), one per leaf tensor that
requires grad (blue; named when ``params`` names it) and one per output (green). Edges run from inputs to the
operations that use them. ``Graph.render`` draws it with Graphviz when the ``graphviz`` package and its
``dot`` program are installed.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

COLORS = {"op": "#d9d9d9", "leaf": "#a4c2f4", "output": "#b6d7a8"}
INSTALL = (
    "pip install 'symgrad[viz]' (the graphviz package) and Graphviz's `dot` program (apt install graphviz)"
)


class Graph(str):
    """DOT text (a ``str``) that can draw itself."""

    def render(self, path: str | Path) -> Path:
        """Draw the graph into ``path``; its suffix picks the format (``.svg``, ``.png``, ``.pdf``)."""
        try:
            import graphviz
        except ImportError:
            raise ImportError(f"sg.viz: rendering needs Graphviz: {INSTALL}") from None
        if shutil.which("dot") is None:
            raise RuntimeError(f"sg.viz: Graphviz's `dot` program is not on PATH: {INSTALL}")
        path = Path(path)
        fmt = path.suffix.lstrip(".") or "svg"
        path.write_bytes(graphviz.Source(str(self)).pipe(format=fmt))
        return path

    def _repr_svg_(self) -> str | None:  # notebooks draw it when Graphviz is there
        try:
            import graphviz
        except ImportError:
            return None
        return graphviz.Source(str(self))._repr_image_svg_xml() if shutil.which("dot") else None


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _op_label(node) -> str:
    lines = [node.name, " ".join(_shape(shape) for shape, _ in node.outs)]
    saved = node.saved if isinstance(node.saved, tuple) else ()
    distinct = {id(s): s for s in saved if isinstance(s, np.ndarray) and s.ndim}  # (one J for both inputs)
    arrays = list(distinct.values())
    if arrays:
        lines.append("saved " + " ".join(_shape(a.shape) for a in arrays))
    return "\n".join(lines)


def graph(tensors, params: Mapping[str, object] | None = None) -> Graph:
    """The tape graph that produced ``tensors`` (one Tensor or several) as DOT text; ``params``: names for
    leaf tensors (``dict(model.named_parameters())``)."""
    outputs = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    for t in outputs:
        if not hasattr(t, "grad_fn"):
            raise TypeError(f"sg.viz.graph takes Tensors; got {type(t).__name__}")
    names = {id(t): name for name, t in (params or {}).items()}
    ids: dict[tuple, str] = {}  # (kind, id of the node or tensor, or the output's index) -> DOT node
    lines = [
        "digraph tape {",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];',
        '  edge [color="#666666", arrowsize=0.6];',
    ]

    def ident(key: tuple, label: str, kind: str) -> str:
        if key not in ids:
            ids[key] = f"n{len(ids)}"
            lines.append(f"  {ids[key]} [label={_quote(label)}, fillcolor={_quote(COLORS[kind])}];")
        return ids[key]

    def op(node) -> str:
        return ident(("op", id(node)), _op_label(node), "op")

    def source(t) -> str:
        if t.grad_fn is not None:
            return op(t.grad_fn)
        label = f"{names[id(t)]}\n" if id(t) in names else ""
        return ident(("leaf", id(t)), label + _shape(t.data.shape), "leaf")

    stack, seen = [t.grad_fn for t in outputs if t.grad_fn is not None], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for inp in node.inputs:
            if inp is not None:
                lines.append(f"  {source(inp)} -> {op(node)};")
                if inp.grad_fn is not None:
                    stack.append(inp.grad_fn)
    for k, t in enumerate(outputs):
        out = ident(("output", k), f"output {k}\n{_shape(t.data.shape)}", "output")
        lines.append(f"  {source(t)} -> {out};")
    lines.append("}")
    return Graph("\n".join(lines))


__all__ = ["graph", "Graph"]


def __dir__() -> list[str]:
    return sorted(__all__)
