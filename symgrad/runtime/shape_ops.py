"""Linear algebra, reductions, reshaping and indexing, each with a small explicit backward rule.

Every function here accepts NumPy arrays as well as Tensors (arrays in, array out, nothing recorded), so the
backward rules are written once with these same functions: on arrays during an ordinary backward, on
Tensors under ``create_graph=True``, where they record and can be differentiated again.
"""

from __future__ import annotations

from math import prod
from typing import Any, NamedTuple

import numpy as np

from symgrad.compiled.arguments import broadcast_axes
from symgrad.runtime.autograd import Node, mode
from symgrad.runtime.tensor import Tensor, _result

#: Gradients of at most this many elements that backward broadcasts are copies, not read-only views
_SMALL = 1 << 12


def _record(out: Any, backward: Any, inputs: tuple, saved: Any, ctx: Any, name: str) -> Tensor:
    out = out if type(out) is np.ndarray else np.asarray(out)
    return _result(out, Node(backward, inputs, saved, ctx, name, ((out.shape, out.dtype),)))


def _tracked(x: Any) -> Any:
    """``x`` when it is a Tensor that the current operation should differentiate, else None."""
    return x if isinstance(x, Tensor) and x._rg and mode.enabled else None


def _data(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(a % ndim if ndim else a for a in axes)


def _kept_shape(shape: tuple, axis: Any) -> tuple:
    axes = _axes(axis, len(shape))
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


# -- reshaping -----------------------------------------------------------------------------------------
def reshape(x: Any, shape: tuple) -> Any:
    if not isinstance(x, Tensor):  # the method: np.reshape's dispatch costs more than the reshape itself
        return x.reshape(shape) if type(x) is np.ndarray else np.reshape(x, shape)
    out = x.data.reshape(shape)
    if _tracked(x) is None:
        return _result(out)
    return _record(out, _reshape_backward, (x,), None, x.data.shape, "ViewBackward")


def _reshape_backward(node: Node, grads: list, graph: bool) -> tuple:
    return (reshape(grads[0], node.ctx),)


def permute(x: Any, perm: tuple) -> Any:
    if not isinstance(x, Tensor):
        return x.transpose(perm) if type(x) is np.ndarray else np.transpose(x, perm)
    out = x.data.transpose(perm)
    if _tracked(x) is None:
        return _result(out)
    return _record(out, _permute_backward, (x,), None, tuple(np.argsort(perm)), "PermuteBackward")


def _permute_backward(node: Node, grads: list, graph: bool) -> tuple:
    return (permute(grads[0], node.ctx),)


def _swap_last(x: Any) -> Any:
    n = len(x.shape)
    return permute(x, tuple(range(n - 2)) + (n - 1, n - 2))


def broadcast_to(x: Any, shape: tuple) -> Any:
    if not isinstance(x, Tensor):  # a gradient: small ones copied (np.broadcast_to costs more than that)
        if type(x) is not np.ndarray or prod(shape) > _SMALL:
            return np.broadcast_to(x, shape)
        if x.ndim > len(shape):
            np.broadcast_to(x, shape)  # (its error)
        out = np.empty(shape, x.dtype)
        out[...] = x
        return out
    out = np.broadcast_to(x.data, shape)
    if _tracked(x) is None:
        return _result(out)
    return _record(out, _broadcast_backward, (x,), None, x.data.shape, "ExpandBackward")


def _broadcast_backward(node: Node, grads: list, graph: bool) -> tuple:
    return (sum_to_shape(grads[0], node.ctx),)


def sum_to_shape(g: Any, shape: tuple) -> Any:
    """Sum tensor ``g`` over the axes that broadcasting added or stretched to reach ``shape`` (on the
    tape)."""
    if g.shape == shape:
        return g
    axes = broadcast_axes(g.shape, shape)
    if axes:
        g = reduce_sum(g, axes, True)
    return reshape(g, shape)


# -- reductions ----------------------------------------------------------------------------------------
def reduce_sum(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    if not isinstance(x, Tensor):
        return (
            x.sum(axis=axis, keepdims=keepdims)
            if type(x) is np.ndarray
            else np.sum(x, axis=axis, keepdims=keepdims)
        )
    out = x.data.sum(axis=axis, keepdims=keepdims)
    if _tracked(x) is None:
        return _result(out)
    return _record(out, _sum_backward, (x,), None, (x.data.shape, axis, keepdims), "SumBackward")


def _sum_backward(node: Node, grads: list, graph: bool) -> tuple:
    shape, axis, keepdims = node.ctx
    g = grads[0]
    if not keepdims and axis is not None:  # (a sum of all elements broadcasts as it is)
        g = reshape(g, _kept_shape(shape, axis))
    return (broadcast_to(g, shape),)


def reduce_mean(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    if not isinstance(x, Tensor):
        return np.mean(x, axis=axis, keepdims=keepdims)
    out = np.mean(x.data, axis=axis, keepdims=keepdims)
    if _tracked(x) is None:
        return _result(out)
    return _record(out, _mean_backward, (x,), None, (x.data.shape, axis, keepdims), "MeanBackward")


def _mean_backward(node: Node, grads: list, graph: bool) -> tuple:
    shape, axis, keepdims = node.ctx
    count = int(np.prod([shape[a] for a in _axes(axis, len(shape))]))
    (g,) = _sum_backward(node, grads, graph)
    return (g / count,)


def reduce_extreme(x: Any, axis: Any, keepdims: bool, np_fn: Any) -> Any:
    """``np.max`` / ``np.min`` over ``axis``; tied extremes share the gradient equally (like
    ``torch.amax``)."""
    if not isinstance(x, Tensor):
        return np_fn(x, axis=axis, keepdims=keepdims)
    if _tracked(x) is None:
        return _result(np_fn(x.data, axis=axis, keepdims=keepdims))
    kept = np_fn(x.data, axis=axis, keepdims=True)
    axes = _axes(axis, x.data.ndim)
    out = kept if keepdims else kept.reshape(tuple(n for i, n in enumerate(kept.shape) if i not in axes))
    mask = x.data == kept
    weights = mask / mask.sum(axis=axis, keepdims=True, dtype=x.data.dtype)
    return _record(
        out,
        _extreme_backward,
        (x,),
        (weights.astype(x.data.dtype, copy=False),),
        (x.data.shape, axis, keepdims),
        "AmaxBackward" if np_fn is np.max else "AminBackward",
    )


def one_axis(dim: int, ndim: int) -> int:
    """``dim`` as a non-negative axis, with PyTorch's error when it is out of range."""
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-max(ndim, 1)}, {max(ndim, 1) - 1}], "
            f"but got {dim})"
        )
    return dim % max(ndim, 1)


