"""``apply_compiled``: a compiled ``@sg.function`` call on tensors becomes one tape node.

Two ways to record, with the same kernels:
- per-element scalar functions with one output and one or two arguments (``fn.jacobian_arity``; the tape's
  own primitives), called on float arrays of one dtype (and Python numbers), at most ``JACOBIAN_MAX``
  elements: the forward runs the fused ``value_and_jacobian`` kernel and the node saves J; backward is
  ``grad * J``, with no second kernel call (on small tensors the call costs more than the arithmetic), as in
  the PyTorch interop. Arrays whose shapes differ are expanded to their broadcast shape first (small copies)
  and their gradients summed back to their shapes.
- everything else: the forward kernel, and a node that saves the inputs; backward runs the vjp kernel and
  sums back to its input's shape only the gradients that a tracked input needs (None for a constant, and for
  a ``nondiff`` argument: a tensor passed there gets no gradient, as for a PyTorch Function whose backward
  returns None for it).
Under ``create_graph=True`` the gradients are recorded for a second differentiation through the hvp and jvp
kernels (``compiled_backward``; the Jacobian-saving node saves its inputs too, for them).
"""

from __future__ import annotations

import functools
from math import prod
from typing import Any

import numpy as np

from symgrad.abi import FLOAT_DTYPES
from symgrad.compiled import register_tensor_hook
from symgrad.compiled.arguments import sum_to_shape
from symgrad.errors import ArgumentError
from symgrad.runtime.autograd import Node, mode
from symgrad.runtime.compiled_backward import record_vjp
from symgrad.runtime.tensor import Tensor, _result

#: Largest input (elements) for which a node saves the local Jacobian instead of the inputs (see the
#: docstring).
JACOBIAN_MAX = 1 << 16

_F64, _F32 = FLOAT_DTYPES


def apply_compiled(fn: Any, args: tuple) -> Tensor | tuple[Tensor, ...]:
    """Run compiled ``fn`` on tensors and numbers; record one node when grad mode is on and an input needs
    it."""
    result = jacobian_node(fn, args)
    return general_node(fn, args) if result is None else result


def jacobian_node(fn: Any, args: tuple) -> Tensor | None:
    """The tape's hot path: the Jacobian-saving node of ``fn(*args)`` (the kernel straight after the
    checks) when grad mode is on, a tensor among ``args`` requires grad, and they fit (see the module
    docstring); else None."""
    if len(args) == 2:
        return binary_jacobian_node(fn, args[0], args[1])
    if len(args) == 1:
        return unary_jacobian_node(fn, args[0])
    return None  # (a wrong argument count: ``forward``'s error)


def general_node(fn: Any, args: tuple) -> Tensor | tuple[Tensor, ...]:
    """``fn``'s forward on any arguments it takes (broadcasting, promotion); when recording, a node that
    saves the inputs for the vjp kernel."""
    arrays = []
    inputs = []
    need = False
    for a in args:
        if isinstance(a, Tensor):
            inputs.append(a if a._rg else None)
            need = need or a._rg
            arrays.append(a.data)
        else:
            inputs.append(None)
            arrays.append(a)
    try:
        outs = _forward(fn, arrays)
    except (ArgumentError, ValueError):
        _check_broadcast(arrays)
        raise
    if not (need and mode.enabled):
        if fn.n_outputs == 1:
            return _result(outs[0])
        return tuple([_result(o) for o in outs])
    metas = tuple([(o.shape, o.dtype) for o in outs])
    node = Node(_vjp_backward, tuple(inputs), tuple(arrays), fn, fn.backward_name, metas)
    if fn.n_outputs == 1:
        return _result(outs[0], node, 0)
    return tuple([_result(o, node, i) for i, o in enumerate(outs)])


def _forward(fn: Any, arrays: list) -> tuple:
    """``fn.forward(*arrays)``; straight to the kernel (``run_same_shape``) for float arrays of one dtype and
    shape and numbers, and for two small float arrays of one dtype that broadcast (expanded first)."""
    outs = fn.run_same_shape("forward", arrays)
    if outs is not None:
        return outs
    if len(arrays) == 2:
        a, b = arrays
        if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype is b.dtype:
            shape = _broadcast_shape(a.shape, b.shape)
            if shape is not None and prod(shape) <= JACOBIAN_MAX:
                outs = fn.run_same_shape("forward", (_expanded(a, shape), _expanded(b, shape)))
                if outs is not None:
                    return outs
    return fn.forward(*arrays)


