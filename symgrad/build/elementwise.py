"""One ``sg.`` math function as a compiled symgrad function of its own (``sg.exp`` on a NumPy array runs
it): traced from the compiler's symbolic form, compiled into the cache once, keyed by what tracing gave."""

from __future__ import annotations

import inspect
from pathlib import Path


def _parameters(name: str, arity: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The parameter names of ``name`` with ``arity`` arguments, and those that are data (no gradient):
    ``where``'s condition."""
    if name == "where" and arity == 3:
        return ("condition", "x", "y"), ("condition",)
    if arity <= 3:
        return ("x", "y", "z")[:arity], ()
    return tuple(f"x{k}" for k in range(arity)), ()


def compile_elementwise(name: str, arity: int, constants: tuple[tuple[int, int], ...] = ()) -> Path:
    """The package (in the cache) of ``sg.<name>`` applied to ``arity`` per-element scalars, with the
    Python integers ``constants`` ((position, value): an order such as polygamma's n or real_root's root)
    compiled in rather than passed."""
    from symgrad.build.compile import compile_traced
    from symgrad.compiler import functions
    from symgrad.compiler.trace import ForwardFunction

    symbolic = getattr(functions, name).symbolic
    params, nondiff = _parameters(name, arity - len(constants))

    def body(*data):
        args = list(data)
        for position, value in constants:
            args.insert(position, value)
        if nondiff:  # a condition arrives as a 0/1 number
            return functions.where(functions.Ne(args[0], 0), *args[1:])
        return symbolic(*args)

    body.__name__ = body.__qualname__ = name
    body.__signature__ = inspect.Signature(
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params]
    )
    return compile_traced(ForwardFunction(body, nondiff).trace())
