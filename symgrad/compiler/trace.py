"""The frontend: a forward function traced once with real SymPy symbols into a ``Spec``.

``ForwardFunction`` holds the user's function and its declarations (``nondiff``, ``uniform``); the callable
``@sg.function`` object (``symgrad.api.SymbolicFunction``) builds on it.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy

from symgrad.compiler import dag, nonfinite, running_sums
from symgrad.compiler.hints import hint
from symgrad.compiler.locals_capture import captured_locals, named_values
from symgrad.compiler.numbers import drop_unit_floats
from symgrad.errors import ExpressionTooLarge, ModelError


@dataclass(frozen=True)
class Shape:
    """Per-element shape of an argument or output: ``sg.Vector(3)``, ``sg.Matrix(3, 3)``; scalars are
    ``()``."""

    dims: tuple[int, ...]

    def __repr__(self) -> str:
        if len(self.dims) == 1:
            return f"Vector({self.dims[0]})"
        return f"Matrix({', '.join(map(str, self.dims))})"


def Vector(n: int) -> Shape:  # noqa: N802  (reads as a type in annotations)
    """Annotation for a per-element vector argument with ``n`` entries (the array's last axis)."""
    return Shape((int(n),))


def Matrix(rows: int, cols: int) -> Shape:  # noqa: N802
    """Annotation for a per-element ``rows x cols`` matrix argument (the array's last two axes)."""
    return Shape((int(rows), int(cols)))


@dataclass(frozen=True)
class ArgSpec:
    name: str
    shape: tuple[int, ...]
    symbols: tuple[sympy.Symbol, ...]  # row-major elements
    diff: bool = True  # False: declared in ``nondiff`` (no gradient, no Jacobian columns)
    uniform: bool = False  # True: declared in ``uniform`` (one number per call, passed by value)


@dataclass(frozen=True)
class OutSpec:
    shape: tuple[int, ...]
    exprs: tuple[sympy.Expr, ...]  # row-major elements


@dataclass(frozen=True)
class Spec:
    """What tracing found: the user's names, shapes and the forward expressions."""

    name: str
    args: tuple[ArgSpec, ...]
    outputs: tuple[OutSpec, ...]
    returns_tuple: bool
    origin: str  # 'model.py:12'
    doc: str
    #: (expression, the user's name for it): intermediate values of the body, for readable temporaries
    names: tuple[tuple[sympy.Expr, str], ...] = ()

    @property
    def where(self) -> str:
        """How messages name the function: ``model.py:12: name``."""
        return f"{self.origin}: {self.name}"

    def __str__(self) -> str:
        sig = ", ".join(
            (a.name if not a.shape else f"{a.name}: {Shape(a.shape)!r}")
            + ("" if a.diff else " [nondiff]")
            + (" [uniform]" if a.uniform else "")
            for a in self.args
        )
        outs = "\n".join(
            f"  out{k} = {list(o.exprs) if o.shape else o.exprs[0]}" for k, o in enumerate(self.outputs)
        )
        return f"{self.name}({sig})  [{self.origin}]\n{outs}"


def _element_symbols(name: str, shape: tuple[int, ...]) -> list[sympy.Symbol]:
    """The real symbols of an argument's elements: ``x``; ``v[0]``; ``m[0, 1]``. An element's name is no
    identifier, so it is never the symbol of another argument (``v[0]`` and an argument ``v_0``)."""
    if not shape:
        return [sympy.Symbol(name, real=True)]
    if len(shape) == 1:
        return [sympy.Symbol(f"{name}[{i}]", real=True) for i in range(shape[0])]
    return [sympy.Symbol(f"{name}[{i}, {j}]", real=True) for i in range(shape[0]) for j in range(shape[1])]


def _resolve_annotation(fn: Callable, annotation: Any, param: str) -> tuple[int, ...]:
    if annotation is inspect.Parameter.empty or annotation in (float, "float"):
        return ()
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, fn.__globals__)  # noqa: S307  (the user's own annotation text)
        except Exception as exc:
            raise ModelError(f"{fn.__name__}: cannot read the annotation of '{param}': {exc}") from None
    if isinstance(annotation, Shape):
        return annotation.dims
    if annotation is float:
        return ()
    raise ModelError(
        f"{fn.__name__}: argument '{param}' is annotated {annotation!r}; "
        "use sg.Vector(n), sg.Matrix(r, c) or no annotation (scalar)"
    )


