"""The backward of a compiled node under ``create_graph=True``, recorded so it can be differentiated again.

A compiled node's gradients are ``g = vjp(x, cot)``. For a cotangent ``v`` shaped like ``g``, their
derivatives are: with respect to ``x``, ``hvp(x, v, cot)`` (the Hessian of ``<cot, f>``, symmetric, times
``v``); with respect to ``cot``, ``jvp(x, v)``. So the gradients carry a ``<Name>BackwardBackward`` node whose
backward runs the hvp and jvp kernels. Those results are the vjp of ``V = fn.derived("vjp")``, the function
``(x, cot) -> vjp(x, cot)``, at ``(x, cot)`` for the cotangent ``v``: under ``create_graph=True`` they carry
the same kind of node for ``V`` (compiled on its first differentiation, from ``fn``'s symbolic source), and so
on to any order; where no source is reachable that node refuses with ``fn.third_derivative_error()``. A
function without an hvp program (a second derivative symgrad cannot take) refuses the second
differentiation instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.compiled.arguments import sum_to_shape
from symgrad.runtime.autograd import Node
from symgrad.runtime.tensor import _result


def record_vjp(node: Node, arrays: tuple, cots: list, results: tuple) -> tuple:
    """The gradients ``results`` of compiled node ``node`` (arrays: the vjp at its inputs ``arrays`` for the
    Tensor cotangents ``cots``) as tensors recorded for one more differentiation."""
    fn = node.ctx
    if "hvp" in fn.programs and "jvp" in fn.programs:
        inputs = tuple(node.inputs) + tuple([c if c._rg else None for c in cots])
        saved = tuple(arrays) + tuple([c.data for c in cots])
        backward = _second_backward
    else:
        inputs, saved, backward = (), None, _refuse_second
    grad_node = Node(backward, inputs, saved, fn, node.name + "Backward", _metas(results))
    return tuple(
        None if inp is None or r is None else _result(r, grad_node, i)
        for i, (inp, r) in enumerate(zip(node.inputs, results))
    )


def _metas(results: tuple) -> tuple:
    return tuple(((), np.float64) if r is None else (np.shape(r), np.result_type(r)) for r in results)


def _second_backward(node: Node, grads: list, graph: bool) -> tuple:
    """The backward of a compiled node's gradients: ``fn``'s own hvp and jvp kernels."""
    return _vjp_of_vjp(node, node.ctx, grads, graph)


def _higher_backward(node: Node, grads: list, graph: bool) -> tuple:
    """``_vjp_of_vjp`` for the vjp function derived from ``node.ctx`` (compiled on first use)."""
    fn = node.ctx.derived("vjp")
    if fn is None or "hvp" not in fn.programs or "jvp" not in fn.programs:
        raise node.ctx.third_derivative_error()
    return _vjp_of_vjp(node, fn, grads, graph)


def _vjp_of_vjp(node: Node, fn: Any, grads: list, graph: bool) -> tuple:
    """d<v, vjp(x, cot)>/dx = hvp(x, v, cot) and d<v, vjp(x, cot)>/dcot = jvp(x, v), for the cotangents
    ``v`` of the gradients (zeros for an input whose gradient was not taken); ``node``: inputs and saved
    arrays ``x`` then ``cot``, for ``fn``."""
    n = len(fn.arg_names)
    arrays, cots = node.saved[:n], node.saved[n:]
    dtype = np.result_type(*cots)
    tangents = []
    for k, diff in enumerate(fn.arg_diff):
        g = grads[k] if node.inputs[k] is not None else None
        if not diff:
            tangents.append(None)
        elif g is None:
            tangents.append(np.zeros(fn.arg_shapes[k], dtype))
        else:
            tangents.append(g.data if graph else g)
    tangents = tuple(tangents)
    results: list = [None] * len(node.inputs)
    if any(inp is not None for inp in node.inputs[:n]):
        results[:n] = fn.hvp(arrays, tangents, cots if fn.n_outputs > 1 else cots[0])
    if any(inp is not None for inp in node.inputs[n:]):
        jvps = fn.jvp(arrays, tangents)[1]
        jvps = jvps if fn.n_outputs > 1 else (jvps,)
        results[n:] = [sum_to_shape(np.asarray(j), np.shape(c)) for j, c in zip(jvps, cots)]
    results = [None if inp is None else r for inp, r in zip(node.inputs, results)]
    if not graph:
        return tuple(results)
    diff = [k for k, d in enumerate(fn.arg_diff) if d]  # the outputs of fn's vjp
    tracked = [
        grads[k] if node.inputs[k] is not None and grads[k] is not None and grads[k]._rg else None
        for k in diff
    ]
    inputs = tuple(node.inputs) + tuple(tracked)
    saved = tuple(node.saved) + tuple(tangents[k] for k in diff)
    higher = Node(_higher_backward, inputs, saved, fn, node.name + "Backward", _metas(tuple(results)))
    return tuple(None if r is None else _result(r, higher, i) for i, r in enumerate(results))


def _refuse_second(node: Node, grads: list, graph: bool) -> Any:
    raise node.ctx.double_backward_error()
