"""Derivation as a value: a traced ``Spec`` -> a ``Derivation``.

``derive`` stabilizes the outputs (``rewrite``), checks them (``rules``) and CSEs the forward into a
straight-line program. Each program body the lowering asks for (``body(kind)``, the ``BODIES`` table) is
built from that program once, by the passes in ``symgrad.compiler.passes``: reverse accumulation for the
adjoint, forward accumulation for the tangent, one unit-seeded reverse pass per output for the Jacobian,
then the stable forms of the exp(-|u|) primitives and one joint CSE.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import sympy
from sympy import Symbol

from symgrad.compiler.display import formula
from symgrad.compiler.passes import (
    Assignments,
    forward_accumulate,
    internal,
    joint_cse,
    reverse_accumulate,
    straight_line,
)
from symgrad.compiler.primitives import expand_shared_cores
from symgrad.compiler.rewrite import stabilize
from symgrad.compiler.rules import apply_subgradients, check_supported
from symgrad.compiler.trace import Spec

#: Closed-form derivatives are kept for display for functions whose forward is at most this many operations.
CLOSED_FORM_OPS = 60


def _symbols(prefix: str, n: int) -> tuple[Symbol, ...]:
    """``n`` internal symbols (``passes.internal``: never a user's argument, whatever its name)."""
    return tuple(internal(f"{prefix}{k}") for k in range(n))


@dataclass(frozen=True, eq=False)
class Derivation:
    """One function's forward program and the symbol families its programs are written over.

    ``symbols`` maps a family to its internal symbols, each family flat and row-major: ``wrt`` (the elements
    of the differentiable arguments), ``output``, ``cotangent`` (one per output element), ``grad`` and
    ``tangent`` (one per ``wrt``), ``jvp`` (one per output element), ``jacobian`` (outputs x ``wrt``,
    row-major). ``body(kind)`` is the straight-line program that assigns a family's symbols."""

    spec: Spec
    outputs: tuple[sympy.Expr, ...]  # the stabilized forward expressions, flat
    forward: Assignments  # straight-line forward; the last assignments bind ``output``
    symbols: dict[str, tuple[Symbol, ...]]
    _bodies: dict[str, Assignments] = field(default_factory=dict, compare=False, repr=False)

    @property
    def where(self) -> str:
        """How messages name the function (``Spec.where``)."""
        return self.spec.where

    def body(self, kind: str) -> Assignments:
        """The program ``kind`` of ``BODIES`` (built on first use)."""
        if kind not in self._bodies:
            self._bodies[kind] = BODIES[kind](self)
        return self._bodies[kind]

    def closed_forms(self) -> tuple[tuple[str, sympy.Expr | str], ...]:
        """Per argument, its vjp as one tree-``diff`` formula over the ``cotangent`` symbols (small functions,
        scalar arguments), 'non_differentiable' for a ``nondiff`` one, else ''."""
        small = sum(sympy.count_ops(e) for e in self.outputs) <= CLOSED_FORM_OPS
        result: list[tuple[str, sympy.Expr | str]] = []
        for a in self.spec.args:
            value: sympy.Expr | str = "" if a.diff else "non_differentiable"  # derivatives.yaml's keyword
            if small and not a.shape and a.diff:
                x = a.symbols[0]
                value = sympy.Add(
                    *[
                        g * apply_subgradients(sympy.diff(e, x))
                        for g, e in zip(self.symbols["cotangent"], self.outputs)
                    ]
                )
            result.append((a.name, value))
        return tuple(result)

    def __str__(self) -> str:
        lines = [str(self.spec), "forward:"]
        lines += [f"  {s} = {formula(e, 200)}" for s, e in self.forward]
        return "\n".join(lines)


def derive(spec: Spec) -> Derivation:
    """Stabilize, check and straight-line the forward of ``spec``."""
    outputs = tuple(stabilize(e) for out in spec.outputs for e in out.exprs)
    for e in outputs:
        check_supported(e, spec.where)
    wrt = tuple(s for a in spec.args if a.diff for s in a.symbols)
    n_out, n_in = len(outputs), len(wrt)
    temps, reduced = straight_line(list(outputs), "_t")
    out_syms = _symbols("_out", n_out)
    symbols = {
        "wrt": wrt,
        "output": out_syms,
        "cotangent": _symbols("_cot", n_out),
        "grad": _symbols("_grad", n_in),
        "tangent": _symbols("_tan_in", n_in),
        "jvp": _symbols("_jvp", n_out),
        "jacobian": tuple(internal(f"_jac{j}_{i}") for j in range(n_out) for i in range(n_in)),
    }
    return Derivation(spec, outputs, temps + list(zip(out_syms, reduced)), symbols)


def _stable_forms(assigns: Assignments) -> Assignments:
    """The primitives of the exp(-|u|) family in their stable forms, so that the joint CSE after it computes
    that exponential once for a value and its gradient."""
    return [(s, expand_shared_cores(e)) for s, e in assigns]


def _forward_body(d: Derivation) -> Assignments:
    stable = _stable_forms(d.forward)
    return d.forward if stable == d.forward else joint_cse(stable)


def _adjoint_body(d: Derivation) -> Assignments:
    """Forward, then reverse accumulation from the ``cotangent`` seeds, binding ``grad``."""
    sym = d.symbols
    rev = reverse_accumulate(d.forward, dict(zip(sym["output"], sym["cotangent"])), list(sym["wrt"]), d.where)
    return joint_cse(_stable_forms(d.forward + rev.assigns + list(zip(sym["grad"], rev.grads))))


def _tangent_body(d: Derivation) -> Assignments:
    """Forward, then forward accumulation from the ``tangent`` seeds, binding ``jvp``."""
    sym = d.symbols
    assigns, tangent = forward_accumulate(d.forward, dict(zip(sym["wrt"], sym["tangent"])), d.where)
    return joint_cse(
        _stable_forms(d.forward + assigns + [(j, tangent[o]) for j, o in zip(sym["jvp"], sym["output"])])
    )


def _jacobian_body(d: Derivation) -> Assignments:
    """Forward, then one unit-seeded reverse pass per output element, binding ``jacobian`` row by row."""
    sym = d.symbols
    n_in = len(sym["wrt"])
    body: Assignments = list(d.forward)
    for j, o in enumerate(sym["output"]):
        rows = reverse_accumulate(d.forward, {o: sympy.S.One}, list(sym["wrt"]), d.where)
        body += rows.assigns + list(zip(sym["jacobian"][j * n_in : (j + 1) * n_in], rows.grads))
    return joint_cse(_stable_forms(body))


#: The programs a derivation can build, by kind; ``symgrad.compiler.lower.PROGRAMS`` prunes each kernel
#: program from one of them.
BODIES: dict[str, Callable[[Derivation], Assignments]] = {
    "forward": _forward_body,
    "adjoint": _adjoint_body,
    "tangent": _tangent_body,
    "jacobian": _jacobian_body,
}
