"""Softmax, log-softmax and the losses on them: ``cross_entropy`` and ``nll_loss`` with
``torch.nn.functional``'s options (class ``weight``, ``ignore_index``, ``label_smoothing``, class-probability
targets, inputs (C,), (N, C) or (N, C, d1, ...)).

The common case, logits (N, C) against class indices with none of the options in use, is one tape node whose
backward is ``softmax(input) - onehot(target)``; the other cases compose ``log_softmax`` with Tensor ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.nn.reduction import check_reduction, reduce_loss
from symgrad.runtime.autograd import Node
from symgrad.runtime.shape_ops import _record, _tracked, reshape
from symgrad.runtime.tensor import Tensor, _result


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``dim``, shifted by the (constant) maximum so that exp never overflows."""
    e = (x - x.detach().max(axis=dim, keepdims=True)).exp()
    return e / e.sum(axis=dim, keepdims=True)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x) along ``dim``, stable."""
    shifted = x - x.detach().max(axis=dim, keepdims=True)
    return shifted - shifted.exp().sum(axis=dim, keepdims=True).log()


def cross_entropy(
    input: Tensor,  # noqa: A002  (torch's names)
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of logits (classes along dim 1, or dim 0 for one sample) against class indices
    or class probabilities (a float target of the input's shape)."""
    check_reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    labels = np.asarray(target.data if isinstance(target, Tensor) else target)
    plain = weight is None and label_smoothing == 0 and input.ndim == 2 and labels.dtype.kind in "iu"
    if plain and labels.shape == input.shape[:1] and not np.any(labels == ignore_index):
        _check_bounds(labels, input.shape[1])
        return _fused_cross_entropy(input, labels, reduction)
    class_dim = 0 if input.ndim == 1 else 1
    n_classes = input.shape[class_dim]
    logp = log_softmax(input, class_dim)
    if labels.dtype.kind == "f":
        return _probability_targets(logp, target, weight, reduction, label_smoothing, class_dim)
    nll = nll_loss(logp, labels, weight, ignore_index, reduction)
    if label_smoothing == 0:
        return nll
    rows, flat_labels = _rows(logp, labels, class_dim)
    keep = flat_labels != ignore_index
    w = _class_weights(weight, n_classes, input.dtype)
    smooth = -(rows * w).sum(axis=1) * keep.astype(input.dtype)
    if reduction == "mean":
        smooth = smooth.sum() / float(w[flat_labels[keep]].sum() if weight is not None else keep.sum())
    else:
        smooth = reduce_loss(smooth.reshape(labels.shape), reduction)
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / n_classes)


def nll_loss(
    input: Tensor,  # noqa: A002
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood of log-probabilities (classes along dim 1, or dim 0 for one sample) at class
    indices; ``mean`` divides by the total weight of the targets not ignored."""
    check_reduction(reduction)
    labels = np.asarray(target.data if isinstance(target, Tensor) else target)
    class_dim = 0 if input.ndim == 1 else 1
    rows, flat_labels = _rows(input, labels, class_dim)
    keep = flat_labels != ignore_index
    _check_bounds(flat_labels[keep], input.shape[class_dim])
    safe = np.where(keep, flat_labels, 0)
    w = _class_weights(weight, input.shape[class_dim], input.dtype)[safe] * keep
    losses = -(rows[np.arange(len(safe)), safe] * w)
    if reduction == "mean":
        return losses.sum() / float(w.sum())
    return reduce_loss(losses.reshape(labels.shape), reduction)


def _rows(x: Tensor, labels: np.ndarray, class_dim: int) -> tuple[Tensor, np.ndarray]:
    """``x`` as (samples, classes) rows and the labels as a vector, after checking that their shapes fit."""
    if labels.dtype.kind not in "iu":
        raise RuntimeError(f"expected scalar type Long but found {labels.dtype}")
    expected = x.shape[:class_dim] + x.shape[class_dim + 1 :]
    if labels.shape != expected:
        if x.ndim >= 2 and labels.ndim >= 1 and labels.shape[0] != x.shape[0]:
            raise ValueError(
                f"Expected input batch_size ({x.shape[0]}) to match target batch_size ({labels.shape[0]})."
            )
        raise RuntimeError(f"Expected target size {list(expected)}, got {list(labels.shape)}")
    if x.ndim > 2:
        x = x.permute(0, *range(2, x.ndim), 1)
    return reshape(x, (-1, x.shape[-1])), labels.reshape(-1)


def _check_bounds(labels: np.ndarray, n_classes: int) -> None:
    bad = labels[(labels < 0) | (labels >= n_classes)]
    if bad.size:
        raise IndexError(f"Target {bad[0]} is out of bounds.")


def _class_weights(weight: Any, n_classes: int, dtype: np.dtype) -> np.ndarray:
    if weight is None:
        return np.ones(n_classes, dtype)
    return np.asarray(weight.data if isinstance(weight, Tensor) else weight, dtype)


def _probability_targets(
    logp: Tensor, target: Any, weight: Any, reduction: str, label_smoothing: float, class_dim: int
) -> Tensor:
    """-sum_c weight_c * target_c * logp_c per sample; ``mean`` divides by the number of samples."""
    if target.shape != logp.shape:
        raise RuntimeError(f"Expected target size {list(logp.shape)}, got {list(target.shape)}")
    n_classes = logp.shape[class_dim]
    if label_smoothing:
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    w = _class_weights(weight, n_classes, logp.dtype).reshape((-1,) + (1,) * (logp.ndim - class_dim - 1))
    losses = -(logp * target * w).sum(axis=class_dim)
    if reduction == "mean":
        return losses.sum() / (logp.data.size // n_classes)
    return reduce_loss(losses, reduction)


def _fused_cross_entropy(input: Tensor, labels: np.ndarray, reduction: str) -> Tensor:  # noqa: A002
    """Logits (N, C) against in-range class indices (N,) as one node."""
    logits = input.data
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
