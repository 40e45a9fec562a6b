"""C target: one C99 translation unit per model, with one loop function per kernel, program and dtype.

``void {kernel}__{program}_{f64|f32}(int64_t n, const T *restrict in..., T *restrict out...)`` runs the
program's straight-line body for ``i`` in ``[0, n)`` (a latency-bound body for two rows ``i`` and ``j`` at a
time, see ``TWO_ROWS_DEPTH``). A scalar slot is one array of ``n`` values
(``x[i]``); a per-element vector or matrix slot is ``n`` contiguous rows (``p[i*3 + k]``).

float32 kernels are true float32: ``expf``, ``F`` literals, ``float`` temporaries, no double macro
constants. The stable primitives (sigmoid, softplus, ...) are ``static inline`` helpers, Piecewise is a
ternary (only the chosen branch's value reaches the result), small integer and half powers are expanded.
Each program is a ``static`` loop over rows ``sg_lo..sg_hi-1`` (``SG_SIMD``: ``omp simd``), the exported
function, which runs it on all OpenMP threads from a size threshold on (``SG_ROWS``), else on one, and
``..._ptrs``, the same with its arguments as an array of pointers (for ``symgrad.backends.c.direct``); the
libm functions the file uses get ``declare simd`` prototypes so gcc can call glibc's libmvec; both are
switched on by the build (``symgrad.backends.c.cffi_build``) only when a test compile showed they work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy
import sympy.printing.c
from sympy.core.mul import _keep_coeff
from sympy.printing.c import C99CodePrinter
from sympy.printing.codeprinter import CodePrinter
from sympy.printing.precedence import PRECEDENCE, precedence

from symgrad import abi
from symgrad.abi import POINTERS_SUFFIX, prototype
from symgrad.compiler.display import TermOrder
from symgrad.compiler.ir import Kernel, Program, Slot

from . import ExpressionPrinter, ModelInfo, one_line, register
from ._c_text import (
    DTYPES,
    HELPERS,
    LIBM,
    LIBMVEC_TIER,
    LOOP_MACROS,
    DType,
    c_safe,
    helper,
    literal,
    vector_math_declarations,
)

__all__ = ["CEmitter", "SymgradCPrinter", "DTYPES", "DType", "c_safe", "cdef", "function_name"]

#: When a loop runs on all OpenMP threads: from the row count at which one thread would take ~0.25 ms (the
#: other threads sleep between loops, and waking them costs 60-120 us on the 2-core VMs; see
#: ``symgrad.backends.c``), estimated as ``PARALLEL_WORK[dtype] / row cost`` within
#: ``[PARALLEL_MIN_ROWS_FLOOR, PARALLEL_MIN_ROWS]``. A row's cost counts arithmetic as 1 and a math
#: function call (sin, exp, log1p, ...) as ``CALL_COST``; calibrated on bench_interop's chain20 kernels
#: (0.05 ns per unit and row in float32, 0.11 in float64, vectorized).
PARALLEL_WORK = {"f32": 5_000_000, "f64": 2_500_000}
PARALLEL_MIN_ROWS = 200_000
PARALLEL_MIN_ROWS_FLOOR = 1_000
CALL_COST = 10
#: A loop does two rows per iteration, interleaving their statements, when its rows are latency-bound: a
#: chain of math calls that each need the previous result, at least TWO_ROWS_DEPTH calls long and at least
#: a quarter of the row's cost. Each call's latency (tens of cycles) then overlaps with the other row's.
#: Measured at N=1e5, ns per element on one thread, one row -> two: float32 chain20 (5 dependent sins)
#: 4.2 -> 3.5, GELU 0.62 -> 0.51; float64 chain20 10.4 -> 8.4. Not latency-bound, or float64 with a short
#: chain, it is no faster or slower (more values to spill around each call): float32 big 2.3 -> 2.5,
#: float64 GELU 1.22 -> 1.41, blend 2.7 -> 3.0.
TWO_ROWS_DEPTH = {"f32": 1, "f64": 3}
#: Functions that print as a compare, a select or one instruction, not a call
_INLINE_FUNCTIONS = frozenset({"Abs", "Piecewise", "floor", "ceiling"}) | frozenset(
    name for name, (calls, _) in HELPERS.items() if not calls
)


class SymgradCPrinter(ExpressionPrinter, TermOrder, C99CodePrinter):
    """Expressions of one dtype; statements, loops and signatures belong to the emitter.

    ``names`` maps a SymPy symbol to its C text (``x[i]``, a local name); ``used`` collects the libm
    functions and ``helpers`` the (helper, dtype suffix) pairs an expression needed, for the file header.
    """

    EXPAND_POW_MAX = 4  # x**4 -> x*x*x*x; beyond, pow()

    def __init__(self, dtype: DType = DTYPES[0], names: dict | None = None) -> None:
        super().__init__({"strict": True})
        self.math_macros = {}  # no M_PI: double, and undefined under -std=c99
        self.dtype = dtype
        self.names = names or {}
        self.used: set[str] = set()
        self.helpers: set[tuple[str, str]] = set()

    # -- atoms ------------------------------------------------------------------------------------------
    def _print_Symbol(self, expr):
        return self.names.get(expr, expr.name)

    def _print_Integer(self, expr):
        return literal(float(expr), self.dtype)

    def _print_Rational(self, expr):
        return literal(float(expr), self.dtype)

    def _print_Float(self, expr):
        return literal(float(expr), self.dtype)

    def _print_NumberSymbol(self, expr):
        return literal(float(expr.evalf(30)), self.dtype)

    _print_Pi = _print_Exp1 = _print_NumberSymbol

    def _print_Infinity(self, expr):
        return "INFINITY"

    def _print_NegativeInfinity(self, expr):
        return "-INFINITY"

    def _print_NaN(self, expr):
        return "NAN"

    def _print_BooleanTrue(self, expr):
        return "1"

    def _print_BooleanFalse(self, expr):
        return "0"

    # -- arithmetic ---------------------------------------------------------------------------------------
    def _print_Mul(self, expr):
        """``-2.0*a*b/(c*d)``: numeric coefficient first, negative powers as one denominator."""
        c, rest = expr.as_coeff_Mul()
        sign = ""
        if c.is_negative:
            expr, sign = _keep_coeff(-c, rest), "-"
        num, den = [], []
        for f in expr.as_ordered_factors():
            if f.is_Pow and f.exp.is_Rational and f.exp.is_negative:
                den.append(f.base if f.exp == -1 else sympy.Pow(f.base, -f.exp, evaluate=False))
            elif f is not sympy.S.One:
                num.append(f)
        text = "*".join(self._factor(f, strict=True) for f in num) or literal(1.0, self.dtype)
        if len(num) == 1 and sign and (num[0].is_Add or self._prints_as_product(num[0])):
            text = f"({text})" if not text.startswith("(") else text
        if len(den) == 1:
            text += "/" + self._factor(den[0], strict=False)
        elif den:
            text += "/(" + "*".join(self._factor(f, strict=True) for f in den) + ")"
        return sign + text

    def _factor(self, item, strict: bool) -> str:
        """One operand of * or /: parenthesized below Mul precedence (``strict``) or at it (a divisor)."""
        text = self._print(item)
        prec = PRECEDENCE["Mul"] if self._prints_as_product(item) else precedence(item)
        if item.is_Number and not item.is_negative:
            prec = PRECEDENCE["Atom"]
        low = prec < PRECEDENCE["Mul"] if strict else prec <= PRECEDENCE["Mul"]
        return f"({text})" if low else text

    def _print_Add(self, expr):
        return CodePrinter._print_Add(self, expr)

    def _prints_as_product(self, expr) -> bool:
        """Pows that print as a product or quotient, so they need parentheses where a Pow would not."""
        if not isinstance(expr, sympy.Pow):
            return False
        e = expr.exp
        if e.is_Float and e == int(e):
            e = sympy.Integer(int(e))
        if e.is_Integer:
            return 2 <= int(e) <= self.EXPAND_POW_MAX or -self.EXPAND_POW_MAX <= int(e) <= -1
        return e in (-sympy.S.Half, sympy.Rational(3, 2), sympy.Rational(-3, 2))

    def parenthesize(self, item, level, strict=False):
        if self._prints_as_product(item):
            prec = PRECEDENCE["Mul"]
            text = self._print(item)
            return f"({text})" if prec < level or (not strict and prec <= level) else text
        return super().parenthesize(item, level, strict)

    def _call(self, name: str, *args) -> str:
        self.used.add(name)
        return f"{name}{self.dtype.libm}({', '.join(self._print(a) for a in args)})"

    def _print_Pow(self, expr, rational=False):
        base, e = expr.args
        if e.is_Float and e == int(e):
            e = sympy.Integer(int(e))  # x**2.0 expands like x**2
        b = self.parenthesize(base, PRECEDENCE["Pow"])
        one = literal(1.0, self.dtype)
        sqrt = f"sqrt{self.dtype.libm}({self._print(base)})"
        if e.is_Integer and 1 <= abs(int(e)) <= self.EXPAND_POW_MAX:
            product = "*".join([b] * abs(int(e)))
            if int(e) > 0:
                return product
            return f"{one}/{product}" if int(e) == -1 else f"{one}/({product})"
        if e == sympy.S.Half:
            return sqrt
        if e == -sympy.S.Half:
            return f"{one}/{sqrt}"
        if e == sympy.Rational(3, 2):
            return f"{b}*{sqrt}"
        if e == sympy.Rational(-3, 2):
            return f"{one}/({b}*{sqrt})"
        return self._call("pow", base, e)

    # -- logic ----------------------------------------------------------------------------------------------
    def _print_Relational(self, expr):
        return f"{self._print(expr.lhs)} {expr.rel_op} {self._print(expr.rhs)}"

    def _bool(self, expr) -> str:
        """A condition as an operand of && / || / ?: (parenthesized unless atomic)."""
        text = self._print(expr)
        return text if isinstance(expr, (sympy.logic.boolalg.BooleanAtom, sympy.Not)) else f"({text})"

    def _print_And(self, expr):
        return " && ".join(self._bool(a) for a in expr.args)

    def _print_Or(self, expr):
        return " || ".join(self._bool(a) for a in expr.args)

    def _print_Not(self, expr):
        return f"!({self._print(expr.args[0])})"

    def _print_ITE(self, expr):
        c, a, b = expr.args
        return f"({self._bool(c)} ? {self._bool(a)} : {self._bool(b)})"

    def _print_Piecewise(self, expr):
        """Nested ternaries: only the chosen branch's value reaches the result (select, not multiply)."""
        *branches, (last, cond) = expr.args
        text = (
            self._print(last) if cond == sympy.true else f"({self._print(cond)} ? {self._print(last)} : NAN)"
        )
        for value, c in reversed(branches):
            text = f"({self._print(c)} ? {self._print(value)} : {text})"
        return text

    # -- functions ----------------------------------------------------------------------------------------
    def _print_libm(self, expr):
        return self._call(LIBM[type(expr).__name__], *expr.args)

    def _print_helper(self, expr):
        name = type(expr).__name__
        self.helpers.add((name, self.dtype.suffix))
        self.used.update(HELPERS[name][0])
        return f"sg_{name}_{self.dtype.suffix}({', '.join(self._print(a) for a in expr.args)})"

    def _print_MinMax(self, expr):
        """SymPy's Max/Min (normally rewritten to maximum/minimum upstream): NaN-propagating, pairwise."""
        name = "maximum" if isinstance(expr, sympy.Max) else "minimum"
        self.helpers.add((name, self.dtype.suffix))
        args = [self._print(a) for a in expr.args]
        text = args[0]
        for a in args[1:]:
            text = f"sg_{name}_{self.dtype.suffix}({text}, {a})"
        return text

    _print_Max = _print_Min = _print_MinMax

    def _print_tanh(self, expr):
        """double: the expm1 form (``sg_tanh_f64``, see its comment); float: tanhf, the faster there."""
        return self._print_helper(expr) if self.dtype.suffix == "f64" else self._print_libm(expr)

    def _print_Function(self, expr):
        raise sympy.printing.codeprinter.PrintMethodNotImplementedError(
            f"the C emitter cannot print {type(expr).__name__} (in {expr})"
        )


