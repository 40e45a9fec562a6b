"""The backward engine: one pass over the nodes reachable from the roots, in Kahn's order (deterministic),
each node's backward run once after every node that consumes its outputs, gradients accumulated into the
leaves' ``.grad`` (``accumulate``; tensor hooks: ``hooks``) or captured for ``autograd.grad``.

During backward, gradients travel as NumPy arrays; with ``create_graph=True`` they travel as Tensors and
every backward rule runs with grad mode on, so its own operations are recorded for a second differentiation.
The loop is written for small graphs, where its own cost is the whole cost (a lone op's backward): no
per-input helper calls, one lock per leaf, no sets unless a gradient reaches a leaf for the first time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from symgrad.runtime import inplace as _inplace
from symgrad.runtime.accumulate import accumulate_all, own, products_to_leaves
from symgrad.runtime.autograd import _SECOND_BACKWARD, FREED, Node, mode
from symgrad.runtime.hooks import run_hooks, wrap


def run_backward(
    roots: Sequence, seeds: list, retain_graph: bool, create_graph: bool, capture: Sequence | None = None
) -> list | None:
    """Propagate ``seeds`` (a list the engine may extend) from ``roots``; accumulate into leaves' ``.grad``,
    or return the gradients of ``capture`` (in order, None where unreached) without touching ``.grad``."""
    if capture is None and len(roots) == 1:
        node = roots[0].grad_fn
        if node is not None:
            for inp in node.inputs:
                if inp is not None and inp.grad_fn is not None:
                    break
            else:  # one node whose inputs are leaves (a lone op)
                if not create_graph and products_to_leaves(node, seeds[0], retain_graph, seeds):
                    return None
                return _lone(node, roots[0]._oi, seeds, retain_graph, create_graph)
    buffers: dict = {}  # node -> gradient per output
    leaves: dict = {}  # id -> [tensor, gradient]
    captured: dict | None = None if capture is None else {}
    nodes = []
    for r, s in zip(roots, seeds):
        node = r.grad_fn
        if node is None:
            _to_leaf(r, s, leaves)
            continue
        _to_buffer(node, r._oi, s, buffers)
        nodes.append(node)
    prev = mode.enabled
    mode.enabled = create_graph
    try:
        if len(nodes) == 1:
            nodes = _chain(nodes[0], buffers, leaves, captured, retain_graph, seeds)
        if nodes:
            _propagate(nodes, buffers, leaves, captured, retain_graph)
        if capture is not None:
            return [_captured(t, leaves, captured) for t in capture]
        accumulate_all(leaves.values(), create_graph, seeds)  # seeds: arrays others hold (copied if kept)
        return None
    finally:
        mode.enabled = prev


def _lone(node: Node, index: int, seeds: list, retain_graph: bool, create_graph: bool) -> None:
    """``run_backward`` from output ``index`` of ``node``, whose inputs are all leaves (where
    ``products_to_leaves`` does not apply)."""
    grads = [seeds[0]]
    n = len(node.outs)
    if n > 1:
        grads = [None] * n
        grads[index] = seeds[0]
    prev = mode.enabled
    mode.enabled = create_graph
    try:
        in_grads = _node_backward(node, grads, None, retain_graph, create_graph)
        inputs = node.inputs
        pairs: Any = tuple(zip(inputs, in_grads))  # (None entries: skipped)
        if len(inputs) > 2 or len(inputs) == 2 and inputs[0] is inputs[1] is not None:  # a leaf used twice
            leaves: dict = {}
            for inp, g in pairs:
                if inp is not None and g is not None:
                    _to_leaf(inp, g, leaves)
            pairs = leaves.values()
        accumulate_all(pairs, create_graph, seeds)
        return None
    finally:
        mode.enabled = prev


def _chain(
    node: Node, buffers: dict, leaves: dict, captured: dict | None, retain_graph: bool, kept: list
) -> list:
    """Run ``node`` (the one root) and its producers while each has at most one input from another node:
    then that producer is consumed by nothing else reachable (every node upstream is reached through it), so
    it runs next, without counting consumers (a lone op, a chain of ops). Returns the producers where the
    walk stops, for ``_propagate`` (none when it reached the leaves). The last node, when no other has
    reached a leaf, takes the lone op's hot path (``products_to_leaves``; ``kept``: see ``accumulate``)."""
    graph = mode.enabled
    while True:
        grads = buffers.pop(node, None)
        if grads is None:  # no gradient: none reaches anything upstream either
            return []
        inputs = node.inputs
        if not (graph or leaves or captured is not None) and len(grads) == 1:
            for inp in inputs:
                if inp is not None and inp.grad_fn is not None:
                    break
            else:  # the last node: its inputs are leaves
                if products_to_leaves(node, grads[0], retain_graph, kept):
                    return []
        in_grads = _node_backward(node, grads, captured, retain_graph, graph)
        parents = []
        for inp, g in zip(inputs, in_grads):
            if inp is None:
                continue
            parent = inp.grad_fn
            if parent is None:
                if g is not None:
                    _to_leaf(inp, g, leaves)
                continue
            parents.append(parent)
            if g is not None:
                _to_buffer(parent, inp._oi, g, buffers)
        if len(parents) == 1:
            node = parents[0]
        elif not parents:
            return parents
        else:  # (the order Kahn's would take: ready as their last consumer slot came)
            return list(dict.fromkeys(reversed(parents)))


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


