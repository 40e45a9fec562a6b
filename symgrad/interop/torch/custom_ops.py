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
from symgrad.interop.torch.second_order import forward_tangents, function_class, second_order_functions
from symgrad.interop.torch.vmap import vmap_rule


def make_custom_ops(
    op_name: str, title: str, arg_names: tuple, arg_shapes: tuple, out_shapes: tuple
) -> tuple:
    """(forward op, vjp op, autograd.Function for torch.func transforms, its vjp and jvp Functions
    (``second_order``)), defined once per process; ``title`` (``CompiledFunction.title``) names the
    Functions: ``<title>SymgradFunc``, ``<title>SymgradVjp``, ``<title>SymgradJvp``, ``<title>SymgradHvp``.
    """
    qualified = f"symgrad::{op_name}"
    if qualified in OPS:  # a second load of the same package (same hash): same kernels
        return OPS[qualified]
    n_args, n_out = len(arg_names), len(out_shapes)
    op, vjp_op, jvp_op, hvp_op = _define_ops(qualified, op_name, arg_names, n_out)
    forward_fake = _forward_fake(arg_shapes, out_shapes)
    op.register_fake(forward_fake)
    vjp_op.register_fake(_vjp_fake(n_args))
    jvp_op.register_fake(_forward_fake(arg_shapes + arg_shapes, out_shapes))
    hvp_op.register_fake(_vjp_fake(n_args))
    cotangents = _cotangents(forward_fake, n_out)

    vmaps = (
        vmap_rule(arg_shapes, n_out, grads=False),
        vmap_rule(arg_shapes + out_shapes, n_args, grads=True),
        vmap_rule(arg_shapes + arg_shapes, n_out, grads=False),
        vmap_rule(arg_shapes + out_shapes + arg_shapes, n_args, grads=True),
    )
    for custom_op, rule in zip((op, vjp_op, jvp_op, hvp_op), vmaps):
        torch.library.register_vmap(custom_op, _vmap_method(custom_op, rule))
    vjp_function, jvp_function, backwards = second_order_functions(
        op_name, title, n_args, (vjp_op, jvp_op, hvp_op), vmaps[1:]
    )
    op.register_autograd(
        _backward(vjp_op, cotangents, n_args, skip_unneeded=True), setup_context=_save_inputs
    )
    for custom_op, backward in zip((vjp_op, jvp_op, hvp_op), backwards):
        custom_op.register_autograd(backward, setup_context=_save_inputs)

    # torch.func transforms: PyTorch's autograd for custom ops refuses torch.func.grad, so under a transform
    # the call goes through new-style autograd.Functions (setup_context, jvp, vmap) wrapping the same ops.
    backward = _backward(vjp_function.apply, cotangents, n_args, skip_unneeded=False)

    def forward_jvp(ctx: Any, *tangents: Any) -> Any:
        return forward_tangents(jvp_function, ctx.saved_tensors, tangents)

    function = function_class(f"{title}SymgradFunc", op, backward, vmaps[0], forward_jvp, save=True)
    OPS[qualified] = (op, vjp_op, function, vjp_function, jvp_function)
    return OPS[qualified]


def _vmap_method(custom_op: Any, rule: Callable) -> Callable:
    return lambda info, in_dims, *ts: rule(custom_op, info, in_dims, ts)


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
    """The forward, vjp, jvp and hvp custom ops, running the kernels of ``BOUND[op_name]`` on the tensors'
    memory (a nondiff argument's gradient is zero: a schema returns one tensor per argument)."""
    n_args = len(arg_names)
    names = schema_names(arg_names)
    extra = schema_names(
        tuple(names) + tuple(f"grad{k}" for k in range(n_out)) + tuple(f"tangent_{n}" for n in names)
    )[n_args:]
    cot_names, tan_names = extra[:n_out], extra[n_out:]
    outs, grads = _returns(n_out), _returns(n_args)

    def schema(params: list, returns: str) -> str:
        return f"({', '.join(f'Tensor {n}' for n in params)}) -> {returns}"

    def forward_impl(*tensors: torch.Tensor) -> Any:
        return _results(BOUND[op_name].forward(*(to_numpy(t) for t in tensors)), None)

    def vjp_impl(*tensors: torch.Tensor) -> Any:
        return _results(BOUND[op_name].vjp(*(to_numpy(t) for t in tensors)), tensors[:n_args])

    def jvp_impl(*tensors: torch.Tensor) -> Any:
        fn = BOUND[op_name]
        arrays = [to_numpy(t) for t in tensors]
        tangents = tuple(a if d else None for a, d in zip(arrays[n_args:], fn.arg_diff))
        out_tangents = fn.jvp(tuple(arrays[:n_args]), tangents)[1]
        return _results(out_tangents if fn.returns_tuple else (out_tangents,), None)

    def hvp_impl(*tensors: torch.Tensor) -> Any:
        fn = BOUND[op_name]
        arrays = [to_numpy(t) for t in tensors]
        tangents = tuple(a if d else None for a, d in zip(arrays[n_args + n_out :], fn.arg_diff))
        hvps = fn.hvp(tuple(arrays[:n_args]), tangents, tuple(arrays[n_args : n_args + n_out]))
        return _results(hvps, tensors[:n_args])

    ops = []
    for suffix, impl, params, returns in (
        ("", forward_impl, names, outs),
        ("_vjp", vjp_impl, names + cot_names, grads),
        ("_jvp", jvp_impl, names + tan_names, outs),
        ("_hvp", hvp_impl, names + cot_names + tan_names, grads),
    ):
        ops.append(
            torch.library.custom_op(
                qualified + suffix, impl, mutates_args=(), device_types="cpu", schema=schema(params, returns)
            )
        )
    return tuple(ops)


def _results(arrays: Any, like: tuple | None) -> Any:
    """Kernel results as tensors: outputs (``like`` None), or gradients shaped like the tensors ``like``
    (zeros for a nondiff argument's None); one tensor alone, several as a tuple."""
    if like is None:
        results = tuple(from_numpy(a) for a in arrays)
    else:
        results = tuple(torch.zeros_like(t) if g is None else grad_tensor(g, t) for g, t in zip(arrays, like))
    return results if len(results) > 1 else results[0]


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