# Functions the class does not print itself: refused unless this printer knows how to type them (libm calls,
# then helpers, each table overriding the one before).
_OWN = set(vars(SymgradCPrinter))
for _table, _method in (
    (sympy.printing.c.known_functions_C99, SymgradCPrinter._print_Function),
    (LIBM, SymgradCPrinter._print_libm),
    (HELPERS, SymgradCPrinter._print_helper),
):
    for _name in _table:
        if f"_print_{_name}" not in _OWN:
            setattr(SymgradCPrinter, f"_print_{_name}", _method)


def function_name(kernel: Kernel, program: Program, dtype: DType) -> str:
    return abi.kernel_symbol(kernel.name, program.name, dtype.suffix)


def _comment(text: str) -> str:
    return one_line(text).replace("/*", "/ *")


def _is_call(node: sympy.Basic) -> bool:
    """Whether ``node`` prints as a call of a math function (sin, exp, a helper that calls log, pow, ...)."""
    if isinstance(node, sympy.Pow):  # integer and half powers print as products and sqrt
        e = node.exp
        return not (e.is_number and e.is_extended_real and float(2 * e).is_integer())
    return isinstance(node, sympy.Function) and type(node).__name__ not in _INLINE_FUNCTIONS


def _row_cost(program: Program) -> int:
    """A row's work in arithmetic operations, a math function call counting ``CALL_COST``."""
    calls = sum(1 for a in program.body for node in sympy.preorder_traversal(a.expr) if _is_call(node))
    return max(program.op_count() + (CALL_COST - 1) * calls, 1)


