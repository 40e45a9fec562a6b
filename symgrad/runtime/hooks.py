"""Tensor hooks on gradients, as PyTorch applies them: a hook's returned tensor replaces the gradient, with
PyTorch's errors for a result that is not a tensor or changes its shape or dtype."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def wrap(g: Any) -> Any:
    """``g`` as a Tensor (an array wrapped, no copy)."""
    return g if isinstance(g, _t.Tensor) else _t._result(g)


def apply_hook(fn: Callable, g: Any, graph: bool) -> Any:
    """``fn``'s replacement for gradient ``g`` (``g`` itself when it returns None), with PyTorch's errors for
    a result that is not a tensor or changes the gradient's shape or dtype."""
    t = wrap(g)
    result = fn(t)
    if result is None:
        return g
    if not isinstance(result, _t.Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
    name = getattr(fn, "__name__", repr(fn))
    if result.data.shape != t.data.shape:
        raise RuntimeError(f"hook '{name}' has changed the size of value")
    if result.data.dtype != t.data.dtype:
        raise RuntimeError(
            f"hook '{name}' has changed the type of value (was {t.data.dtype} got {result.data.dtype})"
        )
    return result if graph else result.data


def run_hooks(hooks: list, index: int, g: Any, graph: bool) -> Any:
    """Apply tensor hooks (then retain_grad, always last) to the gradient of output ``index``."""
    for want_retain in (False, True):
        for i, fn, is_retain in hooks:
            if i == index and is_retain is want_retain:
                g = apply_hook(fn, g, graph)
    return g


from symgrad.runtime import tensor as _t  # noqa: E402  (tensor.py imports autograd, which imports this)
