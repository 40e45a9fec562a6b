"""Derivation as a value: a traced ``Spec`` -> a ``Derivation``.

``derive`` stabilizes the outputs (``rewrite``), checks them (``rules``) and CSEs the forward into a
straight-line program. Each program body the lowering asks for (``body(kind)``, the ``BODIES`` table) is
built from that program once, by the passes in ``symgrad.compiler.passes``: reverse accumulation for the
adjoint, forward accumulation for the tangent, one unit-seeded reverse pass per output for the Jacobian,
then the stable forms of the exp(-|u|) primitives and one joint CSE. Second order differentiates those
programs again: the Hessian is forward accumulation over the Jacobian
program, one unit seed per input, the Hessian-vector product one pass over the adjoint program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import product

import sympy
from sympy import Symbol

from symgrad.compiler.display import formula
from symgrad.compiler.local import hoist_by_output
from symgrad.compiler.passes import (
    Assignments,
    forward_accumulate,
    fresh,
    internal,
    joint_cse,
    prune,
    reverse_accumulate,
    straight_line,
)
from symgrad.compiler.primitives import expand_shared_cores
from symgrad.compiler.rewrite import stabilize
from symgrad.compiler.rules import check_supported
from symgrad.compiler.trace import Spec


def _symbols(prefix: str, n: int) -> tuple[Symbol, ...]:
    """``n`` internal symbols (``passes.internal``: never a user's argument, whatever its name)."""
    return tuple(internal(f"{prefix}{k}") for k in range(n))


@dataclass(frozen=True, eq=False)
class Derivation:
    """One function's forward program and the symbol families its programs are written over.

    ``symbols`` maps a family to its internal symbols, each family flat and row-major: ``wrt`` (the elements
    of the differentiable arguments), ``output``, ``cotangent`` (one per output element), ``grad`` and
    ``tangent`` (one per ``wrt``), ``jvp`` (one per output element), ``jacobian`` (outputs x ``wrt``,
    row-major), ``hessian`` (outputs x ``wrt`` x ``wrt``, row-major), ``hvp`` (one per ``wrt``).
    ``body(kind)`` is the straight-line program that assigns a family's symbols."""

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
    temps, reduced = hoist_by_output(*straight_line(list(outputs), "_t"), fresh("_h"))
    out_syms = _symbols("_out", n_out)
    symbols = {
        "wrt": wrt,
        "output": out_syms,
        "cotangent": _symbols("_cot", n_out),
        "grad": _symbols("_grad", n_in),
        "tangent": _symbols("_tan_in", n_in),
        "jvp": _symbols("_jvp", n_out),
        "jacobian": tuple(internal(f"_jac{j}_{i}") for j in range(n_out) for i in range(n_in)),
        "hessian": tuple(
            internal(f"_hess{j}_{i}_{k}") for j in range(n_out) for i in range(n_in) for k in range(n_in)
        ),
        "hvp": _symbols("_hvp", n_in),
    }
    return Derivation(spec, outputs, temps + list(zip(out_syms, reduced)), symbols)


def _stable_forms(assigns: Assignments) -> Assignments:
    """The primitives of the exp(-|u|) family in their stable forms, so that the joint CSE after it computes
    that exponential once for a value and its gradient."""
    return [(s, expand_shared_cores(e)) for s, e in assigns]


def _cse(d: Derivation, assigns: Assignments) -> Assignments:
    """The joint CSE of a body, the forward's quotients kept as divisions (``passes.joint_cse``)."""
    return joint_cse(assigns, frozenset(s for s, _ in d.forward))


def _forward_body(d: Derivation) -> Assignments:
    stable = _stable_forms(d.forward)
    return d.forward if stable == d.forward else _cse(d, stable)


def _adjoint_assigns(d: Derivation) -> Assignments:
    """Forward, then reverse accumulation from the ``cotangent`` seeds, binding ``grad``."""
    sym = d.symbols
    rev = reverse_accumulate(d.forward, dict(zip(sym["output"], sym["cotangent"])), list(sym["wrt"]), d.where)
    return d.forward + rev.assigns + list(zip(sym["grad"], rev.grads))


def _adjoint_body(d: Derivation) -> Assignments:
    return _cse(d, _stable_forms(_adjoint_assigns(d)))


def _tangent_body(d: Derivation) -> Assignments:
    """Forward, then forward accumulation from the ``tangent`` seeds, binding ``jvp``."""
    sym = d.symbols
    assigns, tangent = forward_accumulate(d.forward, dict(zip(sym["wrt"], sym["tangent"])), d.where)
    return _cse(
        d, _stable_forms(d.forward + assigns + [(j, tangent[o]) for j, o in zip(sym["jvp"], sym["output"])])
    )


def _jacobian_assigns(d: Derivation) -> Assignments:
    """Forward, then one unit-seeded reverse pass per output element, binding ``jacobian`` row by row."""
    sym = d.symbols
    n_in = len(sym["wrt"])
    body: Assignments = list(d.forward)
    for j, o in enumerate(sym["output"]):
        rows = reverse_accumulate(d.forward, {o: sympy.S.One}, list(sym["wrt"]), d.where)
        body += rows.assigns + list(zip(sym["jacobian"][j * n_in : (j + 1) * n_in], rows.grads))
    return body


def _jacobian_body(d: Derivation) -> Assignments:
    return _cse(d, _stable_forms(_jacobian_assigns(d)))


#: A Hessian program is built for at most this many distinct entries (outputs x the upper triangle) ...
HESSIAN_MAX_ENTRIES = 1200
#: ... and at most this much work: inputs x assignments of the Jacobian program (one tangent pass over it per
#: input; a Neo-Hookean tetrahedron is 528, a bundle adjustment residual, 6 s of compile, 3765)
HESSIAN_MAX_WORK = 2000


def _differentiable_again(d: Derivation, assigns: Assignments) -> Assignments:
    """A first-derivative program ready for another pass: straight-lined (``_cse``), its products with an
    exp or a quotient in temporaries of their own, so the local rules differentiate them through their value
    (``local.hoist_by_output``). Before the stable forms: a sigmoid is differentiated by its own rule, not
    through the ``exp(-|x|)`` of its stable form (whose |x|' = 0 at 0 would make softplus''(0) 0)."""
    return hoist_by_output(_cse(d, assigns), [], fresh("_h2_"))[0]


def hessian_entries(d: Derivation) -> int:
    """The distinct entries of the Hessian program: outputs x the upper triangle."""
    n_in = len(d.symbols["wrt"])
    return len(d.symbols["output"]) * n_in * (n_in + 1) // 2


def hessian_fits(d: Derivation) -> bool:
    """Whether ``d`` gets a Hessian program (``HESSIAN_MAX_ENTRIES``, ``HESSIAN_MAX_WORK``)."""
    return (
        hessian_entries(d) <= HESSIAN_MAX_ENTRIES
        and len(d.symbols["wrt"]) * len(d.body("jacobian")) <= HESSIAN_MAX_WORK
    )


def _hessian_body(d: Derivation) -> Assignments:
    """Forward over reverse: the Jacobian program, then one unit-seeded tangent pass per input, giving the
    upper triangle of every output's Hessian; each entry of the lower triangle is the same temporary as its
    mirror (exactly symmetric, and no result read back, which would keep a C loop from vectorizing)."""
    sym = d.symbols
    n_out, n_in = len(sym["output"]), len(sym["wrt"])
    program = _differentiable_again(d, _jacobian_assigns(d))
    body, jac = list(program), sym["jacobian"]
    upper: dict[tuple[int, int, int], Symbol] = {}
    for k, x in enumerate(sym["wrt"]):
        assigns, tangent = forward_accumulate(program, {x: sympy.S.One}, d.where, f"_hes{k}")
        body += assigns
        for j, i in product(range(n_out), range(k + 1)):
            upper[j, i, k] = internal(f"_hup{j}_{i}_{k}")
            body.append((upper[j, i, k], tangent[jac[j * n_in + i]]))
    body = _cse(d, _stable_forms(prune(body, {*sym["output"], *jac, *upper.values()})))
    entries = product(range(n_out), range(n_in), range(n_in))
    return body + [(h, upper[j, min(i, k), max(i, k)]) for h, (j, i, k) in zip(sym["hessian"], entries)]


def _hvp_body(d: Derivation) -> Assignments:
    """Forward over reverse: the adjoint program, then one tangent pass from the ``tangent`` seeds, binding
    ``hvp`` (the tangent of each ``grad``: the Hessian of <cotangent, outputs> times the tangent)."""
    sym = d.symbols
    program = _differentiable_again(d, _adjoint_assigns(d))
    assigns, tangent = forward_accumulate(program, dict(zip(sym["wrt"], sym["tangent"])), d.where, "_hv")
    return _cse(
        d, _stable_forms(program + assigns + [(h, tangent[g]) for h, g in zip(sym["hvp"], sym["grad"])])
    )


#: The programs a derivation can build, by kind; ``symgrad.compiler.lower.PROGRAMS`` prunes each kernel
#: program from one of them.
BODIES: dict[str, Callable[[Derivation], Assignments]] = {
    "forward": _forward_body,
    "adjoint": _adjoint_body,
    "tangent": _tangent_body,
    "jacobian": _jacobian_body,
    "hessian": _hessian_body,
    "hvp": _hvp_body,
}
