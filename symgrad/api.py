"""The user-facing ``@sg.function``.

An ``@sg.function`` is still callable: with SymPy arguments it inlines its body (so functions compose),
with arrays or tensors it compiles itself on first use (into the cache directory) and runs the compiled
kernels. (``sg.compile(path)``, for a whole model file, is ``symgrad.compiled.compile_module``: it needs
no SymPy when the model is unchanged.)
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import sympy

from symgrad.build.compile import compile_traced
from symgrad.build.progress import notice
from symgrad.compiled import CompiledFunction, load_package, reference
from symgrad.compiler.trace import ForwardFunction
from symgrad.errors import ArgumentError, ModelError


class SymbolicFunction(ForwardFunction):
    """An ``@sg.function``: traced, derived and compiled on first use; see the module docstring."""

    def __init__(self, fn: Callable, nondiff: tuple[str, ...] = (), uniform: tuple[str, ...] = ()) -> None:
        super().__init__(fn, nondiff, uniform)
        self._compiled: CompiledFunction | None = None
        self._compiling = threading.Lock()
        params = inspect.signature(fn).parameters.values()
        #: parameters compiled in as their default values (``ForwardFunction._constant``), in order
        self._constants = {p.name: p.default for p in params if p.default is not p.empty}
        self._n_arguments = len(params) - len(self._constants)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(isinstance(a, (sympy.Basic, sympy.MatrixBase)) for a in (*args, *kwargs.values())):
            return self.fn(*args, **kwargs)
        if self._constants and (
            len(args) > self._n_arguments or not self._constants.keys().isdisjoint(kwargs)
        ):
            given = [n for n in self._constants if n in kwargs] or list(self._constants)
            name = given[0]
            raise ArgumentError(
                f"{self.name}(): '{name}' has a default ({self._constants[name]!r}), which is compiled into "
                f"{self.name} as a constant; to pass it per call, declare it without a default "
                f"(and uniform=({name!r},) for one number per call)"
            )
        if self._compiled is None:  # the first call: one notice for tracing and building (stderr, after 2 s)
            with notice(self._where):
                return self.compiled()(*args, **kwargs)
        return self._compiled(*args, **kwargs)

    @property
    def _where(self) -> str:
        """``model.py:f``, how progress notices name this function."""
        return f"{self.origin.rpartition(':')[0]}:{self.name}"

    def compiled(self) -> CompiledFunction:
        """The compiled form of this one function (built on first use, cached on disk; threads calling it
        first at once wait for one build)."""
        if self._compiled is None:
            with self._compiling:
                if self._compiled is None:
                    with notice(self._where):  # stderr, after 2 s
                        started = time.perf_counter()
                        spec = self.trace()
                        traced_in = time.perf_counter() - started
                        functions = load_package(
                            compile_traced(spec, traced_in), rebuild=lambda: compile_traced(spec, traced_in)
                        )
                        self._compiled = functions[self.name]
                        self._compiled.symbolic = self  # its source, for derived functions (func.py)
        return self._compiled

    def vjp(self, *args: Any, out: Any = None, needs_input_grad: tuple[bool, ...] | None = None) -> tuple:
        """Input gradients given the arguments followed by one cotangent per output."""
        return self.compiled().vjp(*args, out=out, needs_input_grad=needs_input_grad)

    def value_and_vjp(self, *args: Any, out: Any = None) -> tuple:
        """(outputs, input gradients) in one fused call."""
        return self.compiled().value_and_vjp(*args, out=out)

    def jvp(self, inputs: tuple, tangents: tuple) -> tuple:
        """(outputs, output tangents), forward mode."""
        return self.compiled().jvp(inputs, tangents)

    def jacobian(self, *args: Any, wrt: str | tuple[str, ...] | None = None, **kwargs: Any):
        """Dense per-row Jacobian blocks, shape ``batch + (n_out, n_in)``; ``wrt``: some arguments only."""
        return self.compiled().jacobian(*args, wrt=wrt, **kwargs)

    def value_and_jacobian(
        self, *args: Any, out: Any = None, wrt: str | tuple[str, ...] | None = None, **kwargs: Any
    ) -> tuple:
        """(outputs, per-row Jacobian blocks) from one fused kernel."""
        return self.compiled().value_and_jacobian(*args, out=out, wrt=wrt, **kwargs)

    def hessian(self, *args: Any, **kwargs: Any):
        """Dense per-row Hessian blocks, ``batch + (n_out, n_in, n_in)`` (``(n_in, n_in)`` for one output)."""
        return self.compiled().hessian(*args, **kwargs)

    def value_jacobian_hessian(self, *args: Any, out: Any = None, **kwargs: Any) -> tuple:
        """(outputs, J, H) from one fused kernel."""
        return self.compiled().value_jacobian_hessian(*args, out=out, **kwargs)

    def hvp(self, primals: tuple, tangents: tuple, cotangent: Any = None) -> tuple:
        """Per argument, the Hessian(-of-<cotangent, outputs>)-vector product, one fused kernel."""
        return self.compiled().hvp(primals, tangents, cotangent)

    def __reduce__(self) -> tuple:
        """Pickled as a reference: its module and name, or its compiled package (``compiled.reference``)."""
        return reference.reduce_symbolic(self)

    def source(self, target: str = "numpy") -> str:
        return self.compiled().source(target)

    def to_torch(self, **options: Any):
        """This function as a differentiable PyTorch op (see ``CompiledFunction.to_torch``)."""
        return self.compiled().to_torch(**options)

    def to_jax(self, **options: Any):
        """This function as a JAX function with a custom_vjp (see ``CompiledFunction.to_jax``)."""
        return self.compiled().to_jax(**options)

    @property
    def derivatives(self) -> dict[str, str]:
        return self.compiled().derivatives

    def _repr_html_(self) -> str:
        """Formulas as LaTeX, op counts per program and the generated source, in a notebook."""
        from symgrad.notebook import html

        return html(self)

    def _repr_latex_(self) -> str:
        """The formulas and derivatives as one LaTeX ``aligned`` block."""
        from symgrad.notebook import latex

        return latex(self)

    def plot(self, range: tuple[float, float] = (-3.0, 3.0), **options: Any):  # noqa: A002
        """A matplotlib Figure of this function and its derivative over ``range`` (``symgrad.plot.plot``:
        ``wrt=``, ``at=``, ``output=``, ``points=``, ``path=``; two ``wrt`` and ``range2=``: heat maps)."""
        from symgrad.plot import plot

        return plot(self, range, **options)


def function(
    fn: Callable | None = None,
    *,
    nondiff: tuple[str, ...] | list[str] = (),
    uniform: tuple[str, ...] | list[str] = (),
) -> SymbolicFunction | Callable[[Callable], SymbolicFunction]:
    """Declare a forward function written with SymPy expressions; symgrad derives and compiles its gradient.

    ``@sg.function(nondiff=("feat",))`` marks arguments that are data, not variables (observed features,
    labels): they get no gradient (``vjp`` gives None in their place) and no Jacobian columns, like
    ``jax.custom_vjp``'s ``nondiff_argnums`` but by name.

    ``uniform=("lr",)`` marks scalar arguments that take one number per call (a step size, a temperature):
    the C kernels get it by value instead of an array filled with it, and its gradient is the sum over the
    batch, as for any broadcast argument."""
    nondiff = (nondiff,) if isinstance(nondiff, str) else tuple(nondiff)
    uniform = (uniform,) if isinstance(uniform, str) else tuple(uniform)
    if fn is None:
        return lambda f: function(f, nondiff=nondiff, uniform=uniform)
    if not callable(fn):
        raise ModelError(f"@sg.function expects a function, got {type(fn).__name__}")
    return SymbolicFunction(fn, nondiff, uniform)
