"""``sg.func``: derivatives as functions, after ``torch.func``.

``sg.func.grad(f)``, ``sg.func.jacobian(f)`` and ``sg.func.hessian(f)`` are new ``@sg.function``s whose
outputs are derivatives of ``f``: their body is the derivative program of ``f`` (reverse accumulation over its
straight-line forward, ``symgrad.compiler.passes``) written back as one expression DAG over the arguments, so
they compile, show and check like any function and compose to any order:
``sg.func.grad(sg.func.grad(cube))(3.0)`` is 18. Where ``torch.func`` nests tuples (several outputs, a tuple
``argnums``), the outputs here are one flat tuple in the same order, row-major.

``derived_vjp`` (``CompiledFunction.derived("vjp")``, private) is a compiled function's vjp, ``(arguments...,
cotangents...) -> gradients``, as a function of its own: the tape differentiates compiled nodes past the
second order through it, recursively.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sympy

from symgrad.api import SymbolicFunction
from symgrad.compiled import CompiledFunction
from symgrad.compiler.derive import derive
from symgrad.compiler.model import load_model
from symgrad.compiler.passes import reverse_accumulate
from symgrad.compiler.trace import ForwardFunction, Shape, Spec
from symgrad.errors import ModelError

#: A derivative block: (its elements, row-major, as expressions over ``f``'s symbols; its shape).
Block = tuple[list[sympy.Expr], tuple[int, ...]]


def _derivative_rows(f: SymbolicFunction) -> tuple[Spec, list[list[sympy.Expr]]]:
    """(the trace of ``f``, per output element the derivatives with respect to each differentiable element,
    as expressions over its symbols): one unit-seeded reverse pass per output element."""
    spec = f.trace()
    d = derive(spec)
    wrt = list(d.symbols["wrt"])
    passes = [reverse_accumulate(d.forward, {o: sympy.S.One}, wrt, d.where) for o in d.symbols["output"]]
    values: dict[sympy.Symbol, sympy.Expr] = {}
    for sym, expr in d.forward + [a for rev in passes for a in rev.assigns]:  # one walk per assignment
        values[sym] = expr.xreplace(values)
    return spec, [[g.xreplace(values) for g in rev.grads] for rev in passes]


def _shaped(exprs: list[sympy.Expr], shape: tuple[int, ...], where: str) -> Any:
    if not shape:
        return exprs[0]
    if len(shape) > 2:
        raise ModelError(
            f"{where}: the derivative has shape {shape}; an @sg.function returns scalars, vectors and "
            "matrices (at most 2 axes): take it with respect to fewer axes (a smaller argnums or output)"
        )
    return sympy.Matrix(shape[0], shape[1] if len(shape) > 1 else 1, exprs)


def _argnums(f: Any, argnums: int | tuple[int, ...], transform: str) -> tuple[Spec, tuple[int, ...]]:
    """(the trace of ``f``, the argument indices), each index checked to be a differentiable argument."""
    if not isinstance(f, SymbolicFunction):
        raise ModelError(f"sg.func.{transform} takes an @sg.function, got {type(f).__name__}")
    spec = f.trace()
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for k in nums:
        if not 0 <= k < len(spec.args) or not spec.args[k].diff:
            raise ModelError(
                f"sg.func.{transform}({f.name}): argnums {k} is not a differentiable argument "
                f"({', '.join(a.name for a in spec.args if a.diff)} are)"
            )
    return spec, nums


def _function(
    f: SymbolicFunction,
    spec: Spec,
    name: str,
    doc: str,
    blocks: Callable[[Spec, list[list[sympy.Expr]]], list[Block]],
    single: bool,
) -> SymbolicFunction:
    """A new ``@sg.function`` of the arguments of ``f`` (traced: ``spec``) returning ``blocks(trace,
    derivative rows)`` (one block if ``single``, else a tuple), each block put over the new arguments."""

    def body(*values: Any) -> Any:
        traced, rows = _derivative_rows(f)
        env = {
            s: v
            for a, value in zip(traced.args, values)
            for s, v in zip(a.symbols, value if a.shape else [value])
        }
        result = [
            _shaped([e.xreplace(env) for e in exprs], shape, name) for exprs, shape in blocks(traced, rows)
        ]
        return result[0] if single else tuple(result)

    return _named(body, f, name, doc, [(a.name, a.shape) for a in spec.args])


def _named(
    body: Callable, f: ForwardFunction, name: str, doc: str, params: list[tuple[str, tuple[int, ...]]]
) -> SymbolicFunction:
    """``body`` as an ``@sg.function`` named ``name`` with parameters ``params`` (name, per-element
    shape), ``f``'s nondiff and uniform arguments kept."""
    body.__name__ = body.__qualname__ = name
    body.__doc__ = doc
    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                p,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=Shape(s) if s else inspect.Parameter.empty,
            )
            for p, s in params
        ]
    )
    return SymbolicFunction(body, nondiff=f.nondiff, uniform=f.uniform)