def unary_jacobian_node(fn: Any, x: Any) -> Tensor | None:
    """The Jacobian-saving node (see the module docstring) of ``fn(x)`` for a float tensor ``x`` of at most
    ``JACOBIAN_MAX`` elements that requires grad, when grad mode is on; else None."""
    if not isinstance(x, Tensor) or not x._rg or not mode.enabled or fn.jacobian_arity != 1:
        return None
    a = x.data
    if type(a) is not np.ndarray:
        return None
    dtype = a.dtype
    if (dtype is not _F64 and dtype is not _F32) or a.size > JACOBIAN_MAX:
        return None
    out, jacobian = fn.kernel("value_and_jacobian", dtype)((a,), a.shape)  # J: batch + (1, 1)
    saved = (jacobian, a)  # J (``_columns``), then the input, for a second differentiation
    return _result(out, Node(_jacobian_backward, (x,), saved, fn, fn.backward_name, ((out.shape, dtype),)))


def binary_jacobian_node(fn: Any, x: Any, y: Any) -> Tensor | None:
    """The Jacobian-saving node of ``fn(x, y)`` in grad mode when a tensor among them requires grad and they
    are float arrays of one dtype (``_broadcast_node`` where their shapes differ), or an array and a Python
    number; else None."""
    if isinstance(x, Tensor):
        a, ta = x.data, (x if x._rg else None)
    else:
        a, ta = x, None
    if isinstance(y, Tensor):
        b, tb = y.data, (y if y._rg else None)
    else:
        b, tb = y, None
    if ta is None and tb is None or not mode.enabled or fn.jacobian_arity != 2:
        return None
    if type(a) is np.ndarray:
        first = a
        if type(b) is np.ndarray:
            if b.dtype is not a.dtype:
                return None
            if b.shape != a.shape:
                return _broadcast_node(fn, a, b, ta, tb)
        elif type(b) is not float and type(b) is not int:
            return None
    elif (type(a) is float or type(a) is int) and type(b) is np.ndarray:
        first = b
    else:
        return None
    dtype = first.dtype
    if (dtype is not _F64 and dtype is not _F32) or first.size > JACOBIAN_MAX:
        return None
    out, jacobian = fn.kernel("value_and_jacobian", dtype)((a, b), first.shape)  # J: batch + (1, 2)
    return _binary_result(fn, out, jacobian, ta, tb, a, b, _jacobian_backward)


def _broadcast_node(fn: Any, a: np.ndarray, b: np.ndarray, ta: Any, tb: Any) -> Tensor | None:
    """The Jacobian-saving node of ``fn`` on arrays of one dtype whose shapes differ but broadcast, to at
    most ``JACOBIAN_MAX`` elements (else None): they are expanded (small copies) before the kernel, and
    their gradients summed back in backward."""
    shape = _broadcast_shape(a.shape, b.shape)
    dtype = a.dtype
    if shape is None or (dtype is not _F64 and dtype is not _F32) or prod(shape) > JACOBIAN_MAX:
        return None
    args = (_expanded(a, shape), _expanded(b, shape))
    out, jacobian = fn.kernel("value_and_jacobian", dtype)(args, shape)
    return _binary_result(fn, out, jacobian, ta, tb, a, b, _broadcast_jacobian_backward)


def _binary_result(
    fn: Any, out: Any, jacobian: Any, ta: Any, tb: Any, a: Any, b: Any, backward: Any
) -> Tensor:
    saved = (
        None if ta is None else jacobian,
        None if tb is None else jacobian,
        a,
        b,
    )  # J per input that needs it (``_columns``), then the inputs as given, for a second differentiation
    # (``compiled_backward``)
    return _result(out, Node(backward, (ta, tb), saved, fn, fn.backward_name, ((out.shape, out.dtype),)))


