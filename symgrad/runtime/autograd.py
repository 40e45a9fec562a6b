"""The tape: ``Node``, grad mode, and the backward engine (iterative, deterministic toposort).

A node records one operation: the input tensors it differentiates with respect to, what its backward needs
(``saved``, freed after a backward without ``retain_graph``) and static information (``ctx``, never freed).
During backward, gradients travel as NumPy arrays; with ``create_graph=True`` they travel as Tensors and every
backward rule runs with grad mode on, so its own operations are recorded for a second differentiation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from itertools import zip_longest
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


def _consumers(roots: list) -> dict:
    """How many nodes reachable from ``roots`` consume each such node's outputs (for a Kahn toposort)."""
    consumers: dict = {}
    stack = []
    for r in roots:
        if r not in consumers:
            consumers[r] = 0
            stack.append(r)
    while stack:
        for inp in stack.pop().inputs:
            if inp is not None:
                parent = inp.grad_fn
                if parent is None:
                    continue
                if parent in consumers:
                    consumers[parent] += 1
                else:
                    consumers[parent] = 1
                    stack.append(parent)
    return consumers


def _wrap(g: Any) -> Any:
    return g if isinstance(g, _t.Tensor) else _t._result(g)


def _apply_hook(fn: Callable, g: Any, graph: bool) -> Any:
    """``fn``'s replacement for gradient ``g`` (``g`` itself when it returns None), with PyTorch's errors for
    a result that is not a tensor or changes the gradient's shape or dtype."""
    t = _wrap(g)
    result = fn(t)
    if result is None:
        return g
    if not isinstance(result, _t.Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
    name = getattr(fn, "__name__", repr(fn))
    if result.data.shape != t.data.shape:
        raise RuntimeError(f"hook '{name}' has changed the size of value")
    if result.data.dtype != t.data.dtype:
        raise RuntimeError(
            f"hook '{name}' has changed the type of value (was {t.data.dtype} got {result.data.dtype})"
        )
    return result if graph else result.data


def _run_hooks(hooks: list, index: int, g: Any, graph: bool) -> Any:
    """Apply tensor hooks (then retain_grad, always last) to the gradient of output ``index``."""
    for want_retain in (False, True):
        for i, fn, is_retain in hooks:
            if i == index and is_retain is want_retain:
                g = _apply_hook(fn, g, graph)
    return g


def run_backward(
    roots: Sequence, seeds: Sequence, retain_graph: bool, create_graph: bool, capture: Sequence | None = None
) -> list | None:
    """Propagate ``seeds`` from ``roots``; accumulate into leaves' ``.grad``, or return the gradients of
    ``capture`` (in order, None where unreached) without touching ``.grad``."""
    buffers: dict = {}  # node -> gradient per output
    leaves: dict = {}  # id -> [tensor, gradient]
    captured: dict | None = None if capture is None else {}
    nodes = []
    for r, s in zip(roots, seeds):
        _deliver(r, s, buffers, leaves)
        if r.grad_fn is not None:
            nodes.append(r.grad_fn)
    prev = mode.enabled
    mode.enabled = create_graph
    try:
        _propagate(nodes, buffers, leaves, captured, retain_graph)
        if capture is not None:
            return [_captured(t, leaves, captured) for t in capture]
        given = {id(s) for s in seeds}  # arrays someone else holds are copied before being kept
        for leaf, g in leaves.values():
            _accumulate(leaf, g, create_graph, given)
        return None
    finally:
        mode.enabled = prev


def _propagate(roots: list, buffers: dict, leaves: dict, captured: dict | None, retain_graph: bool) -> None:
    """Run the backward of every node reachable from ``roots`` after all nodes that consume it (Kahn's
    order, deterministic), passing gradients to their producers' ``buffers`` or to ``leaves``."""
    graph = mode.enabled
    consumers = _consumers(roots)
    # (one root: no node reachable from it consumes it)
    ready = roots[:] if len(roots) == 1 else [r for r in reversed(consumers) if consumers[r] == 0]
    while ready:
        node = ready.pop()
        grads = buffers.pop(node, None)
        in_grads = () if grads is None else _node_backward(node, grads, captured, retain_graph, graph)
        for inp, g in zip_longest(node.inputs, in_grads):
            if inp is None:
                continue
            parent = inp.grad_fn
            if parent is None:
                if g is not None:
                    _deliver(inp, g, buffers, leaves)
                continue
            if g is not None:
                buf = buffers.get(parent)
                if buf is None:
                    buf = buffers[parent] = [None] * len(parent.outs)
                i = inp._oi
                buf[i] = g if buf[i] is None else buf[i] + g
            left = consumers.get(parent, 0) - 1  # (absent: an in-place op in a hook moved inp)
            consumers[parent] = left
            if left == 0:
                ready.append(parent)


def _node_backward(node: Node, grads: list, captured: dict | None, retain_graph: bool, graph: bool) -> Any:
    """``node``'s input gradients for the gradients ``grads`` of its outputs (hooks applied first); frees
    what it saved unless ``retain_graph``."""
    # an output that got no gradient gets zeros, unless its backward takes None (``sg.Function``'s
    # ``set_materialize_grads(False)``: the backward itself decides, per call)
    if len(grads) > 1 and any(g is None for g in grads) and not hasattr(node.backward, "takes_none"):
        grads = [_zeros(meta, graph) if g is None else g for g, meta in zip(grads, node.outs)]
    if node.hooks:
        grads = [g if g is None else _run_hooks(node.hooks, i, g, graph) for i, g in enumerate(grads)]
    if captured is not None:
        captured[node] = grads
    saved = node.saved
    if saved is FREED:
        raise RuntimeError(_SECOND_BACKWARD)
    if _inplace._VERSIONS:
        _inplace.check(node)
    in_grads = node.backward(node, grads, graph)
    if not retain_graph and saved is not None:
        if type(saved) is tuple:
            node.saved = FREED
        else:
            saved._release()
    return in_grads


def _deliver(t: Any, g: Any, buffers: dict, leaves: dict) -> None:
    node = t.grad_fn
    if node is None:
        entry = leaves.get(id(t))
        if entry is None:
            leaves[id(t)] = [t, g]
        else:
            entry[1] = entry[1] + g
        return
    buf = buffers.get(node)
    if buf is None:
        buf = buffers[node] = [None] * len(node.outs)
    i = t._oi
    buf[i] = g if buf[i] is None else buf[i] + g


def _zeros(meta: tuple, graph: bool) -> Any:
    z = np.zeros(meta[0], meta[1])
    return _wrap(z) if graph else z


def _captured(t: Any, leaves: dict, captured: dict) -> Any:
    if t.grad_fn is None:
        entry = leaves.get(id(t))
        g = None if entry is None else entry[1]
    else:
        grads = captured.get(t.grad_fn)
        g = None if grads is None else grads[t._oi]
    return None if g is None else _wrap(_own(g))


def _own(g: Any) -> Any:
    """An array the gradient's receiver may keep: views of other buffers are copied."""
    if isinstance(g, np.ndarray):
        flags = g.flags
        return g if flags.owndata and flags.writeable else g.copy()
    return g


#: Serializes gradient accumulation, as PyTorch's AccumulateGrad does: NumPy releases the GIL inside
#: ``acc += g``, so threads running backward into one leaf would lose updates.
_ACCUMULATING = threading.Lock()


def _accumulate(leaf: Any, g: Any, graph: bool, given: set) -> None:
    if leaf._hooks:
        for fn in list(leaf._hooks):
            g = _apply_hook(fn, g, graph)
    if not graph:
        if type(g) is not np.ndarray:
            g = np.asarray(g)
        dtype = leaf.data.dtype
        if g.dtype is not dtype and g.dtype != dtype:
            g = g.astype(dtype)
    with _ACCUMULATING:
        _add_to_grad(leaf, g, graph, given)


def _add_to_grad(leaf: Any, g: Any, graph: bool, given: set) -> None:
    if leaf.grad is None:
        if not graph:
            g = g.copy() if id(g) in given else _own(g)
            given.add(id(g))
        leaf.grad = _wrap(g)
    elif graph:
        leaf.grad = leaf.grad + g
    else:
        acc = leaf.grad.data
        if type(acc) is np.ndarray and acc.shape == g.shape and acc.flags.writeable:  # (g: an array here)
            acc += g  # in place, like PyTorch's AccumulateGrad outside create_graph
        else:
            leaf.grad = _wrap(acc + g)


def _seeds(outputs: Sequence, grad_outputs: Sequence | None, graph: bool) -> list:
    seeds = []
    for i, out in enumerate(outputs):
        g = None if grad_outputs is None else grad_outputs[i]
        if g is None:
            if out.data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            seeds.append(_wrap(np.ones_like(out.data)) if graph else np.ones_like(out.data))
            continue
        is_tensor = isinstance(g, _t.Tensor)
        arr = g.data if is_tensor else np.asarray(g, dtype=out.data.dtype)
        if arr.shape != out.data.shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of {arr.shape} and "
                f"output[{i}] has a shape of {out.data.shape}."
            )
        if arr.dtype != out.data.dtype:
            arr = arr.astype(out.data.dtype)
        seeds.append((g if is_tensor and arr is g.data else _wrap(arr)) if graph else arr)
    return seeds


def _as_list(x: Any) -> list:
    return [x] if isinstance(x, _t.Tensor) else list(x)


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
    run_backward(outputs, _seeds(outputs, grads, create_graph), retain, create_graph)


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
    result = run_backward(outs, _seeds(outs, grads, create_graph), retain, create_graph, capture=ins)
    if not allow_unused and any(g is None for g in result):
        raise RuntimeError(
            "One of the differentiated Tensors appears to not have been used in the graph. "
            "Set allow_unused=True if this is the desired behavior."
        )
    return tuple(result)


from symgrad.runtime import inplace as _inplace  # noqa: E402  (it imports this module's grad mode)
from symgrad.runtime import tensor as _t  # noqa: E402  (tensor.py imports this module first)
