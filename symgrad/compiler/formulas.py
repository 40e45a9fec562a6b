"""Closed-form formulas for display (``fn.formulas``, ``fn.derivatives``, ``derivatives.yaml``, ``symgrad
show``): each output element, each argument's vjp (a list of formulas for a vector argument) and the Hessian's
upper triangle, written with one tree ``diff`` per entry in the user's names. Kept only for small functions:
the programs, not these formulas, are what runs."""

from __future__ import annotations

from itertools import combinations_with_replacement

import sympy
from sympy import Symbol

from symgrad.compiler import dag
from symgrad.compiler.derive import Derivation
from symgrad.compiler.display import formula
from symgrad.compiler.numbers import drop_unit_floats
from symgrad.compiler.rules import apply_subgradients

#: Closed forms are kept for display for functions whose forward is at most this many operations.
CLOSED_FORM_OPS = 60

#: Second derivatives go into ``derivatives.yaml`` for functions of at most this many scalar inputs (the
#: Hessian's upper triangle: 10 entries per output); ``symgrad show --order 2`` shows them for any small one.
SECOND_ORDER_ARGS = 4

#: A formula: one expression, one per element of a vector argument, or a word ('', 'non_differentiable').
Value = sympy.Expr | tuple[sympy.Expr, ...] | str


def small(d: Derivation) -> bool:
    """Whether the outputs are small enough for closed forms (``CLOSED_FORM_OPS``)."""
    # count_ops walks the tree: only for outputs whose tree (DAG-counted) is small already
    return sum(dag.tree_size(e) for e in d.outputs) <= 4 * CLOSED_FORM_OPS and (
        sum(sympy.count_ops(e) for e in d.outputs) <= CLOSED_FORM_OPS
    )


def outputs(d: Derivation, names: list[Symbol]) -> list[tuple[str, sympy.Expr]]:
    """Each output element's formula, labelled by its name in generated code (``out``, ``out_1``)."""
    return [(n.name, e) for n, e in zip(names, d.outputs)]


def first(d: Derivation) -> list[tuple[str, Value]]:
    """Per argument, its vjp over the ``cotangent`` symbols (small functions): an expression for a scalar, one
    per element for a vector; 'non_differentiable' for a ``nondiff`` argument, else ''."""
    keep = small(d)
    result: list[tuple[str, Value]] = []
    for a in d.spec.args:
        value: Value = "" if a.diff else "non_differentiable"  # derivatives.yaml's keyword
        if keep and a.diff:
            vjps = tuple(
                sympy.Add(*[g * _diff(e, x) for g, e in zip(d.symbols["cotangent"], d.outputs)])
                for x in a.symbols
            )
            value = vjps if a.shape else vjps[0]
        result.append((a.name, value))
    return result


def _diff(e: sympy.Expr, x: Symbol) -> sympy.Expr:
    """d e / d x with symgrad's subgradient conventions, a factor 1.0 dropped (``numbers``)."""
    return drop_unit_floats(apply_subgradients(sympy.diff(e, x)))


def second(d: Derivation, out_names: list[str], wrt_names: list[str]) -> list[tuple[str, sympy.Expr]]:
    """The upper triangle of each output element's Hessian (small functions whose entries are at most
    ``8 * CLOSED_FORM_OPS`` nodes in all), labelled ``d2out/dx dy``."""
    if not small(d):
        return []
    wrt = d.symbols["wrt"]
    result = []
    for name, e in zip(out_names, d.outputs):
        grads = [_diff(e, x) for x in wrt]
        for i, k in combinations_with_replacement(range(len(wrt)), 2):
            result.append((f"d2{name}/d{wrt_names[i]} d{wrt_names[k]}", _diff(grads[i], wrt[k])))
    return result if sum(dag.tree_size(e) for _, e in result) <= 8 * CLOSED_FORM_OPS else []


def renamed(value: Value, rename: dict) -> Value:
    """``value`` in the names of ``rename`` (symbols to symbols)."""
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return tuple(dag.rename(v, rename) for v in value)
    return dag.rename(value, rename)


def text(value: Value) -> str:
    """A formula as one line; a vector argument's as ``[f0, f1, ...]``."""
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return "[" + ", ".join(formula(v) for v in value) + "]"
    return formula(value)
