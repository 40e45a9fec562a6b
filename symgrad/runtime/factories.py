"""Tensor factories as in PyTorch: ``zeros``, ``ones``, ``full``, ``empty``, ``*_like``, ``arange``,
``linspace``, ``eye``.

Each returns a new leaf; ``dtype`` defaults as in PyTorch (float32 for floating values, int64 for integer
ones, bool for booleans), ``requires_grad=True`` needs a floating dtype, and ``device`` may only be the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from symgrad.runtime import dtypes
from symgrad.runtime.tensor import Tensor


def sizes(size: Sequence[Any], caller: str) -> tuple[int, ...]:
    """A shape given as ``f(2, 3)`` or ``f((2, 3))``, with PyTorch's error when none is given."""
    if not size:
        raise TypeError(f'{caller}() missing 1 required positional arguments: "size"')
    if len(size) == 1 and not isinstance(size[0], (int, np.integer)):
        size = tuple(size[0])
    return tuple(int(n) for n in size)


def leaf(data: np.ndarray, requires_grad: bool, device: Any = None) -> Tensor:
    """A new leaf tensor holding ``data`` (not copied)."""
    dtypes.check_device(device)
    return Tensor(data, requires_grad=requires_grad)


def zeros(*size: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """A tensor of zeros (float32 unless ``dtype`` says otherwise)."""
    data = np.zeros(sizes(size, "zeros"), dtypes.resolve(dtype, dtypes.DEFAULT_FLOAT))
    return leaf(data, requires_grad, device)


def ones(*size: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """A tensor of ones (float32 unless ``dtype`` says otherwise)."""
    data = np.ones(sizes(size, "ones"), dtypes.resolve(dtype, dtypes.DEFAULT_FLOAT))
    return leaf(data, requires_grad, device)


def empty(*size: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """An uninitialised tensor (float32 unless ``dtype`` says otherwise)."""
    data = np.empty(sizes(size, "empty"), dtypes.resolve(dtype, dtypes.DEFAULT_FLOAT))
    return leaf(data, requires_grad, device)


def full(
    size: Sequence[int],
    fill_value: Any,
    *,
    dtype: Any = None,
    requires_grad: bool = False,
    device: Any = None,
) -> Tensor:
    """A tensor of ``fill_value``; its dtype follows the value (bool, int64 or float32) unless given."""
    dtype = dtypes.resolve(dtype, dtypes.of_scalar(getattr(fill_value, "data", fill_value)))
    data = np.full(sizes((size,), "full"), getattr(fill_value, "data", fill_value), dtype)
    return leaf(data, requires_grad, device)


def _like(t: Any, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    data = t.data if isinstance(t, Tensor) else np.asarray(t)
    return data.shape, dtypes.resolve(dtype, data.dtype)


def zeros_like(t: Any, *, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """Zeros of ``t``'s shape and (unless given) dtype."""
    return leaf(np.zeros(*_like(t, dtype)), requires_grad, device)


def ones_like(t: Any, *, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """Ones of ``t``'s shape and (unless given) dtype."""
    return leaf(np.ones(*_like(t, dtype)), requires_grad, device)


def full_like(
    t: Any, fill_value: Any, *, dtype: Any = None, requires_grad: bool = False, device: Any = None
) -> Tensor:
    """``fill_value`` in ``t``'s shape and (unless given) dtype."""
    return leaf(np.full(*_like(t, dtype)[:1], fill_value, _like(t, dtype)[1]), requires_grad, device)


def arange(
    start: Any,
    end: Any = None,
    step: Any = 1,
    *,
    dtype: Any = None,
    requires_grad: bool = False,
    device: Any = None,
) -> Tensor:
    """``start, start + step, ...`` up to ``end`` (excluded); ``arange(n)`` is ``0 .. n-1``. Integer
    arguments give int64, any float float32; each value is ``start + i * step`` computed in float64."""
    if end is None:
        start, end = 0, start
    bounds = [getattr(v, "data", v) for v in (start, end, step)]
    floating = any(dtypes.of_scalar(v).kind == "f" for v in bounds)
    dtype = dtypes.resolve(dtype, dtypes.DEFAULT_FLOAT if floating else dtypes.int64)
    start, end, step = (float(v) for v in bounds)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    n = max(0, math.ceil((end - start) / step))
    values = start + np.arange(n, dtype=np.float64) * step if floating else np.arange(n) * int(step)
    return leaf((values if floating else values + int(start)).astype(dtype), requires_grad, device)


def linspace(
    start: Any, end: Any, steps: int, *, dtype: Any = None, requires_grad: bool = False, device: Any = None
) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive (float32 unless given); as in
    PyTorch, the first half counts up from ``start`` and the second half down from ``end``."""
    dtype = dtypes.resolve(dtype, dtypes.DEFAULT_FLOAT)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    calc = dtype if dtype.kind == "f" else np.dtype(np.float64)  # integers: a float64 step, then truncated
    start, end = (calc.type(dtype.type(getattr(v, "data", v))) for v in (start, end))
    step = (end - start) / calc.type(max(steps - 1, 1))
    i = np.arange(steps)
    lo = start + step * i.astype(calc)
    hi = end - step * (steps - 1 - i).astype(calc)
    values = np.where(i < steps // 2, lo, hi) if steps > 1 else np.full(steps, start)
    return leaf(values.astype(dtype), requires_grad, device)


def eye(
    n: int, m: int | None = None, *, dtype: Any = None, requires_grad: bool = False, device: Any = None
) -> Tensor:
    """The ``n`` x ``m`` identity (``m = n`` by default; float32 unless given)."""
    data = np.eye(n, n if m is None else m, dtype=dtypes.resolve(dtype, dtypes.DEFAULT_FLOAT))
    return leaf(data, requires_grad, device)