def _as_output(value: Any, fname: str, index: str) -> OutSpec:
    if isinstance(value, (sympy.MatrixBase, list)):
        m = sympy.Matrix(value)
        shape = (m.rows,) if m.cols == 1 else (m.rows, m.cols)
        return OutSpec(shape, tuple(_as_scalar(v, fname, index) for v in m))
    return OutSpec((), (_as_scalar(value, fname, index),))


def _as_scalar(value: Any, fname: str, index: str) -> sympy.Expr:
    # a Symbol is also a sympy Boolean: only non-Expr Booleans (relations, And, true) are conditions
    if isinstance(value, bool) or (
        isinstance(value, sympy.logic.boolalg.Boolean) and not isinstance(value, sympy.Expr)
    ):
        raise ModelError(
            f"{fname}: returned a boolean{index} ({value}); return a number-valued expression "
            "(sg.where(cond, 1.0, 0.0) for an indicator)"
        )
    if isinstance(value, (int, float)):
        return nonfinite.constant(value) if isinstance(value, float) else sympy.Integer(value)
    if not isinstance(value, sympy.Expr):
        raise ModelError(
            f"{fname}: returned a {type(value).__name__}{index}, expected a SymPy expression "
            "(use sg.exp, sg.log, ... rather than math or numpy functions inside @sg.function)"
        )
    return drop_unit_floats(value)


def _check_size(expr: sympy.Expr, fname: str, limit: int) -> None:
    """Its distinct sub-expressions (the DAG that compiling walks, not the tree) at most ``limit``."""
    if dag.count(expr, limit) > limit:
        raise ExpressionTooLarge(
            f"{fname}: the traced expression has more than {limit} nodes (distinct sub-expressions); split "
            "the function, use sg.Vector arguments, or raise SYMGRAD_MAX_OPS"
        )


def _size_limit() -> int:
    """``SYMGRAD_MAX_OPS``: the most nodes a traced expression may have (default 200000)."""
    text = os.environ.get("SYMGRAD_MAX_OPS", "200000")
    try:
        return int(text)
    except ValueError:
        raise ModelError(f"SYMGRAD_MAX_OPS must be a whole number of nodes, got {text!r}") from None


