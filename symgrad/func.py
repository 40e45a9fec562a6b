"""``sg.func``: derivatives as functions, after ``torch.func``.

``sg.func.grad(f)`` is a new ``@sg.function`` whose output is the gradient of ``f``: its body is the
gradient program of ``f`` (reverse accumulation over its straight-line forward, ``symgrad.compiler.passes``)
written back as one expression DAG over the arguments, so it compiles, shows and checks like any function
and composes to any order: ``sg.func.grad(sg.func.grad(cube))(3.0)`` is 18.
"""

from __future__ import annotations

import inspect
from typing import Any

import sympy

from symgrad.api import SymbolicFunction
from symgrad.compiler.derive import derive
from symgrad.compiler.passes import reverse_accumulate
from symgrad.compiler.trace import Shape, Spec
from symgrad.errors import ModelError


def _gradients(f: SymbolicFunction) -> tuple[Spec, list[sympy.Expr]]:
    """(the trace of ``f``, d output / d each differentiable element, as expressions over its symbols)."""
    spec = f.trace()
    d = derive(spec)
    if len(d.symbols["output"]) != 1:
        raise ModelError(
            f"sg.func.grad({f.name}): the function has {len(d.symbols['output'])} output elements; "
            "grad takes a function with one scalar output"
        )
    rev = reverse_accumulate(
        d.forward, {d.symbols["output"][0]: sympy.S.One}, list(d.symbols["wrt"]), d.where
    )
    values: dict[sympy.Symbol, sympy.Expr] = {}
    for sym, expr in d.forward + rev.assigns:  # each small: one walk per assignment, shared subtrees
        values[sym] = expr.xreplace(values)
    return spec, [g.xreplace(values) for g in rev.grads]


def _shaped(exprs: list[sympy.Expr], shape: tuple[int, ...]) -> Any:
    if not shape:
        return exprs[0]
    return sympy.Matrix(shape[0], shape[1] if len(shape) > 1 else 1, exprs)


def grad(f: SymbolicFunction, argnums: int | tuple[int, ...] = 0) -> SymbolicFunction:
    """The gradient of ``f`` (one scalar output) with respect to argument ``argnums`` (a tuple: a tuple of
    gradients), as a new ``@sg.function`` of the same arguments; each gradient is shaped like its argument."""
    if not isinstance(f, SymbolicFunction):
        raise ModelError(f"sg.func.grad takes an @sg.function, got {type(f).__name__}")
    spec = f.trace()
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for k in nums:
        if not 0 <= k < len(spec.args) or not spec.args[k].diff:
            raise ModelError(
                f"sg.func.grad({f.name}): argnums {k} is not a differentiable argument "
                f"({', '.join(a.name for a in spec.args if a.diff)} are)"
            )

    def body(*values: Any) -> Any:
        traced, grads = _gradients(f)
        env = {
            s: v
            for a, value in zip(traced.args, values)
            for s, v in zip(a.symbols, value if a.shape else [value])
        }
        starts, n = {}, 0
        for a in traced.args:  # the gradients of the differentiable arguments, in order
            if a.diff:
                starts[a.name], n = n, n + len(a.symbols)
        result = []
        for k in nums:
            a = traced.args[k]
            start = starts[a.name]
            result.append(_shaped([g.xreplace(env) for g in grads[start : start + len(a.symbols)]], a.shape))
        return result[0] if isinstance(argnums, int) else tuple(result)

    body.__name__ = body.__qualname__ = f"grad_{f.name}"
    body.__doc__ = f"The gradient of {f.name} with respect to {', '.join(spec.args[k].name for k in nums)}."
    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                a.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=Shape(a.shape) if a.shape else inspect.Parameter.empty,
            )
            for a in spec.args
        ]
    )
    return SymbolicFunction(body, nondiff=f.nondiff, uniform=f.uniform)
