"""Where the ``sg.`` math functions send arguments that are not SymPy: a table of handlers by argument type.

``sg.exp(x)`` builds a SymPy expression for a symbol or a number (inside ``@sg.function``); when an argument
is of a registered type it calls that type's handler instead, as ``torch.exp`` works on tensors:
``sg.Tensor`` -> the tape op (registered by ``symgrad.runtime``), ``numpy.ndarray`` -> the compiled
elementwise kernel (registered by ``symgrad.compiled``). The compiler imports neither stage: they fill this
table when they load, and ``PROVIDERS`` are imported on the first argument of a type the table does not
know, so that a miss is never only a matter of import order. No SymPy here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

#: ``handler(name, args)``: the value of the ``sg.`` math function ``name`` on ``args``
Handler = Callable[[str, tuple], Any]

#: the modules that register handlers when imported
PROVIDERS = ("symgrad.compiled", "symgrad.runtime")

_handlers: dict[type, tuple[int, Handler]] = {}
_loaded: list[bool] = [False]


def register(kind: type, handler: Handler, priority: int = 0) -> None:
    """Send ``sg.`` math calls with an argument of type ``kind`` (or a subclass) to ``handler``; among
    arguments of several registered types, the handler of the highest ``priority`` wins (a Tensor beside
    an array records on the tape)."""
    _handlers[kind] = (priority, handler)


def _entry(value: Any) -> tuple[int, Handler] | None:
    for kind in type(value).__mro__:
        entry = _handlers.get(kind)
        if entry is not None:
            return entry
    return None


def handler_for(args: tuple) -> Handler | None:
    """The handler for ``args``, or None when no argument is of a registered type (then the call is
    symbolic)."""
    best = None
    for a in args:
        entry = _entry(a)
        if entry is not None and (best is None or entry[0] > best[0]):
            best = entry
    if best is None and not _loaded[0]:
        _loaded[0] = True
        for module in PROVIDERS:
            importlib.import_module(module)
        return handler_for(args)
    return None if best is None else best[1]
