"""``sg.Function``: user-defined forward and backward, exactly like ``torch.autograd.Function``.

Both of PyTorch's styles: ``forward(ctx, *args)``, or (PyTorch 2) ``forward(*args)`` without ctx plus
``setup_context(ctx, inputs, output)``, which ``apply`` calls after forward with the inputs (defaults of
forward filled in) and forward's return value.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from symgrad.runtime.autograd import _SECOND_BACKWARD, FREED, Node, mode, no_grad
from symgrad.runtime.engine import _zeros
from symgrad.runtime.shape_ops import sum_to_shape
from symgrad.runtime.tensor import Tensor, _result


class FunctionCtx:
    """The ``ctx`` passed to ``forward`` and ``backward``; set any attribute on it to pass values along."""

    needs_input_grad: tuple[bool, ...]

    def __init__(self) -> None:
        self._saved: Any = ()
        self._non_differentiable: tuple = ()
        self._materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        """Keep tensors for ``backward``; they are freed after it unless ``retain_graph=True``."""
        self._saved = tensors

    def mark_non_differentiable(self, *tensors: Any) -> None:
        """Outputs (as forward returned them) that get no gradient: they do not require grad, and backward
        receives zeros for them (None with ``set_materialize_grads(False)``)."""
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """Whether backward receives zeros (True, the default) or None for outputs that got no gradient."""
        self._materialize_grads = bool(value)

    @property
    def saved_tensors(self) -> tuple:
        if self._saved is FREED:
            raise RuntimeError(_SECOND_BACKWARD)
        return self._saved

    def _release(self) -> None:
        if self._saved:
            self._saved = FREED


class Function:
    """Subclass with static ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)`` (or a ctx-less
    ``forward(*args)`` with ``setup_context(ctx, inputs, output)``); call ``apply``."""

    @staticmethod
    def forward(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("subclasses of sg.Function must implement forward")

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple, output: Any) -> None:
        """PyTorch 2 style: fill ``ctx`` from the inputs and the output after ``forward(*inputs)`` ran."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        raise NotImplementedError("subclasses of sg.Function must implement backward")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Run ``forward`` without recording and record one node whose backward is ``cls.backward``."""
        ctx = FunctionCtx()
        separate = cls.setup_context is not Function.setup_context
        if separate:
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._rg for a in args)
        with no_grad():
            if separate:
                result = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, result)
            else:
                result = cls.forward(ctx, *args, **kwargs)
        outs = result if isinstance(result, tuple) else (result,)
        # outputs marked non-differentiable, and integer ones (indices), get no gradient, as in PyTorch
        keep = [
            not any(o is m for m in ctx._non_differentiable)
            and np.asarray(getattr(o, "data", o)).dtype.kind == "f"
            for o in outs
        ]
        if not (mode.enabled and any(ctx.needs_input_grad) and any(keep)):
            return result
        arrays = [o.data if isinstance(o, Tensor) else np.asarray(o) for o in outs]
        inputs = tuple(a if needs else None for a, needs in zip(args, ctx.needs_input_grad))
        metas = tuple((a.data.shape, a.data.dtype) if isinstance(a, Tensor) else None for a in args)
        node = Node(
            _function_backward,
            inputs,
            ctx,
            (cls, metas),
            cls.__name__ + "Backward",
            tuple((a.shape, a.dtype) for a in arrays),
        )
        wrapped = tuple(
            _result(a, node, i) if k else _result(a) for i, (a, k) in enumerate(zip(arrays, keep))
        )
        return wrapped if isinstance(result, tuple) else wrapped[0]


def _function_backward(node: Node, grads: list, graph: bool) -> tuple:
    cls, metas = node.ctx
    ctx = node.saved
    if ctx._materialize_grads:
        grads = [_zeros(meta, graph) if g is None else g for g, meta in zip(grads, node.outs)]
    result = cls.backward(ctx, *(g if graph or g is None else _result(g) for g in grads))
    result = result if isinstance(result, tuple) else (result,)
    n = len(metas)
    if len(result) > n and all(r is None for r in result[n:]):
        result = result[:n]
    if len(result) != n:
        raise RuntimeError(
            f"function {node.name} returned an incorrect number of gradients "
            f"(expected {n}, got {len(result)})"
        )
    return tuple(
        _checked(node.name, i, r, meta, graph) if inp is not None else None
        for i, (r, meta, inp) in enumerate(zip(result, metas, node.inputs))
    )


_function_backward.takes_none = True  # it materializes missing gradients itself (``engine.run_backward``)


def _checked(name: str, index: int, grad: Any, meta: tuple, graph: bool) -> Any:
    """The gradient for input ``index``, summed to the input's shape when it broadcasts to the grad's."""
    if grad is None:
        return None
    shape, dtype = meta
    g = (
        grad
        if graph and isinstance(grad, Tensor)
        else (grad.data if isinstance(grad, Tensor) else np.asarray(grad))
    )
    if tuple(g.shape) != shape:
        if not _expandable(shape, tuple(g.shape)):
            raise RuntimeError(
                f"Function {name} returned an invalid gradient at index {index} - got "
                f"{list(g.shape)} but expected shape compatible with {list(shape)}"
            )
        g = sum_to_shape(g, shape)
    if not graph and g.dtype != dtype:
        g = g.astype(dtype)
    return g


def _expandable(shape: tuple, target: tuple) -> bool:
    if len(shape) > len(target):
        return False
    return all(n == m or n == 1 for n, m in zip(shape[::-1], target[::-1]))
