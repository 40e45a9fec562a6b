"""PyTorch's Tensor methods beyond arithmetic: dtype conversions, view-like reshapes (``unsqueeze``,
``squeeze``, ``flatten``, ``expand``, ``t``), ``clamp``, ``var``/``std``/``prod``/``norm``,
``softmax``/``log_softmax``, ``//``, ``%`` and ``float(t)``/``int(t)`` (mixed into ``Tensor``).

Each method composes existing operations (``shape_ops``, the compiled elementwise primitives) or calls one
of the small tape ops in ``pointwise`` and ``reductions``; none has a backward rule of its own. The imports
are inside the methods because those modules build Tensors, and this class is part of ``Tensor``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from symgrad.runtime import dtypes


class TensorMethods:
    """Methods of ``Tensor`` that a PyTorch model expects (see the module docstring)."""

    __slots__ = ()

    # -- device and dtype ----------------------------------------------------------------------------
    @property
    def device(self) -> str:
        """Always ``"cpu"``."""
        return "cpu"

    def cpu(self) -> Any:
        return self

    def dim(self) -> int:
        return self.data.ndim

    def to(self, *args: Any, dtype: Any = None, device: Any = None, copy: bool = False, **_: Any) -> Any:
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)`` or ``to(other)``: this tensor itself when
        nothing changes (unless ``copy``), else a copy that passes gradients back cast to this dtype."""
        for a in args:
            if hasattr(a, "_rg"):
                dtype = a.data.dtype
            elif isinstance(a, str) and not _is_dtype_name(a):
                device = a
            else:
                dtype = a
        dtypes.check_device(device)
        if dtype is None or np.dtype(dtype) == self.data.dtype:
            return self.clone() if copy else self
        from symgrad.runtime.pointwise import convert

        return convert(self, dtype)

    def float(self) -> Any:
        """As float32 (``to(sg.float32)``)."""
        return self.to(dtypes.float32)

    def double(self) -> Any:
        """As float64 (``to(sg.float64)``)."""
        return self.to(dtypes.float64)

    def long(self) -> Any:
        """As int64 (off the tape)."""
        return self.to(dtypes.int64)

    def type_as(self, other: Any) -> Any:
        """As ``other``'s dtype."""
        return self.to(other.data.dtype)

    def clone(self) -> Any:
        """A copy (C-ordered) that passes gradients back unchanged."""
        from symgrad.runtime.pointwise import convert

        return convert(self, self.data.dtype, "CloneBackward0")

    def contiguous(self) -> Any:
        """This tensor when its data is C-contiguous, else ``clone()``."""
        return self if self.data.flags.c_contiguous else self.clone()

    def __float__(self) -> float:
        return float(self._one_element())

    def __int__(self) -> int:
        return int(self._one_element())

    def _one_element(self) -> Any:
        if self.data.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self.data.item()

    # -- shapes --------------------------------------------------------------------------------------
    def unsqueeze(self, dim: int) -> Any:
        """A view with a new axis of size 1 at ``dim``."""
        from symgrad.runtime.shape_ops import one_axis, reshape

        d = one_axis(dim, self.data.ndim + 1)
        return reshape(self, self.data.shape[:d] + (1,) + self.data.shape[d:])

    def squeeze(self, dim: Any = None) -> Any:
        """A view without the axes of size 1 (only those in ``dim`` when given)."""
        from symgrad.runtime.shape_ops import one_axis, reshape

        shape = self.data.shape
        if dim is None:
            dims = range(len(shape))
        else:
            dims = [one_axis(d, len(shape)) for d in ((dim,) if isinstance(dim, int) else dim)]
        drop = {d for d in dims if d < len(shape) and shape[d] == 1}
        return reshape(self, tuple(n for d, n in enumerate(shape) if d not in drop))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Any:
        """A view with the axes ``start_dim .. end_dim`` merged into one."""
        from symgrad.runtime.shape_ops import one_axis, reshape

        shape = self.data.shape
        start, end = one_axis(start_dim, len(shape)), one_axis(end_dim, len(shape))
        if start > end:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        if not shape:
            return reshape(self, (1,))
        return reshape(self, shape[:start] + (int(np.prod(shape[start : end + 1])),) + shape[end + 1 :])

    def expand(self, *sizes: Any) -> Any:
        """A broadcast view of ``sizes`` (-1 keeps an axis); only axes of size 1 can grow."""
        from symgrad.runtime.shape_ops import broadcast_to

        return broadcast_to(self, _expanded(self.data.shape, _sizes(sizes), self.data.dtype))

    def expand_as(self, other: Any) -> Any:
        return self.expand(other.shape)

    def broadcast_to(self, shape: Sequence[int]) -> Any:
        from symgrad.runtime.shape_ops import broadcast_to

        return broadcast_to(self, tuple(shape))

    def transpose(self, dim0: int, dim1: int) -> Any:
        """Swap two dimensions (``permute`` for any order)."""
        perm = list(range(self.data.ndim))
        perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
        return self.permute(tuple(perm))

    def t(self) -> Any:
        """The transpose of a matrix (a 0-D or 1-D tensor as it is)."""
        if self.data.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.data.ndim}D")
        return self.permute(tuple(range(self.data.ndim))[::-1])

    @property
    def mT(self) -> Any:  # noqa: N802
        return self.transpose(-2, -1)

    # -- math ----------------------------------------------------------------------------------------
    def clamp(self, min: Any = None, max: Any = None) -> Any:  # noqa: A002  (torch's names)
        """Values limited to [min, max]; gradient 1 inside, boundaries included (PyTorch's rule)."""
        from symgrad.runtime.pointwise import clamp

        return clamp(self, min, max)

    clip = clamp

    def var(
        self, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None
    ) -> Any:
        """Variance over ``dim``, divided by ``N - correction`` (1, the sample variance, by default)."""
        from symgrad.runtime.reductions import var

        return var(self, dim, unbiased, keepdim, correction)

    def std(
        self, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None
    ) -> Any:
        """Standard deviation, the square root of ``var`` (gradient 0 where it is 0)."""
        from symgrad.runtime.reductions import std

        return std(self, dim, unbiased, keepdim, correction)

    def prod(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """Product of all elements or along ``dim`` (exact gradient with zeros present)."""
        from symgrad.runtime.reductions import prod

        return prod(self, dim, keepdim)

    def norm(self, p: Any = "fro", dim: Any = None, keepdim: bool = False) -> Any:
        """Vector p-norm over ``dim`` (2 by default; gradient 0 at a zero norm)."""
        from symgrad.runtime.reductions import norm

        return norm(self, p, dim, keepdim)

    def softmax(self, dim: int, dtype: Any = None) -> Any:
        """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the (constant) maximum: never overflows."""
        x = self if dtype is None else self.to(dtype)
        e = (x - x.detach().amax(_axis(dim, x), True)).exp()
        return e / e.sum(dim=dim, keepdim=True)

    def log_softmax(self, dim: int, dtype: Any = None) -> Any:
        """``x - logsumexp(x)`` along ``dim``, stable in the same way as ``softmax``."""
        x = self if dtype is None else self.to(dtype)
        shifted = x - x.detach().amax(_axis(dim, x), True)
        return shifted - shifted.exp().sum(dim=dim, keepdim=True).log()

    def __floordiv__(self, other: Any) -> Any:
        from symgrad.runtime.pointwise import floor_divide

        return floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Any:
        from symgrad.runtime.pointwise import floor_divide

        return floor_divide(other, self)

    def __mod__(self, other: Any) -> Any:
        from symgrad.runtime.pointwise import remainder

        return remainder(self, other)

    def __rmod__(self, other: Any) -> Any:
        from symgrad.runtime.pointwise import remainder

        return remainder(other, self)


def _axis(dim: int, x: Any) -> int:
    from symgrad.runtime.shape_ops import one_axis

    return one_axis(dim, x.data.ndim)


def _is_dtype_name(name: str) -> bool:
    try:
        np.dtype(name)
    except TypeError:
        return False
    return True


def _sizes(sizes: tuple) -> tuple[int, ...]:
    return tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], (int, np.integer)) else sizes


