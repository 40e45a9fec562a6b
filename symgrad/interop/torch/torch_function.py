"""``TorchFunction``: the callable ``to_torch`` returns, which checks the arguments and picks the path of
each call (custom ops when traced or transformed, the eager ``autograd.Function`` otherwise)."""

from __future__ import annotations

from typing import Any

import torch
import torch.autograd.forward_ad as forward_ad

from symgrad.compiled.arguments import broadcast_shape
from symgrad.interop.torch.arguments import FLOATS, PLAIN, prepare
from symgrad.interop.torch.autograd_function import make_autograd_function, raw_apply
from symgrad.interop.torch.custom_ops import make_custom_ops

_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
_functorch_wrapped = getattr(
    getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", lambda t: False
)


def plain_eager(tensors: list) -> bool:
    """Plain CPU tensors (no functorch wrapper, not even a dead one) and no dispatch mode: the NumPy-level
    autograd.Function may run the call, through ``raw_apply``."""
    if _dispatch_modes():
        return False
    for t in tensors:
        if type(t) not in PLAIN or t.device.type != "cpu" or _functorch_wrapped(t):
            return False
    return True


class TorchFunction:
    """A compiled symgrad function as a PyTorch callable; see ``symgrad.interop.torch``."""

    def __init__(self, fn: Any, op_name: str, implementation: str) -> None:
        self.fn = fn
        self.name = fn.name
        self.op_name = op_name
        self.implementation = implementation
        self.arg_names = fn.arg_names
        self.__doc__ = fn.__doc__
        self.__name__ = self.__qualname__ = fn.name
        n_args, n_out = len(fn.arg_names), fn.n_outputs
        self._n_args, self._n_out = n_args, n_out
        self._scalar_args = all(s == () for s in fn.arg_shapes)
        self._jac_ok = fn.jacobian_saving
        self.op = self.vjp_op = self.function = self.func_function = None
        second = None  # the differentiable vjp and the jvp (``second_order``): custom ops, PyTorch 2.4+
        if hasattr(torch.library, "custom_op"):
            ops = make_custom_ops(op_name, fn.title, fn.arg_names, fn.arg_shapes, fn.out_shapes)
            second = ops[3:]
            if implementation in ("auto", "custom_op"):
                self.op, self.vjp_op, self.func_function = ops[:3]
        if implementation in ("auto", "function"):
            self.function = make_autograd_function(op_name, fn.title, n_args, n_out, second)
            self._eager_apply = raw_apply(self.function)
        if implementation == "function":
            # Dynamo cannot trace into the cffi call: under torch.compile the call is one clean graph break
            # (it runs eagerly); outside, no wrapper (torch.compiler.disable has a cost on every call).
            disable = getattr(getattr(torch, "compiler", None), "disable", None)
            self._apply = self.function.apply
            self._apply_compiling = disable(self.function.apply) if disable else self.function.apply

    def __repr__(self) -> str:
        return (
            f"<symgrad torch op {self.name}({', '.join(self.arg_names)}) [{self.implementation}: "
            f"symgrad::{self.op_name}] from {self.fn.origin}>"
        )

    def _use_jacobian(self, tensors: list) -> bool:
        """Forward with the Jacobian (backward = grad * J, no recomputation) when a gradient will be needed,
        the function is per-element scalar with one output and one or two arguments, and J is no larger than
        the inputs (broadcasting does not blow it up)."""
        if not (self._jac_ok and torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
            return False
        if len(tensors) == 1:
            return True
        shapes = [t.shape for t in tensors]
        batch = broadcast_shape(shapes)
        return batch is not None and any(s == batch for s in shapes)

    def _prepare(self, args: tuple) -> list[torch.Tensor]:
        """The arguments as tensors of one dtype (``arguments.prepare``); runs traced under torch.compile."""
        if self._scalar_args and len(args) == self._n_args:
            # Fast path: plain CPU tensors of one float dtype, per-element scalars, one argument or one shape.
            first = args[0]
            if type(first) in PLAIN and first.dtype in FLOATS and first.device.type == "cpu":
                if self._n_args == 1:
                    return [first]
                dtype, shape = first.dtype, first.shape
                if all(
                    type(a) in PLAIN and a.dtype == dtype and a.shape == shape and a.device.type == "cpu"
                    for a in args
                ):
                    return list(args)
        return prepare(self.fn, args)

    def __call__(self, *args: Any) -> Any:
        tensors = self._prepare(args)
        if self.op is None:
            if _is_compiling():
                out = self._apply_compiling(False, *tensors)
            else:
                out = self._apply(self._use_jacobian(tensors), *tensors)
        elif _is_compiling():
            out = self.op(*tensors)
        elif _functorch_active() or forward_ad._current_level >= 0:  # a transform, or forward-mode AD
            out = self.func_function.apply(*tensors)
        elif self.implementation == "auto" and plain_eager(tensors):
            out = self._eager_apply(self._use_jacobian(tensors), *tensors)
        else:
            out = self.op(*tensors)
        if self.fn.returns_tuple:
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return out[0] if isinstance(out, (tuple, list)) else out
