"""The ``torch.library`` path: a compiled function as two custom ops, ``symgrad::<op name>`` (forward) and
``symgrad::<op name>_vjp``, with fake (meta) implementations, joined by ``register_autograd``, with vmap
rules, and wrapped in new-style ``autograd.Function``s for ``torch.func`` transforms.

The ops are opaque to ``torch.compile``: Dynamo puts them into the graph as they are and AOTAutograd puts
the vjp op into the compiled backward. Each op is defined once per process (``registry.OPS``); its kernels
come from the CompiledFunction bound to its name when it runs (``registry.BOUND``).
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from typing import Any

import torch

from symgrad.interop.torch.arguments import batch, from_numpy, grad_tensor, to_numpy
from symgrad.interop.torch.registry import BOUND, OPS
from symgrad.interop.torch.vmap import vmap_rule


def make_custom_ops(
    op_name: str, title: str, arg_names: tuple, arg_shapes: tuple, out_shapes: tuple
) -> tuple:
    """(forward op, vjp op, autograd.Function for torch.func transforms), defined once per process;
    ``title`` (``CompiledFunction.title``) names the Functions: ``<title>SymgradFunc``, ``<title>SymgradVjp``.
    """
    qualified = f"symgrad::{op_name}"
    if qualified in OPS:  # a second load of the same package (same hash): same kernels
        return OPS[qualified]
    n_args = len(arg_names)
    op, vjp_op = _define_ops(qualified, op_name, arg_names, len(out_shapes))
    forward_fake = _forward_fake(arg_shapes, out_shapes)
    op.register_fake(forward_fake)
    vjp_op.register_fake(_vjp_fake(n_args))
    cotangents = _cotangents(forward_fake, len(out_shapes))

    def refuse_double_backward(ctx: Any, *grads: Any) -> tuple:
        raise BOUND[op_name].double_backward_error()

    op.register_autograd(
        _backward(vjp_op, cotangents, n_args, skip_unneeded=True), setup_context=_save_inputs
    )
    vjp_op.register_autograd(refuse_double_backward, setup_context=_save_nothing)

    fwd_vmap = vmap_rule(arg_shapes, out_shapes, grads=False)
    vjp_vmap = vmap_rule(arg_shapes, out_shapes, grads=True)
    torch.library.register_vmap(op, lambda info, in_dims, *ts: fwd_vmap(op, info, in_dims, ts))
    torch.library.register_vmap(vjp_op, lambda info, in_dims, *ts: vjp_vmap(vjp_op, info, in_dims, ts))

    # torch.func transforms: PyTorch's autograd for custom ops refuses torch.func.grad, so under a transform
    # the call goes through new-style autograd.Functions (setup_context, vmap) wrapping the same two ops.
    vjp_function = functorch_function(
        f"{title}SymgradVjp", vjp_op, refuse_double_backward, vjp_vmap, save=False
    )
    backward = _backward(vjp_function.apply, cotangents, n_args, skip_unneeded=False)
    function = functorch_function(f"{title}SymgradFunc", op, backward, fwd_vmap, save=True)
    OPS[qualified] = (op, vjp_op, function)
    return OPS[qualified]


def schema_names(names: tuple[str, ...]) -> list[str]:
    """``names`` as unique parameter names a ``torch.library`` schema accepts (``arg<i>`` where not)."""
    out, seen = [], set()
    for i, n in enumerate(names):
        n = (
            n
            if n.isidentifier()
            and not keyword.iskeyword(n)
            and n not in ("self", "out")
            and not n.startswith("_")
            else f"arg{i}"
        )
        while n in seen:
            n = f"{n}_{i}"
        seen.add(n)
        out.append(n)
    return out


def _returns(n: int) -> str:
    return "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"


def _define_ops(qualified: str, op_name: str, arg_names: tuple, n_out: int) -> tuple:
    """The forward and vjp custom ops, running the kernels of ``BOUND[op_name]`` on the tensors' memory."""
    n_args = len(arg_names)
    names = schema_names(arg_names)
    cot_names = schema_names(tuple(names) + tuple(f"grad{k}" for k in range(n_out)))[n_args:]
    fwd_schema = f"({', '.join(f'Tensor {n}' for n in names)}) -> {_returns(n_out)}"
    vjp_schema = f"({', '.join(f'Tensor {n}' for n in names + cot_names)}) -> {_returns(n_args)}"

    def forward_impl(*tensors: torch.Tensor) -> Any:
        outs = BOUND[op_name].forward(*(to_numpy(t) for t in tensors))
        results = tuple(from_numpy(o) for o in outs)
        return results if n_out > 1 else results[0]

    def vjp_impl(*tensors: torch.Tensor) -> Any:
        inputs = tensors[:n_args]
        grads = BOUND[op_name].vjp(*(to_numpy(t) for t in tensors))
        # a nondiff argument's gradient is zero: the op's schema returns one tensor per argument
        results = tuple(
            torch.zeros_like(t) if g is None else grad_tensor(g, t) for g, t in zip(grads, inputs)
        )
        return results if n_args > 1 else results[0]

    op = torch.library.custom_op(
        qualified, forward_impl, mutates_args=(), device_types="cpu", schema=fwd_schema
    )
    vjp_op = torch.library.custom_op(
        f"{qualified}_vjp", vjp_impl, mutates_args=(), device_types="cpu", schema=vjp_schema
    )
    return op, vjp_op


