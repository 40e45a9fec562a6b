"""In-place operations and the version counter that keeps them honest (PyTorch's rules).

Every array a tensor's data lives in has a version, bumped by each in-place operation on it (shared by the
tensors that view it: ``detach()``, ``from_numpy``). A node records the versions of the arrays it saved for
backward; backward refuses to use one that changed since, with PyTorch's error. In-place operations on a leaf
that requires grad are refused outside ``no_grad``; on other tensors that take part in the graph they are
recorded as the out-of-place operation, whose result the tensor then holds (its old value is kept for the
backward that needs it).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from symgrad.runtime.autograd import mode

#: id of an array's root buffer -> (weak reference to it, version); absent: version 0
_VERSIONS: dict[int, tuple[Any, int]] = {}


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def version(a: Any) -> int:
    """The version of the buffer ``a`` (an array, or a tensor's data) lives in."""
    if not _VERSIONS:
        return 0
    if type(a) is not np.ndarray:
        a = getattr(a, "data", None)
        if type(a) is not np.ndarray:
            return 0
    root = _root(a)
    entry = _VERSIONS.get(id(root))
    return entry[1] if entry is not None and entry[0]() is root else 0


def bump(a: np.ndarray) -> None:
    """Count one in-place modification of ``a``'s buffer."""
    root = _root(a)
    if len(_VERSIONS) > 4096:  # forget buffers that are gone
        for key in [k for k, (ref, _) in _VERSIONS.items() if ref() is None]:
            del _VERSIONS[key]
    _VERSIONS[id(root)] = (weakref.ref(root), version(root) + 1)


def snapshot(saved: Any) -> tuple | None:
    """The versions of the arrays in ``saved`` (a node's saved values) that were ever modified in place."""
    if not _VERSIONS or type(saved) is not tuple:
        return None
    return tuple((i, version(a)) for i, a in enumerate(saved) if version(a))


def check(node: Any) -> None:
    """Raise PyTorch's error when an array ``node`` saved was modified in place since it was saved."""
    if not _VERSIONS or type(node.saved) is not tuple:
        return
    recorded = dict(node.versions or ())
    for i, a in enumerate(node.saved):
        now = version(a)
        if now != recorded.get(i, 0):
            data = a if type(a) is np.ndarray else a.data
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: [{data.dtype} {list(data.shape)}], which is saved by {node.name}, is at "
                f"version {now}; expected version {recorded.get(i, 0)} instead."
            )


