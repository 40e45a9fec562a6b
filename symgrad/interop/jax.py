"""A compiled symgrad function as a JAX function: ``m.neo_relu.to_jax()``.

    f = m.blend.to_jax()
    jax.jit(f)(x, y)
    jax.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1))(x, y)

The function is a ``jax.custom_jvp``: its primal calls the forward kernel, its tangent is ``J . t``, with
J from the fused ``value_and_jacobian`` kernel (through ``jax_host.host_call``) contracted in JAX, so JAX can
transpose it: ``jax.jit``, ``jax.grad``, ``jax.vjp``, ``jax.jvp``, ``jax.jacfwd``, ``jax.jacrev`` and
``jax.vmap`` (``vmap_method="expand_dims"``: one kernel call for the whole batch) all work. J is itself a
``custom_jvp`` whose tangent is the Hessian program's H contracted with t (``jax.hessian``, grad of grad);
for a function too large for that program, one hvp kernel call per output element (forward over reverse:
``jax.hessian``, ``jax.jacfwd(jax.grad)``; reverse over reverse needs the Hessian program). A third
derivative raises ``CompiledFunction.third_derivative_error``; a function without an hvp program raises
``double_backward_error`` at the second. Reverse mode costs the Jacobian program (n_out x n_in per element),
not the vjp's n_in; a ``custom_vjp`` with the vjp kernel would take a second host call (forward, then vjp),
and the host call, not J, was what ``jax.grad`` paid beyond the kernel (``jax_host``).

Arguments: JAX or NumPy arrays or Python numbers; the dtype is ``jnp.result_type`` of the arguments (so
Python numbers are weak, and without ``jax_enable_x64`` everything is float32), and must be float32 or
float64. They broadcast like the compiled function (per-element shapes are trailing axes); the gradient
of a broadcast argument is summed back to its shape (in JAX, after the callback).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from symgrad.abi import FLOAT_DTYPES
from symgrad.compiled.arguments import (
    FLOAT_NAMES,
    batch_shape,
    broadcast_batches,
    broadcast_shape,
    check_arity,
    check_number,
    dtype_error,
    is_number,
    type_error,
)
from symgrad.errors import ArgumentError
from symgrad.interop.jax_host import host_call

_CACHE: dict[int, tuple[Any, JaxFunction]] = {}


def to_jax(fn: Any) -> JaxFunction:
    """``fn`` (a ``CompiledFunction``) as a JAX-differentiable function; repeated calls give one object."""
    hit = _CACHE.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    wrapped = JaxFunction(fn)
    _CACHE[id(fn)] = (fn, wrapped)
    return wrapped


def _full(arrays: Any, tails: tuple) -> tuple[list, tuple]:
    """``arrays`` (NumPy) broadcast to their common batch shape (per-element shapes ``tails``), and it:
    under vmap's expand_dims an unbatched argument arrives with a leading 1, and per-element derivatives
    must keep every batch axis."""
    arrays = [np.asarray(a) for a in arrays]
    batch = broadcast_shape(a.shape[: a.ndim - len(t)] for a, t in zip(arrays, tails))
    return [np.broadcast_to(a, batch + t) for a, t in zip(arrays, tails)], batch


def _callbacks(fn: Any) -> tuple:
    """The host callbacks (forward, value_and_jacobian, Jacobian tangent) calling ``fn``'s kernels."""
    n_args = len(fn.arg_names)
    diff = [k for k, d in enumerate(fn.arg_diff) if d]
    out_sizes = [math.prod(s) for s in fn.out_shapes]

    def forward_callback(*arrays: Any) -> tuple:
        return tuple(fn.forward(*(np.asarray(a) for a in arrays)))

    def jacobian_callback(*arrays: Any) -> tuple:
        outs, jac = fn.value_and_jacobian(*(np.asarray(a) for a in arrays))
        return (*(outs if fn.returns_tuple else (outs,)), jac)

    def jacobian_tangent_callback(*arrays: Any) -> np.ndarray:
        """dJ/dx . t, batch + (n_out, n_in): row o is the hvp with the unit cotangent of output element o
        (each output's Hessian is symmetric), one kernel call per output element."""
        full, batch = _full(arrays, fn.arg_shapes + tuple(fn.arg_shapes[k] for k in diff))
        args, tangents = tuple(full[:n_args]), iter(full[n_args:])
        tangents = tuple(next(tangents) if d else None for d in fn.arg_diff)
        rows = []
        for m, size in enumerate(out_sizes):
            for e in range(size):
                cots = [np.zeros(s, args[0].dtype) for s in fn.out_shapes]
                cots[m].reshape(-1)[e] = 1
                hvp = fn.hvp(args, tangents, tuple(cots))
                rows.append(np.concatenate([hvp[k].reshape(batch + (-1,)) for k in diff], axis=-1))
        return np.stack(rows, axis=-2)

    def hessian_callback(*arrays: Any) -> np.ndarray:
        """H, batch + (n_out, n_in, n_in) (also for one output element)."""
        hess = fn.hessian(*(np.asarray(a) for a in arrays))
        lead = hess.ndim - (2 if sum(out_sizes) == 1 else 3)
        return hess.reshape(hess.shape[:lead] + (sum(out_sizes),) + hess.shape[-2:])

    return forward_callback, jacobian_callback, hessian_callback, jacobian_tangent_callback


