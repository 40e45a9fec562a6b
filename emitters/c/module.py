"""The C target's module: statements, identifiers and loop functions of each program, and the file.

Contract (the ABI, ``symgrad.abi``): for every kernel, program and dtype, ``void
{kernel}__{program}_{f64|f32}(int64_t n, const T *restrict in..., T *restrict out...)`` computes the
program for rows ``i`` in ``[0, n)`` (a uniform input is one ``T`` passed by value), and
``..._ptrs(int64_t n, void *const *p)`` does the same with its arguments as an array of pointers. A scalar
slot is one array of ``n`` values (``x[i]``); a per-element vector or matrix slot is ``n`` contiguous rows
(``p[i*3 + k]``). Each is a ``static`` loop over rows ``sg_lo..sg_hi-1`` (``SG_SIMD``), run by ``SG_ROWS``
on one thread or, from a row count on (``loops``), on all OpenMP threads; a latency-bound body does two rows
per iteration; rows of a width gcc does not vectorize as a group are read through a variable holding the
width (``strides``). Identifiers that could be a C macro or a called function are renamed. Each kernel's
functions form one section of the file, opened by ``abi.SECTION_MARK`` (its banner); a section refers to
nothing in another, so the build may compile sections as separate translation units.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy

from symgrad import abi
from symgrad.abi import prototype
from symgrad.compiler.ir import Kernel, Program, Slot

from .. import ModelInfo, one_line
from .loops import _parallel_min_rows, _two_rows
from .printer import SymgradCPrinter
from .strides import GROUPED_WIDTHS, STRIDE_MACROS, hidden_widths, stride_lines
from .text import DTYPES, HELPERS, LIBMVEC_TIER, LOOP_MACROS, DType, c_safe, helper, vector_math_declarations


def function_name(kernel: Kernel, program: Program, dtype: DType) -> str:
    return abi.kernel_symbol(kernel.name, program.name, dtype.suffix)


def _comment(text: str) -> str:
    return one_line(text).replace("/*", "/ *")


class _Names:
    """C identifiers for one program: the IR's names, unless one could be a macro or a called function."""

    def __init__(self, program: Program) -> None:
        self.taken = {s.name for slot in (*program.inputs, *program.outputs) for s in (slot, *slot.symbols)}
        self.taken |= {a.target.name for a in program.body}
        self.taken |= {"i", "j", "n"}
        self.renamed: dict[str, str] = {}
        self.second: dict[str, str] = {}
        self.params = {self(slot.name) for slot in (*program.inputs, *program.outputs)}
        self.results: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        if c_safe(name):
            return name
        if name not in self.renamed:
            # 'cos' -> 'cos_'; a macro family matches with any suffix ('FLT_MAX_'), so those get a prefix
            new = name + "_" if c_safe(name + "_") else "v_" + name
            while new in self.taken:
                new += "_"
            self.taken.add(new)
            self.renamed[name] = new
        return self.renamed[name]

    def fresh(self, name: str) -> str:
        """A new identifier: ``name``, with ``_`` appended until it is taken by nothing else."""
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def local(self, name: str) -> str:
        """The C local for the IR's ``name``: a scalar result named as its argument (``grad_w``) gets one of
        its own (``grad_w_``)."""
        name = self(name)
        if name in self.params:
            if name not in self.results:
                self.results[name] = self.fresh(name + "_")
            return self.results[name]
        return name

    def lane(self, name: str) -> str:
        """The second row's copy of the (C-safe) local ``name``: ``t3`` -> ``t3_b``."""
        if name not in self.second:
            self.second[name] = self.fresh(name + "_b")
        return self.second[name]


