"""Gradients into leaves' ``.grad`` (PyTorch's AccumulateGrad): a leaf's hooks first, then the sum in place
(a new ``.grad`` under ``create_graph``, or when the old one cannot take it), under one lock; and the lone
op's hot path, where a Jacobian-saving node's input gradients are added as ``g * column`` in one fused call.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from symgrad.backends.fused import MUL_ADD as _MUL_ADD
from symgrad.backends.fused import MUL_ADD_SUM as _MUL_ADD_SUM
from symgrad.compiled.arguments import leading_sum, sum_to_shape
from symgrad.runtime import inplace as _inplace
from symgrad.runtime.autograd import _SECOND_BACKWARD, FREED, Node
from symgrad.runtime.hooks import apply_hook, wrap


def own(g: Any) -> Any:
    """An array the gradient's receiver may keep: views of other buffers are copied."""
    if isinstance(g, np.ndarray):
        flags = g.flags
        return g if flags.owndata and flags.writeable else g.copy()
    return g


#: Serializes gradient accumulation, as PyTorch's AccumulateGrad does: NumPy releases the GIL inside
#: ``acc += g``, so threads running backward into one leaf would lose updates.
ACCUMULATING = threading.Lock()


def accumulate_all(pairs: Any, graph: bool, kept: list) -> None:
    """Each (leaf, gradient) of ``pairs`` (skipping a None in either place): the leaf's hooks, then the sum
    into its ``.grad`` (under one lock for all when no leaf has hooks; hooks run outside it, a hook may run
    a backward of its own)."""
    for leaf, g in pairs:
        if g is not None and leaf is not None and leaf._hooks:
            break
    else:
        with ACCUMULATING:
            for leaf, g in pairs:
                if g is not None and leaf is not None:
                    accumulate(leaf, g, graph, kept)
        return
    for leaf, g in pairs:
        if g is None or leaf is None:
            continue
        if leaf._hooks:
            for fn in list(leaf._hooks):
                g = apply_hook(fn, g, graph)
        with ACCUMULATING:
            accumulate(leaf, g, graph, kept)


def plain_leaves(inputs: tuple) -> bool:
    """Whether ``inputs`` are one or two distinct leaves (or None) without hooks: their gradients go
    straight into ``.grad`` (``accumulate_products``)."""
    a = inputs[0]
    if a is not None and a._hooks:
        return False
    if len(inputs) == 1:
        return True
    b = inputs[1]
    return len(inputs) == 2 and b is not a and (b is None or not b._hooks)


def products_to_leaves(node: Node, g: np.ndarray, retain_graph: bool, kept: list) -> bool:
    """The hot path of a node whose inputs are leaves, outside ``create_graph``, given its output's gradient
    ``g``: when the node ``saves_columns`` (a Jacobian-saving op) and has no hooks, and its inputs are
    ``plain_leaves``, its gradients go straight into ``.grad`` (``accumulate_products``, without calling
    its ``backward``) and the answer is True; else nothing is done and it is False."""
    inputs = node.inputs
    if (
        not getattr(node.backward, "saves_columns", False)
        or node.hooks is not None
        or not plain_leaves(inputs)
    ):
        return False
    saved = node.saved
    if saved is FREED:
        raise RuntimeError(_SECOND_BACKWARD)
    if _inplace._VERSIONS:
        _inplace.check(node)
    if not retain_graph:
        node.saved = FREED
    accumulate_products(inputs, g, saved, kept)
    return True


def accumulate_products(leaves: tuple, g: np.ndarray, saved: tuple, kept: list) -> None:
    """``accumulate_all`` of the gradients ``g * column k`` summed to input k's shape (a ``saves_columns``
    node's ``saved``: J or None per input, then the inputs) into ``plain_leaves``: where ``.grad`` already
    has the input's shape, one fused call adds the product in place (``fused.MUL_ADD`` on J's column k, or
    ``fused.MUL_ADD_SUM`` for an input that broadcast along leading axes; both round as NumPy does and refuse
    another dtype or layout), else through ``accumulate``."""
    mul_add, mul_add_sum = _MUL_ADD[0], _MUL_ADD_SUM[0]
    n = len(leaves)
    out_shape = g.shape
    with ACCUMULATING:
        for k in range(n):
            leaf = leaves[k]
            if leaf is None:  # (a constant: no J was saved for it either)
                continue
            jacobian = saved[k]
            shape = saved[n + k].shape
            grad = leaf.grad
            if grad is not None and grad.data.shape == shape:
                if shape == out_shape:
                    if mul_add is not None and mul_add(grad.data, g, jacobian, k):
                        continue
                elif mul_add_sum is not None and leading_sum(out_shape, shape):
                    if mul_add_sum(grad.data, g, jacobian, k):
                        continue
            accumulate(leaf, sum_to_shape(g * jacobian[..., 0, k], shape), False, kept)


def accumulate(leaf: Any, g: Any, graph: bool, kept: list) -> None:
    """Add ``g`` to ``leaf.grad`` (the caller holds ``ACCUMULATING``); ``kept``: arrays that may not become a
    ``.grad`` as they are (the seeds, and those already kept by another leaf), extended with the one kept
    here."""
    grad = leaf.grad
    if graph:
        leaf.grad = wrap(g) if grad is None else grad + g
        return
    if type(g) is not np.ndarray:
        g = np.asarray(g)
    dtype = leaf.data.dtype
    if g.dtype is not dtype and g.dtype != dtype:
        g = g.astype(dtype)
    if grad is None:
        for k in kept:
            if k is g:
                g = g.copy()
                break
        else:
            g = own(g)
        kept.append(g)
        leaf.grad = _t._result(g)
        return
    acc = grad.data
    if type(acc) is np.ndarray and acc.shape == g.shape and acc.flags.writeable:
        acc += g  # in place, like PyTorch's AccumulateGrad outside create_graph
    else:
        leaf.grad = _t._result(acc + g)


from symgrad.runtime import tensor as _t  # noqa: E402  (tensor.py imports autograd, which imports this)