def argextreme(data: np.ndarray, dim: int | None, keepdim: bool, np_arg: Any) -> Tensor:
    """The int64 index of the first extreme (``np_arg``) over all of ``data`` or along ``dim``."""
    if dim is None:
        index = np.asarray(np_arg(data), dtype=np.int64)
        return Tensor(index.reshape((1,) * data.ndim) if keepdim else index)
    return Tensor(np_arg(data, axis=dim, keepdims=keepdim).astype(np.int64))


class ValuesIndices(NamedTuple):
    """What ``max``/``min`` along a dimension return (``torch.return_types.max``)."""

    values: Any
    indices: Any


def extreme_along(x: Any, dim: int, keepdim: bool, np_arg: Any) -> ValuesIndices:
    """``(values, indices)`` of the max (``np_arg=np.argmax``) or min along ``dim``, the first index of a
    tie; the gradient goes to that index only, as in PyTorch."""
    idx = np_arg(x.data, axis=dim, keepdims=True)
    kept = np.take_along_axis(x.data, idx, axis=dim)
    squeeze = (lambda a: a) if keepdim else (lambda a: np.squeeze(a, axis=dim))
    indices = Tensor(squeeze(idx).astype(np.int64))
    if _tracked(x) is None:
        return ValuesIndices(_result(squeeze(kept)), indices)
    name = "MaxBackward0" if np_arg is np.argmax else "MinBackward0"
    out = _record(squeeze(kept), _along_backward, (x,), None, (x.data.shape, dim, keepdim, idx), name)
    return ValuesIndices(out, indices)


def _along_backward(node: Node, grads: list, graph: bool) -> tuple:
    shape, dim, keepdim, idx = node.ctx
    g = grads[0] if keepdim else reshape(grads[0], _kept_shape(shape, dim))
    return (index_put(g, shape, dim, idx),)


def index_put(g: Any, shape: tuple, dim: int, idx: np.ndarray) -> Any:
    """Zeros of ``shape`` with ``g`` placed at ``idx`` along ``dim`` (differentiable in ``g``)."""
    data = np.zeros(shape, dtype=_data(g).dtype)
    np.put_along_axis(data, idx, _data(g), axis=dim)
    if not isinstance(g, Tensor) or _tracked(g) is None:
        return data if not isinstance(g, Tensor) else _result(data)
    return _record(data, _index_put_backward, (g,), None, (dim, idx), "ScatterBackward0")


def _index_put_backward(node: Node, grads: list, graph: bool) -> tuple:
    dim, idx = node.ctx
    return (take_along(grads[0], dim, idx),)


