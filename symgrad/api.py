"""The user-facing ``@sg.function``.

An ``@sg.function`` is still callable: with SymPy arguments it inlines its body (so functions compose),
with arrays or tensors it compiles itself on first use (into the cache directory) and runs the compiled
kernels. (``sg.compile(path)``, for a whole model file, is ``symgrad.compiled.compile_module``: it needs
no SymPy when the model is unchanged.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import sympy

from symgrad.build.compile import compile_traced
from symgrad.compiled import CompiledFunction, load_package
from symgrad.compiler.trace import ForwardFunction
from symgrad.errors import ModelError


class SymbolicFunction(ForwardFunction):
    """An ``@sg.function``: traced, derived and compiled on first use; see the module docstring."""

    def __init__(self, fn: Callable, nondiff: tuple[str, ...] = (), uniform: tuple[str, ...] = ()) -> None:
        super().__init__(fn, nondiff, uniform)
        self._compiled: CompiledFunction | None = None
        self._compiling = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(isinstance(a, (sympy.Basic, sympy.MatrixBase)) for a in args):
            return self.fn(*args)
        return self.compiled()(*args, **kwargs)

    def compiled(self) -> CompiledFunction:
        """The compiled form of this one function (built on first use, cached on disk; threads calling it
        first at once wait for one build)."""
        if self._compiled is None:
            with self._compiling:
                if self._compiled is None:
                    self._compiled = load_package(compile_traced(self.trace()))[self.name]
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

    def jacobian(self, *args: Any):
        """Dense per-row Jacobian blocks, shape ``batch + (n_out, n_in)``."""
        return self.compiled().jacobian(*args)

    def value_and_jacobian(self, *args: Any, out: Any = None) -> tuple:
        """(outputs, per-row Jacobian blocks) from one fused kernel."""
        return self.compiled().value_and_jacobian(*args, out=out)

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