def _columns(spec: Spec, k: int) -> range:
    """The positions of argument ``k``'s elements among the differentiable elements."""
    start = sum(len(a.symbols) for a in spec.args[:k] if a.diff)
    return range(start, start + len(spec.args[k].symbols))


def grad(f: SymbolicFunction, argnums: int | tuple[int, ...] = 0) -> SymbolicFunction:
    """The gradient of ``f`` (one scalar output) with respect to argument ``argnums`` (a tuple: a tuple of
    gradients), as a new ``@sg.function`` of the same arguments; each gradient is shaped like its argument."""
    spec, nums = _argnums(f, argnums, "grad")

    def blocks(traced: Spec, rows: list[list[sympy.Expr]]) -> list[Block]:
        if len(rows) != 1:
            raise ModelError(
                f"sg.func.grad({f.name}): the function has {len(rows)} output elements; "
                "grad takes a function with one scalar output"
            )
        return [([rows[0][i] for i in _columns(traced, k)], traced.args[k].shape) for k in nums]

    names = ", ".join(spec.args[k].name for k in nums)
    doc = f"The gradient of {f.name} with respect to {names}."
    return _function(f, spec, f"grad_{f.name}", doc, blocks, isinstance(argnums, int))


def jacobian(f: SymbolicFunction, argnums: int | tuple[int, ...] = 0) -> SymbolicFunction:
    """The Jacobian of ``f`` with respect to argument ``argnums``, as a new ``@sg.function`` of the same
    arguments (``torch.func.jacobian``): for each output and each argument in ``argnums`` (output-major), a
    block shaped ``output shape + argument shape``; one block for one output and an int ``argnums``, else a
    flat tuple."""
    spec, nums = _argnums(f, argnums, "jacobian")
    doc = f"The Jacobian of {f.name} with respect to {', '.join(spec.args[k].name for k in nums)}."
    return _jacobian(f, spec, argnums, f"jacobian_{f.name}", doc)


def hessian(f: SymbolicFunction, argnums: int | tuple[int, ...] = 0) -> SymbolicFunction:
    """The Hessian of ``f`` with respect to argument ``argnums``, the Jacobian of its Jacobian
    (``torch.func.hessian``), as a new ``@sg.function``: for each output, and each pair (i, j) of arguments
    in ``argnums`` (row-major), a block shaped ``output shape + shape of i + shape of j``."""
    spec, nums = _argnums(f, argnums, "hessian")
    inner = _jacobian(f, spec, argnums, f"jacobian_{f.name}", f"The Jacobian of {f.name}.")
    doc = f"The Hessian of {f.name} with respect to {', '.join(spec.args[k].name for k in nums)}."
    return _jacobian(inner, inner.trace(), argnums, f"hessian_{f.name}", doc)


