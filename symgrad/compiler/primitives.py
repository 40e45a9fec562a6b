"""Stable primitives as SymPy functions whose derivatives are primitives again.

Each class is a ``sympy.Function`` with ``fdiff`` (the derivative rule) and a rewrite to elementary functions
(used by ``evalf`` and by tests). The derivation never expands them, so ``d softplus = sigmoid`` stays
overflow-free; afterwards the lowering writes those of the exp(-|u|) family out in their stable forms
(``expand_shared_cores``), and emitters print the others (xlogy, maximum, minimum, log1p, expm1) in theirs.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
from sympy import Eq, Piecewise, S
from sympy.codegen.cfunctions import expm1, log1p

from symgrad.compiler import dag
from symgrad.compiler.piecewise import PiecewiseOperand, piecewise

__all__ = [
    "sigmoid",
    "softplus",
    "logsigmoid",
    "logaddexp",
    "xlogy",
    "maximum",
    "minimum",
    "amax",
    "amin",
    "log1p",
    "expm1",
    "hypot",
]


class _Primitive(sympy.Function):
    """Shared behaviour: real-valued, evaluated numerically through the elementary rewrite."""

    is_real = True

    def _eval_evalf(self, prec):
        # every subclass defines _elementary(): its formula in exp/log, evaluated at the requested precision
        try:
            return self._elementary()._eval_evalf(prec)
        except (TypeError, ValueError):  # e.g. Max(nan, 1) ("not comparable"): leave it unevaluated
            return None


def _core(x: sympy.Expr) -> sympy.Expr:
    """exp(-|x|): the one transcendental that sigmoid, softplus, logsigmoid and logaddexp share (in (0, 1],
    never overflowing); their stable forms are written over it so that CSE computes it once."""
    return sympy.exp(-sympy.Abs(x))


class sigmoid(_Primitive):
    """sigmoid(x) = 1 / (1 + exp(-x)); d/dx = sigmoid(x) * sigmoid(-x) (no 1 - s cancellation)."""

    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return sigmoid(x) * sigmoid(-x)

    @classmethod
    def eval(cls, x):
        if x is S.Zero:
            return S.Half
        if x is S.Infinity:
            return S.One
        if x is S.NegativeInfinity:
            return S.Zero

    def _elementary(self):
        return 1 / (1 + sympy.exp(-self.args[0]))

    def _stable(self):
        x = self.args[0]
        e = _core(x)
        return piecewise((S.One, x >= 0), (e, True)) / (1 + e)

    def _eval_rewrite_as_exp(self, x, **kwargs):
        return 1 / (1 + sympy.exp(-x))


class softplus(_Primitive):
    """softplus(x) = log(1 + exp(x)), printed as max(x, 0) + log1p(exp(-|x|)); d/dx = sigmoid(x)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return sigmoid(self.args[0])

    @classmethod
    def eval(cls, x):
        if x is S.NegativeInfinity:
            return S.Zero
        if x is S.Infinity:
            return S.Infinity

    def _elementary(self):
        return sympy.log(1 + sympy.exp(self.args[0]))

    def _stable(self):
        x = self.args[0]
        return piecewise((x, x > 0), (S.Zero, True)) + log1p(_core(x))

    def _eval_rewrite_as_log(self, x, **kwargs):
        return sympy.log(1 + sympy.exp(x))


