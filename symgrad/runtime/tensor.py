"""``Tensor``: a NumPy array plus its place on the tape.

Elementwise arithmetic and math methods dispatch to the compiled primitives (``elementwise``); linear
algebra, reductions, reshaping and indexing go to ``shape_ops``. Python numbers are weak scalars: a float32
tensor times 2.0 stays float32.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from symgrad.runtime import autograd
from symgrad.runtime.autograd import _Handle
from symgrad.runtime.inplace import InPlaceOps
from symgrad.runtime.tensor_methods import TensorMethods

_new = object.__new__


def _as_array(data: Any, dtype: Any = None, copy: bool = False) -> np.ndarray:
    """NumPy arrays keep their dtype; Python floats become float32 (torch's default dtype)."""
    if isinstance(data, Tensor):
        data = data.data
    if dtype is not None:
        return np.array(data, dtype=dtype, copy=copy or None)
    if isinstance(data, (np.ndarray, np.generic)):
        return np.array(data, copy=copy or None)
    arr = np.array(data)
    return arr.astype(np.float32) if arr.dtype == np.float64 else arr


def _check_requires_grad(arr: np.ndarray) -> None:
    if arr.dtype.kind not in "fc":
        raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")


def _result(data: Any, node: Any = None, index: int = 0) -> Tensor:
    """A tensor produced by an operation (the hot path: no checks, no conversions beyond ndarray)."""
    t = _new(Tensor)
    t.data = data if type(data) is np.ndarray else np.asarray(data)
    t.grad = None
    t.grad_fn = node
    t._rg = node is not None
    t._oi = index
    t._hooks = None
    return t


class Tensor(TensorMethods, InPlaceOps):
    """An n-dimensional array that records the operations applied to it when it requires grad; in-place
    operations (``add_``, ``+=``, ``zero_``, ``t[i] = v``, ...) follow PyTorch's rules (``inplace``); more
    of PyTorch's methods (``to``, ``unsqueeze``, ``clamp``, ``softmax``, ...) are in ``tensor_methods``."""

    __slots__ = ("data", "grad", "grad_fn", "_rg", "_oi", "_hooks", "__weakref__")
    __array_ufunc__ = None  # ndarray (op) Tensor defers to Tensor's reflected operator

    def __init__(self, data: Any, requires_grad: bool = False) -> None:
        self.data = _as_array(data)
        self.grad = None
        self.grad_fn = None
        self._oi = 0
        self._hooks = None
        self._rg = False
        if requires_grad:
            self.requires_grad = True

    # -- tape state ------------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._rg

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self.grad_fn is not None:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        if value:
            _check_requires_grad(self.data)
        self._rg = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def detach(self) -> Tensor:
        """The same data (shared memory), off the tape."""
        return _result(self.data)

    def backward(
        self, gradient: Any = None, retain_graph: bool | None = None, create_graph: bool = False
    ) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of every leaf it depends on."""
        autograd.backward_from(self, gradient, retain_graph, create_graph)

    def retain_grad(self) -> None:
        """Keep ``.grad`` on this non-leaf tensor too (leaves always keep it)."""
        if self.grad_fn is None:
            if not self._rg:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return
        ref = weakref.ref(self)

        def retain(g: Tensor) -> None:
            t = ref()
            if t is not None:  # a copy, as PyTorch's (recorded under create_graph=True): g may be the seed
                t.grad = g.clone() if t.grad is None else t.grad + g

        self._node_hooks().append((self._oi, retain, True))

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> _Handle:
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor replaces it."""
        if not self._rg:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is None:
            if self._hooks is None:
                self._hooks = []
            self._hooks.append(hook)
            return _Handle(self._hooks, hook)
        hooks = self._node_hooks()
        item = (self._oi, hook, False)
        hooks.append(item)
        return _Handle(hooks, item)

    def _node_hooks(self) -> list:
        node = self.grad_fn
        if node.hooks is None:
            node.hooks = []
        return node.hooks

    # -- array facts -------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def numel(self) -> int:
        return self.data.size

    def size(self, dim: int | None = None) -> Any:
        return self.data.shape if dim is None else self.data.shape[dim]

    def __len__(self) -> int:
        return len(self.data)

    def numpy(self) -> np.ndarray:
        """The underlying array (shared memory)."""
        if self._rg:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
            )
        return self.data

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def item(self) -> float | int | bool:
        if self.data.size != 1:
            raise RuntimeError(f"a Tensor with {self.data.size} elements cannot be converted to Scalar")
        return self.data.item()

    def tolist(self) -> Any:
        return self.data.tolist()

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.data)

    def __repr__(self) -> str:
        body = np.array2string(self.data, separator=", ", prefix="tensor(")
        extra = "" if self.data.dtype in (np.float32, np.int64, np.bool_) else f", dtype={self.data.dtype}"
        if self.grad_fn is not None:
            extra += f", grad_fn=<{self.grad_fn.name}>"
        elif self._rg:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    __hash__ = object.__hash__

    # -- arithmetic: compiled elementwise primitives -------------------------------------------------------
    def __add__(self, other: Any) -> Tensor:
        return _binary("add", self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _binary("add", other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _binary("sub", self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _binary("sub", other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _binary("mul", self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _binary("mul", other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _binary("div", self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _binary("div", other, self)

    def __pow__(self, other: Any) -> Tensor:
        return _binary("pow", self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _binary("pow", other, self)

    def __neg__(self) -> Tensor:
        return _unary("neg", self)

    def __abs__(self) -> Tensor:
        return _unary("abs", self)

    def __matmul__(self, other: Any) -> Tensor:
        return _so.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return _so.matmul(other, self)

    def pow(self, exponent: Any) -> Tensor:
        return _binary("pow", self, exponent)

    def maximum(self, other: Any) -> Tensor:
        return _binary("maximum", self, other)

    def minimum(self, other: Any) -> Tensor:
        return _binary("minimum", self, other)

    # comparisons: boolean results, never on the tape
    def __lt__(self, other: Any) -> Tensor:
        return _result(self.data < _raw(other))

    def __le__(self, other: Any) -> Tensor:
        return _result(self.data <= _raw(other))

    def __gt__(self, other: Any) -> Tensor:
        return _result(self.data > _raw(other))

    def __ge__(self, other: Any) -> Tensor:
        return _result(self.data >= _raw(other))

    def __eq__(self, other: Any) -> Tensor:
        return _result(self.data == _raw(other))  # type: ignore[override]

    def __ne__(self, other: Any) -> Tensor:
        return _result(self.data != _raw(other))  # type: ignore[override]

    # -- reductions, linear algebra, shapes -------------------------------------------------------------
    def sum(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: bool = False
    ) -> Tensor:
        return _so.reduce_sum(self, axis if dim is None else dim, keepdims or keepdim)

    def mean(
        self, axis: Any = None, keepdims: bool = False, *, dim: Any = None, keepdim: bool = False
    ) -> Tensor:
        return _so.reduce_mean(self, axis if dim is None else dim, keepdims or keepdim)

    def max(self, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: bool = False) -> Any:
        """As in PyTorch: ``max()`` the largest value (ties share the gradient equally); ``max(dim)`` the
        ``(values, indices)`` along ``dim`` (the gradient goes to the index returned); ``max(other)`` the
        elementwise maximum. NumPy's ``max(axis=..., keepdims=...)`` gives the values only."""
        return self._extreme(dim, keepdim, axis, keepdims, np.max, np.argmax, "maximum")

    def min(self, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: bool = False) -> Any:
        """As ``max``, for the smallest value."""
        return self._extreme(dim, keepdim, axis, keepdims, np.min, np.argmin, "minimum")

    def _extreme(self, dim, keepdim, axis, keepdims, np_fn, np_arg, elementwise) -> Any:
        if isinstance(dim, Tensor):
            return getattr(self, elementwise)(dim)
        if dim is not None:
            return _so.extreme_along(self, _so.one_axis(dim, self.data.ndim), keepdim, np_arg)
        return _so.reduce_extreme(self, axis, keepdims, np_fn)

    def amax(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        """Largest values over ``dim`` (all by default); ties share the gradient equally."""
        return _so.reduce_extreme(self, dim, keepdim, np.max)

    def amin(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        """Smallest values over ``dim`` (all by default); ties share the gradient equally."""
        return _so.reduce_extreme(self, dim, keepdim, np.min)

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the (first) largest value, over the flattened tensor or along ``dim`` (int64)."""
        return _so.argextreme(self.data, dim, keepdim, np.argmax)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the (first) smallest value, as ``argmax``."""
        return _so.argextreme(self.data, dim, keepdim, np.argmin)

    def reshape(self, *shape: Any) -> Tensor:
        return _so.reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)

    view = reshape

    def permute(self, *dims: Any) -> Tensor:
        return _so.permute(self, tuple(dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims))

    @property
    def T(self) -> Tensor:  # noqa: N802
        return _so.permute(self, tuple(range(self.data.ndim - 1, -1, -1)))

    def __getitem__(self, index: Any) -> Tensor:
        return _so.getitem(self, index)


def _raw(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


_UNARY = (
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sigmoid",
    "relu",
    "softplus",
    "abs",
    "neg",
    "square",
    "reciprocal",
    "sign",
)


def _unary_method(name: str) -> Callable[[Tensor], Tensor]:
    def method(self: Tensor) -> Tensor:
        return _unary(name, self)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Elementwise {name}, a compiled symgrad primitive (one tape node)."
    return method


for _name in _UNARY:
    setattr(Tensor, _name, _unary_method(_name))


def tensor(data: Any, requires_grad: bool = False, dtype: Any = None) -> Tensor:
    """A new leaf tensor holding a copy of ``data``; Python floats default to float32."""
    t = Tensor(_as_array(data, dtype, copy=True))
    if requires_grad:
        t.requires_grad = True
    return t


def from_numpy(array: np.ndarray) -> Tensor:
    """A leaf tensor sharing ``array``'s memory (``torch.from_numpy``): a write to either shows in the
    other."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    return _result(array)


def as_tensor(data: Any, dtype: Any = None) -> Tensor:
    """``data`` as a tensor, sharing memory when it already is an array (or tensor) of ``dtype``
    (``torch.as_tensor``); otherwise a converted copy, with ``tensor``'s dtype rules."""
    if isinstance(data, Tensor):
        return data if dtype is None or data.dtype == dtype else _result(data.data.astype(dtype))
    return _result(_as_array(data, dtype))


from symgrad.runtime import shape_ops as _so  # noqa: E402  (these modules build Tensors)
from symgrad.runtime.elementwise import binary as _binary  # noqa: E402
from symgrad.runtime.elementwise import unary as _unary  # noqa: E402