@functools.lru_cache(maxsize=1024)
def _broadcast_shape(s: tuple, t: tuple) -> tuple | None:
    """The broadcast of two shapes (NumPy's rules), None where they do not broadcast (cached: a training
    loop's ops see the same few pairs of shapes on every step)."""
    if len(s) < len(t):
        s, t = t, s
    lead = len(s) - len(t)
    result = list(s)
    for i, n in enumerate(t, lead):
        m = s[i]
        if n != m:
            if m == 1:
                result[i] = n
            elif n != 1:
                return None
    return tuple(result)


def _expanded(a: Any, shape: tuple) -> Any:
    """An array ``a`` broadcast to ``shape`` as a new C-contiguous array (numbers and arrays of that shape
    as they are; a one-element array as its value, a Python number, exact in float32 too): every backend
    then sees same-shape arguments or numbers, which it fills out."""
    if type(a) is not np.ndarray or a.shape == shape:
        return a
    if a.size == 1:
        return a.item()
    full = np.empty(shape, a.dtype)
    full[...] = a
    return full


def _jacobian_backward(node: Node, grads: list, graph: bool) -> tuple:
    saved = node.saved  # (``_columns``)
    if graph:
        return _recorded(node, grads)
    g = grads[0]
    if len(saved) == 2:  # its one input requires grad (else there would be no node)
        return (g * saved[0][..., 0, 0],)
    ja, jb = saved[0], saved[1]
    return None if ja is None else g * ja[..., 0, 0], None if jb is None else g * jb[..., 0, 1]


def _broadcast_jacobian_backward(node: Node, grads: list, graph: bool) -> tuple:
    """``_jacobian_backward`` for broadcast inputs: each gradient summed back to its input's shape."""
    return _recorded(node, grads) if graph else _products(node, grads[0])


def _columns(node: Node) -> tuple:
    """(columns, inputs) of a Jacobian-saving node, whose saved tuple is (J or None per input, inputs...)
    with J the kernel's (batch + (1, n)) and input k's column ``J[..., 0, k]``: the gradient of input k is
    ``g * columns[k]`` summed to ``inputs[k]``'s shape (None: no gradient), with ``g`` the output's."""
    saved = node.saved
    n = len(saved) // 2
    return tuple(None if j is None else j[..., 0, k] for k, j in enumerate(saved[:n])), saved[n:]


#: The saved tuple is ``_columns``'s layout: the engine's lone path accumulates the products itself
#: (``accumulate.accumulate_products``) instead of calling ``backward``.
_jacobian_backward.saves_columns = _broadcast_jacobian_backward.saves_columns = True


def _products(node: Node, g: np.ndarray) -> tuple:
    """The inputs' gradients for the output's gradient ``g`` (``_columns``)."""
    columns, inputs = _columns(node)
    return tuple(None if c is None else sum_to_shape(g * c, np.shape(x)) for c, x in zip(columns, inputs))


def _recorded(node: Node, grads: list) -> tuple:
    """A Jacobian-saving node's gradients under ``create_graph=True``, recorded (``compiled_backward``)."""
    return record_vjp(node, _columns(node)[1], grads, _products(node, grads[0].data))


def _vjp_backward(node: Node, grads: list, graph: bool) -> tuple:
    fn = node.ctx
    needed = tuple([inp is not None for inp in node.inputs])  # constants' gradients are not summed back
    if not graph:
        return fn.vjp(*node.saved, *grads, needs_input_grad=needed)
    results = fn.vjp(*node.saved, *[g.data for g in grads], needs_input_grad=needed)
    return record_vjp(node, node.saved, grads, results)


def _check_broadcast(arrays: list) -> None:
    """Raise PyTorch's broadcast error when the arguments' shapes do not broadcast."""
    shapes = [np.shape(a) for a in arrays]
    ndim = max(len(s) for s in shapes)
    for i in range(ndim - 1, -1, -1):
        sizes = [s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0]
        for k in range(1, len(sizes)):
            if sizes[0] != sizes[k] and sizes[0] != 1 and sizes[k] != 1:
                raise RuntimeError(
                    f"The size of tensor a ({sizes[0]}) must match the size of tensor b "
                    f"({sizes[k]}) at non-singleton dimension {i}"
                )


register_tensor_hook(Tensor, apply_compiled)
