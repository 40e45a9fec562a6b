"""Lowering: a ``Derivation`` -> a validated ``Kernel``, one ``Program`` per row of ``PROGRAMS``.

Each row says which slot families a program takes and returns and which derivation body it is pruned from
(dead code dropped, single-use temporaries inlined). Slots and temporaries get readable, safe names from
the user's symbols (``naming``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import count, product

from sympy import Symbol

from symgrad.compiler import dag
from symgrad.compiler.derive import Derivation, hessian_fits
from symgrad.compiler.display import formula
from symgrad.compiler.ir import Assign, Kernel, Program, Slot
from symgrad.compiler.naming import Namer, sanitize
from symgrad.compiler.passes import Assignments, inline_single_use, prune
from symgrad.errors import UnsupportedError


@dataclass(frozen=True)
class ProgramRule:
    """How one kernel program is built from a derivation."""

    name: str
    inputs: tuple[str, ...]  # slot families, in parameter order
    outputs: tuple[str, ...]  # slot families, in result order (each a ``Derivation.symbols`` family)
    body: str  # the ``Derivation.body`` kind it is pruned from
    #: an optional program: built only where this holds, and left out (not an error) where a second
    #: derivative is unsupported; ``CompiledFunction`` then says the program is missing
    optional: Callable[[Derivation], bool] | None = None


#: Every program of a kernel, in the order they are laid out (temporaries are numbered in this order).
PROGRAMS = (
    ProgramRule("value_and_vjp", ("arg", "cotangent"), ("output", "grad"), "adjoint"),
    ProgramRule("forward", ("arg",), ("output",), "forward"),
    ProgramRule("vjp", ("arg", "cotangent"), ("grad",), "adjoint"),
    ProgramRule("jvp", ("arg", "tangent"), ("output", "jvp"), "tangent"),
    ProgramRule("value_and_jacobian", ("arg",), ("output", "jacobian"), "jacobian"),
    ProgramRule(
        "value_jacobian_hessian", ("arg",), ("output", "jacobian", "hessian"), "hessian", hessian_fits
    ),
    ProgramRule("hvp", ("arg", "cotangent", "tangent"), ("hvp",), "hvp", lambda d: True),
)


def _element_names(base: str, shape: tuple[int, ...]) -> list[str]:
    return [base + "".join(f"_{i}" for i in index) for index in product(*map(range, shape))]


class _Builder:
    """Names slots and temporaries as they are laid out, and renames internal symbols to them."""

    def __init__(self) -> None:
        self.namer = Namer()
        self.rename: dict[Symbol, Symbol] = {}
        self.temp_names = (f"t{k}" for k in count())

    def slot(
        self,
        base: str,
        shape: tuple[int, ...],
        role: str,
        internal: list[Symbol],
        of: str = "",
        uniform: bool = False,
    ) -> Slot:
        name = self.namer(base)
        symbols = []
        for sym, element in zip(internal, _element_names(name, shape)):
            new = Symbol(element if not shape else self.namer(element), real=True)
            self.rename[sym] = new
            symbols.append(new)
        return Slot(name, shape, tuple(symbols), role, of, uniform)

    def program(
        self,
        name: str,
        inputs: tuple[Slot, ...],
        outputs: tuple[Slot, ...],
        body: Assignments,
        notes: dict[Symbol, str],
    ) -> Program:
        assigns = []
        for sym, expr in body:
            if sym not in self.rename:
                self.rename[sym] = Symbol(self.namer(next(self.temp_names)), real=True)
            assigns.append(Assign(self.rename[sym], expr.xreplace(self.rename), notes.get(sym, "")))
        return Program(name, inputs, outputs, tuple(assigns))


def _slots(d: Derivation, b: _Builder) -> dict[str, tuple[Slot, ...]]:
    """Every slot family in the user's names: arguments, then each output with its cotangent, gradients,
    tangents, output tangents and the Jacobian block (the order in which names are handed out)."""
    spec, sym = d.spec, d.symbols
    args = tuple(b.slot(a.name, a.shape, "arg", list(a.symbols), uniform=a.uniform) for a in spec.args)
    single = len(spec.outputs) == 1
    outs, cots, it_out, it_cot = [], [], iter(sym["output"]), iter(sym["cotangent"])
    for k, o in enumerate(spec.outputs):
        oname = "out" if single else f"out{k}"
        outs.append(b.slot(oname, o.shape, "output", [next(it_out) for _ in o.exprs]))
        cots.append(
            b.slot(
                "grad" if single else f"grad_{oname}",
                o.shape,
                "cotangent",
                [next(it_cot) for _ in o.exprs],
                of=oname,
            )
        )
    wrt = [a for a, a_spec in zip(args, spec.args) if a_spec.diff]
    it_grad, it_tan, it_jvp = iter(sym["grad"]), iter(sym["tangent"]), iter(sym["jvp"])
    grads = [
        b.slot(f"grad_{a.name}", a.shape, "grad", [next(it_grad) for _ in a.symbols], of=a.name) for a in wrt
    ]
    tans = [
        b.slot(f"tangent_{a.name}", a.shape, "tangent", [next(it_tan) for _ in a.symbols], of=a.name)
        for a in wrt
    ]
    jvps = [
        b.slot(f"jvp_{o.name}", o.shape, "jvp", [next(it_jvp) for _ in o.symbols], of=o.name) for o in outs
    ]
    n_out, n_in = len(sym["output"]), len(sym["wrt"])
    jac = b.slot("jacobian", (n_out, n_in), "jacobian", list(sym["jacobian"]))
    # one output: its Hessian block alone, (n_in, n_in)
    hess = b.slot("hessian", (n_out, n_in, n_in)[n_out == 1 :], "hessian", list(sym["hessian"]))
    it_hvp = iter(sym["hvp"])
    hvps = [
        b.slot(f"hvp_{a.name}", a.shape, "hvp", [next(it_hvp) for _ in a.symbols], of=a.name) for a in wrt
    ]
    return {
        "arg": args,
        "output": tuple(outs),
        "cotangent": tuple(cots),
        "grad": tuple(grads),
        "tangent": tuple(tans),
        "jvp": tuple(jvps),
        "jacobian": (jac,),
        "hessian": (hess,),
        "hvp": tuple(hvps),
    }


def _notes(d: Derivation, slots: dict[str, tuple[Slot, ...]], b: _Builder) -> dict[Symbol, str]:
    """The comment of each output and gradient assignment: the formula it computes."""
    notes = {
        sym: f"{b.rename[sym]} = {formula(dag.rename(e, b.rename), 100)}"
        for sym, e in zip(d.symbols["output"], d.outputs)
    }
    out_names = ", ".join(s.name for s in slots["output"])
    internal = {v: k for k, v in b.rename.items()}
    for slot in slots["grad"]:
        for sym in slot.symbols:
            notes[internal[sym]] = f"{sym} = d({out_names})/d{slot.of} . grad"
    return notes


def lower(d: Derivation) -> Kernel:
    """Lay out every program of ``PROGRAMS`` for one derivation."""
    b = _Builder()
    slots = _slots(d, b)
    notes = _notes(d, slots, b)
    programs = []
    for rule in PROGRAMS:
        results = {s for family in rule.outputs for s in d.symbols[family]}
        if rule.optional is not None:
            try:
                if not rule.optional(d):
                    continue
                d.body(rule.body)
            except UnsupportedError:
                continue
        body = inline_single_use(prune(d.body(rule.body), results), results)
        programs.append(
            b.program(
                rule.name,
                tuple(s for f in rule.inputs for s in slots[f]),
                tuple(s for f in rule.outputs for s in slots[f]),
                body,
                notes,
            )
        )
    spec = d.spec
    kernel = Kernel(
        name=sanitize(spec.name),
        public_name=spec.name,
        origin=spec.origin,
        doc=spec.doc,
        args=slots["arg"],
        outputs=slots["output"],
        returns_tuple=spec.returns_tuple,
        programs=tuple(programs),
        formulas=tuple(
            (s.name, formula(dag.rename(e, b.rename)))
            for s, e in zip(slots["output"], d.outputs)
            if not s.shape
        ),
        derivatives=tuple(
            (name, value if isinstance(value, str) else formula(dag.rename(value, b.rename)))
            for name, value in d.closed_forms()
        ),
        nondiff=tuple(a.name for a, a_spec in zip(slots["arg"], spec.args) if not a_spec.diff),
        op_counts=tuple((p.name, p.op_count()) for p in programs),
    )
    return kernel.validate()
