"""NumPy target: a readable, importable ``.py`` module with one function per program.

Each function takes the argument arrays (any broadcastable shapes, float32 or float64 — constants are
Python scalars, so float32 stays float32) and returns its results in the order of the program's outputs.
Piecewise becomes nested ``numpy.where``: every branch is computed but only the chosen one is used, and
bodies run under ``numpy.errstate`` so an untaken branch's inf/NaN raises no warning.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.precedence import PRECEDENCE

from symgrad import abi
from symgrad.compiler.display import PiecewiseSelects, TermOrder
from symgrad.compiler.ir import Kernel, Program, Slot

from . import ExpressionPrinter, ModelInfo, one_line, register

HELPERS = "_sg"  # symgrad.backends.npfuncs: xlogy, the special functions and packing for arrays


def _strong_constant(expr) -> bool:
    """A constant that NumPy would evaluate to a float64 *scalar* (``numpy.sqrt(2)``, ``numpy.log(2)``): under
    NumPy's promotion rules that scalar turns a float32 array into float64, where a Python float does not."""
    if not isinstance(expr, sympy.Expr) or expr.is_Atom or not expr.is_number:
        return False
    return bool(expr.atoms(sympy.Function)) or any(not p.exp.is_Integer for p in expr.atoms(sympy.Pow))


def _constant_select(expr) -> bool:
    """A Piecewise choosing between numbers only: ``numpy.where(c, 0, 1)`` is an int64 (or float64) array,
    which would promote the float32 arrays it multiplies."""
    return isinstance(expr, sympy.Piecewise) and all(v.is_number for v, _ in expr.args)


def _small_power(f) -> bool:
    """``x**2`` .. ``x**4``: printed as a product of the base."""
    return f.is_Pow and f.exp.is_Integer and 2 <= int(f.exp) <= 4


def _divisor(f) -> bool:
    return f.is_Pow and f.exp.is_number and f.exp.is_negative


class SymgradNumPyPrinter(ExpressionPrinter, TermOrder, PiecewiseSelects, NumPyPrinter):
    """Expressions only; statements and layout belong to the emitter.

    float32 stays float32 math: compound constants that NumPy would compute as float64 scalars are printed
    inside ``float(...)`` (a Python float is weak), and a select between numbers only is cast to the
    kernel's ``dtype`` (a local the emitter defines when ``uses_dtype`` is set)."""

    _in_constant = False
    uses_dtype = False

    def _print(self, expr, **kwargs):
        if self._in_constant:
            return super()._print(expr, **kwargs)
        if _strong_constant(expr):
            template = "float({})"
        elif _constant_select(expr):
            template, self.uses_dtype = "{}.astype(dtype)", True
        else:
            return super()._print(expr, **kwargs)
        self._in_constant = True
        try:
            return template.format(super()._print(expr, **kwargs))
        finally:
            self._in_constant = False

    def _print_Mul(self, expr):
        """A product without a divisor runs left to right with its squares and cubes spelled out in line
        (``2*e*x*x``, not ``2*e*(x*x)``): where ``e`` underflows to 0 and ``x*x`` overflows, ``(2*e*x)*x`` is
        0 as the true value is, where ``e*(x*x)`` would be 0*inf = NaN (as the C target prints it)."""
        coeff, rest = expr.as_coeff_Mul()
        factors = sympy.Mul.make_args(rest)
        if any(_divisor(f) for f in factors) or not any(_small_power(f) for f in factors):
            return super()._print_Mul(expr)
        parts = [] if abs(coeff) == 1 else [self.parenthesize(abs(coeff), PRECEDENCE["Mul"])]
        for f in rest.as_ordered_factors():
            base, times = (f.base, int(f.exp)) if _small_power(f) else (f, 1)
            parts += [self.parenthesize(base, PRECEDENCE["Mul"])] * times
        return ("-" if coeff.is_negative else "") + "*".join(parts)

    def _print_Pow(self, expr, rational=False):
        base, exp = expr.args
        if exp.is_Integer and 1 <= abs(int(exp)) <= 4:
            factors = [self.parenthesize(base, PRECEDENCE["Mul"])] * abs(int(exp))
            if exp > 0:  # parenthesised: the caller sees one Pow-precedence atom (a/(t*t), not a/t*t)
                return "*".join(factors) if exp == 1 else f"({'*'.join(factors)})"
            return (
                f"1/{self.parenthesize(base, PRECEDENCE['Pow'])}" if exp == -1 else f"1/({'*'.join(factors)})"
            )
        if exp == sympy.S.Half:
            return f"numpy.sqrt({self._print(base)})"
        if exp == -sympy.S.Half:
            return f"1/numpy.sqrt({self._print(base)})"
        if exp.is_Rational:
            return f"{self.parenthesize(base, PRECEDENCE['Pow'])}**{float(exp)!r}"
        return f"{self.parenthesize(base, PRECEDENCE['Pow'])}**{self.parenthesize(exp, PRECEDENCE['Pow'])}"

    def parenthesize(self, item, level, strict=False):
        """A positive fraction is one number in Python (``0.5*r``, not ``(0.5)*r``)."""
        if isinstance(item, sympy.Rational) and item.is_positive:
            return self._print(item)
        return super().parenthesize(item, level, strict)

    def _print_Relational(self, expr):
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[expr.rel_op]
        return f"({self._print(expr.lhs)} {op} {self._print(expr.rhs)})"

    def _print_And(self, expr):
        return "(" + " & ".join(self._print(a) for a in expr.args) + ")"

    def _print_Or(self, expr):
        return "(" + " | ".join(self._print(a) for a in expr.args) + ")"

    def _print_Not(self, expr):
        return f"(~{self._print(expr.args[0])})"

    def _print_BooleanTrue(self, expr):
        return "True"

    def _print_BooleanFalse(self, expr):
        return "False"

    def _select(self, cond: str, then: str, other: str) -> str:
        return f"numpy.where({cond}, {then}, {other})"

    def _print_ITE(self, expr):
        c, a, b = expr.args
        return self._select(self._print(c), self._print(a), self._print(b))

    @staticmethod
    def _number(value: float) -> str:
        """A float constant as Python source; out-of-range values are numpy.inf, never a bare ``inf``."""
        if value in (float("inf"), float("-inf")):
            return "numpy.inf" if value > 0 else "(-numpy.inf)"
        return repr(value)

    def _print_Float(self, expr):
        return self._number(float(expr))

    def _print_Rational(self, expr):
        return self._number(float(expr))

    def _print_Integer(self, expr):
        # small integers stay Python ints (exact, and weak: float32 stays float32); a huge one becomes a
        # float, since NumPy cannot convert a Python int beyond int64 (OverflowError) and float() of it raises
        if abs(int(expr)) <= 2**53:
            return str(int(expr))
        return self._number(float(sympy.Float(expr)))

    def _print_Abs(self, expr):
        return f"numpy.abs({self._print(expr.args[0])})"

    def _print_maximum(self, expr):
        return f"numpy.maximum({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _print_minimum(self, expr):
        return f"numpy.minimum({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _helper(self, expr):
        return f"{HELPERS}.{type(expr).__name__}({', '.join(self._print(a) for a in expr.args)})"


