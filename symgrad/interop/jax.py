"""A compiled symgrad function as a JAX function: ``m.neo_relu.to_jax()``.

    f = m.blend.to_jax()
    jax.jit(f)(x, y)
    jax.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1))(x, y)

The function is a ``jax.custom_vjp`` whose forward and backward call the compiled kernels (the active
symgrad backend, C by default) through ``jax.pure_callback``, so it works under ``jax.jit``, ``jax.grad``,
``jax.vjp``, ``jax.vmap`` (``vmap_method="expand_dims"``: one kernel call for the whole batch) and
combinations such as ``jax.vmap(jax.grad(...))`` and ``jax.jacrev``. Forward mode (``jax.jvp``,
``jax.jacfwd``) is not available through a ``custom_vjp``; neither is a second derivative.

Residuals: the inputs, for the vjp kernel in the backward callback; or, for per-element scalar functions
with one output and one or two arguments whose Jacobian is no larger than the inputs, the forward under
differentiation runs the fused ``value_and_jacobian`` kernel and keeps only J, and the backward is
``cotangent * J`` in JAX (no second callback, no recomputation of the forward). Outside differentiation
only the forward kernel runs.

Arguments: JAX or NumPy arrays or Python numbers; the dtype is ``jnp.result_type`` of the arguments (so
Python numbers are weak, and without ``jax_enable_x64`` everything is float32), and must be float32 or
float64. They broadcast like the compiled function (per-element shapes are trailing axes); the gradient
of a broadcast argument is summed back to its shape (in JAX, after the callback).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from symgrad.abi import FLOAT_DTYPES
from symgrad.compiled.arguments import (
    FLOAT_NAMES,
    batch_shape,
    broadcast_axes,
    broadcast_batches,
    broadcast_shape,
    check_arity,
    check_number,
    dtype_error,
    is_number,
    type_error,
)
from symgrad.errors import ArgumentError

_CACHE: dict[int, tuple[Any, JaxFunction]] = {}


def to_jax(fn: Any) -> JaxFunction:
    """``fn`` (a ``CompiledFunction``) as a JAX-differentiable function; repeated calls give one object."""
    hit = _CACHE.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    wrapped = JaxFunction(fn)
    _CACHE[id(fn)] = (fn, wrapped)
    return wrapped


def _sum_to(g: jax.Array, shape: tuple) -> jax.Array:
    """Sum ``g`` (the batch shape, same rank as ``shape``) over the axes where ``shape`` has 1."""
    axes = broadcast_axes(g.shape, tuple(shape))
    g = jnp.sum(g, axis=axes, keepdims=True) if axes else g
    return g if g.shape == tuple(shape) else jnp.broadcast_to(g, shape)


def _callbacks(fn: Any) -> tuple:
    """The host callbacks (forward, value_and_jacobian, vjp) calling ``fn``'s kernels on NumPy arrays."""
    n_args = len(fn.arg_names)

    def forward_callback(*arrays: Any) -> tuple:
        return tuple(fn.forward(*(np.asarray(a) for a in arrays)))

    def jacobian_callback(*arrays: Any) -> tuple:
        outs, jac = fn.value_and_jacobian(*(np.asarray(a) for a in arrays))
        return (*(outs if fn.returns_tuple else (outs,)), jac)

    def vjp_callback(*arrays: Any) -> tuple:
        # Full-batch gradients (no summing here): under vmap's expand_dims an unbatched argument arrives
        # with a leading 1 while its per-example gradient must keep the batch axis; JAX sums afterwards.
        arrays = [np.asarray(a) for a in arrays]
        args = arrays[:n_args]
        batch = broadcast_shape(
            a.shape[: a.ndim - len(t)] for a, t in zip(arrays, fn.arg_shapes + fn.out_shapes)
        )
        full = [np.broadcast_to(a, batch + t) for a, t in zip(args, fn.arg_shapes)]
        grads = fn.vjp(*full, *arrays[n_args:])
        # custom_vjp wants a cotangent for every argument: zero for a nondiff one
        return tuple(np.zeros_like(a) if g is None else g for g, a in zip(grads, full))

    return forward_callback, jacobian_callback, vjp_callback


