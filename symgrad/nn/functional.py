"""Functional forms of layers and losses (``sg.nn.functional``, like ``torch.nn.functional``).

``linear``, ``cross_entropy`` and ``embedding`` are one tape node each with an explicit rule; ``gelu``,
``silu`` and ``binary_cross_entropy_with_logits`` are compiled symgrad functions (``nn/model.py``, one node
each, derivatives derived); the rest compose Tensor ops (whose elementwise parts are compiled primitives).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from symgrad.compiled import load_model
from symgrad.nn.reduction import check_reduction, reduce_loss
from symgrad.nn.softmax import cross_entropy, log_softmax, nll_loss, softmax
from symgrad.runtime.autograd import Node
from symgrad.runtime.compiled_node import apply_compiled
from symgrad.runtime.rng import default_generator
from symgrad.runtime.shape_ops import _record, _tracked, index_add, matmul, permute, reduce_sum, reshape
from symgrad.runtime.tensor import Tensor, _result

_MODEL = Path(__file__).with_name("model.py")
_compiled: dict[str, Any] = {}


def _kernel(name: str) -> Any:
    """Compiled function ``name`` of ``nn/model.py`` (the file is compiled on first use, then cached)."""
    if not _compiled:
        _compiled.update(load_model(_MODEL))
    return _compiled[name]


def relu(x: Tensor) -> Tensor:
    return x.relu()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002  (torch's names)
    """x * Phi(x) (``approximate='tanh'``: PyTorch's tanh approximation), a compiled symgrad function."""
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh. Got {approximate}")
    return apply_compiled(_kernel("gelu" if approximate == "none" else "gelu_tanh"), (input,))


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """x * sigmoid(x), a compiled symgrad function."""
    out = apply_compiled(_kernel("silu"), (input,))
    return input.copy_(out.data) if inplace else out


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero each element with probability ``p`` and scale the rest by 1/(1-p) (identity when not
    ``training``). The mask comes from symgrad's generator: seed it with ``sg.manual_seed``."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    keep = default_generator().random(input.shape) >= p
    dtype = input.dtype if input.dtype.kind == "f" else np.float32
    scale = keep.astype(dtype) * dtype.type(1.0 / (1.0 - p)) if p < 1.0 else np.zeros(input.shape, dtype)
    return input.mul_(scale) if inplace else input * scale


def layer_norm(
    input: Tensor,  # noqa: A002
    normalized_shape: Any,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the last ``len(normalized_shape)`` dimensions (biased variance),
    then ``* weight + bias``."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or input.shape[input.ndim - len(shape) :] != shape or input.ndim < len(shape):
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, "
            f"{', '.join(map(str, shape))}], but got input of size{list(input.shape)}"
        )
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    centred = input - input.mean(axis=axes, keepdims=True)
    out = centred * ((centred * centred).mean(axis=axes, keepdims=True) + eps).sqrt().reciprocal()
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


def embedding(input: Any, weight: Tensor, padding_idx: int | None = None) -> Tensor:  # noqa: A002
    """Rows of ``weight`` (num_embeddings, dim) at the integer indices ``input``; the row at ``padding_idx``
    gets no gradient."""
    idx = np.asarray(input.data if isinstance(input, Tensor) else input)
    if idx.dtype.kind not in "iu":
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int;"
            f" but got {idx.dtype} instead (while checking arguments for embedding)"
        )
    n = weight.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError("index out of range in self")
    out = weight.data[idx]
    if _tracked(weight) is None:
        return _result(out)
    if padding_idx is not None and padding_idx < 0:
        padding_idx += n
    return _record(out, _embedding_backward, (weight,), None, (idx, padding_idx), "EmbeddingBackward")


def _embedding_backward(node: Node, grads: list, graph: bool) -> tuple:
    idx, padding_idx = node.ctx
    weight, g = node.inputs[0].data, grads[0]
    shape, dtype = weight.shape, weight.dtype
    if padding_idx is not None:
        g = g * (idx != padding_idx)[..., None].astype(dtype)
    return (index_add(g, shape, dtype, idx),)


def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002  (torch's names)
    return reduce_loss((input - target).square(), reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,  # noqa: A002
    target: Any,
    weight: Any = None,
    reduction: str = "mean",
    pos_weight: Any = None,
) -> Tensor:
    """Logistic loss of logits against targets in [0, 1]: ``(1 - y) x - logsigmoid(x)``, stable for any
    logit (a compiled symgrad function); ``pos_weight`` weights the positive term, ``weight`` each element."""
    if not isinstance(target, Tensor):
        target = np.asarray(target, input.dtype)
    if target.shape != input.shape:
        raise ValueError(
            f"Target size ({list(target.shape)}) must be the same as input size ({list(input.shape)})"
        )
    check_reduction(reduction)
    if pos_weight is None:
        losses = apply_compiled(_kernel("bce_with_logits"), (input, target))
    else:
        losses = apply_compiled(_kernel("bce_with_logits_pos_weight"), (input, target, pos_weight))
    return reduce_loss(losses if weight is None else losses * weight, reduction)


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


__all__ = [
    "linear",
    "relu",
    "gelu",
    "silu",
    "softmax",
    "log_softmax",
    "dropout",
    "layer_norm",
    "embedding",
    "mse_loss",
    "cross_entropy",
    "nll_loss",
    "binary_cross_entropy_with_logits",
]


def __dir__() -> list[str]:
    """The public names, not the modules and helpers this module imports (``np``, ``Any``, ...)."""
    return sorted(__all__)