def _propagate(roots: list, buffers: dict, leaves: dict, captured: dict | None, retain_graph: bool) -> None:
    """Run the backward of every node reachable from ``roots`` after all nodes that consume it (Kahn's
    order, deterministic), passing gradients to their producers' ``buffers`` or to ``leaves``."""
    graph = mode.enabled
    consumers = _consumers(roots)
    # (one root: no node reachable from it consumes it)
    ready = roots[:] if len(roots) == 1 else [r for r in reversed(consumers) if consumers[r] == 0]
    while ready:
        node = ready.pop()
        inputs = node.inputs
        grads = buffers.pop(node, None)
        if grads is None:  # no gradient reached it: its producers still wait for it
            in_grads: Any = (None,) * len(inputs)
        else:
            in_grads = _node_backward(node, grads, captured, retain_graph, graph)
        for inp, g in zip(inputs, in_grads):
            if inp is None:
                continue
            parent = inp.grad_fn
            if parent is None:
                if g is not None:
                    _to_leaf(inp, g, leaves)
                continue
            if g is not None:
                _to_buffer(parent, inp._oi, g, buffers)
            left = consumers.get(parent, 0) - 1  # (absent: an in-place op in a hook moved inp)
            consumers[parent] = left
            if left == 0:
                ready.append(parent)


def _to_leaf(t: Any, g: Any, leaves: dict) -> None:
    entry = leaves.get(id(t))
    if entry is None:
        leaves[id(t)] = [t, g]
    else:
        entry[1] = entry[1] + g


def _to_buffer(node: Node, i: int, g: Any, buffers: dict) -> None:
    buf = buffers.get(node)
    if buf is None:
        n = len(node.outs)
        if n == 1:
            buffers[node] = [g]
            return
        buf = buffers[node] = [None] * n
    buf[i] = g if buf[i] is None else buf[i] + g


def _node_backward(node: Node, grads: list, captured: dict | None, retain_graph: bool, graph: bool) -> Any:
    """``node``'s input gradients for the gradients ``grads`` of its outputs (hooks applied first), one per
    input (a backward that returns fewer: None for the rest); frees what it saved unless ``retain_graph``."""
    # an output that got no gradient gets zeros, unless its backward takes None (``sg.Function``'s
    # ``set_materialize_grads(False)``: the backward itself decides, per call)
    if len(grads) > 1 and any(g is None for g in grads) and not hasattr(node.backward, "takes_none"):
        grads = [_zeros(meta, graph) if g is None else g for g, meta in zip(grads, node.outs)]
    if node.hooks:
        grads = [g if g is None else run_hooks(node.hooks, i, g, graph) for i, g in enumerate(grads)]
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
    n = len(node.inputs)
    return in_grads if len(in_grads) == n else (tuple(in_grads) + (None,) * n)[:n]


def _zeros(meta: tuple, graph: bool) -> Any:
    z = np.zeros(meta[0], meta[1])
    return wrap(z) if graph else z


def _captured(t: Any, leaves: dict, captured: dict) -> Any:
    if t.grad_fn is None:
        entry = leaves.get(id(t))
        g = None if entry is None else entry[1]
    else:
        grads = captured.get(t.grad_fn)
        g = None if grads is None else grads[t._oi]
    return None if g is None else wrap(own(g))