def _call_depth(program: Program) -> int:
    """The longest chain of math calls in a row that each need the previous one's result."""
    depth: dict[sympy.Basic, int] = {}

    def of(expr: sympy.Basic) -> int:
        if expr not in depth:
            inner = max((of(arg) for arg in expr.args), default=0)
            depth[expr] = inner + _is_call(expr)
        return depth[expr]

    for a in program.body:
        depth[a.target] = of(a.expr)
    return max(depth.values(), default=0)


def _two_rows(program: Program, dtype: DType) -> bool:
    """Whether the loop does two rows per iteration (see ``TWO_ROWS_DEPTH``)."""
    depth = _call_depth(program)
    return depth >= TWO_ROWS_DEPTH[dtype.suffix] and 4 * CALL_COST * depth >= _row_cost(program)


def _parallel_min_rows(program: Program, dtype: DType) -> int:
    """Rows from which a loop runs on all OpenMP threads (see ``PARALLEL_WORK``)."""
    rows = PARALLEL_WORK[dtype.suffix] // _row_cost(program)
    return max(PARALLEL_MIN_ROWS_FLOOR, min(PARALLEL_MIN_ROWS, rows))


class _Names:
    """C identifiers for one program: the IR's names, unless one could be a macro or a called function."""

    def __init__(self, program: Program) -> None:
        self.taken = {s.name for slot in (*program.inputs, *program.outputs) for s in (slot, *slot.symbols)}
        self.taken |= {a.target.name for a in program.body}
        self.taken |= {"i", "j", "n"}
        self.renamed: dict[str, str] = {}
        self.second: dict[str, str] = {}

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

    def lane(self, name: str) -> str:
        """The second row's copy of the (C-safe) local ``name``: ``t3`` -> ``t3_b``."""
        if name not in self.second:
            new = name + "_b"
            while new in self.taken:
                new += "_"
            self.taken.add(new)
            self.second[name] = new
        return self.second[name]