class JaxFunction:
    """A compiled symgrad function as a JAX function; see the module docstring."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.name = fn.name
        self.arg_names = fn.arg_names
        self.__doc__ = fn.__doc__
        self.__name__ = self.__qualname__ = fn.name
        self._n_args, self._n_out = len(fn.arg_names), fn.n_outputs
        #: per-element scalar, one output, one or two differentiable arguments (``CompiledFunction``)
        self._jac_ok = fn.jacobian_saving
        self._core = self._make_core()

    def __repr__(self) -> str:
        return f"<symgrad JAX function {self.name}({', '.join(self.arg_names)}) from {self.fn.origin}>"

    # -- shapes ---------------------------------------------------------------------------------------------
    def _batch_rank(self, shapes: tuple) -> int:
        return max(len(s) - len(t) for s, t in zip(shapes, self.fn.arg_shapes))

    def _batch(self, shapes: tuple) -> tuple:
        """The broadcast batch shape of (checked) argument shapes."""
        return broadcast_shape(s[: len(s) - len(t)] for s, t in zip(shapes, self.fn.arg_shapes))

    # -- the custom_vjp core: every argument has the same batch rank and the same dtype ---------------------
    def _use_jacobian(self, shapes: tuple) -> bool:
        """Forward with the Jacobian (backward = cotangent * J in JAX, no second callback) for per-element
        scalar functions with one output and one or two arguments when J is no larger than the inputs (no
        broadcast blow-up). One output only: multi-output fused Jacobians are not trusted yet (see the
        xfail in tests/test_adbench.py)."""
        if not self._jac_ok:
            return False
        batch = self._batch(shapes)
        return any(tuple(s) == batch for s in shapes)

    def _make_core(self) -> Any:
        fn, n_args, n_out = self.fn, self._n_args, self._n_out
        forward_callback, jacobian_callback, vjp_callback = _callbacks(fn)

        def out_structs(args: tuple) -> tuple:
            batch = self._batch(tuple(a.shape for a in args))
            return tuple(jax.ShapeDtypeStruct(batch + s, args[0].dtype) for s in fn.out_shapes)

        def call_forward(args: tuple) -> tuple:
            return jax.pure_callback(forward_callback, out_structs(args), *args, vmap_method="expand_dims")

        # ``shapes`` (static, hashable) lets the backward sum gradients back to the arguments' shapes.
        @partial(jax.custom_vjp, nondiff_argnums=(0,))
        def core(shapes: tuple, *args: jax.Array) -> tuple:
            return call_forward(args)

        def core_fwd(shapes: tuple, *args: jax.Array) -> tuple:
            if not self._use_jacobian(shapes):
                return call_forward(args), args  # residuals: the inputs only
            structs = out_structs(args)
            jac = jax.ShapeDtypeStruct(structs[0].shape + (n_out, n_args), args[0].dtype)
            *outs, jac = jax.pure_callback(
                jacobian_callback, (*structs, jac), *args, vmap_method="expand_dims"
            )
            return tuple(outs), jac  # residuals: the Jacobian only

        def core_bwd(shapes: tuple, res: Any, cotangents: tuple) -> tuple:
            if self._use_jacobian(shapes):
                jac = res
                grads = tuple(
                    sum(c * jac[..., j, i] for j, c in enumerate(cotangents)) for i in range(n_args)
                )
                return tuple(_sum_to(g, s) for g, s in zip(grads, shapes))
            args = res
            batch = self._batch(shapes)
            dtype = args[0].dtype
            cots = tuple(jnp.asarray(c, dtype) for c in cotangents)
            structs = tuple(jax.ShapeDtypeStruct(batch + t, dtype) for t in fn.arg_shapes)
            grads = jax.pure_callback(vjp_callback, structs, *args, *cots, vmap_method="expand_dims")
            return tuple(_sum_to(g, s) for g, s in zip(grads, shapes))

        core.defvjp(core_fwd, core_bwd)
        return core

    # -- the boundary ---------------------------------------------------------------------------------------
    def _prepare(self, args: tuple) -> list:
        """The arguments checked (``symgrad.compiled.arguments``), as arrays of one float dtype."""
        fn = self.fn
        check_arity(fn.name, fn.arg_names, len(args))
        for value, name, tail in zip(args, fn.arg_names, fn.arg_shapes):
            if is_number(value):
                check_number(fn.name, name, tail)
            elif hasattr(value, "shape") and hasattr(value, "dtype"):  # arrays, tracers
                dtype = np.dtype(value.dtype)
                if dtype.kind != "f":  # any float here: the promoted dtype is checked below
                    raise dtype_error(fn.name, name, dtype)
                batch_shape(fn.name, name, tuple(value.shape), tail)
            else:
                raise type_error(fn.name, name, "an array", value)
        dtype = np.dtype(jnp.result_type(*args))
        if dtype not in FLOAT_DTYPES:
            if dtype.kind in "iub":  # only Python numbers: JAX's default float
                dtype = np.dtype(jnp.result_type(float))
            else:
                raise ArgumentError(
                    f"{fn.name}: arguments have dtype {dtype}; the compiled kernels take {FLOAT_NAMES}"
                )
        arrays = [jnp.asarray(a, dtype) for a in args]
        shapes = tuple(a.shape for a in arrays)
        broadcast_batches(
            fn.name, fn.arg_names, [s[: len(s) - len(t)] for s, t in zip(shapes, fn.arg_shapes)]
        )
        # Same batch rank for every argument (leading 1s; a free reshape): under vmap the batched axis goes in
        # front of each argument, and it only lines up across arguments of the same rank.
        rank = self._batch_rank(shapes)
        return [
            a.reshape((1,) * (rank - (a.ndim - len(t))) + a.shape) if a.ndim - len(t) < rank else a
            for a, t in zip(arrays, fn.arg_shapes)
        ]

    def __call__(self, *args: Any) -> Any:
        args = self._prepare(args)
        outs = self._core(tuple(tuple(a.shape) for a in args), *args)
        return tuple(outs) if self.fn.returns_tuple else outs[0]


__all__ = ["to_jax", "JaxFunction"]
