"""The tape: ``Node``, grad mode, and ``backward`` / ``grad`` (their seeds and checks; the engine that runs
them is ``engine``).

A node records one operation: the input tensors it differentiates with respect to, what its backward needs
(``saved``, freed after a backward without ``retain_graph``) and static information (``ctx``, never freed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

FREED = object()  # the value of ``Node.saved`` once a backward without retain_graph has released it

_SECOND_BACKWARD = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they have "
    "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
    "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
    "if you need to access saved tensors after calling backward."
)


class _GradMode(threading.local):
    enabled = True


mode = _GradMode()


def is_grad_enabled() -> bool:
    """Whether operations are recorded on the tape (per thread, like ``torch.is_grad_enabled``)."""
    return mode.enabled


class _SetGradMode:
    """Context manager and decorator that sets grad mode and restores the previous one on exit."""

    _value = True

    def __enter__(self) -> None:
        self._prev = mode.enabled
        mode.enabled = self._value

    def __exit__(self, *exc: Any) -> None:
        mode.enabled = self._prev

    def __call__(self, fn: Callable) -> Callable:
        value = self._value

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prev = mode.enabled
            mode.enabled = value
            try:
                return fn(*args, **kwargs)
            finally:
                mode.enabled = prev

        wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = fn.__name__, fn.__doc__, fn
        return wrapper


class no_grad(_SetGradMode):  # noqa: N801  (torch's spelling)
    """Operations inside do not record; their outputs do not require grad."""

    _value = False


class enable_grad(_SetGradMode):  # noqa: N801
    """Turn recording back on inside a ``no_grad`` block."""

    _value = True


class Node:
    """One recorded operation; ``backward(node, grads, graph)`` returns one gradient (or None) per input."""

    __slots__ = ("backward", "inputs", "saved", "ctx", "name", "outs", "hooks", "versions")

    def __init__(
        self, backward: Callable, inputs: tuple, saved: Any, ctx: Any, name: str, outs: tuple
    ) -> None:
        self.backward = backward
        self.inputs = inputs  # Tensor per differentiable input, None for constants
        self.saved = saved  # tuple (freed to FREED), an object with _release(), or None
        self.ctx = ctx
        self.name = name  # 'MulBackward'
        self.outs = outs  # (shape, dtype) per output
        self.hooks = None  # [(output index, fn, is_retain_grad)]
        # versions of saved arrays modified in place before (``inplace``); checked before backward uses them
        self.versions = _inplace.snapshot(saved) if _inplace._VERSIONS else None

    def __repr__(self) -> str:
        return f"<{self.name} object at {id(self):#x}>"


class _Handle:
    """What ``register_hook`` returns; ``remove()`` unregisters the hook."""

    __slots__ = ("_list", "_item")

    def __init__(self, hooks: list, item: Any) -> None:
        self._list, self._item = hooks, item

    def remove(self) -> None:
        if self._item in self._list:
            self._list.remove(self._item)


def _seeds(outputs: Sequence, grad_outputs: Sequence | None, graph: bool) -> list:
    if grad_outputs is None:
        return [_seed(i, out, None, graph) for i, out in enumerate(outputs)]
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grad_outputs)} gradients")
    return [_seed(i, out, g, graph) for i, (out, g) in enumerate(zip(outputs, grad_outputs))]


def _seed(i: int, out: Any, g: Any, graph: bool) -> Any:
    """The gradient that starts backward at output ``i``: ``g`` checked (shape) and cast to its dtype, or
    ones for a one-element output (a tensor under ``graph``)."""
    data = out.data
    if g is None:
        if data.size != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        one = np.empty(data.shape, data.dtype)
        one.fill(1)
        return _t._result(one) if graph else one
    is_tensor = isinstance(g, _t.Tensor)
    arr = g.data if is_tensor else np.asarray(g, dtype=data.dtype)
    if arr.shape != data.shape:
        raise RuntimeError(
            f"Mismatch in shape: grad_output[{i}] has a shape of {arr.shape} and "
            f"output[{i}] has a shape of {data.shape}."
        )
    if arr.dtype is not data.dtype and arr.dtype != data.dtype:
        arr = arr.astype(data.dtype)
    if not graph:
        return arr
    return g if is_tensor and arr is g.data else _t._result(arr)


def _as_list(x: Any) -> list:
    return [x] if isinstance(x, _t.Tensor) else list(x)


def backward_from(t: Any, gradient: Any, retain_graph: bool | None, create_graph: bool) -> None:
    """``Tensor.backward``: ``backward`` from one tensor."""
    if not t._rg:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    seeds = [_seed(0, t, gradient, create_graph)]
    retain = create_graph if retain_graph is None else retain_graph
    _engine.run_backward((t,), seeds, retain, create_graph)


def backward(
    tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None, create_graph: bool = False
) -> None:
    """Accumulate d(tensors)/d(leaf) into every leaf's ``.grad`` (``torch.autograd.backward``)."""
    outputs = _as_list(tensors)
    grads = None if grad_tensors is None else _as_list(grad_tensors)
    for i, out in enumerate(outputs):
        if not out._rg:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
    retain = create_graph if retain_graph is None else retain_graph
    _engine.run_backward(outputs, _seeds(outputs, grads, create_graph), retain, create_graph)


def grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple:
    """d(outputs)/d(inputs) as a tuple of Tensors, without touching ``.grad`` (``torch.autograd.grad``)."""
    outs, ins = _as_list(outputs), _as_list(inputs)
    grads = None if grad_outputs is None else _as_list(grad_outputs)
    for i, out in enumerate(outs):
        if not out._rg:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
    for t in ins:
        if not t._rg:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    retain = create_graph if retain_graph is None else retain_graph
    result = _engine.run_backward(outs, _seeds(outs, grads, create_graph), retain, create_graph, ins)
    if not allow_unused and any(g is None for g in result):
        raise RuntimeError(
            "One of the differentiated Tensors appears to not have been used in the graph. "
            "Set allow_unused=True if this is the desired behavior."
        )
    return tuple(result)


from symgrad.runtime import engine as _engine  # noqa: E402  (these modules import this one's grad mode)
from symgrad.runtime import inplace as _inplace  # noqa: E402
from symgrad.runtime import tensor as _t  # noqa: E402  (tensor.py imports this module first)