def _index(slot: Slot, k: int, row: str) -> str:
    return row if slot.size == 1 else f"{row}*{slot.size} + {k}"


def _statements(
    program: Program, dtype: DType, p: SymgradCPrinter, cname: _Names, row: str, local: Callable[[str], str]
) -> list[tuple[str, bool]]:
    """The loop body for row ``row`` (``i`` or ``j``), locals named by ``local`` (comments only on ``i``):
    (statement, whether it loads or stores an array element)."""
    names: dict[sympy.Symbol, str] = {}
    used = set().union(*(a.expr.free_symbols for a in program.body)) if program.body else set()
    lines = []
    for slot in program.inputs:
        array = cname(slot.name)
        for k, sym in enumerate(slot.symbols):
            if slot.uniform:
                names[sym] = array  # a number passed by value
            elif not slot.shape:
                names[sym] = f"{array}[{row}]"
            elif sym in used:
                names[sym] = local(cname(sym.name))
                lines.append((f"const {dtype.ctype} {names[sym]} = {array}[{_index(slot, k, row)}];", True))
    stores = {}
    for slot in program.outputs:
        array = cname(slot.name)
        for k, sym in enumerate(slot.symbols):
            stores[sym] = names[sym] = f"{array}[{_index(slot, k, row)}]"
    p.names = names
    for a in program.body:
        note = f"  /* {_comment(a.note)} */" if a.note and row == "i" else ""
        value = p.doprint(a.expr)
        if a.target in stores:
            lines.append((f"{stores[a.target]} = {value};{note}", True))
        else:
            names[a.target] = local(cname(a.target.name))
            lines.append((f"const {dtype.ctype} {names[a.target]} = {value};{note}", False))
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