class JaxFunction:
    """A compiled symgrad function as a JAX function; see the module docstring."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.name = fn.name
        self.arg_names = fn.arg_names
        self.__doc__ = fn.__doc__
        self.__name__ = self.__qualname__ = fn.name
        self._diff = [k for k, d in enumerate(fn.arg_diff) if d]
        self._out_sizes = [math.prod(s) for s in fn.out_shapes]
        self._core = self._make_core()

    def __repr__(self) -> str:
        return f"<symgrad JAX function {self.name}({', '.join(self.arg_names)}) from {self.fn.origin}>"

    # -- shapes ---------------------------------------------------------------------------------------------
    def _batch_rank(self, shapes: tuple) -> int:
        return max(len(s) - len(t) for s, t in zip(shapes, self.fn.arg_shapes))

    def _batch(self, args: tuple) -> tuple:
        """The broadcast batch shape of (checked) arguments."""
        return broadcast_shape(a.shape[: a.ndim - len(t)] for a, t in zip(args, self.fn.arg_shapes))

    def _structs(self, args: tuple, jacobian: bool) -> tuple:
        """The result shapes of the forward (and, with ``jacobian``, J's) callback."""
        batch, dtype = self._batch(args), args[0].dtype
        outs = tuple(jax.ShapeDtypeStruct(batch + s, dtype) for s in self.fn.out_shapes)
        return (*outs, self._jacobian_struct(batch, dtype)) if jacobian else outs

    def _jacobian_struct(self, batch: tuple, dtype: Any) -> jax.ShapeDtypeStruct:
        n_in = sum(math.prod(self.fn.arg_shapes[k]) for k in self._diff)
        return jax.ShapeDtypeStruct(batch + (sum(self._out_sizes), n_in), dtype)

    def _flat_tangents(self, batch: tuple, tangents: tuple, dtype: Any) -> jax.Array:
        """The tangents of the differentiable arguments flattened and broadcast: ``batch + (n_in,)``."""
        parts = [
            jnp.broadcast_to(tangents[k], batch + s).reshape(batch + (math.prod(s),))
            for k, s in ((k, self.fn.arg_shapes[k]) for k in self._diff)
        ]
        return jnp.concatenate(parts, axis=-1).astype(dtype)

    def _contract(self, jac: jax.Array, tangents: tuple) -> tuple:
        """J . t per output, in JAX (so that reverse mode transposes it)."""
        batch = jac.shape[:-2]
        rows = (jac * self._flat_tangents(batch, tangents, jac.dtype)[..., None, :]).sum(-1)  # XLA fuses it
        ends = np.cumsum(self._out_sizes)[:-1].tolist()
        return tuple(r.reshape(batch + s) for r, s in zip(jnp.split(rows, ends, axis=-1), self.fn.out_shapes))

    # -- the core: every argument has the same batch rank and the same dtype --------------------------------
    def _make_core(self) -> Any:
        """``core(*args) -> outputs``: a ``custom_jvp`` whose tangent is ``J . t`` with J from the fused
        ``value_and_jacobian`` kernel; J is itself a ``custom_jvp`` whose tangent comes from the hvp kernel,
        and that one refuses a third derivative."""
        fn = self.fn
        forward_callback, jacobian_callback, hessian_callback, jacobian_tangent_callback = _callbacks(fn)

        callback = host_call

        @jax.custom_jvp
        def hvp_rows(*args: jax.Array) -> jax.Array:
            n = len(fn.arg_names)
            return callback(
                jacobian_tangent_callback, self._jacobian_struct(self._batch(args[:n]), args[0].dtype), *args
            )

        @hvp_rows.defjvp
        def hvp_rows_jvp(primals: tuple, tangents: tuple) -> tuple:
            raise fn.third_derivative_error()

        @jax.custom_jvp
        def value_and_jacobian(*args: jax.Array) -> tuple:
            return tuple(callback(jacobian_callback, self._structs(args, True), *args))

        @jax.custom_jvp
        def hessian(*args: jax.Array) -> jax.Array:
            batch, dtype = self._batch(args), args[0].dtype
            n_out, n_in = self._jacobian_struct(batch, dtype).shape[-2:]
            struct = jax.ShapeDtypeStruct(batch + (n_out, n_in, n_in), dtype)
            return callback(hessian_callback, struct, *args)

        @hessian.defjvp
        def hessian_jvp(primals: tuple, tangents: tuple) -> tuple:
            raise fn.third_derivative_error()

        @value_and_jacobian.defjvp
        def value_and_jacobian_jvp(primals: tuple, tangents: tuple) -> tuple:
            """dJ . t: the Hessian contracted in JAX where its program was compiled (reverse mode transposes
            it), else one hvp per output element (forward over reverse only)."""
            if "hvp" not in fn.programs:  # a second derivative symgrad cannot take
                raise fn.double_backward_error()
            *outs, jac = value_and_jacobian(*primals)
            if "value_jacobian_hessian" in fn.programs:
                flat = self._flat_tangents(jac.shape[:-2], tangents, jac.dtype)
                d_jac = (hessian(*primals) * flat[..., None, None, :]).sum(-1)
            else:
                d_jac = hvp_rows(*primals, *(tangents[k] for k in self._diff))
            return (*outs, jac), (*self._contract(jac, tangents), d_jac)

        @jax.custom_jvp
        def core(*args: jax.Array) -> tuple:
            return tuple(callback(forward_callback, self._structs(args, False), *args))

        @core.defjvp
        def core_jvp(primals: tuple, tangents: tuple) -> tuple:
            *outs, jac = value_and_jacobian(*primals)
            return tuple(outs), self._contract(jac, tangents)

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
        outs = self._core(*args)
        return tuple(outs) if self.fn.returns_tuple else outs[0]


__all__ = ["to_jax", "JaxFunction"]