class ForwardFunction:
    """A forward function written with SymPy and its declarations; ``trace`` turns it into a ``Spec``."""

    def __init__(self, fn: Callable, nondiff: tuple[str, ...] = (), uniform: tuple[str, ...] = ()) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        self.nondiff = tuple(nondiff)
        self.uniform = tuple(uniform)

    def __repr__(self) -> str:
        return f"<symgrad function {self.name} from {self.origin}>"

    @property
    def origin(self) -> str:
        """``model.py:12``; ``cell:3`` for a Jupyter cell (IPython's file name for it is a hash)."""
        code = self.fn.__code__
        folder, file = os.path.split(code.co_filename)
        if os.path.basename(folder).startswith("ipykernel_"):
            file = "cell"
        return f"{file}:{code.co_firstlineno}"

    def trace(self) -> Spec:
        """Call the body once with real SymPy symbols (the frontend owns symbol creation)."""
        params = list(inspect.signature(self.fn).parameters.values())
        for option, names in (("nondiff", self.nondiff), ("uniform", self.uniform)):
            unknown = sorted(set(names) - {p.name for p in params})
            if unknown:
                raise ModelError(
                    f"{self.name}: {option} names {', '.join(map(repr, unknown))}, which "
                    f"{'is not an argument' if len(unknown) == 1 else 'are not arguments'} of the "
                    "function"
                )
        args, values, constants = [], [], []
        for p in params:
            if self._constant(p):  # a default is a constant of the trace, as a closure's value is
                constants.append(p)
                continue
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise ModelError(f"{self.name}: only plain positional arguments are supported (got '{p}')")
            shape = _resolve_annotation(self.fn, p.annotation, p.name)
            symbols = _element_symbols(p.name, shape)
            if shape and p.name in self.uniform:
                raise ModelError(
                    f"{self.name}: uniform argument '{p.name}' must be a scalar (one number per call), "
                    f"not {Shape(shape)!r}"
                )
            args.append(
                ArgSpec(p.name, shape, tuple(symbols), p.name not in self.nondiff, p.name in self.uniform)
            )
            if not shape:
                values.append(symbols[0])
            else:
                values.append(sympy.Matrix(shape[0], shape[1] if len(shape) > 1 else 1, symbols))
        result, found = self._call_body(values, constants)
        returns_tuple = isinstance(result, tuple)
        items = result if returns_tuple else (result,)
        outputs = tuple(
            _as_output(v, self.name, f" (output {k})" if returns_tuple else "") for k, v in enumerate(items)
        )
        allowed = {s for a in args for s in a.symbols}
        limit = _size_limit()
        for out in outputs:
            for e in out.exprs:
                # both walk the DAG: SymPy's free_symbols walks the tree, exponential in the depth of a DAG
                # such as e = sin(e) + cos(e) repeated
                _check_size(e, f"{self.origin}: {self.name}", limit)
                stray = dag.free_symbols(e) - allowed
                if stray:
                    names = ", ".join(sorted(map(str, stray)))
                    raise ModelError(
                        f"{self.name}: the result uses symbol(s) {names} that are not arguments "
                        "of the function; make them parameters (or Python constants)"
                    )
        names = named_values(found, {a.name for a in args}, drop_unit_floats)
        return Spec(
            self.name, tuple(args), outputs, returns_tuple, self.origin, inspect.getdoc(self.fn) or "", names
        )

    def _constant(self, p: inspect.Parameter) -> bool:
        """Whether parameter ``p`` is compiled in as its default value (then it is no argument of the compiled
        function); a default on an argument declared ``nondiff`` or ``uniform`` is refused."""
        if p.default is p.empty:
            return False
        declared = "uniform" if p.name in self.uniform else "nondiff" if p.name in self.nondiff else None
        if declared:
            raise ModelError(
                f"{self.name}: '{p.name}' is declared {declared} and has a default ({p.default!r}); symgrad "
                f"compiles a default in as a constant: remove the default to make '{p.name}' an argument"
            )
        return True

    def _call_body(
        self, values: list, constants: list[inspect.Parameter]
    ) -> tuple[Any, list[tuple[str, Any]]]:
        """The body's result and its locals (``locals_capture``)."""
        values = values + [p.default for p in constants if p.kind is p.POSITIONAL_ONLY]
        keywords = {p.name: p.default for p in constants if p.kind is not p.POSITIONAL_ONLY}
        try:
            # x + 1e400 keeps x (SymPy would fold x + oo to oo)
            with nonfinite.tracing(), running_sums.appending(), captured_locals(self.fn.__code__) as found:
                result = self.fn(*values, **keywords)
            return result, found
        except Exception as exc:
            tb, lineno = exc.__traceback__, 0
            while tb is not None:
                if tb.tb_frame.f_code is self.fn.__code__:
                    lineno = tb.tb_lineno
                tb = tb.tb_next
            line = f" (line {lineno})" if lineno else ""
            if isinstance(exc, ModelError):  # symgrad's own words (sg.where's): where in the body it happened
                if not lineno:
                    raise
                raise type(exc)(f"{self.origin}: {self.name}{line}: {exc}") from None
            advice = hint(exc, self.fn.__code__.co_filename, lineno)
            what = f"{type(exc).__name__}: {exc}{advice}"
            raise ModelError(f"{self.origin}: {self.name}{line}: {what}") from None