class CEmitter:
    name = "c"
    filename = "kernels.c"

    def emit_program(
        self, kernel: Kernel, program: Program, dtype: DType, printer: SymgradCPrinter | None = None
    ) -> str:
        cname = _Names(program)
        p = printer or SymgradCPrinter(dtype)
        first = _statements(program, dtype, p, cname, "i", lambda name: name)
        two = _two_rows(program, dtype)
        if two:
            second = _statements(program, dtype, p, cname, "j", cname.lane)
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
        slots = (*program.inputs, *program.outputs)
        args = ", ".join(cname(s.name) for s in slots)
        # the pointer-array entry: every argument as p[k], a uniform input as a pointer to its value
        unpacked = ", ".join(
            f"*(const {dtype.ctype} *)p[{k}]" if s.uniform else f"p[{k}]" for k, s in enumerate(slots)
        )
        body = "\n".join(f"        {line}" for line in lines)
        title = f"{program.name} of {_comment(kernel.name)} [{_comment(kernel.origin)}], {dtype.ctype}"
        rows = prototype("sg_rows_" + name, params, "static SG_NOINLINE void", "int64_t sg_lo, int64_t sg_hi")
        if two:
            loop = (
                "    /* two rows per iteration, i from the first half and j from the second (an odd count does its\n"
                "       middle row twice): their chains of math calls overlap in the CPU */\n"
                "    const int64_t sg_half = (sg_hi - sg_lo + 1)/2;\n"
                "    const int64_t sg_skip = sg_hi - sg_lo - sg_half;\n"
                "    SG_SIMD\n"
                "    for (int64_t i = sg_lo; i < sg_lo + sg_half; ++i) {\n"
            )
        else:
            loop = "    SG_SIMD\n    for (int64_t i = sg_lo; i < sg_hi; ++i) {\n"
        return (
            f"/* {title}: rows sg_lo to sg_hi - 1 */\n"
            f"{rows}\n{{\n{loop}{body}\n    }}\n}}\n\n"
            f"/* {title} */\n"
            f"{prototype(name, params)}\n{{\n"
            f"    SG_ROWS({_parallel_min_rows(program, dtype)}, sg_rows_{name}, {args});\n}}\n\n"
            f"/* {title}: the arguments as pointers p[0], p[1], ... (symgrad's direct call) */\n"
            f"void {name}{POINTERS_SUFFIX}(int64_t n, void *const *p)\n{{\n"
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
        if used & set(LIBMVEC_TIER):
            head += ["", vector_math_declarations(used)]
        for name in HELPERS:
            for dtype in DTYPES:
                if (name, dtype.suffix) in helpers:
                    head += ["", helper(name, dtype)]
        return "\n".join(head) + "\n\n" + "\n\n".join(bodies) + "\n"

    @staticmethod
    def _banner(kernel: Kernel) -> str:
        lines = [f"/* ---- {_comment(kernel.name)} [{_comment(kernel.origin)}] ----"]
        lines += [f"   {_comment(name)} = {_comment(text)}" for name, text in kernel.formulas]
        lines += [f"   vjp {_comment(name)}: {_comment(text)}" for name, text in kernel.derivatives if text]
        return "\n".join(lines) + " */"


def cdef(kernels: Sequence[Kernel]) -> str:
    """The cffi ``cdef`` of a module (``symgrad.abi.cdef`` over the kernels' programs)."""
    return abi.cdef(
        (k.name, p.name, [s.uniform for s in p.inputs], len(p.outputs)) for k in kernels for p in k.programs
    )


register("c")(CEmitter)
