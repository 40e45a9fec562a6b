"""Elementwise operations outside the compiled primitives, each one tape node with a small explicit rule:
``clamp`` (PyTorch's masks, gradient 1 at a boundary), ``remainder`` (``%``), ``floor_divide`` (``//``,
no derivative, as in PyTorch) and ``convert`` (dtype casts and copies: ``to``, ``float()``, ``clone()``).

Like ``shape_ops``, ``convert`` takes NumPy arrays too, so backward rules can use it on plain gradients.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.runtime import dtypes
from symgrad.runtime.autograd import Node
from symgrad.runtime.shape_ops import _data, _record, _tracked, sum_to_shape
from symgrad.runtime.tensor import Tensor, _result


def convert(x: Any, dtype: Any, name: str = "ToCopyBackward0") -> Any:
    """A (C-ordered) copy of ``x`` as ``dtype``; the gradient flows back cast to ``x``'s dtype (floating
    results only)."""
    dtype = np.dtype(dtype)
    if not isinstance(x, Tensor):
        return np.asarray(x).astype(dtype)
    out = x.data.astype(dtype, order="C")
    if dtype.kind not in "fc" or _tracked(x) is None:
        return _result(out)
    return _record(out, _convert_backward, (x,), None, x.data.dtype, name)


def _convert_backward(node: Node, grads: list, graph: bool) -> tuple:
    return (convert(grads[0], node.ctx),)


def _bound(value: Any, dtype: np.dtype) -> Any:
    return None if value is None else np.asarray(_data(value), dtype)


def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002  (torch's names)
    """``x`` limited to [min, max] (``max`` wins where min > max); the gradient passes where
    min <= x <= max, boundaries included, and goes to a tensor bound where that bound is the result."""
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    dtype = dtypes.promote(x, min, max)
    data, lo, hi = x.data.astype(dtype, copy=False), _bound(min, dtype), _bound(max, dtype)
    out = np.clip(data, lo, hi)
    tracked = (_tracked(x), _tracked(min), _tracked(max))
    if all(t is None for t in tracked):
        return _result(out)
    inside = np.ones(data.shape, bool) if lo is None else data >= lo
    if hi is not None:
        inside = inside & (data <= hi)
    below = None if lo is None else (data < lo) if hi is None else (data < lo) & (lo < hi)
    above = None if hi is None else (data > hi) if lo is None else (data > hi) | (hi < lo)
    masks = (inside, below, above)
    shapes = tuple(None if t is None else t.shape for t in tracked)
    return _record(out, _masked_backward, tracked, None, (masks, shapes), "ClampBackward1")


def _masked_backward(node: Node, grads: list, graph: bool) -> tuple:
    masks, shapes = node.ctx
    g = grads[0]
    return tuple(
        None if shape is None else sum_to_shape(g * mask.astype(g.dtype), shape)
        for mask, shape in zip(masks, shapes)
    )


def _operands(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    dtype = dtypes.promote(a, b)
    A, B = np.asarray(_data(a), dtype), np.asarray(_data(b), dtype)
    if dtype.kind in "iu" and not B.all():
        raise RuntimeError("ZeroDivisionError")
    return A, B, dtype


def remainder(a: Any, b: Any) -> Tensor:
    """``a % b`` with the sign of ``b`` (Python's and PyTorch's ``remainder``); d/da = 1,
    d/db = -floor(a / b)."""
    A, B, dtype = _operands(a, b)
    out = np.remainder(A, B)
    ta, tb = _tracked(a), _tracked(b)
    if ta is None and tb is None:
        return _result(out)
    ctx = (np.shape(A), np.shape(B), -np.floor_divide(A, B))
    return _record(out, _remainder_backward, (ta, tb), None, ctx, "RemainderBackward0")


def _remainder_backward(node: Node, grads: list, graph: bool) -> tuple:
    shape_a, shape_b, minus_quotient = node.ctx
    g = grads[0]
    return sum_to_shape(g, shape_a), sum_to_shape(g * minus_quotient, shape_b)


def floor_divide(a: Any, b: Any) -> Tensor:
    """``a // b`` rounded toward minus infinity (Python's and PyTorch's rule). Its result is on the tape,
    but, as in PyTorch, has no derivative: a backward through it is an error."""
    A, B, dtype = _operands(a, b)
    out = np.floor_divide(A, B)
    tracked = (_tracked(a), _tracked(b))
    if all(t is None for t in tracked) or dtype.kind not in "fc":
        return _result(out)
    return _record(out, _no_derivative, tracked, None, None, "NotImplemented")


def _no_derivative(node: Node, grads: list, graph: bool) -> tuple:
    raise RuntimeError("derivative for aten::floor_divide is not implemented")
