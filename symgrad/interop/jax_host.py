"""Host calls from JAX for ``to_jax()``: ``host_call(function, structs, *args)``, ``jax.pure_callback``
with ``vmap_method="expand_dims"`` minus its input copies.

``jax.pure_callback`` puts every argument on the CPU device as a new ``jax.Array`` (``device_put``) before
it calls the Python function; the kernels read NumPy arrays, so that copy and its dispatch are waste: at
1e3 rows they were three quarters of a ``jax.jit(jax.grad(...))`` through a compiled function (80 of 106
us), the kernel a tenth. ``host_call`` binds a primitive of its own with ``pure_callback``'s abstract
evaluation and batching rule whose lowering hands XLA's host buffers (NumPy arrays) straight to
``function``. It is built from JAX internals (``jax._src.callback``); where they have moved,
``PRIMITIVE`` is None and ``host_call`` is ``jax.pure_callback``, slower and otherwise the same.

Like ``pure_callback``, the primitive has no derivative rules: ``to_jax`` calls it only inside its
``custom_jvp`` functions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax


def _primitive() -> tuple[Any, Any, Any] | None:
    """(the primitive, ``_FlatCallback``, ``ShapedArray``), or None where JAX's internals differ from what
    this expects."""
    try:
        from jax._src import callback as cb
        from jax._src import core, dispatch, ffi
        from jax._src.interpreters import batching, mlir

        emit, op_sharding, flat = cb.emit_python_callback, cb._callback_op_sharding, cb._FlatCallback
        abstract_eval, batching_rule = cb.pure_callback_abstract_eval, ffi.ffi_batching_rule
        needs_devices, primitive_batchers = (
            dispatch.prim_requires_devices_during_lowering,
            batching.primitive_batchers,
        )
        primitive, apply, register, shaped = (
            core.Primitive,
            dispatch.apply_primitive,
            mlir.register_lowering,
            core.ShapedArray,
        )
    except (ImportError, AttributeError):
        return None
    prim = primitive("symgrad_host_call")
    prim.multiple_results = True
    prim.def_impl(functools.partial(apply, prim))
    prim.def_abstract_eval(abstract_eval)
    needs_devices.add(prim)
    primitive_batchers[prim] = functools.partial(batching_rule, prim)

    def lowering(ctx: Any, *args: Any, callback: Any, sharding: Any, **params: Any) -> Any:
        def host(*arrays: Any) -> tuple:  # XLA's buffers as NumPy arrays, passed on as they are
            return tuple(callback(*arrays))

        sharding = op_sharding(ctx.module_context.axis_context, sharding, ctx.avals_out)
        result, _, _ = emit(
            ctx,
            host,
            None,
            list(args),
            ctx.avals_in,
            ctx.avals_out,
            has_side_effect=False,
            returns_token=False,
            sharding=sharding,
        )
        return result

    register(prim, lowering, cacheable=False)
    return prim, flat, shaped


def _checked(found: tuple[Any, Any, Any] | None) -> tuple[Any, Any, Any] | None:
    """``found`` if one jitted and one vmapped call through it give the right values, else None: internals
    that import but changed their signatures or meaning fall back to ``pure_callback`` too."""
    if found is None:
        return None
    import numpy as np

    def twice(a: Any) -> Any:
        return _bind(found, lambda x: (np.asarray(x) * 2,), (jax.ShapeDtypeStruct(a.shape, a.dtype),), a)[0]

    try:
        x = np.arange(3.0, dtype=np.float32)
        ok = np.array_equal(jax.jit(twice)(x), 2 * x)
        ok = ok and np.array_equal(jax.jit(jax.vmap(twice))(np.stack([x, x])), np.stack([2 * x, 2 * x]))
    except Exception:  # noqa: BLE001 - any failure of JAX's internals means: use the public API
        return None
    return found if ok else None


def _bind(found: tuple[Any, Any, Any], function: Callable, structs: Any, *args: Any) -> Any:
    prim, flat_callback, shaped = found
    avals, out_tree = jax.tree_util.tree_flatten(
        jax.tree_util.tree_map(lambda s: shaped(s.shape, s.dtype), structs)
    )
    flat_args, in_tree = jax.tree_util.tree_flatten((args, {}))
    out = prim.bind(
        *flat_args,
        callback=flat_callback(function, in_tree),
        result_avals=tuple(avals),
        sharding=None,
        vmap_method="expand_dims",
    )
    return jax.tree_util.tree_unflatten(out_tree, out)


PRIMITIVE = _checked(_primitive())


def host_call(function: Callable, structs: Any, *args: Any) -> Any:
    """``function(*args)`` (NumPy arrays in, NumPy arrays out) run on the host from JAX, with results shaped
    like ``structs`` (a pytree of ``jax.ShapeDtypeStruct``); under ``vmap`` one call with the batched axis in
    front (unbatched arguments get a leading 1), as ``pure_callback``'s ``expand_dims``."""
    if PRIMITIVE is None:
        return jax.pure_callback(function, structs, *args, vmap_method="expand_dims")
    return _bind(PRIMITIVE, function, structs, *args)


__all__ = ["host_call", "PRIMITIVE"]