class logsigmoid(_Primitive):
    """logsigmoid(x) = -softplus(-x); d/dx = sigmoid(-x)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return sigmoid(-self.args[0])

    def _elementary(self):
        return -sympy.log(1 + sympy.exp(-self.args[0]))

    def _stable(self):
        x = self.args[0]
        return piecewise((x, x < 0), (S.Zero, True)) - log1p(_core(x))

    def _eval_rewrite_as_log(self, x, **kwargs):
        return -sympy.log(1 + sympy.exp(-x))


class logaddexp(_Primitive):
    """logaddexp(a, b) = log(exp(a) + exp(b)), exact for -inf arguments.

    d/da = sigmoid(a - b), which is exactly 1/2 at a finite tie (so differentiating it again gives the true
    1/4 there), and 1/2 at an infinite one, where a - b is NaN (so logaddexp(-inf, -inf) has finite
    gradients).
    """

    nargs = 2

    def fdiff(self, argindex=1):
        a, b = self.args if argindex == 1 else self.args[::-1]
        smooth = sigmoid(a - b)
        return piecewise((smooth, Eq(a - b, 0)), (S.Half, Eq(a, b)), (smooth, True))

    def _elementary(self):
        a, b = self.args
        return sympy.log(sympy.exp(a) + sympy.exp(b))

    def _stable(self):
        a, b = self.args
        return piecewise(
            (a + sympy.log(2), Eq(a, b)), (piecewise((a, a > b), (b, True)) + log1p(_core(a - b)), True)
        )

    def _eval_rewrite_as_log(self, a, b, **kwargs):
        return sympy.log(sympy.exp(a) + sympy.exp(b))


class xlogy(_Primitive):
    """xlogy(x, y) = x * log(y), and 0 where x == 0 (so x*log(x) at 0 is 0). d/dx = log(y), also at x == 0
    (linear in x, as torch and JAX), but 0 at x == y == 0; d/dy = x/y, 0 where x == 0."""

    nargs = 2

    def fdiff(self, argindex=1):
        x, y = self.args
        if argindex == 1:
            # x == y == 0 as one comparison: a C `&&` is control flow, which keeps the loop from vectorizing
            return piecewise((S.Zero, Eq(sympy.Abs(x) + sympy.Abs(y), 0)), (sympy.log(y), True))
        return piecewise((S.Zero, Eq(x, 0)), (x / y, True))

    @classmethod
    def eval(cls, x, y):
        if x is S.Zero:
            return S.Zero

    def _elementary(self):
        x, y = self.args
        return piecewise((S.Zero, Eq(x, 0)), (x * sympy.log(y), True))


class hypot(_Primitive):
    """hypot(x, y) = sqrt(x**2 + y**2), written out as m*sqrt(1 + (n/m)**2) for m, n the larger and the
    smaller of |x|, |y| (no overflow at 1e200, no underflow at 1e-200); d/dx = x/hypot(x, y), and 0 at
    the origin (as abs'(0)); selected on hypot == 0, not x == 0, so that the second derivative at x == 0,
    y != 0 is 1/|y| (an axis-aligned spring's Hessian), not the select's 0."""

    nargs = 2

    def fdiff(self, argindex=1):
        a = self.args[argindex - 1]
        return piecewise((S.Zero, Eq(self, 0)), (a / self, True))

    def _elementary(self):
        x, y = self.args
        return sympy.sqrt(x**2 + y**2)

    def _stable(self):
        a, b = (sympy.Abs(v) for v in self.args)
        m, n = maximum(a, b), minimum(a, b)
        # the ratio held whole (a Piecewise operand, which the lowering gives a temporary of its own): SymPy
        # distributes (n/m)**2 into n**2/m**2, 0/0 at 1.5e-300 and inf/inf at 1e30 in float32
        ratio = PiecewiseOperand.of(Piecewise((S.Zero, Eq(n, 0)), (n / m, True)))
        return m * sympy.sqrt(1 + ratio**2)


def _kink_derivative(a: sympy.Expr, b: sympy.Expr, wins: sympy.Expr) -> sympy.Expr:
    """Derivative of max/min(a, b) in a: 1 where a wins, 0 where it loses; at a tie 0 against a constant
    (relu'(0) = 0, relu6'(6) = 0) and 1/2 against another input (torch.maximum splits ties)."""
    if b.is_number:
        return piecewise((S.One, wins), (S.Zero, True))
    return piecewise((S.One, wins), (S.Half, Eq(a, b)), (S.Zero, True))


class maximum(_Primitive):
    """maximum(a, b), NaN-propagating like torch.maximum; SymPy's ``Max`` is rewritten to it."""

    nargs = 2

    def fdiff(self, argindex=1):
        a, b = self.args if argindex == 1 else self.args[::-1]
        return _kink_derivative(a, b, a > b)

    def _elementary(self):
        return sympy.Max(*self.args)


class minimum(_Primitive):
    """minimum(a, b), NaN-propagating like torch.minimum; SymPy's ``Min`` is rewritten to it."""

    nargs = 2

    def fdiff(self, argindex=1):
        a, b = self.args if argindex == 1 else self.args[::-1]
        return _kink_derivative(a, b, a < b)

    def _elementary(self):
        return sympy.Min(*self.args)


def _tie_share(args: tuple, i: int, loses) -> sympy.Expr:
    """Derivative of an n-ary max/min in its argument ``i``: 0 where another argument beats it
    (``loses(a, b)``: ``a`` is beaten by ``b``), else 1/k for the k arguments equal to it (an even split of
    a tie, as ``torch.amax``; 1 where it wins alone)."""
    a = args[i]
    others = [b for j, b in enumerate(args) if j != i]
    ties = sympy.Add(*[piecewise((S.One, Eq(a, b)), (S.Zero, True)) for b in others])
    return piecewise((S.Zero, sympy.Or(*[loses(a, b) for b in others])), (1 / (1 + ties), True))


class _NaryExtreme(_Primitive):
    """An n-ary max or min: differentiates as one function (ties split evenly), emitted as nested binary
    ones. Subclasses name the binary primitive, SymPy's class and which of two arguments loses."""

    binary: type
    sympy_class: type
    loses: Callable[[sympy.Expr, sympy.Expr], sympy.Basic]

    def fdiff(self, argindex=1):
        return _tie_share(self.args, argindex - 1, self.loses)

    def _elementary(self):
        return self.sympy_class(*self.args)

    def nested(self) -> sympy.Expr:
        """The value as nested binary ones (what the emitters print)."""
        result = self.args[0]
        for arg in self.args[1:]:
            result = self.binary(result, arg)
        return result


class amax(_NaryExtreme):
    """The largest of three or more arguments, NaN-propagating; a tie among k of them gives each 1/k of the
    gradient (``torch.amax``). ``Max`` of three or more is rewritten to it; emitted as nested ``maximum``."""

    binary, sympy_class = maximum, sympy.Max

    @staticmethod
    def loses(a: sympy.Expr, b: sympy.Expr) -> sympy.Basic:
        return a < b


class amin(_NaryExtreme):
    """The smallest of three or more arguments; ties split as in ``amax``. ``Min`` of three or more is
    rewritten to it; emitted as nested ``minimum``."""

    binary, sympy_class = minimum, sympy.Min

    @staticmethod
    def loses(a: sympy.Expr, b: sympy.Expr) -> sympy.Basic:
        return a > b


PRIMITIVES = (
    sigmoid, softplus, logsigmoid, logaddexp, xlogy, maximum, minimum, amax, amin, log1p, expm1, hypot,
)  # fmt: skip
#: n-ary primitives that differentiate as one function and are emitted as nested binary ones
NESTED = (amax, amin)
#: The primitives written out in their stable forms before the joint CSE (see ``expand_shared_cores``).
SHARED_CORE = (sigmoid, softplus, logsigmoid, logaddexp)
#: The primitives written out in elementary form before the joint CSE: the exp(-|u|) family, and hypot.
EXPANDED = (*SHARED_CORE, hypot)


def expand_shared_cores(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with every n-ary max/min nested into binary ones, and every sigmoid, softplus, logsigmoid and
    logaddexp in its stable elementary form over exp(-|u|). Applied after differentiation: softplus' value
    and gradient (sigmoid), or sigmoid's value and gradient (sigmoid(x)*sigmoid(-x)), then share one exp
    instead of computing it two or three times."""
    if dag.has(expr, *NESTED):  # over the DAG: SymPy's ``has`` walks a layered net as a tree
        expr = expr.replace(lambda e: isinstance(e, NESTED), lambda e: e.nested())
    if not dag.has(expr, *EXPANDED):
        return expr
    return expr.replace(lambda e: isinstance(e, EXPANDED), lambda e: e._stable())