def _expanded(shape: tuple, sizes: tuple, dtype: np.dtype) -> tuple[int, ...]:
    """The target shape of ``expand(sizes)`` (-1 kept), with PyTorch's errors."""
    if len(sizes) < len(shape):
        kind = {"f": "Float", "i": "Long", "b": "Bool"}.get(dtype.kind, "")
        raise RuntimeError(
            f"expand(torch.{kind}Tensor{{{list(shape)}}}, size={list(sizes)}): the number of sizes "
            f"provided ({len(sizes)}) must be greater or equal to the number of dimensions in the tensor "
            f"({len(shape)})"
        )
    lead = len(sizes) - len(shape)
    target = []
    for i, n in enumerate(sizes):
        if i < lead:
            if n < 0:
                raise RuntimeError(
                    f"The expanded size of the tensor ({n}) isn't allowed in a leading, non-existing "
                    f"dimension {i}"
                )
            target.append(int(n))
            continue
        have = shape[i - lead]
        if n != -1 and n != have and have != 1:
            raise RuntimeError(
                f"The expanded size of the tensor ({n}) must match the existing size ({have}) at "
                f"non-singleton dimension {i}.  Target sizes: {list(sizes)}.  Tensor sizes: {list(shape)}"
            )
        target.append(have if n == -1 else int(n))
    return tuple(target)
