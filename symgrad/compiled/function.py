"""``CompiledFunction``: a compiled symgrad function as a NumPy-level callable (no SymPy here).

It validates arguments at the boundary (dtype and shape errors name the function and the argument),
broadcasts arguments in the style of NumPy generalized ufuncs (per-element shapes are trailing axes),
calls the active backend's kernel and sums gradients of broadcast arguments back to their shapes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from symgrad import abi, backends
from symgrad.build.package import Package
from symgrad.build.progress import notice
from symgrad.compiled import display, higher
from symgrad.compiled.arguments import (
    as_array,
    batch_shape,
    bind,
    broadcast_batches,
    check_arity,
    check_dtype,
    check_number,
    check_number_range,
    is_number,
    jacobian_columns,
    out_problem,
    same_shape_floats,
    split_cotangents,
    sum_to_shape,
    uniform_value,
)
from symgrad.compiled.lazy import lazy_arrays
from symgrad.errors import ArgumentError

_F64, _F32 = abi.FLOAT_DTYPES


#: (Tensor type, apply) once the tape runtime registered itself (``register_tensor_hook``): before that no
#: Tensor can exist, and a call on arrays does not pay the runtime's import.
_tensor_hook: tuple = ((), None)
#: Framework adapters by name (``to_torch``, ``to_jax``): module and function, imported on first use.
ADAPTERS = {"torch": ("symgrad.interop.torch", "to_torch"), "jax": ("symgrad.interop.jax", "to_jax")}


def register_tensor_hook(tensor_type: type, apply: Callable) -> None:
    """Called by the runtime when it loads: a call with a ``tensor_type`` argument runs ``apply(fn, args)``
    (one tape node) instead of the kernels on arrays."""
    global _tensor_hook
    _tensor_hook = (tensor_type, apply)


class CompiledFunction(higher.SecondOrder, display.Notebook):
    """Forward, vjp and fused value_and_vjp of one function (second order: ``SecondOrder``; in notebooks:
    ``display``); see ``docs/contracts.md``."""

    def __init__(self, package: Package, entry: dict) -> None:
        #: the package it was loaded from (``symgrad.build.package.Package``)
        self.package = package
        self._entry = entry
        self.name: str = entry["name"]
        #: the sanitized identifier of its generated functions (``symgrad.abi.kernel_symbol``)
        self.ident: str = entry["ident"]
        #: program name -> {"inputs": [slot, ...], "outputs": [slot, ...]} as in the manifest
        self.programs: dict[str, dict] = entry["programs"]
        self.origin: str = entry["origin"]
        self.__doc__ = entry["doc"] or f"Compiled symgrad function {self.name} ({self.origin})."
        self.arg_names = tuple(a["name"] for a in entry["args"])
        self.arg_shapes = tuple(tuple(a["shape"]) for a in entry["args"])
        #: False for arguments declared ``nondiff``: vjp gives None for them, jacobian/jvp skip them
        self.arg_diff = tuple(a.get("diff", True) for a in entry["args"])
        self._all_diff = all(self.arg_diff)
        #: arguments declared ``uniform``: one number per call, passed to the kernels by value
        self._uniform = frozenset(a["name"] for a in entry["args"] if a.get("uniform"))
        self.out_shapes = tuple(tuple(o["shape"]) for o in entry["outputs"])
        self.n_outputs = len(self.out_shapes)
        self.returns_tuple: bool = entry["returns_tuple"]
        self.derivatives: dict[str, str] = entry["derivatives"]
        self.formulas: dict[str, str] = entry["formulas"]
        self.op_counts: dict[str, int] = entry["op_counts"]
        self._scalar_slots = not any(self.arg_shapes) and not any(self.out_shapes)
        self.uniform_at = tuple(k for k, name in enumerate(self.arg_names) if name in self._uniform)
        self._elementwise = self._scalar_slots and not self._uniform
        #: per-element scalar, one output, one or two differentiable arguments: a tape node or autograd
        #: Function may run value_and_jacobian forward and save J (as large as the inputs) for backward;
        #: ``jacobian_arity``: the tape node's argument count where it may (no uniform argument), else 0
        self.jacobian_saving: bool = (
            self._scalar_slots
            and self.n_outputs == 1
            and len(self.arg_names) <= 2
            and self._all_diff
            and "value_and_jacobian" in entry["programs"]
        )
        self.jacobian_arity: int = len(self.arg_names) if self.jacobian_saving and not self.uniform_at else 0
        self._vjp_shapes = self.arg_shapes + self.out_shapes
        self._vjp_names = self.arg_names + tuple(
            f"grad of output {k}" if self.n_outputs > 1 else "grad_out" for k in range(self.n_outputs)
        )
        #: ``Softplus``: the name's parts capitalized, how tape nodes and framework ops label this function
        self.title = "".join(p.capitalize() for p in self.name.split("_"))
        #: ``SoftplusBackward``: how tape nodes and framework ops name this function's backward
        self.backward_name = self.title + "Backward"
        self._kernels: dict[tuple, Any] = {}
        self._loaded: dict[str, tuple[str, Any]] = {}

    def __repr__(self) -> str:
        return f"<compiled symgrad function {self.name}({', '.join(self.arg_names)}) from {self.origin}>"

    def source(self, target: str = "numpy") -> str:
        """The generated source of this function for ``target`` ('numpy', 'c', 'yaml')."""
        sources = self._entry["sources"]
        if target not in sources:
            raise KeyError(f"{self.name}: no {target!r} source; available: {', '.join(sorted(sources))}")
        return sources[target]

    @property
    def backend(self) -> str:
        """The backend that actually runs (after a fallback, 'numpy')."""
        return self._kernel_set()[0]

    # -- kernels --------------------------------------------------------------------------------------
    def _kernel_set(self) -> tuple[str, Any]:
        name = backends.get_backend_name()
        if name not in self._loaded:
            with notice(f"{self.origin.rpartition(':')[0]}:{self.name} ({name} build)", self.package.quiet):
                self._loaded[name] = backends.load_kernels(self.package, name)
        return self._loaded[name]

    def kernel(self, program: str, dtype: np.dtype) -> Any:
        """The active backend's ``run`` for ``program`` in ``dtype`` (``symgrad.backends.base.Run``)."""
        key = (backends.chosen_name(), program, dtype)  # keyed by the chosen backend (the hot path)
        run = self._kernels.get(key)
        if run is None:
            run = self._kernels[key] = self._kernel_set()[1].program(self.ident, program, dtype)
        return run

    # -- argument handling ------------------------------------------------------------------------------
    def _arrays(self, values: tuple, shapes: tuple, names: tuple) -> tuple[list, np.dtype, tuple]:
        """(arrays of one dtype, that dtype, the broadcast batch shape), checking every argument."""
        if self._elementwise:  # fast path: same-shape, same-dtype float arrays and Python numbers
            fast = same_shape_floats(values)
            if fast is not None:
                return fast
        arrays, batches, dtypes = [], [], []
        for value, shape, name in zip(values, shapes, names):
            if name in self._uniform:
                arrays.append(uniform_value(self.name, name, value))
                batches.append(())
                continue
            if is_number(value):
                check_number(self.name, name, shape)
                check_number_range(self.name, name, value)
                arr, batch = value, ()
            else:
                arr = as_array(self.name, name, value)
                check_dtype(self.name, name, arr.dtype)
                dtypes.append(arr.dtype)
                batch = batch_shape(self.name, name, arr.shape, shape)
            arrays.append(arr)
            batches.append(batch)
        dtype = np.result_type(*dtypes) if dtypes else _F64
        batch = broadcast_batches(self.name, names, batches)
        arrays = [
            a.astype(dtype)
            if isinstance(a, np.ndarray) and a.dtype != dtype
            else (np.asarray(a, dtype) if not isinstance(a, np.ndarray) else a)
            for a in arrays
        ]
        return arrays, dtype, batch

    def _package_outputs(self, outs: tuple) -> Any:
        return tuple(outs) if self.returns_tuple else outs[0]

    # -- public entry points ----------------------------------------------------------------------------
    def _out(self, out: Any, program: str, dtype: np.dtype, batch: tuple, inputs: list) -> tuple | None:
        """Check caller-provided result buffers (``out=``): one per result of ``program``, each a writeable,
        C-contiguous, aligned array of exactly the result's dtype and shape, overlapping no input."""
        if out is None:
            return None
        outs = (out,) if isinstance(out, np.ndarray) else tuple(out)
        shapes = [tuple(s["shape"]) for s in self.programs[program]["outputs"]]
        if len(outs) != len(shapes):
            raise ArgumentError(
                f"{self.name}: out= takes {len(shapes)} array(s) for {program}; got {len(outs)}"
            )
        for k, (o, shape) in enumerate(zip(outs, shapes)):
            full = batch + shape
            problem = out_problem(o, dtype, full)
            if problem is not None:
                raise ArgumentError(
                    f"{self.name}: out[{k}] must be a writeable C-contiguous {dtype} array of "
                    f"shape {full}; {problem}"
                )
            others = [a for a in inputs if isinstance(a, np.ndarray)] + list(outs[:k])
            if any(np.may_share_memory(o, a) for a in others):
                raise ArgumentError(f"{self.name}: out[{k}] overlaps an argument or another out= buffer")
        return outs

    @lazy_arrays
    def forward(self, *args: Any, out: Any = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """The outputs as a tuple, never recording on a tape; ``out=``: arrays to write them into. Arguments
        by position or by name, as for a Python function."""
        args = bind(self.name, self.arg_names, args, kwargs)
        check_arity(self.name, self.arg_names, len(args))
        arrays, dtype, batch = self._arrays(args, self.arg_shapes, self.arg_names)
        return self.kernel("forward", dtype)(
            tuple(arrays), batch, self._out(out, "forward", dtype, batch, arrays)
        )

    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        if kwargs:
            args = bind(self.name, self.arg_names, args, kwargs)
        tensor, apply_compiled = _tensor_hook
        for a in args:
            if type(a) is not np.ndarray and isinstance(a, tensor):
                if out is not None:
                    raise ArgumentError(f"{self.name}: out= takes NumPy arrays, not Tensors")
                return apply_compiled(self, args)
        return self._package_outputs(self.forward(*args, out=out))

    @lazy_arrays
    def _vjp_call(
        self, program: str, values: tuple, what: str, out: Any = None, needed: tuple | None = None
    ) -> tuple[tuple, tuple]:
        """(outputs, gradients) of ``program``; ``needed``: a flag per argument, None for the gradients not
        needed (the tape's constants), which are then not summed back to their argument's shape."""
        args, cots = split_cotangents(self.name, what, len(self.arg_names), self.n_outputs, values)
        arrays, dtype, batch = self._arrays(args + cots, self._vjp_shapes, self._vjp_names)
        if out is not None and not self._all_diff:
            out = self._drop_nondiff(out, self.n_outputs if program == "value_and_vjp" else 0)
        buffers = self._out(out, program, dtype, batch, arrays)
        if buffers is not None:
            for a, shape, name, diff in zip(args, self.arg_shapes, self.arg_names, self.arg_diff):
                if diff and name in self._uniform:
                    raise ArgumentError(
                        f"{self.name}: with out=, uniform argument '{name}' cannot be "
                        "differentiable (its gradient is a sum over the batch)"
                    )
                if diff and np.shape(a) != batch + shape:
                    raise ArgumentError(
                        f"{self.name}: with out=, argument '{name}' must have the full shape "
                        f"{batch + shape} (its gradient would be summed over broadcast axes)"
                    )
        results = self.kernel(program, dtype)(tuple(arrays), batch, buffers)
        n_out = self.n_outputs if program == "value_and_vjp" else 0
        grads = results[n_out:]
        if not self._all_diff:
            it = iter(grads)
            grads = tuple(next(it) if d else None for d in self.arg_diff)
        if needed is not None:
            grads = tuple([g if n else None for g, n in zip(grads, needed)])
        for g, a in zip(grads, args):
            if g is not None and (type(a) is not np.ndarray or g.shape != a.shape):  # broadcast: sum back
                grads = tuple([g if g is None else sum_to_shape(g, np.shape(a)) for g, a in zip(grads, args)])
                break
        return results[:n_out], grads

    def _drop_nondiff(self, out: Any, n_out: int) -> Any:
        """``out=`` laid out like the results (None where a nondiff argument's gradient would be, so a
        previous result can be passed back): the buffers of the differentiable arguments only."""
        out = (out,) if isinstance(out, np.ndarray) else tuple(out)
        if len(out) != n_out + len(self.arg_names):
            return out
        for o, name, diff in zip(out[n_out:], self.arg_names, self.arg_diff):
            if not diff and o is not None:
                raise ArgumentError(
                    f"{self.name}: argument '{name}' is nondiff and has no gradient; "
                    "its out= entry must be None (or leave it out)"
                )
        return out[:n_out] + tuple(o for o, diff in zip(out[n_out:], self.arg_diff) if diff)

    def vjp(
        self, *args_and_cotangents: Any, out: Any = None, needs_input_grad: tuple[bool, ...] | None = None
    ) -> tuple[np.ndarray, ...]:
        """Gradients of every argument (each shaped like its argument; None for a ``nondiff`` one) given one
        cotangent per output; ``out=``: one array per gradient (of the differentiable arguments);
        ``needs_input_grad``: a flag per argument (as on a PyTorch ``ctx``), None in place of the others."""
        return self._vjp_call("vjp", args_and_cotangents, "vjp", out, needs_input_grad)[1]

    def value_and_vjp(self, *args_and_cotangents: Any, out: Any = None) -> tuple[Any, tuple[np.ndarray, ...]]:
        """(outputs, gradients) from one fused kernel that shares subexpressions between them; ``out=``:
        arrays for the outputs, then the gradients (saves the page faults of fresh results at large N)."""
        outs, grads = self._vjp_call("value_and_vjp", args_and_cotangents, "value_and_vjp", out)
        return self._package_outputs(outs), grads

    @lazy_arrays
    def jvp(self, inputs: tuple, tangents: tuple) -> tuple[Any, Any]:
        """Forward mode, like ``jax.jvp``: (outputs, output tangents) for argument ``tangents`` (None in the
        place of a ``nondiff`` argument)."""
        inputs, tangents = tuple(inputs), tuple(tangents)
        if len(inputs) != len(self.arg_names) or len(tangents) != len(self.arg_names):
            raise ArgumentError(
                f"{self.name}.jvp takes a tuple of {len(self.arg_names)} inputs and a tuple of "
                f"{len(self.arg_names)} tangents; got {len(inputs)} and {len(tangents)}"
            )
        for t, name, diff in zip(tangents, self.arg_names, self.arg_diff):
            if (t is None) == diff:
                raise ArgumentError(
                    f"{self.name}.jvp: argument '{name}' is "
                    + (
                        "differentiable; give it a tangent, not None"
                        if diff
                        else "declared nondiff; pass None as its tangent"
                    )
                )
        wrt = [(t, n, s) for t, n, s, d in zip(tangents, self.arg_names, self.arg_shapes, self.arg_diff) if d]
        names = self.arg_names + tuple(f"tangent of {n}" for _, n, _ in wrt)
        shapes = self.arg_shapes + tuple(s for _, _, s in wrt)
        arrays, dtype, batch = self._arrays(inputs + tuple(t for t, _, _ in wrt), shapes, names)
        results = self.kernel("jvp", dtype)(tuple(arrays), batch)
        n = self.n_outputs
        return self._package_outputs(results[:n]), self._package_outputs(results[n:])

    @lazy_arrays
    def value_and_jacobian(
        self, *args: Any, out: Any = None, wrt: str | Sequence[str] | None = None, **kwargs: Any
    ) -> tuple[Any, np.ndarray]:
        """(outputs, J) with J of shape ``batch + (n_out, n_in)``: rows are the flattened outputs in order,
        columns the flattened differentiable (not ``nondiff``) arguments in order (each row-major), from one
        fused kernel; ``out=``: arrays for the outputs, then J (e.g. a view of a sparse matrix's values);
        ``wrt=("q", "v")``: the columns of those arguments only, in that order."""
        args = bind(self.name, self.arg_names, args, kwargs)
        check_arity(self.name, self.arg_names, len(args))
        columns = jacobian_columns(self.name, self.arg_names, self.arg_shapes, self.arg_diff, wrt)
        if columns is not None and out is not None:
            raise ArgumentError(f"{self.name}: out= gives every column of J; it cannot be combined with wrt=")
        arrays, dtype, batch = self._arrays(args, self.arg_shapes, self.arg_names)
        buffers = self._out(out, "value_and_jacobian", dtype, batch, arrays)
        results = self.kernel("value_and_jacobian", dtype)(tuple(arrays), batch, buffers)
        jac = results[-1] if columns is None else results[-1][..., columns]
        return self._package_outputs(results[:-1]), jac

    def run_same_shape(self, program: str, arrays: Sequence) -> tuple | None:
        """The (fresh) results of ``program`` when ``arrays`` are this function's arguments as same-shape
        float arrays of one dtype (or numbers), else None: symgrad's own hot paths (the optimizers, the
        PyTorch op), without the public entries' layers. Only for per-element scalar slots, uniform
        arguments given as numbers."""
        if not self._scalar_slots or len(arrays) != len(self.arg_names):
            return None
        for k in self.uniform_at:  # a uniform argument must be a number here (an array: the checks' error)
            if type(arrays[k]) is not float and type(arrays[k]) is not int:
                return None
        same = same_shape_floats(arrays)
        if same is None:
            return None
        return self.kernel(program, same[1])(arrays, same[2])

    def double_backward_error(self) -> RuntimeError:
        """The error every runtime raises when asked to differentiate this function's vjp again."""
        return RuntimeError(
            f"double backward through the compiled function '{self.name}' ({self.origin}) is not supported: "
            "its vjp kernel is first-order. Differentiate once, or write the derivative you need as its own "
            "@sg.function and compile it."
        )

    def jacobian(self, *args: Any, wrt: str | Sequence[str] | None = None, **kwargs: Any) -> np.ndarray:
        """The dense per-row Jacobian blocks; see ``value_and_jacobian`` for the layout and ``wrt``."""
        return self.value_and_jacobian(*args, wrt=wrt, **kwargs)[1]

    def to_torch(self, **options: Any) -> Any:
        """This function as a PyTorch op backed by the compiled kernels (``symgrad.interop.torch``)."""
        return _adapter("torch")(self, **options)

    def to_jax(self, **options: Any) -> Any:
        """This function as a JAX function with a custom_vjp calling the compiled kernels."""
        return _adapter("jax")(self, **options)


def _adapter(name: str) -> Callable:
    """The adapter registered in ``ADAPTERS`` (a plugin table: this stage depends on no framework)."""
    module, attr = ADAPTERS[name]
    return getattr(importlib.import_module(module), attr)
