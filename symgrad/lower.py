"""Lowering: a traced ``Spec`` -> a validated ``Kernel`` with forward, vjp and fused programs.

This is the one place that orders the passes: stabilize -> check -> forward CSE -> reverse accumulation
-> stable forms of the exp(-|u|) primitives -> joint CSE -> prune/inline per program -> readable, safe names.
"""
from __future__ import annotations

from itertools import count

import sympy
from sympy import Symbol

from .derive import (Assignments, forward_accumulate, inline_single_use, joint_cse, prune, reverse_accumulate,
                     straight_line)
from .display import formula
from .frontend import Spec
from .ir import Assign, Kernel, Program, Slot
from .naming import Namer, sanitize
from .primitives import expand_shared_cores
from .rewrite import stabilize
from .rules import apply_subgradients, check_supported

#: Closed-form derivatives are shown for functions whose forward is at most this many operations.
CLOSED_FORM_OPS = 60


def _element_names(base: str, shape: tuple[int, ...]) -> list[str]:
    if not shape:
        return [base]
    if len(shape) == 1:
        return [f"{base}_{i}" for i in range(shape[0])]
    return [f"{base}_{i}_{j}" for i in range(shape[0]) for j in range(shape[1])]


class _Builder:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.where = f"{spec.origin}: {spec.name}"
        self.namer = Namer()
        self.rename: dict[Symbol, Symbol] = {}
        self.temp_names = (f"t{k}" for k in count())

    def slot(self, base: str, shape: tuple[int, ...], role: str, internal: list[Symbol], of: str = "",
             uniform: bool = False) -> Slot:
        name = self.namer(base)
        symbols = []
        for sym, element in zip(internal, _element_names(name, shape)):
            new = Symbol(element if not shape else self.namer(element), real=True)
            self.rename[sym] = new
            symbols.append(new)
        return Slot(name, shape, tuple(symbols), role, of, uniform)

    def program(self, name: str, inputs: tuple[Slot, ...], outputs: tuple[Slot, ...], body: Assignments,
                notes: dict[Symbol, str]) -> Program:
        assigns = []
        for sym, expr in body:
            if sym not in self.rename:
                self.rename[sym] = Symbol(self.namer(next(self.temp_names)), real=True)
            assigns.append(Assign(self.rename[sym], expr.xreplace(self.rename), notes.get(sym, "")))
        return Program(name, inputs, outputs, tuple(assigns))


def _stable_forms(assigns: Assignments) -> Assignments:
    """The primitives of the exp(-|u|) family in their stable forms, so that the joint CSE after it computes
    that exponential once for a value and its gradient."""
    return [(s, expand_shared_cores(e)) for s, e in assigns]