def take_along(g: Any, dim: int, idx: np.ndarray) -> Any:
    """``g`` at ``idx`` along ``dim`` (differentiable)."""
    data = np.take_along_axis(_data(g), idx, axis=dim)
    if not isinstance(g, Tensor) or _tracked(g) is None:
        return data if not isinstance(g, Tensor) else _result(data)
    return _record(data, _take_along_backward, (g,), None, (_data(g).shape, dim, idx), "GatherBackward0")


def _take_along_backward(node: Node, grads: list, graph: bool) -> tuple:
    shape, dim, idx = node.ctx
    return (index_put(grads[0], shape, dim, idx),)


def _extreme_backward(node: Node, grads: list, graph: bool) -> tuple:
    shape, axis, keepdims = node.ctx
    g = grads[0] if keepdims else reshape(grads[0], _kept_shape(shape, axis))
    return (g * node.saved[0],)


# -- matrix product ------------------------------------------------------------------------------------
def matmul(a: Any, b: Any) -> Any:
    """``a @ b`` with NumPy's rules for 1-D operands and broadcast batch dimensions."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        return np.matmul(a, b)
    A, B = _data(a), _data(b)
    try:
        out = np.matmul(A, B)
    except ValueError:
        if np.ndim(A) == 2 and np.ndim(B) == 2:
            raise RuntimeError(
                f"mat1 and mat2 shapes cannot be multiplied ({A.shape[0]}x{A.shape[1]} and "
                f"{B.shape[0]}x{B.shape[1]})"
            ) from None
        raise
    ta, tb = _tracked(a), _tracked(b)
    if ta is None and tb is None:
        return _result(out)
    return _record(out, _matmul_backward, (ta, tb), (a, b), None, "MmBackward")


def _matmul_backward(node: Node, grads: list, graph: bool) -> tuple:
    a, b = node.saved if graph else (_data(x) for x in node.saved)
    g = grads[0]
    ga = gb = None
    if len(a.shape) == 1 and len(b.shape) == 1:
        ga, gb = g * b, g * a
    elif len(a.shape) == 1:  # (k,) @ (..., k, n) -> (..., n)
        g_col = reshape(g, g.shape[:-1] + (g.shape[-1], 1))
        ga = reshape(matmul(b, g_col), g.shape[:-1] + (b.shape[-2],))
        gb = matmul(reshape(a, (a.shape[0], 1)), reshape(g, g.shape[:-1] + (1, g.shape[-1])))
    elif len(b.shape) == 1:  # (..., m, k) @ (k,) -> (..., m)
        g_col = reshape(g, g.shape + (1,))
        ga = matmul(g_col, reshape(b, (1, b.shape[0])))
        gb = reshape(matmul(_swap_last(a), g_col), g.shape[:-1] + (b.shape[0],))
    else:
        ga = matmul(g, _swap_last(b))
        gb = matmul(_swap_last(a), g)
    ia, ib = node.inputs
    return (
        None if ia is None else sum_to_shape(ga, tuple(a.shape)),
        None if ib is None else sum_to_shape(gb, tuple(b.shape)),
    )


# -- indexing ------------------------------------------------------------------------------------------
def _plain_index(index: Any) -> Any:
    if isinstance(index, Tensor):
        return index.data
    if isinstance(index, tuple):
        return tuple(i.data if isinstance(i, Tensor) else i for i in index)
    return index


def _has_integer_array(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, (list, np.ndarray)) and np.asarray(i).dtype.kind in "iu" for i in items)


def getitem(x: Any, index: Any) -> Any:
    """``x[index]`` with NumPy's basic and advanced indexing."""
    index = _plain_index(index)
    if not isinstance(x, Tensor):
        return x[index]
    out = x.data[index]
    if _tracked(x) is None:
        return _result(out)
    return _record(out, _getitem_backward, (x,), None, (x.data.shape, x.data.dtype, index), "IndexBackward")


def _getitem_backward(node: Node, grads: list, graph: bool) -> tuple:
    shape, dtype, index = node.ctx
    return (index_add(grads[0], shape, dtype, index),)


def index_add(g: Any, shape: tuple, dtype: Any, index: Any) -> Any:
    """Zeros of ``shape`` with ``g`` added at ``index`` (repeated indices add up): the adjoint of getitem."""
    z = np.zeros(shape, dtype)
    if _has_integer_array(index):
        np.add.at(z, index, _data(g))
    else:
        z[index] = _data(g)
    if _tracked(g) is None:
        return z if not isinstance(g, Tensor) else _result(z)
    return _record(z, _index_add_backward, (g,), None, index, "IndexPutBackward")


def _index_add_backward(node: Node, grads: list, graph: bool) -> tuple:
    return (getitem(grads[0], node.ctx),)
