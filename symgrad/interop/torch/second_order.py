"""Second derivatives of the PyTorch op: the vjp as a differentiable function, and forward mode.

For the gradients ``g = vjp(x, cot)`` and a cotangent ``w`` shaped like ``g``: ``d<w, g>/dx = hvp(x, cot, w)``
(the Hessian of ``<cot, f>`` is symmetric) and ``d<w, g>/dcot = jvp(x, w)``; in forward mode,
``dg = hvp(x, cot, dx) + vjp(x, dcot)``. The forward op's own forward-mode rule is the jvp kernel, and
``jvp(x, t) = J t`` has ``d<w, J t>/dx = hvp(x, w, t)`` and ``d<w, J t>/dt = vjp(x, w)``. So three new-style
``autograd.Function``s over the custom ops ``_vjp``, ``_jvp`` and ``_hvp`` (``custom_ops``) give
``gradgradcheck``, ``create_graph=True``, ``torch.func.hessian`` (forward over reverse), ``torch.func.jvp``;
each has a ``vmap`` rule. The hvp kernel is not differentiated again (a third derivative raises
``CompiledFunction.third_derivative_error``), nor is the jvp in forward mode over forward mode.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from symgrad.interop.torch.registry import BOUND


def function_class(name: str, call: Any, backward: Any, vmap: Callable, jvp: Any, save: bool) -> type:
    """A new-style ``autograd.Function`` around a custom op, usable under ``torch.func`` transforms; with
    ``save`` it keeps its inputs for backward and for forward mode."""

    def forward(*tensors: torch.Tensor) -> Any:
        return call(*tensors)

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        if save:
            ctx.save_for_backward(*inputs)
            ctx.save_for_forward(*inputs)

    def vmap_method(info: Any, in_dims: tuple, *tensors: torch.Tensor) -> tuple:
        return vmap(cls.apply, info, in_dims, tensors)

    cls = type(
        name,
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "setup_context": staticmethod(setup_context),
            "backward": staticmethod(backward),
            "jvp": staticmethod(jvp),
            "vmap": staticmethod(vmap_method),
            "__module__": __package__,
        },
    )
    return cls


def as_tuple(result: Any) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _filled(tensors: Any, like: tuple) -> list:
    """``tensors`` with zeros (shaped like ``like``) in place of None."""
    return [torch.zeros_like(x) if t is None else t for t, x in zip(tensors, like)]


def _given(tensors: Any) -> bool:
    return any(t is not None for t in tensors)


def _require_hvp(op_name: str) -> None:
    if "hvp" not in BOUND[op_name].programs:  # a second derivative symgrad cannot take
        raise BOUND[op_name].double_backward_error()


def _refuse_third(op_name: str, ctx: Any, *grads: Any) -> Any:
    raise BOUND[op_name].third_derivative_error()


def _refuse_forward_over_forward(op_name: str, ctx: Any, *tangents: Any) -> Any:
    raise RuntimeError(
        f"{BOUND[op_name].name}: forward mode over forward mode (torch.func.jacfwd of jacfwd) is not "
        "supported by the compiled kernels; torch.func.hessian (forward over reverse) and reverse over "
        "forward are"
    )


def second_order_functions(op_name: str, title: str, n_args: int, ops: tuple, vmaps: tuple) -> tuple:
    """(``<title>SymgradVjp``, ``<title>SymgradJvp``) over ``ops`` = (vjp, jvp, hvp custom ops) with their
    ``vmaps`` rules, and the backwards of the three (for their ``register_autograd``)."""
    vjp_op, jvp_op, hvp_op = ops
    vjp_vmap, jvp_vmap, hvp_vmap = vmaps

    require_hvp = partial(_require_hvp, op_name)
    refuse_third = partial(_refuse_third, op_name)
    hvp = function_class(f"{title}SymgradHvp", hvp_op, refuse_third, hvp_vmap, refuse_third, save=False)

    def vjp_backward(ctx: Any, *ws: Any) -> tuple:
        """d<w, vjp(x, cot)>: hvp(x, cot, w) for x, jvp(x, w) for cot."""
        require_hvp()
        saved = ctx.saved_tensors
        x, cots = saved[:n_args], saved[n_args:]
        needs = ctx.needs_input_grad
        ws = _filled(ws, x)
        gx = as_tuple(hvp.apply(*x, *cots, *ws)) if any(needs[:n_args]) else (None,) * n_args
        gc: tuple = (None,) * len(cots)
        if any(needs[n_args:]):
            outs = as_tuple(jvp.apply(*x, *ws))
            gc = tuple(o if o.shape == c.shape else o.sum_to_size(c.shape) for o, c in zip(outs, cots))
        return tuple(g if need else None for g, need in zip(gx + gc, needs))

    def vjp_jvp(ctx: Any, *tangents: Any) -> Any:
        """d vjp(x, cot) = hvp(x, cot, dx) + vjp(x, dcot)."""
        require_hvp()
        saved = ctx.saved_tensors
        x, cots = saved[:n_args], saved[n_args:]
        tx, tc = tangents[:n_args], tangents[n_args:]
        parts = []
        if _given(tx):
            parts.append(as_tuple(hvp.apply(*x, *cots, *_filled(tx, x))))
        if _given(tc):
            parts.append(as_tuple(vjp.apply(*x, *_filled(tc, cots))))
        result = parts[0] if len(parts) == 1 else tuple(a + b for a, b in zip(*parts))
        return result if n_args > 1 else result[0]

    vjp = function_class(f"{title}SymgradVjp", vjp_op, vjp_backward, vjp_vmap, vjp_jvp, save=True)

    def jvp_backward(ctx: Any, *ws: Any) -> tuple:
        """d<w, J(x) t>: hvp(x, w, t) for x, vjp(x, w) for t."""
        require_hvp()
        saved = ctx.saved_tensors
        x, ts = saved[:n_args], saved[n_args:]
        needs = ctx.needs_input_grad
        outs = as_tuple(jvp.apply(*x, *ts)) if any(w is None for w in ws) else ws
        ws = _filled(ws, outs)
        gx = as_tuple(hvp.apply(*x, *ws, *ts)) if any(needs[:n_args]) else (None,) * n_args
        gt = as_tuple(vjp.apply(*x, *ws)) if any(needs[n_args:]) else (None,) * n_args
        gt = tuple(g if g is None or g.shape == t.shape else g.sum_to_size(t.shape) for g, t in zip(gt, ts))
        return tuple(g if need else None for g, need in zip(gx + gt, needs))

    refuse = partial(_refuse_forward_over_forward, op_name)
    jvp = function_class(f"{title}SymgradJvp", jvp_op, jvp_backward, jvp_vmap, refuse, save=True)
    return vjp, jvp, (vjp_backward, jvp_backward, refuse_third)


def forward_tangents(jvp: type, inputs: tuple, tangents: tuple) -> Any:
    """The forward op's forward-mode rule: the jvp kernel (zeros for inputs without a tangent)."""
    return jvp.apply(*inputs, *_filled(tangents, inputs))