#: Functions printed as calls of the helper module's function of the same name (SciPy's special functions,
#: dtype-preserving; xlogy): ``_sg.gamma(x)``.
HELPER_FUNCTIONS = (
    "xlogy", "erf", "erfc", "erfinv", "erfcx", "loggamma", "gamma", "polygamma", "beta", "betaln", "exp2",
    "log2", "log10", "cbrt", "sinc", "Mod", "frac", "j0", "j1", "i0", "i1", "i0e", "i1e",
    "i0e_minus_i1e", "digamma_difference", "erfcx_grad", "root", "hurwitz_zeta",
)  # fmt: skip
for _name in HELPER_FUNCTIONS:
    setattr(SymgradNumPyPrinter, f"_print_{_name}", SymgradNumPyPrinter._helper)


def _unpack(slot: Slot) -> list[str]:
    if not slot.shape:
        return []
    if len(slot.shape) == 1:
        return [f"{s} = {slot.name}[..., {i}]" for i, s in enumerate(slot.symbols)]
    cols = slot.shape[1]
    return [f"{s} = {slot.name}[..., {i // cols}, {i % cols}]" for i, s in enumerate(slot.symbols)]


def _pack(slot: Slot) -> str:
    if not slot.shape:
        return str(slot.symbols[0])
    return f"{HELPERS}.pack(({''.join(f'{s}, ' for s in slot.symbols).rstrip()}), {slot.shape!r})"


def _docstring_text(text: str) -> str:
    """Text safe inside a triple-quoted docstring: one line, no double quote that could close it (a file
    name may contain anything, three double quotes included)."""
    return one_line(text).replace('"', "'")


def function_name(kernel: Kernel, program: Program) -> str:
    return abi.kernel_symbol(kernel.name, program.name)


class NumPyEmitter:
    name = "numpy"
    filename = "kernels_numpy.py"

    def __init__(self) -> None:
        self.printer = SymgradNumPyPrinter({"fully_qualified_modules": True, "inline": True})
        self._printed: dict[int, tuple[Kernel, str]] = {}

    def emit_program(self, kernel: Kernel, program: Program) -> str:
        params = ", ".join(s.name for s in program.inputs)
        lines = [
            f"def {function_name(kernel, program)}({params}):",
            f'    """{_docstring_text(f"{program.name} of {kernel.name} [{kernel.origin}].")}"""',
            '    with numpy.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):',
        ]
        body = [line for slot in program.inputs for line in _unpack(slot)]
        self.printer.uses_dtype = False
        packed = {s for slot in program.outputs if slot.shape for s in slot.symbols}
        for a in program.body:
            note = f"  # {one_line(a.note)}" if a.note else ""
            value = self.printer.doprint(a.expr)
            if a.target in packed and a.expr.is_number:  # packed as is, an int64 or float64 array
                value, self.printer.uses_dtype = f"numpy.asarray({value}, dtype)", True
            body.append(f"{a.target} = {value}{note}")
        if self.printer.uses_dtype:  # the dtype the backend computes in (Python numbers are weak)
            body.insert(0, f"dtype = numpy.result_type({params})")
        lines += [f"        {line}" for line in body or ["pass"]]
        lines.append(f"    return ({''.join(_pack(s) + ', ' for s in program.outputs).rstrip()})")
        return "\n".join(lines)

    def emit_function(self, kernel: Kernel) -> str:
        """Every program of ``kernel``, printed once per emitter instance (the module reuses it)."""
        hit = self._printed.get(id(kernel))
        if hit is None or hit[0] is not kernel:
            hit = self._printed[id(kernel)] = (
                kernel,
                "\n\n\n".join(self.emit_program(kernel, p) for p in kernel.programs),
            )
        return hit[1]

    def emit_module(self, kernels: Sequence[Kernel], info: ModelInfo) -> str:
        head = [
            f"# @generated by symgrad {info.symgrad_version} from {one_line(info.source)}. Do not edit.",
            "# Regenerate with: symgrad compile " + one_line(info.source),
            "import numpy",
            "",
            f"from symgrad.backends import npfuncs as {HELPERS}",
            "",
        ]
        return "\n".join(head) + "\n\n" + "\n\n\n".join(self.emit_function(k) for k in kernels) + "\n"


register("numpy")(NumPyEmitter)
