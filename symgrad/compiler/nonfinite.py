"""Infinite and NaN constants a model writes (``x + 1e400``, ``sg.where(c, x, math.inf)``), kept as opaque
atoms while tracing.

SymPy turns ``float('inf')`` into ``oo`` and folds ``x + oo`` to ``oo``, which loses ``x`` and its gradient
(IEEE arithmetic keeps it: d(x + inf)/dx = 1). While a body is traced (``tracing()``), a non-finite Python or
NumPy float becomes a ``NonFinite`` atom that SymPy does not fold: its derivative is 0 and it prints as
``INFINITY``/``NAN`` in C, ``numpy.inf``/``numpy.nan`` in NumPy and ``inf``/``nan`` in formulas.

Each constant the body writes is an atom of its own (a serial number tells them apart), so that SymPy never
cancels ``x + inf - inf`` to ``x`` nor ``inf*x/inf`` to ``x``: the generated code computes them as the
user's Python expression does in IEEE arithmetic (NaN), with PyTorch's gradients (1 and NaN). NaN counts as
not finite, so that ``(x + nan)*0`` becomes SymPy's ``nan`` (refused at compile time) rather than 0.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import sympy
from sympy.core.sympify import _convert_numpy_types, converter

from symgrad.compiler.patching import Patch


class NonFinite(sympy.AtomicExpr):
    """``inf`` or ``nan`` as a constant SymPy does not evaluate (no free symbols: derivative 0); ``-inf`` is
    ``-NonFinite("inf")``."""

    _C = {"inf": "INFINITY", "nan": "NAN"}
    _NUMPY = {"inf": "numpy.inf", "nan": "numpy.nan"}

    is_commutative = True  # else Mul keeps it apart from the numbers, and 0*inf is 0 instead of nan
    kind_name: str
    #: which constant of the model this is: two are never equal, so SymPy cancels neither ``inf - inf`` nor
    #: ``inf/inf`` (in creation order, which keeps the order of terms, and the cache key, deterministic)
    serial: int

    def __new__(cls, kind: str, serial: int | None = None) -> NonFinite:
        if kind not in cls._C:
            raise ValueError(f"NonFinite takes 'inf' or 'nan', not {kind!r}")
        obj = super().__new__(cls)
        obj.kind_name = kind
        obj.serial = next(_serials) if serial is None else serial
        return obj

    def __getnewargs__(self) -> tuple:
        return (self.kind_name, self.serial)

    def _hashable_content(self) -> tuple:
        return (self.kind_name, self.serial)

    # IEEE order: x < inf and x > -inf for every real x, so max(x, -inf) is x; NaN compares as nothing
    @property
    def is_extended_real(self) -> bool | None:  # type: ignore[override]
        return None if self.kind_name == "nan" else True

    @property
    def is_finite(self) -> bool:  # type: ignore[override]
        return False

    @property
    def is_infinite(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_extended_positive(self) -> bool | None:  # type: ignore[override]
        return None if self.kind_name == "nan" else True

    @property
    def is_extended_negative(self) -> bool | None:  # type: ignore[override]
        return None if self.kind_name == "nan" else False

    def __float__(self) -> float:
        return float(self.kind_name)

    def _eval_evalf(self, prec: int) -> sympy.Expr:
        return sympy.oo if self.kind_name == "inf" else sympy.nan

    def _ccode(self, printer: Any) -> str:
        return self._C[self.kind_name]

    def _numpycode(self, printer: Any) -> str:
        printer.module_imports["numpy"].add(self.kind_name)
        return self._NUMPY[self.kind_name]

    def _sympystr(self, printer: Any) -> str:
        return self.kind_name

    def _sympyrepr(self, printer: Any) -> str:
        return f"NonFinite({self.kind_name!r})"  # no serial: a cache key must not depend on the count


_serials = itertools.count()


def constant(value: float) -> sympy.Expr:
    """``value`` as a SymPy constant: a ``Float``, or a ``NonFinite`` atom when it is infinite or NaN."""
    if math.isnan(value):
        return NonFinite("nan")
    if math.isinf(value):
        return NonFinite("inf") if value > 0 else -NonFinite("inf")
    return sympy.Float(value)


def _from_float(value: float) -> sympy.Expr:
    return constant(float(value))


def _from_numpy(value: np.floating) -> sympy.Expr:
    return _convert_numpy_types(value) if np.isfinite(value) else constant(float(value))


_CONVERTERS: dict[type, Any] = {float: _from_float, np.floating: _from_numpy}
_saved: dict[type, Any] = {}


def _install() -> None:
    _saved.clear()
    _saved.update({t: converter[t] for t in _CONVERTERS if t in converter})
    converter.update(_CONVERTERS)


def _remove() -> None:
    for t in _CONVERTERS:
        converter.pop(t, None)
    converter.update(_saved)


#: While it is entered (by any thread, nested or not), SymPy converts non-finite floats to ``NonFinite``
#: instead of ``oo``/``nan``; the previous converters come back when the last one leaves.
tracing = Patch(_install, _remove).held
