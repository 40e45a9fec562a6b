"""Emitters: one printer per target over the same kernel IR, registered by name.

An emitter turns a list of ``symgrad.compiler.ir.Kernel`` into the text of one file (``emit_module``) and
can show the part for one kernel (``emit_function``). Emitters never differentiate; adding a target means
adding one module (or package) here that calls ``register``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from symgrad.compiler.ir import Kernel


class ExpressionPrinter:
    """Code-printer mixin: ``doprint`` of one right-hand side, without SymPy's statement machinery (assignment
    targets, the UnevaluatedExpr rewrite walk, line formatting; its cost: docs/performance.md); emitters
    write statements themselves. Printers run in strict mode (unsupported constructs raise); an expression
    that needs a number constant declared falls back to the full ``doprint``."""

    def doprint(self, expr, assign_to=None):
        if assign_to is not None:
            return super().doprint(expr, assign_to)
        self._not_supported, self._number_symbols = set(), set()
        text = self._print(expr)
        return super().doprint(expr) if self._number_symbols else text


@dataclass(frozen=True)
class ModelInfo:
    """Where the kernels come from, for banners."""

    source: str  # 'model.py'
    symgrad_version: str


class Emitter(Protocol):
    """One target's printer. ``get`` makes a fresh instance per build, so an emitter may memoize per kernel
    (``write_package`` asks for the module and then each function's text)."""

    name: str
    filename: str

    def emit_module(self, kernels: Sequence[Kernel], info: ModelInfo) -> str: ...

    def emit_function(self, kernel: Kernel) -> str: ...


_REGISTRY: dict[str, Callable[[], Emitter]] = {}


def register(name: str) -> Callable[[Callable[[], Emitter]], Callable[[], Emitter]]:
    def wrap(factory: Callable[[], Emitter]) -> Callable[[], Emitter]:
        _REGISTRY[name] = factory
        return factory

    return wrap


def get(name: str) -> Emitter:
    _load_builtin()
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise KeyError(f"no emitter named {name!r}; available: {', '.join(sorted(_REGISTRY))}") from None


def names() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def _load_builtin() -> None:
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


def one_line(text: str) -> str:
    """Text safe inside a one-line comment of any target: printable ASCII, no comment terminators."""
    text = text.encode("ascii", "replace").decode("ascii")
    text = re.sub(r"[^\x20-\x7e]", "?", text)
    return text.replace("\\", "/").replace("*/", "* /")  # "*\\" would become "*/" after the neutralizing
