"""``apply_compiled``: a compiled ``@sg.function`` call on tensors becomes one tape node.

Two ways to record, with the same kernels:
- per-element scalar functions with one output and one or two arguments (``fn.jacobian_saving``; the tape's
  own primitives), called on same-shape arrays of one dtype, at most ``JACOBIAN_MAX`` elements: the forward
  runs the fused ``value_and_jacobian`` kernel and the node saves J; backward is ``grad * J``, with no
  second kernel call (on small tensors the call costs more than the arithmetic), as in the PyTorch interop.
- everything else: the forward kernel, and a node that saves the inputs; backward runs the vjp kernel and
  sums back to its input's shape only the gradients that a tracked input needs (None for a constant, and for
  a ``nondiff`` argument: a tensor passed there gets no gradient, as for a PyTorch Function whose backward
  returns None for it).
Under ``create_graph=True`` the gradients are recorded for a second differentiation through the hvp and jvp
kernels (``compiled_backward``; the Jacobian-saving node saves its inputs too, for them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.abi import FLOAT_DTYPES
from symgrad.compiled import register_tensor_hook
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
    if not fn.jacobian_saving or not mode.enabled:
        return None
    if len(args) == 2:
        return _binary_jacobian_node(fn, args[0], args[1])
    if len(args) == 1:
        return _unary_jacobian_node(fn, args[0])
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
        outs = fn.forward(*arrays)
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


def _fits(fn: Any, array: Any, n_args: int) -> bool:
    """Whether ``fn`` of ``n_args`` arguments may save its Jacobian for arguments of ``array``'s dtype and
    shape: a float32/float64 array of at most ``JACOBIAN_MAX`` elements, no ``uniform`` argument."""
    if type(array) is not np.ndarray:
        return False
    dtype = array.dtype
    return (
        (dtype is _F64 or dtype is _F32)
        and array.size <= JACOBIAN_MAX
        and len(fn.arg_names) == n_args
        and not fn.uniform_at
    )


def _unary_jacobian_node(fn: Any, x: Any) -> Tensor | None:
    """The Jacobian-saving node (see the module docstring) of ``fn(x)`` for a tensor ``x`` that requires
    grad, else None."""
    if not isinstance(x, Tensor) or not x._rg or not _fits(fn, x.data, 1):
        return None
    a = x.data
    out, jacobian = fn.kernel("value_and_jacobian", a.dtype)((a,), a.shape)  # J: batch + (1, 1)
    saved = (jacobian[..., 0, 0], a)  # J, then the input, for a second differentiation
    return _result(
        out, Node(_jacobian_backward, (x,), saved, fn, fn.backward_name, ((out.shape, out.dtype),))
    )


def _binary_jacobian_node(fn: Any, x: Any, y: Any) -> Tensor | None:
    """The Jacobian-saving node of ``fn(x, y)`` when a tensor among them requires grad and they are arrays
    of one dtype and shape, or Python numbers; else None."""
    tx, ty = isinstance(x, Tensor), isinstance(y, Tensor)
    a, ta = (x.data, x if x._rg else None) if tx else (x, None)
    b, tb = (y.data, y if y._rg else None) if ty else (y, None)
    if ta is None and tb is None:
        return None
    if type(a) is np.ndarray:
        first = a
        if type(b) is np.ndarray:
            if b.dtype is not a.dtype or b.shape != a.shape:
                return None
        elif type(b) is not float and type(b) is not int:
            return None
    elif type(a) is float or type(a) is int:
        first = b  # (an array, or _fits refuses)
    else:
        return None
    if not _fits(fn, first, 2):
        return None
    out, jacobian = fn.kernel("value_and_jacobian", first.dtype)((a, b), first.shape)  # J: batch + (1, 2)
    saved = (
        None if ta is None else jacobian[..., 0, 0],
        None if tb is None else jacobian[..., 0, 1],
        a,
        b,
    )  # J's columns, then the inputs, for a second differentiation (``compiled_backward``)
    return _result(
        out, Node(_jacobian_backward, (ta, tb), saved, fn, fn.backward_name, ((out.shape, out.dtype),))
    )


def _jacobian_backward(node: Node, grads: list, graph: bool) -> tuple:
    saved = node.saved  # J's columns, then the inputs
    if graph:
        n = len(saved) // 2
        g = grads[0].data
        return record_vjp(node, saved[n:], grads, tuple([None if c is None else g * c for c in saved[:n]]))
    g = grads[0]
    if len(saved) == 2:  # its one input requires grad (else there would be no node)
        return (g * saved[0],)
    a, b = saved[0], saved[1]
    return (None if a is None else g * a, None if b is None else g * b)


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
