"""Reductions beyond ``sum``/``mean``/``max``: ``prod``, ``var``, ``std`` and ``norm`` (PyTorch's
signatures, values and gradients).

``var`` and the p-norms are compositions of Tensor operations; two tape nodes have rules of their own:
``prod`` (the product of the other elements, exact with zeros) and ``root`` (``s ** (1/p)`` whose gradient
is 0 where ``s`` is 0, which gives ``std`` and ``norm`` PyTorch's zero gradient at a zero result).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from symgrad.runtime.autograd import Node
from symgrad.runtime.shape_ops import _data, _record, _tracked, getitem, one_axis, permute, reshape
from symgrad.runtime.tensor import Tensor, _result


def _dims(dim: Any, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    return tuple(sorted({one_axis(d, ndim) for d in ((dim,) if isinstance(dim, int) else dim)}))


def _require_float(x: Tensor, what: str) -> None:
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"{what} only support floating point and complex dtypes")


# -- prod ----------------------------------------------------------------------------------------------
def prod(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """The product of all elements, or along ``dim`` (integer tensors give int64, as in PyTorch)."""
    data = x.data
    axis = None if dim is None else one_axis(dim, data.ndim)
    out = np.prod(data, axis=axis, keepdims=keepdim, dtype=np.int64 if data.dtype.kind in "biu" else None)
    if _tracked(x) is None:
        return _result(out)
    return _record(out, _prod_backward, (x,), (x,), (data.shape, axis, keepdim), "ProdBackward0")


def _prod_backward(node: Node, grads: list, graph: bool) -> tuple:
    shape, axis, keepdim = node.ctx
    x = node.saved[0] if graph else _data(node.saved[0])
    if axis is None:
        return (reshape(grads[0] * _others(reshape(x, (-1,))), shape),)
    perm = tuple(a for a in range(len(shape)) if a != axis) + (axis,)
    others = permute(_others(permute(x, perm)), tuple(np.argsort(perm)))
    kept = tuple(1 if a == axis else n for a, n in enumerate(shape))
    return (reshape(grads[0], kept) * others if not keepdim else grads[0] * others,)


def _others(x: Any) -> Any:
    """For each element along the last axis, the product of the others (zeros included, no division)."""
    n = x.shape[-1]
    if isinstance(x, Tensor):  # create_graph: a differentiable gather of the n - 1 others, then prod
        index = np.array([[j for j in range(n) if j != i] for i in range(n)], dtype=np.intp).reshape(n, n - 1)
        return prod(getitem(x, (Ellipsis, index)), -1)
    ones = np.ones(x.shape[:-1] + (1,), x.dtype)
    left = np.cumprod(np.concatenate([ones, x[..., :-1]], axis=-1), axis=-1)
    right = np.cumprod(np.concatenate([ones, x[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    return left * right


# -- var, std ------------------------------------------------------------------------------------------
def var(
    x: Tensor,
    dim: Any = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    correction: Any = None,
    name: str = "var",
) -> Tensor:
    """The variance over ``dim`` (all by default), divided by ``N - correction``: ``correction=1`` (or
    ``unbiased=True``, the default) for the sample variance, 0 for the population one."""
    _require_float(x, "std and var")
    if isinstance(dim, bool):  # var(unbiased) in PyTorch's older signature
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    axes = _dims(dim, x.ndim)
    count = int(np.prod([x.shape[a] for a in axes]))
    if count - correction <= 0:
        warnings.warn(
            f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
            "factor (input numel divided by output numel).",
            UserWarning,
            stacklevel=4 if name == "std" else 3,
        )
    deviation = x - x.mean(dim=axes, keepdim=True)
    return (deviation * deviation).sum(dim=axes, keepdim=keepdim) / max(0, count - correction)


def std(
    x: Tensor, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, correction: Any = None
) -> Tensor:
    """The square root of ``var`` (same arguments); its gradient is 0 where the result is 0."""
    return root(var(x, dim, unbiased, keepdim, correction, "std"), 2)


# -- root, norm ----------------------------------------------------------------------------------------
def root(s: Any, p: float) -> Any:
    """``s ** (1 / p)`` (``sqrt`` for p = 2), with gradient ``g / (p * out ** (p - 1))`` where ``s`` is
    nonzero and 0 where it is 0 (PyTorch's rule for norms and ``std``); arrays in, arrays out."""
    data = _data(s)
    out = np.sqrt(data) if p == 2 else np.power(data, 1 / p)
    if not isinstance(s, Tensor):
        return out
    if _tracked(s) is None:
        return _result(out)
    return _record(out, _root_backward, (s,), (s,), p, "NormBackward")


def _root_backward(node: Node, grads: list, graph: bool) -> tuple:
    s = node.saved[0] if graph else _data(node.saved[0])
    p = node.ctx
    zero = _data(s) == 0
    safe = root(s + zero.astype(_data(s).dtype), p)  # 1 where s is 0: a finite quotient, masked below
    scale = (~zero).astype(_data(s).dtype) / (p * safe if p == 2 else p * safe ** (p - 1))
    return (grads[0] * scale,)


def norm(x: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False) -> Tensor:
    """The vector p-norm over ``dim`` (all elements by default): p = 2 or ``"fro"``, 1, ``inf``, ``-inf``,
    0 (the count of nonzeros) or any other p > 0 as ``sum(|x| ** p) ** (1 / p)``. At a zero norm the
    gradient is 0, as in PyTorch."""
    if x.dtype.kind not in "fc":
        raise RuntimeError(
            f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {x.dtype}"
        )
    axes = _dims(dim, x.ndim)
    if p in ("fro", 2):
        return root((x * x).sum(dim=axes, keepdim=keepdim), 2)
    if isinstance(p, str):
        raise RuntimeError(f"norm: p={p!r} is not supported; use 'fro' or a number")
    if p == np.inf:
        return x.abs().amax(axes, keepdim)
    if p == -np.inf:
        return x.abs().amin(axes, keepdim)
    if p == 0:
        return _result((x.data != 0).sum(axis=axes, keepdims=keepdim).astype(x.dtype))
    if p == 1:
        return x.abs().sum(dim=axes, keepdim=keepdim)
    return root((x.abs() ** p).sum(dim=axes, keepdim=keepdim), p)
