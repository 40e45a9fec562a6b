"""The user's own names for intermediate values: the locals of the traced body, read after it returns, for
readable temporaries in generated code.

A ``sys.settrace`` hook stands until the body's frame starts, keeps a reference to that frame (whose locals
stay readable after it returns) and removes itself: SymPy's calls during the trace are not hooked (a hook on
each of them tripled the trace time). It only reads the frame, so it changes no result. Under a debugger or
coverage (the hook is taken) nothing is captured and temporaries get structural names.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any

import sympy

#: Values kept per trace: the first this many named expressions (a loop's locals are its last values only).
MAX_NAMED = 500


@contextmanager
def captured_locals(body: CodeType) -> Iterator[list[tuple[str, Any]]]:
    """While active, finds ``body``'s frame; on exit, the list holds its locals ``(name, value)``."""
    found: list[tuple[str, Any]] = []
    if sys.gettrace() is not None:  # a debugger or coverage holds the hook
        yield found
        return
    frames: list[FrameType] = []

    def on_call(frame: FrameType, event: str, arg: Any) -> None:
        if frame.f_code is body:
            frames.append(frame)  # its locals stay readable after it returns
            sys.settrace(None)  # nothing else is traced

    sys.settrace(on_call)
    try:
        yield found
    finally:
        sys.settrace(None)
        if frames:
            found.extend(frames[0].f_locals.items())
        frames.clear()


def named_values(
    items: list[tuple[str, Any]], skip: set[str], clean: Callable
) -> tuple[tuple[Any, str], ...]:
    """``(expression, name)`` for each compound SymPy value among ``items`` (the first name of a value wins;
    matrix and list entries as ``name_i``, ``name_i_j``), names in ``skip`` (the arguments) left out;
    ``clean`` is applied to each expression (the form the outputs take)."""
    out: dict[Any, str] = {}
    for name, value in items:
        if name in skip or not name.strip("_"):
            continue
        for expr, label in _entries(name, value):
            if len(out) >= MAX_NAMED:
                return tuple(out.items())
            if isinstance(expr, sympy.Expr) and not expr.is_Atom:
                out.setdefault(clean(expr), label)
    return tuple(out.items())


def _entries(name: str, value: Any) -> list[tuple[Any, str]]:
    if isinstance(value, sympy.MatrixBase):
        if value.cols == 1:
            return [(v, f"{name}_{i}") for i, v in enumerate(value)]
        return [(value[i, j], f"{name}_{i}_{j}") for i in range(value.rows) for j in range(value.cols)]
    if isinstance(value, (list, tuple)) and len(value) <= 64:
        return [(v, f"{name}_{i}") for i, v in enumerate(value) if isinstance(v, sympy.Expr)]
    return [(value, name)]
