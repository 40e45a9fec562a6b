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

from symgrad.compiler import dag, formulas
from symgrad.compiler.derive import Derivation, hessian_fits
from symgrad.compiler.display import formula
from symgrad.compiler.ir import Assign, Kernel, Program, Slot
from symgrad.compiler.naming import Namer, Temporary, sanitize
from symgrad.compiler.passes import Assignments, inline_single_use, prune
from symgrad.compiler.rewrite import stabilize
from symgrad.compiler.temp_names import TempNames
from symgrad.debug import timed
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


#: Every program of a kernel, in the order they are laid out.
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
    """Names slots and temporaries as they are laid out, and renames internal symbols to them. A temporary is
    numbered across the kernel (``t3``, its ``naming.Temporary`` key) and named readably in each program
    (``temp_names``)."""

    def __init__(self, d: Derivation) -> None:
        self.namer = Namer()
        self.rename: dict[Symbol, Symbol] = {}
        self.keys: dict[Symbol, str] = {}
        self.renamed: dict = {}  # dag.renamed's results, shared by the programs
        self.temp_keys = (f"t{k}" for k in count())
        self.slot_names: Namer | None = None  # the namer once the slots are named (before any temporary)
        known = {s for a in d.spec.args for s in a.symbols}
        self.temps = TempNames(d.spec.names, known, stabilize)

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
        self.slot_names = self.slot_names or self.namer.copy()
        assigns, rename, temp_name = [], dict(self.rename), self.temps.program(self.slot_names)
        for sym, expr in body:
            shown = dag.renamed(expr, rename, self.renamed)
            if sym not in rename:
                if sym not in self.keys:
                    self.keys[sym] = self.namer(next(self.temp_keys))
                label = temp_name(sym, expr, shown)
                rename[sym] = Temporary(f"{self.keys[sym]}\0{label}", label, real=True)
            assigns.append(Assign(rename[sym], shown, notes.get(sym, "")))
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


def _display(
    d: Derivation, slots: dict[str, tuple[Slot, ...]], b: _Builder, order: int
) -> dict[str, list[tuple[str, formulas.Value]]]:
    """The display formulas in generated code's names: ``outputs`` (per element), ``first`` (per argument)
    and, for ``order`` 2, ``second`` (the Hessian's upper triangle)."""
    outs = [s for slot in slots["output"] for s in slot.symbols]
    shown = {
        "outputs": [(n, dag.rename(e, b.rename)) for n, e in formulas.outputs(d, outs)],
        "first": [(a, formulas.renamed(v, b.rename)) for a, v in formulas.first(d)],
        "second": [],
    }
    if order == 2:
        wrt = [b.rename[s].name for s in d.symbols["wrt"]]
        second = formulas.second(d, [s.name for s in outs], wrt)
        shown["second"] = [(label, dag.rename(e, b.rename)) for label, e in second]
    return shown


def display_formulas(d: Derivation, order: int = 1) -> dict[str, list[tuple[str, formulas.Value]]]:
    """What ``symgrad show`` prints as formulas (``_display``), without laying out any program."""
    b = _Builder(d)
    return _display(d, _slots(d, b), b, order)


def _kernel_formulas(
    d: Derivation, slots: dict[str, tuple[Slot, ...]], b: _Builder, programs: list[Program]
) -> dict[str, tuple[tuple[str, str], ...]]:
    """The ``Kernel``'s formula fields as text; second derivatives for a function with a Hessian program and
    at most ``formulas.SECOND_ORDER_ARGS`` scalar arguments."""
    hessian = any(p.name == "value_jacobian_hessian" for p in programs)
    order = 2 if hessian and len(d.symbols["wrt"]) <= formulas.SECOND_ORDER_ARGS else 1
    shown = _display(d, slots, b, order)
    return {
        "formulas": tuple((n, formulas.text(v)) for n, v in shown["outputs"]),
        "derivatives": tuple((n, formulas.text(v)) for n, v in shown["first"]),
        "second_derivatives": tuple((n, formulas.text(v)) for n, v in shown["second"]),
    }


def lower(d: Derivation) -> Kernel:
    """Lay out every program of ``PROGRAMS`` for one derivation."""
    b = _Builder(d)
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
        with timed(f"{d.spec.name}: lower {rule.name}"):
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
        **_kernel_formulas(d, slots, b, programs),
        nondiff=tuple(a.name for a, a_spec in zip(slots["arg"], spec.args) if not a_spec.diff),
        op_counts=tuple((p.name, p.op_count()) for p in programs),
    )
    return kernel.validate()
