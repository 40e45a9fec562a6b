"""``cat``, ``stack`` and ``matmul`` as functions of tensors (``torch.cat``, ``torch.stack``,
``torch.matmul``).

``cat`` is one tape node whose backward hands each input its slice of the gradient (cast back to the
input's dtype when the inputs were promoted); ``stack`` is ``cat`` of the inputs with a new axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from symgrad.runtime import dtypes
from symgrad.runtime.autograd import Node
from symgrad.runtime.pointwise import convert
from symgrad.runtime.shape_ops import _record, _tracked, getitem, one_axis, reshape
from symgrad.runtime.shape_ops import matmul as _matmul
from symgrad.runtime.tensor import Tensor, _result


def _tensors(tensors: Sequence[Any], empty_error: Exception) -> list[Tensor]:
    if isinstance(tensors, Tensor):
        raise TypeError("expected a sequence of Tensors, got a single Tensor")
    tensors = list(tensors)
    if not tensors:
        raise empty_error
    for i, t in enumerate(tensors):
        if not isinstance(t, (Tensor, np.ndarray)):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {type(t).__name__}")
    return [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]


def _check_cat_shapes(tensors: list[Tensor], dim: int) -> None:
    first = tensors[0].shape
    for i, t in enumerate(tensors[1:], 1):
        if t.ndim != len(first):
            raise RuntimeError(f"Tensors must have same number of dimensions: got {len(first)} and {t.ndim}")
        for d, (a, b) in enumerate(zip(first, t.shape)):
            if d != dim and a != b:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {dim}. Expected size {a} but got size "
                    f"{b} for tensor number {i} in the list."
                )


def cat(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """Join ``tensors`` along the existing dimension ``dim`` (dtypes promoted as in PyTorch)."""
    tensors = _tensors(tensors, ValueError("cat(): expected a non-empty list of Tensors"))
    dim = one_axis(dim, tensors[0].ndim)
    _check_cat_shapes(tensors, dim)
    dtype = dtypes.promote(*tensors)
    out = np.concatenate([t.data for t in tensors], axis=dim, dtype=dtype)
    tracked = tuple(_tracked(t) for t in tensors)
    if not any(t is not None for t in tracked):
        return _result(out)
    bounds = np.cumsum([0] + [t.shape[dim] for t in tensors])
    ctx = (dim, [(int(a), int(b), t.dtype) for a, b, t in zip(bounds[:-1], bounds[1:], tensors)])
    return _record(out, _cat_backward, tracked, None, ctx, "CatBackward0")


def _cat_backward(node: Node, grads: list, graph: bool) -> tuple:
    dim, pieces = node.ctx
    g = grads[0]
    result = []
    for inp, (a, b, dtype) in zip(node.inputs, pieces):
        if inp is None:
            result.append(None)
            continue
        piece = getitem(g, (slice(None),) * dim + (slice(a, b),))
        result.append(piece if piece.dtype == dtype else convert(piece, dtype))
    return tuple(result)


def stack(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """Join equally shaped ``tensors`` along a new dimension ``dim``."""
    tensors = _tensors(tensors, RuntimeError("stack expects a non-empty TensorList"))
    shape = tensors[0].shape
    for i, t in enumerate(tensors[1:], 1):
        if t.shape != shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 and "
                f"{list(t.shape)} at entry {i}"
            )
    dim = one_axis(dim, len(shape) + 1)
    new = shape[:dim] + (1,) + shape[dim:]
    return cat([reshape(t, new) for t in tensors], dim)


def matmul(input: Any, other: Any) -> Tensor:  # noqa: A002  (torch's names)
    """The matrix product ``input @ other`` (NumPy's and PyTorch's rules for 1-D and batched operands)."""
    out = _matmul(input, other)
    return out if isinstance(out, Tensor) else _result(np.asarray(out))
