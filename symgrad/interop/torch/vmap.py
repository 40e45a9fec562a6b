"""``torch.func.vmap`` rules of the custom ops (and of the autograd.Functions that wrap them).

The compiled functions broadcast, so a vmapped call is one call on the batched tensors, with the vmapped
axis in front, padded so that it lines up across arguments under trailing-aligned broadcasting.
"""

from __future__ import annotations

from typing import Any


def vmap_rule(in_shapes: tuple, n_results: int, grads: bool) -> Any:
    """The vmap rule of an op whose inputs have per-element shapes ``in_shapes`` and which returns
    ``n_results`` tensors, given the callable to run batched: ``rule(call, info, in_dims, tensors) ->
    (outputs, out_dims)``. ``grads``: the results are gradients shaped like the first ``n_results`` inputs
    (the vjp and hvp ops), so every argument gets the vmapped axis (a stride-0 expand when unbatched) and
    per-example gradients are not summed over it; otherwise the results broadcast like outputs."""

    def rule(call: Any, info: Any, in_dims: tuple, tensors: tuple) -> tuple:
        size = info.batch_size
        out = call(*align_batched(size, in_dims, tensors, in_shapes, expand_all=grads))
        if not grads:
            return out, ((0,) * n_results if n_results > 1 else 0)
        out = out if n_results > 1 else (out,)
        logical = [t.shape if d is None else t.movedim(d, 0).shape[1:] for t, d in zip(tensors, in_dims)]
        results = tuple(g.reshape(size, *shape) for g, shape in zip(out, logical[:n_results]))
        return (results, (0,) * n_results) if n_results > 1 else (results[0], 0)

    return rule


def align_batched(size: int, in_dims: tuple, tensors: tuple, shapes: tuple, expand_all: bool) -> list:
    """Move each vmapped dimension to the front and pad with size-1 axes after it, so that the vmapped axis
    lines up across arguments under trailing-aligned broadcasting; with ``expand_all`` unbatched arguments
    get the leading axis too (a stride-0 expand), so that per-example gradients are not summed over it."""
    ranks = [t.dim() - (d is not None) - len(s) for t, d, s in zip(tensors, in_dims, shapes)]
    top = max(ranks)
    out = []
    for t, d, r in zip(tensors, in_dims, ranks):
        if d is None:
            if not expand_all:
                out.append(t)
                continue
            t = t.reshape((1,) * (top - r + 1) + tuple(t.shape)).expand(size, *([-1] * (t.dim() + top - r)))
        else:
            t = t.movedim(d, 0)
            t = t.reshape((size,) + (1,) * (top - r) + tuple(t.shape[1:]))
        out.append(t)
    return out
