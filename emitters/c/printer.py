"""The C target's expression printer: one right-hand side of one dtype as C99 text.

Contract: ``SymgradCPrinter(dtype, names).doprint(expr)`` prints ``expr`` with the dtype's literals, libm
names (``expf``) and helpers (``sg_<name>_<f64|f32>``), symbols as ``names`` maps them, and records the libm
functions it called in ``used`` and the (helper, dtype suffix) pairs in ``helpers`` (the module declares
them). Piecewise and ITE are ternaries, small integer and half powers are products and ``sqrt``, Max/Min are
NaN-propagating helpers; any other function the tables below do not type is refused (strict mode).
"""

from __future__ import annotations

import sympy
import sympy.printing.c
from sympy.core.mul import _keep_coeff
from sympy.printing.c import C99CodePrinter
from sympy.printing.codeprinter import CodePrinter
from sympy.printing.precedence import PRECEDENCE, precedence

from symgrad.compiler.display import PiecewiseSelects, TermOrder
from symgrad.compiler.special import MAX_POLYGAMMA

from .. import ExpressionPrinter
from .text import DTYPES, HELPERS, LIBM, DType, literal


class SymgradCPrinter(ExpressionPrinter, TermOrder, PiecewiseSelects, C99CodePrinter):
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
        sign, factors = "", None
        if c.is_negative:
            sign = "-"
            if rest.is_Add or rest.is_Number:  # -c*rest distributes or folds
                factors = _keep_coeff(-c, rest).as_ordered_factors()
            else:  # -c*rest's factors, without the product's flatten (assumption queries of every factor)
                factors = ([] if -c is sympy.S.One else [-c]) + list(rest.as_ordered_factors())
        num, den = [], []
        for f in expr.as_ordered_factors() if factors is None else factors:
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

    def _select(self, cond: str, then: str, other: str) -> str:
        """One select of a Piecewise (``PiecewiseSelects``) or an ITE: a ternary, so only the chosen
        branch's value reaches the result (select, not multiply)."""
        return f"({cond} ? {then} : {other})"

    def _print_ITE(self, expr):
        c, a, b = expr.args
        return self._select(self._bool(c), self._bool(a), self._bool(b))

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

    def _print_polygamma(self, expr):
        """polygamma(n, x): the order as the int first argument of one helper (``special``)."""
        n = expr.args[0]
        if not (n.is_Integer and 0 <= int(n) <= MAX_POLYGAMMA):
            raise sympy.printing.codeprinter.PrintMethodNotImplementedError(
                f"the C emitter prints polygamma of orders 0..{MAX_POLYGAMMA} only (in {expr})"
            )
        self.helpers.add(("polygamma", self.dtype.suffix))
        self.used.update(HELPERS["polygamma"][0])
        return f"sg_polygamma_{self.dtype.suffix}({int(n)}, {self._print(expr.args[1])})"

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
