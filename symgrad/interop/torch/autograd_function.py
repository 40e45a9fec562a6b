"""The eager path: a compiled function as an old-style ``torch.autograd.Function``, called as
``apply(jac, *tensors)`` on plain CPU tensors.

``jac=False``: the forward kernel; backward runs the fused vjp kernel on the saved inputs. ``jac=True``
(per-element scalar, one output, one or two arguments; ``TorchFunction._use_jacobian``): the forward runs
the fused ``value_and_jacobian`` kernel and saves the Jacobian instead of the inputs; backward is then
``grad * J`` (summed back to broadcast shapes): the forward program is not recomputed. Old-style
``forward(ctx, ...)``: no per-call signature binding (new-style ``setup_context`` costs an
``inspect.signature`` per call); ``torch.func`` transforms use the custom ops instead. Under
``create_graph=True`` backward goes through the differentiable vjp Function of ``second_order`` on the
inputs (kept by reference, with their versions checked, since the Jacobian path saves none), and forward
mode runs the jvp kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from symgrad.interop.torch.arguments import from_numpy, grad_tensor, to_numpy
from symgrad.interop.torch.registry import BOUND
from symgrad.interop.torch.second_order import forward_tangents


def make_autograd_function(op_name: str, title: str, n_args: int, n_out: int, second: tuple | None) -> type:
    """The eager ``autograd.Function`` ``<title>SymgradFunction`` over the kernels of ``BOUND[op_name]``;
    ``second``: the differentiable vjp and the jvp Functions (``second_order``; None: first order only)."""
    return type(
        f"{title}SymgradFunction",
        (torch.autograd.Function,),
        {
            "forward": staticmethod(_forward(op_name, n_args, n_out)),
            "backward": staticmethod(_backward(op_name, n_args, second)),
            "jvp": staticmethod(_jvp(op_name, second)),
            "__module__": __package__,
        },
    )


def raw_apply(function: type) -> Callable:
    """``function.apply`` without ``torch.autograd.Function``'s Python layer, which binds new-style
    signatures (ours is old-style), routes functorch transforms and unwraps dead functorch wrappers: for
    the eager path, only when ``plain_eager`` holds and no transform is active."""
    try:
        return super(torch.autograd.Function, function).apply
    except AttributeError:  # a PyTorch without the C-level apply: the public one
        return function.apply


def _forward(op_name: str, n_args: int, n_out: int) -> Callable:
    def forward(ctx: Any, jac: bool, *tensors: torch.Tensor) -> Any:
        fn = BOUND[op_name]
        arrays = [t.numpy(force=True) for t in tensors]  # views of the tensors' memory (see to_numpy)
        # for a second differentiation and forward mode (not saved: first-order backward never reads them)
        ctx.inputs, ctx.versions = tensors, [t._version for t in tensors]
        if jac:  # one output (see _use_jacobian)
            results = fn.run_same_shape("value_and_jacobian", arrays)  # same shapes: straight to the kernel
            if results is None:
                out, jacobian = fn.value_and_jacobian(*arrays)  # J: batch + (1, n_args)
                out = out[0] if fn.returns_tuple else out
            else:
                out, jacobian = results
            ctx.jac = [torch.from_numpy(jacobian[..., 0, i]) for i in range(n_args)]
            ctx.shapes = [t.shape for t in tensors]
            return from_numpy(out)
        ctx.jac = None
        ctx.save_for_backward(*tensors)  # the vjp needs the inputs only, never the outputs
        outs = fn.forward(*arrays)
        if n_out == 1:
            return from_numpy(outs[0])
        return tuple(from_numpy(o) for o in outs)

    return forward


def _backward(op_name: str, n_args: int, second: tuple | None) -> Callable:
    def backward(ctx: Any, *grads: Any) -> tuple:
        needs = ctx.needs_input_grad
        if not any(needs):
            return (None,) * (n_args + 1)
        if torch.is_grad_enabled():  # create_graph=True: gradients that can be differentiated again
            return (None, *_differentiable_grads(ctx, op_name, n_args, second, grads))
        jac = ctx.jac
        if jac is not None:
            return (
                None,
                *[
                    _jacobian_grad(jac[i], grads[0], s) if needs[i + 1] else None
                    for i, s in enumerate(ctx.shapes)
                ],
            )
        inputs = ctx.saved_tensors
        cots = [to_numpy(g) if g is not None else 0.0 for g in grads]
        results = BOUND[op_name].vjp(*(to_numpy(t) for t in inputs), *cots)
        return (
            None,
            *[
                grad_tensor(r, t) if need and r is not None else None
                for r, t, need in zip(results, inputs, needs[1:])
            ],
        )

    return backward


def _differentiable_grads(ctx: Any, op_name: str, n_args: int, second: tuple | None, grads: tuple) -> tuple:
    """The gradients through the differentiable vjp Function (``second_order``), on the inputs as they were
    (the Jacobian-saving forward saved none: it checks their versions here)."""
    fn = BOUND[op_name]
    if second is None:  # PyTorch < 2.4: no custom ops for the second-order kernels
        raise fn.double_backward_error()
    inputs = ctx.inputs
    if any(t._version != v for t, v in zip(inputs, ctx.versions)):
        raise RuntimeError(
            f"{fn.name}: an input changed in place since the call; a second derivative needs the old value"
        )
    results = second[0].apply(*inputs, *grads)  # grads are materialized (no None)
    results = results if n_args > 1 else (results,)
    return tuple(r if need else None for r, need in zip(results, ctx.needs_input_grad[1:]))


def _jvp(op_name: str, second: tuple | None) -> Callable:
    def jvp(ctx: Any, jac_tangent: Any, *tangents: Any) -> Any:
        """Forward mode: the jvp kernel (``second_order``)."""
        if second is None:
            raise RuntimeError(f"{BOUND[op_name].name}: forward-mode AD needs PyTorch 2.4 or later")
        return forward_tangents(second[1], ctx.inputs, tangents)

    return jvp


def _jacobian_grad(column: torch.Tensor, grad: torch.Tensor | None, shape: torch.Size) -> torch.Tensor:
    """grad * J[..., 0, i], summed back to the input's (broadcast) shape."""
    if grad is None:
        return column.new_zeros(shape)
    term = grad * column
    return term if term.shape == shape else term.sum_to_size(shape)