def lower(spec: Spec) -> Kernel:
    """Derive and lay out every program of one function."""
    b = _Builder(spec)
    outputs = [stabilize(e) for out in spec.outputs for e in out.exprs]
    for e in outputs:
        check_supported(e, b.where)
    # gradients, tangents and Jacobian columns are over the differentiable arguments only
    arg_syms = [s for a in spec.args if a.diff for s in a.symbols]

    temps, reduced = straight_line(outputs, "_t")
    out_syms = [Symbol(f"_out{k}", real=True) for k in range(len(outputs))]
    cot_syms = [Symbol(f"_cot{k}", real=True) for k in range(len(outputs))]
    grad_syms = [Symbol(f"_grad{k}", real=True) for k in range(len(arg_syms))]
    forward = temps + list(zip(out_syms, reduced))
    rev = reverse_accumulate(forward, dict(zip(out_syms, cot_syms)), arg_syms, b.where)
    full = joint_cse(_stable_forms(forward + rev.assigns + list(zip(grad_syms, rev.grads))))

    # Forward mode (jvp) and the dense per-row Jacobian (one unit-seeded reverse pass per output element).
    tan_syms = [Symbol(f"_tan_in{k}", real=True) for k in range(len(arg_syms))]
    jvp_syms = [Symbol(f"_jvp{k}", real=True) for k in range(len(outputs))]
    tan_assigns, tangent = forward_accumulate(forward, dict(zip(arg_syms, tan_syms)), b.where)
    jvp_body = forward + tan_assigns + [(j, tangent[o]) for j, o in zip(jvp_syms, out_syms)]
    jvp_full = joint_cse(_stable_forms(jvp_body))
    jac_syms = [Symbol(f"_jac{j}_{i}", real=True) for j in range(len(outputs)) for i in range(len(arg_syms))]
    jac_body: Assignments = list(forward)
    for j, o in enumerate(out_syms):
        rows = reverse_accumulate(forward, {o: sympy.S.One}, arg_syms, b.where)
        jac_body += rows.assigns + list(zip(jac_syms[j * len(arg_syms):(j + 1) * len(arg_syms)], rows.grads))
    jac_full = joint_cse(_stable_forms(jac_body))
    stable_forward = _stable_forms(forward)
    forward_body = forward if stable_forward == forward else joint_cse(stable_forward)

    # Slots, in the user's names.
    args = tuple(b.slot(a.name, a.shape, "arg", list(a.symbols), uniform=a.uniform) for a in spec.args)
    single = len(spec.outputs) == 1
    out_slots, cot_slots, it_out, it_cot = [], [], iter(out_syms), iter(cot_syms)
    for k, o in enumerate(spec.outputs):
        n = len(o.exprs)
        oname = "out" if single else f"out{k}"
        out_slots.append(b.slot(oname, o.shape, "output", [next(it_out) for _ in range(n)]))
        cot_slots.append(b.slot("grad" if single else f"grad_{oname}", o.shape, "cotangent",
                                [next(it_cot) for _ in range(n)], of=oname))
    it_grad, it_tan = iter(grad_syms), iter(tan_syms)
    wrt = [a for a, a_spec in zip(args, spec.args) if a_spec.diff]
    grad_slots = [b.slot(f"grad_{a.name}", a.shape, "grad", [next(it_grad) for _ in a.symbols], of=a.name)
                  for a in wrt]
    tan_slots = [b.slot(f"tangent_{a.name}", a.shape, "tangent", [next(it_tan) for _ in a.symbols], of=a.name)
                 for a in wrt]
    it_jvp = iter(jvp_syms)
    jvp_slots = [b.slot(f"jvp_{o.name}", o.shape, "jvp", [next(it_jvp) for _ in o.symbols], of=o.name)
                 for o in out_slots]
    jac_slot = b.slot("jacobian", (len(out_syms), len(arg_syms)), "jacobian", jac_syms)

    out_names = ", ".join(s.name for s in out_slots)
    notes = {sym: f"{b.rename[sym]} = {formula(e.xreplace(b.rename), 100)}" for sym, e in zip(out_syms, outputs)}
    for slot in grad_slots:
        for sym in slot.symbols:
            notes[next(k for k, v in b.rename.items() if v == sym)] = f"{sym} = d({out_names})/d{slot.of} . grad"

    results = set(out_syms) | set(grad_syms)
    programs = (
        b.program("value_and_vjp", (*args, *cot_slots), (*out_slots, *grad_slots),
                  inline_single_use(prune(full, results), results), notes),
        b.program("forward", args, tuple(out_slots),
                  inline_single_use(prune(forward_body, set(out_syms)), set(out_syms)), notes),
        b.program("vjp", (*args, *cot_slots), tuple(grad_slots),
                  inline_single_use(prune(full, set(grad_syms)), set(grad_syms)), notes),
        b.program("jvp", (*args, *tan_slots), (*out_slots, *jvp_slots),
                  inline_single_use(prune(jvp_full, set(out_syms) | set(jvp_syms)),
                                    set(out_syms) | set(jvp_syms)), notes),
        b.program("value_and_jacobian", args, (*out_slots, jac_slot),
                  inline_single_use(prune(jac_full, set(out_syms) | set(jac_syms)),
                                    set(out_syms) | set(jac_syms)), notes),
    )
    kernel = Kernel(
        name=sanitize(spec.name), public_name=spec.name,
        origin=spec.origin, doc=spec.doc, args=args, outputs=tuple(out_slots), returns_tuple=spec.returns_tuple,
        programs=programs,
        formulas=tuple((s.name, formula(e.xreplace(b.rename))) for s, e in zip(out_slots, outputs)
                       if not s.shape),
        derivatives=_closed_forms(spec, outputs, cot_slots, b),
        nondiff=tuple(a.name for a, a_spec in zip(args, spec.args) if not a_spec.diff),
        op_counts=tuple((p.name, p.op_count()) for p in programs),
    )
    return kernel.validate()


def _closed_forms(spec: Spec, outputs: list[sympy.Expr], cot_slots: list[Slot], b: _Builder
                  ) -> tuple[tuple[str, str], ...]:
    """vjp of each scalar argument as one formula (tree ``diff``) when the function is small enough."""
    small = sum(sympy.count_ops(e) for e in outputs) <= CLOSED_FORM_OPS
    seeds = [s for slot in cot_slots for s in slot.symbols]
    result = []
    for a in spec.args:
        text = "" if a.diff else "non_differentiable"      # derivatives.yaml's keyword for such inputs
        if small and not a.shape and a.diff:
            x = a.symbols[0]
            total = sympy.Add(*[g * apply_subgradients(sympy.diff(e, x)) for g, e in zip(seeds, outputs)])
            text = formula(total.xreplace(b.rename))
        result.append((a.name, text))
    return tuple(result)
