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


def apply_compiled(fn: Any, args: tuple) -> Tensor | tuple[Tensor, ...]:
    """Run compiled ``fn`` on tensors and numbers; record one node when grad mode is on and an input needs
    it."""
    arrays = []
    inputs = []
    need = False
    for a in args:
        if isinstance(a, Tensor):
            arrays.append(a.data)
            if a._rg:
                need = True
                inputs.append(a)
                continue
        else:
            arrays.append(a)
        inputs.append(None)
    record = need and mode.enabled
    if record and fn.jacobian_saving:
        result = _jacobian_node(fn, arrays, inputs)
        if result is not None:
            return result
    try:
        outs = fn.forward(*arrays)
    except (ArgumentError, ValueError):
        _check_broadcast(arrays)
        raise
    if not record:
        if fn.n_outputs == 1:
            return _result(outs[0])
        return tuple([_result(o) for o in outs])
    if fn.n_outputs == 1:
        out = outs[0]
        node = Node(
            _vjp_backward, tuple(inputs), tuple(arrays), fn, fn.backward_name, ((out.shape, out.dtype),)
        )
        return _result(out, node, 0)
    node = Node(
        _vjp_backward,
        tuple(inputs),
        tuple(arrays),
        fn,
        fn.backward_name,
        tuple([(o.shape, o.dtype) for o in outs]),
    )
    return tuple([_result(o, node, i) for i, o in enumerate(outs)])


def _jacobian_node(fn: Any, arrays: list, inputs: list) -> Tensor | None:
    """The Jacobian-saving node (see the module docstring) when ``arrays`` are same-shape float arrays of one
    dtype, at most ``JACOBIAN_MAX`` elements, and numbers; else None (a function with a ``uniform`` argument
    records the vjp node, and a wrong argument count gets ``forward``'s error). The tape's hot path: the
    kernel straight after the argument pass."""
    if len(arrays) != len(fn.arg_names) or fn.uniform_at:
        return None
    first = None
    for a in arrays:
        kind = type(a)
        if kind is np.ndarray:
            if first is None:
                first = a
            elif a.dtype is not first.dtype or a.shape != first.shape:
                return None
        elif kind is not float and kind is not int:
            return None
    if first.dtype not in FLOAT_DTYPES or first.size > JACOBIAN_MAX:  # (a tensor requires grad: first is set)
        return None
    out, jacobian = fn.kernel("value_and_jacobian", first.dtype)(arrays, first.shape)  # J: batch + (1, n)
    columns = tuple([None if inp is None else jacobian[..., 0, k] for k, inp in enumerate(inputs)])
    saved = columns + tuple(arrays)  # the inputs, for a second differentiation (``compiled_backward``)
    node = Node(_jacobian_backward, tuple(inputs), saved, fn, fn.backward_name, ((out.shape, out.dtype),))
    return _result(out, node, 0)


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