class InPlaceOps:
    """The in-place methods of ``Tensor``."""

    __slots__ = ()

    @property
    def _version(self) -> int:
        """How many in-place operations changed this tensor's buffer (``torch.Tensor._version``)."""
        return version(self.data)

    def add_(self, other: Any, *, alpha: Any = 1) -> Any:
        return self._inplace("add", other if alpha == 1 else other * alpha)

    def sub_(self, other: Any, *, alpha: Any = 1) -> Any:
        return self._inplace("sub", other if alpha == 1 else other * alpha)

    def mul_(self, other: Any) -> Any:
        return self._inplace("mul", other)

    def div_(self, other: Any) -> Any:
        return self._inplace("div", other)

    def __iadd__(self, other: Any) -> Any:
        return self._inplace("add", other)

    def __isub__(self, other: Any) -> Any:
        return self._inplace("sub", other)

    def __imul__(self, other: Any) -> Any:
        return self._inplace("mul", other)

    def __itruediv__(self, other: Any) -> Any:
        return self._inplace("div", other)

    def zero_(self) -> Any:
        return self._assign("zero_", lambda data: data.fill(0), lambda before: before * 0)

    def fill_(self, value: Any) -> Any:
        return self._assign(
            "fill_", lambda data: data.fill(_value(value)), lambda before: before * 0 + value, value
        )

    def copy_(self, src: Any) -> Any:
        return self._assign(
            "copy_",
            lambda data: np.copyto(data, np.broadcast_to(_value(src), data.shape)),
            lambda before: before * 0 + (src.to(before.dtype) if hasattr(src, "_rg") else src),
            src,
        )

    def clamp_(self, min: Any = None, max: Any = None) -> Any:  # noqa: A002  (PyTorch's names)
        return self._assign(
            "clamp_",
            lambda data: np.clip(data, _value(min), _value(max), out=data),
            lambda before: before.clamp(min, max),
            min,
            max,
        )

    def __setitem__(self, index: Any, value: Any) -> None:
        self._assign(
            "__setitem__",
            lambda data: data.__setitem__(_value(index), _value(value)),
            lambda before: _put(before, index, value),
            value,
        )

    # -- the rules -------------------------------------------------------------------------------------
    def _refuse_leaf(self) -> None:
        if mode.enabled and self._rg and self.grad_fn is None:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")

    def _before(self) -> Any:
        """A copy of this tensor's value, in its place on the graph: the input of the out-of-place op."""
        from symgrad.runtime.tensor import _result

        return _result(self.data.copy(), self.grad_fn if self._rg else None, self._oi)

    def _inplace(self, name: str, other: Any) -> Any:
        """``self (op)= other``: on the arrays outside the graph, else recorded as ``self (op) other``."""
        self._refuse_leaf()
        tracked = mode.enabled and (self._rg or getattr(other, "_rg", False))
        if not tracked:
            _ufunc(name, self.data, _value(other))
            bump(self.data)
            return self
        from symgrad.runtime.elementwise import call

        new = call(name, self._before(), other)
        if new.data.dtype != self.data.dtype:
            _cast_error(new.data.dtype, self.data.dtype)
        np.copyto(self.data, new.data)
        bump(self.data)
        self.grad_fn, self._oi, self._rg = new.grad_fn, new._oi, new._rg
        return self

    def _assign(self, name: str, write: Any, graph: Any, *sources: Any) -> Any:
        """An in-place write: ``write`` changes the array; where the graph is involved (this tensor or a
        source requires grad) ``graph(before)``, the same write out of place, records its derivative."""
        self._refuse_leaf()
        new = None
        if mode.enabled and (self._rg or any(getattr(s, "_rg", False) for s in sources)):
            from symgrad.runtime.tensor import _result

            before = (
                _result(self.data.copy(), self.grad_fn, self._oi) if self._rg else _result(self.data.copy())
            )
            new = graph(before)
        try:
            write(self.data)
        except TypeError as exc:  # NumPy's casting refusal, in PyTorch's words
            raise RuntimeError(f"{name}: {exc}") from None
        bump(self.data)
        if new is not None:
            self.grad_fn, self._oi, self._rg = new.grad_fn, new._oi, new._rg
        return self


def _put(before: Any, index: Any, value: Any) -> Any:
    """``before`` with ``value`` written at ``index``, out of place: the gradient reaches ``before`` outside
    ``index`` and ``value`` (summed to its shape) inside it."""
    from symgrad.runtime import shape_ops

    index = shape_ops._plain_index(index)
    keep = np.ones(before.data.shape, before.data.dtype)
    keep[index] = 0
    if not hasattr(value, "_rg"):
        value = np.asarray(value, before.data.dtype)
    elif value.data.dtype != before.data.dtype:
        value = value.to(before.data.dtype)
    selected = before.data[index].shape
    spread = shape_ops.broadcast_to(value, selected) if value.shape != selected else value
    return before * keep + shape_ops.index_add(spread, before.data.shape, before.data.dtype, index)


def _value(x: Any) -> Any:
    return x.data if hasattr(x, "_rg") else x


def _ufunc(name: str, data: np.ndarray, other: Any) -> None:
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}[name]
    try:
        fn(data, other, out=data, casting="same_kind")
    except TypeError:  # numpy's UFuncTypeError
        _cast_error(np.result_type(data, other), data.dtype)


def _cast_error(result: np.dtype, into: np.dtype) -> None:
    raise RuntimeError(f"result type {result} can't be cast to the desired output type {into}")
