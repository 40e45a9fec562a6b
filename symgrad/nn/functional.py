"""Functional forms of layers and losses (``sg.nn.functional``, like ``torch.nn.functional``).

``linear`` and ``cross_entropy`` are one tape node each with an explicit rule; the rest compose Tensor ops
(whose elementwise parts are compiled primitives).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.runtime.autograd import Node
from symgrad.runtime.shape_ops import _record, _tracked, matmul, permute, reduce_sum, reshape
from symgrad.runtime.tensor import Tensor, _result


def relu(x: Tensor) -> Tensor:
    return x.relu()


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``dim``, shifted by the (constant) maximum so that exp never overflows."""
    e = (x - x.detach().max(axis=dim, keepdims=True)).exp()
    return e / e.sum(axis=dim, keepdims=True)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x) along ``dim``, stable."""
    shifted = x - x.detach().max(axis=dim, keepdims=True)
    return shifted - shifted.exp().sum(axis=dim, keepdims=True).log()


def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002  (torch's names)
    return _reduce((input - target).square(), reduction)


def _reduce(losses: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    if reduction == "none":
        return losses
    raise ValueError(f"{reduction} is not a valid value for reduction")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` as one node (x: (..., in), weight: (out, in), bias: (out,))."""
    X, W = x.data, weight.data
    out = X @ W.T
    if bias is not None:
        out += bias.data
    inputs = (_tracked(x), _tracked(weight), None if bias is None else _tracked(bias))
    if inputs[0] is None and inputs[1] is None and inputs[2] is None:
        return _result(out)
    return _record(out, _linear_backward, inputs, (x, weight), None, "AddmmBackward")


def _linear_backward(node: Node, grads: list, graph: bool) -> tuple:
    x, w = node.saved if graph else (node.saved[0].data, node.saved[1].data)
    g = grads[0]
    g2 = reshape(g, (-1, g.shape[-1]))
    ix, iw, ib = node.inputs
    gx = None if ix is None else reshape(matmul(g2, w), x.shape)
    gw = None if iw is None else matmul(permute(g2, (1, 0)), reshape(x, (-1, x.shape[-1])))
    gb = None if ib is None else reduce_sum(g2, 0)
    return gx, gw, gb


def cross_entropy(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Softmax cross-entropy of logits (N, C) against class indices (N,); one node whose backward is
    ``softmax(input) - onehot(target)`` (scaled by the reduction)."""
    logits = input.data
    labels = np.asarray(target.data if isinstance(target, Tensor) else target)
    if logits.ndim != 2 or labels.shape != logits.shape[:1] or labels.dtype.kind not in "iu":
        raise ValueError(
            f"cross_entropy expects logits of shape (N, C) and integer class indices of shape "
            f"(N,); got {logits.shape} and {labels.shape} {labels.dtype}"
        )
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    rows = np.arange(len(labels))
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    total = exp.sum(axis=1, keepdims=True)
    losses = np.log(total[:, 0]) - shifted[rows, labels]
    out = losses.mean() if reduction == "mean" else losses.sum() if reduction == "sum" else losses
    if _tracked(input) is None:
        return _result(out)
    exp /= total
    return _record(
        out, _cross_entropy_backward, (input,), (exp, input), (labels, reduction), "NllLossBackward"
    )


def _cross_entropy_backward(node: Node, grads: list, graph: bool) -> tuple:
    probs, logits = node.saved
    labels, reduction = node.ctx
    g = grads[0]
    n = len(labels)
    scale = g / n if reduction == "mean" else g if reduction == "sum" else reshape(g, (n, 1))
    if graph:
        onehot = np.zeros_like(probs)
        onehot[np.arange(n), labels] = 1
        return ((softmax(logits, 1) - onehot) * scale,)
    grad = probs.copy()
    grad[np.arange(n), labels] -= 1
    grad *= scale
    return (grad,)
