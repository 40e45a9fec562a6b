"""Framework interop: a compiled symgrad function as a PyTorch op or a JAX function.

    import symgrad as sg
    m = sg.compile("model.py")
    neo_relu = m.neo_relu.to_torch()     # autograd-aware op on CPU tensors   (symgrad.interop.torch)
    neo_relu = m.neo_relu.to_jax()       # jax.custom_jvp over a host call     (symgrad.interop.jax)

Both run the same compiled kernels as ``CompiledFunction.forward`` / ``.vjp`` (the
active symgrad backend, C by default). Neither framework is imported until its entry point is used.
"""

from __future__ import annotations

from typing import Any


def to_torch(fn: Any, **options: Any) -> Any:
    """``symgrad.interop.torch.to_torch`` (imports PyTorch)."""
    from symgrad.interop.torch import to_torch as impl

    return impl(fn, **options)


def to_jax(fn: Any, **options: Any) -> Any:
    """``symgrad.interop.jax.to_jax`` (imports JAX)."""
    from symgrad.interop.jax import to_jax as impl

    return impl(fn, **options)


__all__ = ["to_torch", "to_jax"]