def _statements(
    program: Program,
    dtype: DType,
    p: SymgradCPrinter,
    cname: _Names,
    row: str,
    local: Callable[[str], str],
    access: Callable[[Slot, int, str], str],
    grouped: Callable[[Slot], bool],
) -> list[tuple[str, bool]]:
    """The loop body for row ``row`` (``i`` or ``j``), locals named by ``local`` (comments only on ``i``),
    component ``k`` of a slot at ``access(slot, k, row)``: (statement, whether it loads or stores an array
    element). Slots of a row width gcc vectorizes as a group (``grouped``: 2 to 16 values) are
    stored at the end of the body: gcc may move an earlier store into the branches of a later
    select, and a masked store to a group stops the loop from vectorizing ("unsupported access type for
    masked store"); the values of wider slots are stored as computed (kept to the end, they cost spills)."""
    names: dict[sympy.Symbol, str] = {}
    used = set().union(*(a.expr.free_symbols for a in program.body)) if program.body else set()
    lines = []
    for slot in program.inputs:
        for k, sym in enumerate(slot.symbols):
            if slot.uniform:
                names[sym] = cname(slot.name)  # a number passed by value
            elif not slot.shape:
                names[sym] = access(slot, k, row)
            elif sym in used:
                names[sym] = local(cname(sym.name))
                lines.append((f"const {dtype.ctype} {names[sym]} = {access(slot, k, row)};", True))
    p.names = names
    computed = {a.target for a in program.body}
    direct: dict[sympy.Symbol, str] = {}  # results stored as computed
    at_end = []  # the others: (slot, component)
    for slot in program.outputs:
        for k, sym in enumerate(slot.symbols):
            if sym in computed and grouped(slot):
                at_end.append((slot, k))
            elif sym in computed:
                direct[sym] = access(slot, k, row)
    for a in program.body:
        note = f"  /* {_comment(a.note)} */" if a.note and row == "i" else ""
        value = p.doprint(a.expr)
        if a.target in direct:
            names[a.target] = direct[a.target]
            lines.append((f"{direct[a.target]} = {value};{note}", True))
        else:
            names[a.target] = local(cname.local(a.target.name))
            lines.append((f"const {dtype.ctype} {names[a.target]} = {value};{note}", False))
    lines += [(f"{access(slot, k, row)} = {names[slot.symbols[k]]};", True) for slot, k in at_end]
    return lines


def _interleave(first: list[tuple[str, bool]], second: list[tuple[str, bool]]) -> list[str]:
    """Two rows' statements alternately, except that a run of loads or stores stays together for each row:
    gcc vectorizes the accesses to a row's values of one slot (``J[i*2 + 0]``, ``J[i*2 + 1]``) only as a
    group."""
    lines = []
    k = 0
    while k < len(first):
        end = k + 1
        if first[k][1]:
            while end < len(first) and first[end][1]:
                end += 1
        lines += [line for line, _ in first[k:end]] + [line for line, _ in second[k:end]]
        k = end
    return lines


#: The head of a program's loop over rows sg_lo..sg_hi-1: one row per iteration, or two (i, j = i + sg_skip)
_ONE_ROW_LOOP = "    SG_SIMD\n    for (int64_t i = sg_lo; i < sg_hi; ++i) {\n"
_TWO_ROWS_LOOP = (
    "    /* two rows per iteration, i from the first half and j from the second (an odd count does its\n"
    "       middle row twice): their chains of math calls overlap in the CPU */\n"
    "    const int64_t sg_half = (sg_hi - sg_lo + 1)/2;\n"
    "    const int64_t sg_skip = sg_hi - sg_lo - sg_half;\n"
    "    SG_SIMD\n"
    "    for (int64_t i = sg_lo; i < sg_lo + sg_half; ++i) {\n"
)