def _jacobian(
    f: SymbolicFunction, spec: Spec, argnums: int | tuple[int, ...], name: str, doc: str
) -> SymbolicFunction:
    """``jacobian`` of ``f`` (traced: ``spec``), named ``name``."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def blocks(traced: Spec, rows: list[list[sympy.Expr]]) -> list[Block]:
        result, start = [], 0
        for out in traced.outputs:
            out_rows = rows[start : start + len(out.exprs)]
            start += len(out.exprs)
            for k in nums:
                cols = _columns(traced, k)
                result.append(([r[i] for r in out_rows for i in cols], out.shape + traced.args[k].shape))
        return result

    return _function(f, spec, name, doc, blocks, isinstance(argnums, int) and len(spec.outputs) == 1)


def _elements(spec_shape: tuple[int, ...], value: Any) -> list:
    return list(value) if spec_shape else [value]


def _vjp_function(f: ForwardFunction) -> SymbolicFunction:
    """``vjp_<name>(arguments..., cotangents...)``: the gradient of ``<cotangents, f(arguments)>`` with
    respect to each differentiable argument (one, or a tuple), by reverse accumulation seeded with the
    cotangents."""
    spec = f.trace()
    taken = {a.name for a in spec.args}
    params = [(a.name, a.shape) for a in spec.args]
    for k, out in enumerate(spec.outputs):
        cot = "cotangent" if len(spec.outputs) == 1 else f"cotangent{k}"
        while cot in taken:
            cot += "_"
        taken.add(cot)
        params.append((cot, out.shape))
    name = f"vjp_{f.name}"

    def body(*values: Any) -> Any:
        traced = f.trace()
        d = derive(traced)
        n = len(traced.args)
        seeds: dict[sympy.Symbol, sympy.Expr] = {}
        cots = [c for out, v in zip(traced.outputs, values[n:]) for c in _elements(out.shape, v)]
        for o, c in zip(d.symbols["output"], cots):
            seeds[o] = seeds.get(o, sympy.S.Zero) + c
        rev = reverse_accumulate(d.forward, seeds, list(d.symbols["wrt"]), d.where)
        known: dict[sympy.Symbol, sympy.Expr] = {}
        for sym, expr in d.forward + rev.assigns:
            known[sym] = expr.xreplace(known)
        env = {
            s: v
            for a, value in zip(traced.args, values)
            for s, v in zip(a.symbols, _elements(a.shape, value))
        }
        grads = [g.xreplace(known).xreplace(env) for g in rev.grads]
        result = [
            _shaped([grads[i] for i in _columns(traced, k)], a.shape, name)
            for k, a in enumerate(traced.args)
            if a.diff
        ]
        return result[0] if len(result) == 1 else tuple(result)

    return _named(body, f, name, f"The vjp of {f.name}: its gradients for the given cotangents.", params)


#: (package hash, name) -> the vjp function derived from that compiled function (None: no source here)
_vjps: dict[tuple[str, str], CompiledFunction | None] = {}
_vjps_lock = threading.RLock()


def derived_vjp(fn: CompiledFunction) -> CompiledFunction | None:
    """The vjp of compiled ``fn`` as a compiled function of its own (``_vjp_function``), from its symbolic
    source: the ``@sg.function`` traced in this process, or the unchanged model file of its package; None
    when neither is reachable. Once per function per process (and cached on disk, by content)."""
    key = (fn.package.manifest.get("package_hash", str(fn.package.path)), fn.name)
    with _vjps_lock:
        if key not in _vjps:
            source = fn.symbolic or _model_source(fn)
            _vjps[key] = None if source is None else _vjp_function(source).compiled()
        return _vjps[key]


def _model_source(fn: CompiledFunction) -> ForwardFunction | None:
    """The ``@sg.function`` named like ``fn`` in the model file its package was compiled from, when that
    file is still there unchanged."""
    manifest = fn.package.manifest
    if "model" not in manifest:
        return None
    model = (Path(fn.package.path) / manifest["model"]).resolve()
    try:
        digest = hashlib.sha256(model.read_bytes()).hexdigest()
    except OSError:
        return None
    if digest != manifest.get("model_sha256"):
        return None
    return _model_functions(str(model), digest).get(fn.name)


@functools.lru_cache(maxsize=32)
def _model_functions(path: str, digest: str) -> dict[str, ForwardFunction]:
    """The model file's functions by name (one import per file and content)."""
    return {f.name: f for f in load_model(Path(path))}
