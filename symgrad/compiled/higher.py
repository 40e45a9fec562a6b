"""Second-order entry points of ``CompiledFunction`` (a mixin): ``hessian``, ``value_jacobian_hessian``
and ``hvp``, each one fused kernel (the ``value_jacobian_hessian`` and ``hvp`` programs); ``derived``, the
functions built from its source for higher orders.

The Hessian is laid out like the Jacobian: rows are the flattened outputs, both other axes the flattened
differentiable arguments in order, ``batch + (n_out, n_in, n_in)`` (``batch + (n_in, n_in)`` for one
output), exactly symmetric. A function with too large a Hessian (``HESSIAN_MAX_ENTRIES`` and
``HESSIAN_MAX_WORK`` of the compiler), or whose second derivative uses a function symgrad cannot
differentiate twice, has no such program: the call says so.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from symgrad.compiled.arguments import bind, check_arity, sum_to_shape
from symgrad.errors import ArgumentError

#: Functions derived from a compiled one, by kind: ``"vjp"`` is ``(arguments..., cotangents...) -> the vjp``
#: compiled as a function of its own (the tape differentiates a compiled node a third time and more through
#: it). Built from the symbolic source by the module and function named here, imported on first use (a
#: plugin table, like ``ADAPTERS``: this stage holds no SymPy).
DERIVERS = {"vjp": ("symgrad.func", "derived_vjp")}


class SecondOrder:
    """Mixed into ``CompiledFunction``; uses its argument checks (``_arrays``, ``_out``) and kernels."""

    #: the ``@sg.function`` this was compiled from, when this process traced it (set by
    #: ``SymbolicFunction.compiled``); a package compiled from a model file finds its source by the manifest
    symbolic: Any = None

    def derived(self, kind: str) -> Any:
        """The compiled function of ``kind`` derived from this one (see ``DERIVERS``; compiled once per
        process, cached on disk), or None when its symbolic source is not reachable."""
        module, attr = DERIVERS[kind]
        return getattr(importlib.import_module(module), attr)(self)

    def _second_order(self, program: str) -> None:
        """Raise unless the package holds ``program``."""
        if program not in self.programs:
            raise ArgumentError(
                f"{self.name}: no {program} program was compiled: its Hessian is larger or costlier than "
                "symgrad compiles (symgrad.compiler.derive.HESSIAN_MAX_ENTRIES, HESSIAN_MAX_WORK), or its "
                "second derivative uses a function symgrad cannot differentiate twice"
            )

    def third_derivative_error(self) -> RuntimeError:
        """The error a runtime raises when asked to differentiate this function three times and its
        ``derived("vjp")`` is not available (no source reachable)."""
        return RuntimeError(
            f"a third derivative through the compiled function '{self.name}' ({self.origin}) is not "
            "available: past the second, a compiled node differentiates through its vjp compiled as a "
            "function of its own, which needs its source (the @sg.function traced in this process, or the "
            "unchanged model file of its package), and none is reachable here. Compose sg.func.grad, e.g. "
            f"sg.func.grad(sg.func.grad({self.name})), where the source is at hand."
        )

    def value_jacobian_hessian(self, *args: Any, out: Any = None, **kwargs: Any) -> tuple[Any, Any, Any]:
        """(outputs, J, H) from one fused kernel: J as ``value_and_jacobian`` gives it, H of shape
        ``batch + (n_out, n_in, n_in)`` (``batch + (n_in, n_in)`` for one output element); ``out=``: arrays
        for the outputs, then J, then H (e.g. views of a sparse assembler's buffers)."""
        self._second_order("value_jacobian_hessian")
        args = bind(self.name, self.arg_names, args, kwargs)
        check_arity(self.name, self.arg_names, len(args))
        arrays, dtype, batch = self._arrays(args, self.arg_shapes, self.arg_names)
        buffers = self._out(out, "value_jacobian_hessian", dtype, batch, arrays)
        results = self.kernel("value_jacobian_hessian", dtype)(tuple(arrays), batch, buffers)
        return self._package_outputs(results[:-2]), results[-2], results[-1]

    def hessian(self, *args: Any, **kwargs: Any) -> np.ndarray:
        """The dense per-row Hessian blocks; see ``value_jacobian_hessian`` for the layout."""
        return self.value_jacobian_hessian(*args, **kwargs)[2]

    def hvp(self, primals: Sequence, tangents: Sequence, cotangent: Any = None) -> tuple:
        """For each argument, the Hessian of ``<cotangent, outputs>`` times ``tangents``, shaped like the
        argument (None for a ``nondiff`` one, whose tangent must be None): the jvp of the vjp, from one fused
        kernel. ``cotangent``: one per output (a tuple for several outputs), None for ones."""
        self._second_order("hvp")
        primals, tangents = tuple(primals), tuple(tangents)
        n_args = len(self.arg_names)
        if len(primals) != n_args or len(tangents) != n_args:
            raise ArgumentError(
                f"{self.name}.hvp takes a tuple of {n_args} primals and a tuple of {n_args} tangents; "
                f"got {len(primals)} and {len(tangents)}"
            )
        for t, name, diff in zip(tangents, self.arg_names, self.arg_diff):
            if (t is None) == diff:
                wanted = "give it a tangent, not None" if diff else "pass None as its tangent (it is nondiff)"
                raise ArgumentError(f"{self.name}.hvp: argument '{name}': {wanted}")
        cots = self._hvp_cotangents(cotangent, primals)
        diff = [k for k, d in enumerate(self.arg_diff) if d]
        names = (
            self.arg_names
            + tuple(f"cotangent of output {k}" for k in range(self.n_outputs))
            + tuple(f"tangent of {self.arg_names[k]}" for k in diff)
        )
        shapes = self.arg_shapes + self.out_shapes + tuple(self.arg_shapes[k] for k in diff)
        values = primals + cots + tuple(tangents[k] for k in diff)
        arrays, dtype, batch = self._arrays(values, shapes, names)
        it = iter(self.kernel("hvp", dtype)(tuple(arrays), batch))
        return tuple(
            sum_to_shape(next(it), np.shape(p)) if d else None for p, d in zip(primals, self.arg_diff)
        )

    def _hvp_cotangents(self, cotangent: Any, primals: tuple) -> tuple:
        """One cotangent per output: ones (of the primals' dtype) for None, a lone value for a one-output
        function."""
        if cotangent is None:
            dtypes = [p.dtype for p in primals if isinstance(p, np.ndarray)]
            dtype = np.result_type(*dtypes) if dtypes else np.float64
            return tuple(np.ones(s, dtype) if s else 1.0 for s in self.out_shapes)
        if self.n_outputs == 1 and not isinstance(cotangent, (tuple, list)):
            return (cotangent,)
        cots = tuple(cotangent)
        if len(cots) != self.n_outputs:
            raise ArgumentError(
                f"{self.name}.hvp takes one cotangent per output ({self.n_outputs}); got {len(cots)}"
            )
        return cots
