"""``sg.nn.utils``: gradient clipping (``clip_grad_norm_``, ``clip_grad_value_``), as ``torch.nn.utils``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from symgrad.runtime.autograd import no_grad
from symgrad.runtime.tensor import Tensor, _result


def _grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p.grad for p in params if p.grad is not None]


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
) -> Tensor:
    """Scale the gradients in place so that their joint ``norm_type``-norm is at most ``max_norm``; returns
    the norm before clipping. As PyTorch: the factor is ``max_norm / (norm + 1e-6)`` capped at 1, and every
    gradient is multiplied by it (also when it is 1)."""
    grads = _grads(parameters)
    norm_type = float(norm_type)
    if not grads:
        return _result(np.array(0.0, np.float32))
    dtype = np.result_type(*(g.dtype for g in grads))
    norms = np.array([_norm(g.data, norm_type) for g in grads], dtype)
    total = dtype.type(_norm(norms, norm_type))
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it "
            "cannot be clipped. To disable this error and scale the gradients by the non-finite norm "
            "anyway, set `error_if_nonfinite=False`"
        )
    coef = min(dtype.type(max_norm) / (total + dtype.type(1e-6)), dtype.type(1.0))
    with no_grad():
        for g in grads:
            g.mul_(g.dtype.type(coef))
    return _result(np.array(total))


def _norm(x: np.ndarray, norm_type: float) -> Any:
    if norm_type == np.inf:
        return np.abs(x).max() if x.size else x.dtype.type(0)
    if norm_type == -np.inf:
        return np.abs(x).min()
    if norm_type == 0:
        return x.dtype.type(np.count_nonzero(x))
    if norm_type == 2:
        return np.sqrt(np.vdot(x.ravel(), x.ravel()))
    return (np.abs(x) ** norm_type).sum() ** (1 / norm_type)


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient in place to [-clip_value, clip_value]."""
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)