class CEmitter:
    name = "c"
    filename = "kernels.c"

    def emit_program(
        self, kernel: Kernel, program: Program, dtype: DType, printer: SymgradCPrinter | None = None
    ) -> str:
        cname = _Names(program)
        p = printer or SymgradCPrinter(dtype)
        slots = (*program.inputs, *program.outputs)
        widths = {w: cname.fresh(f"sg_width{w}") for w in sorted(hidden_widths(program))}

        def access(slot: Slot, k: int, row: str) -> str:
            if slot.size == 1:
                return f"{cname(slot.name)}[{row}]"
            return f"{cname(slot.name)}[{row}*{widths.get(slot.size, slot.size)} + {k}]"

        def grouped(slot: Slot) -> bool:  # one value per row is a plain contiguous (maskable) store
            return slot.size > 1 and slot.size in GROUPED_WIDTHS and slot.size not in widths

        first = _statements(program, dtype, p, cname, "i", lambda name: name, access, grouped)
        two = _two_rows(program, dtype)
        if two:
            second = _statements(program, dtype, p, cname, "j", cname.lane, access, grouped)
            lines = ["const int64_t j = i + sg_skip;", *_interleave(first, second)]
        else:
            lines = [line for line, _ in first]
        params = [
            f"const {dtype.ctype} {cname(s.name)}"
            if s.uniform
            else f"const {dtype.ctype} *restrict {cname(s.name)}"
            for s in program.inputs
        ]
        params += [f"{dtype.ctype} *restrict {cname(s.name)}" for s in program.outputs]
        name = function_name(kernel, program, dtype)
        args = ", ".join(cname(s.name) for s in slots)
        # the pointer-array entry: every argument as p[k], a uniform input as a pointer to its value
        unpacked = ", ".join(
            f"*(const {dtype.ctype} *)p[{k}]" if s.uniform else f"p[{k}]" for k, s in enumerate(slots)
        )
        body = "\n".join(f"        {line}" for line in lines)
        head = "".join(f"    {line}\n" for line in stride_lines(widths))
        loop = f"{head}{_TWO_ROWS_LOOP if two else _ONE_ROW_LOOP}{body}\n    }}\n"
        title = f"{program.name} of {_comment(kernel.name)} [{_comment(kernel.origin)}], {dtype.ctype}"
        rows = prototype("sg_rows_" + name, params, "static SG_NOINLINE void", "int64_t sg_lo, int64_t sg_hi")
        return (
            f"/* {title}: rows sg_lo to sg_hi - 1 */\n"
            f"{rows}\n{{\n{loop}}}\n\n"
            f"/* {title} */\n"
            f"{prototype(name, params)}\n{{\n"
            f"    SG_ROWS({_parallel_min_rows(program, dtype)}, sg_rows_{name}, {args});\n}}\n\n"
            f"/* {title}: the arguments as pointers p[0], p[1], ... (symgrad's direct call) */\n"
            f"void {name}{abi.POINTERS_SUFFIX}(int64_t n, void *const *p)\n{{\n"
            f"    {name}(n, {unpacked});\n}}"
        )

    def __init__(self) -> None:
        self._printed: dict[int, tuple[Kernel, str, set, set]] = {}

    def _functions(self, kernel: Kernel) -> tuple[str, set, set]:
        """(text, libm functions used, helpers used) of every program and dtype of ``kernel``, printed once
        per emitter instance (``emit_module`` and ``emit_function`` of one build share it)."""
        hit = self._printed.get(id(kernel))
        if hit is None or hit[0] is not kernel:
            printers = {d.suffix: SymgradCPrinter(d) for d in DTYPES}
            text = "\n\n".join(
                self.emit_program(kernel, program, dtype, printers[dtype.suffix])
                for dtype in DTYPES
                for program in kernel.programs
            )
            hit = self._printed[id(kernel)] = (
                kernel,
                text,
                set().union(*(p.used for p in printers.values())),
                set().union(*(p.helpers for p in printers.values())),
            )
        return hit[1], hit[2], hit[3]

    def emit_function(self, kernel: Kernel) -> str:
        return self._functions(kernel)[0]

    def emit_module(self, kernels: Sequence[Kernel], info: ModelInfo) -> str:
        printed = [self._functions(k) for k in kernels]
        bodies = [self._banner(k) + "\n" + text for k, (text, _, _) in zip(kernels, printed)]
        used = set().union(*(u for _, u, _ in printed))
        helpers = set().union(*(h for _, _, h in printed))
        head = [
            f"/* @generated by symgrad {info.symgrad_version} from {_comment(info.source)}. Do not edit.",
            f"   Regenerate with: symgrad compile {_comment(info.source)}",
            "",
            "   One function per kernel, program and dtype (T = double for _f64, float for _f32):",
            "     void <kernel>__<program>_<f64|f32>(int64_t n, const T *restrict inputs..., "
            "T *restrict results...)",
            "   Every array holds n rows; a vector or matrix argument is one contiguous row per element",
            "   (x[i*3 + k]). Arrays must not overlap. */",
            "#include <math.h>",
            "#include <stdint.h>",
            "",
            LOOP_MACROS,
        ]
        if any(hidden_widths(p) for k in kernels for p in k.programs):
            head += ["", STRIDE_MACROS]
        if used & set(LIBMVEC_TIER):
            head += ["", vector_math_declarations(used)]
        for name in HELPERS:
            for dtype in DTYPES:
                if (name, dtype.suffix) in helpers:
                    head += ["", helper(name, dtype)]
        return "\n".join(head) + "\n\n" + "\n\n".join(bodies) + "\n"

    @staticmethod
    def _banner(kernel: Kernel) -> str:
        lines = [f"{abi.SECTION_MARK}{_comment(kernel.name)} [{_comment(kernel.origin)}] ----"]
        lines += [f"   {_comment(name)} = {_comment(text)}" for name, text in kernel.formulas]
        lines += [f"   vjp {_comment(name)}: {_comment(text)}" for name, text in kernel.derivatives if text]
        return "\n".join(lines) + " */"