def _forward_fake(arg_shapes: tuple, out_shapes: tuple) -> Callable:
    """The forward op's fake (meta) implementation: empty outputs, promoted dtype, broadcast shape."""
    n_out = len(out_shapes)

    def forward_fake(*tensors: torch.Tensor) -> Any:
        dtype = tensors[0].dtype
        for t in tensors[1:]:
            dtype = torch.promote_types(dtype, t.dtype)
        shape = torch.broadcast_shapes(*(batch(t.shape, s) for t, s in zip(tensors, arg_shapes)))
        results = tuple(tensors[0].new_empty((*shape, *s), dtype=dtype) for s in out_shapes)
        return results if n_out > 1 else results[0]

    return forward_fake


def _vjp_fake(n_args: int) -> Callable:
    """The vjp op's fake (meta) implementation: one empty gradient shaped like each argument."""

    def vjp_fake(*tensors: torch.Tensor) -> Any:
        results = tuple(t.new_empty(t.shape) for t in tensors[:n_args])
        return results if n_args > 1 else results[0]

    return vjp_fake


def _cotangents(forward_fake: Callable, n_out: int) -> Callable:
    """``cotangents(inputs, grads)``: ``grads`` with zeros (of the output's shape) for outputs that did not
    reach the loss."""

    def cotangents(inputs: tuple, grads: tuple) -> list:
        if all(g is not None for g in grads):
            return list(grads)
        like = forward_fake(*inputs)
        like = like if n_out > 1 else (like,)
        return [g if g is not None else torch.zeros_like(o) for g, o in zip(grads, like)]

    return cotangents


def _backward(vjp: Callable, cotangents: Callable, n_args: int, skip_unneeded: bool) -> Callable:
    """The backward of the forward op: ``vjp`` (the op, or its torch.func Function) on the saved inputs,
    gradients only where ``ctx.needs_input_grad``."""

    def backward(ctx: Any, *grads: Any) -> tuple:
        if skip_unneeded and not any(ctx.needs_input_grad):
            return (None,) * n_args
        inputs = ctx.saved_tensors
        results = vjp(*inputs, *cotangents(inputs, grads))
        results = results if n_args > 1 else (results,)
        return tuple(r if need else None for r, need in zip(results, ctx.needs_input_grad))

    return backward


def _save_inputs(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.save_for_backward(*inputs)  # the vjp needs the inputs only, never the outputs


def _save_nothing(ctx: Any, inputs: tuple, output: Any) -> None:
    pass


def functorch_function(name: str, call: Any, backward: Any, vmap: Callable, save: bool) -> type:
    """A new-style autograd.Function around a custom op, usable under torch.func transforms."""

    def forward(*tensors: torch.Tensor) -> Any:
        return call(*tensors)

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        if save:
            ctx.save_for_backward(*inputs)

    def vmap_method(info: Any, in_dims: tuple, *tensors: torch.Tensor) -> tuple:
        return vmap(cls.apply, info, in_dims, tensors)

    cls = type(
        name,
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "setup_context": staticmethod(setup_context),
            "backward": staticmethod(backward),
            "vmap": staticmethod(vmap_method),
            "__module__": __package__,
        },
    )
    return cls
