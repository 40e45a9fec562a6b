"""Special functions: the SymPy classes symgrad compiles as they are, and its own primitives where SymPy has
none or its derivative rule is not finite or not accurate where the true one is.

SymPy's own, with their ``fdiff`` (``SYMPY_SPECIAL``): ``loggamma`` (log|Gamma|; d = digamma), ``gamma``,
``polygamma(n, x)`` (d = polygamma(n + 1, x); ``digamma(x)`` is ``polygamma(0, x)``), ``erfinv``, ``exp2``,
``log2``, ``log10``, ``Mod`` and ``frac`` (derivatives from the subgradient table, ``rules``), and ``beta``
when a model uses SymPy's directly.

symgrad's (``SPECIAL_PRIMITIVES``): ``cbrt`` and ``root`` (SymPy's roots are ``x**(1/n)``, NaN below 0),
``sinc`` (SymPy's derivative is 0/0 at 1e-300 and cancels near 0), ``erfcx``, ``beta`` and ``betaln``, the
Bessel functions of order 0 and 1 (SymPy's derivatives need orders it cannot print, ``besselj(2, x)``, or
divide 0 by 0 at x = 0), and three that derivative rules use where the textbook difference cancels:
``erfcx_grad`` (2x erfcx(x) - 2/sqrt(pi)), ``digamma_difference`` (digamma(x + h) - digamma(x)) and
``i0e_minus_i1e``; and ``hurwitz_zeta`` (``sg.zeta``; d/ds refused). The emitters print each as a helper
(``emitters/c/special.py``, ``symgrad/backends/npfuncs.py``).
"""

from __future__ import annotations

from math import factorial

import sympy
from sympy import Abs, Eq, S, cos, sign, sqrt
from sympy.codegen.cfunctions import exp2, log2, log10

from symgrad.compiler.display import formula
from symgrad.compiler.piecewise import piecewise
from symgrad.compiler.primitives import _Primitive
from symgrad.errors import ModelError, UnsupportedError

#: The highest polygamma order the emitters print (the derivative of polygamma(3, x) is polygamma(4, x)).
MAX_POLYGAMMA = 4


class cbrt(_Primitive):
    """The real cube root (negative for negative x); d/dx = 1/(3*cbrt(x)**2)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return 1 / (3 * cbrt(self.args[0]) ** 2)

    def _elementary(self):
        return sympy.real_root(self.args[0], 3)


class root(_Primitive):
    """The real n-th root for an integer n >= 4 (``real_root``): negative for negative x and odd n, NaN below
    0 for even n; d/dx = 1/(n*root(x, n)**(n - 1)). Printed as pow corrected by one Newton step (pow alone,
    with the rounded exponent 1/n, errs by 35 ulp at 1e300)."""

    nargs = 2

    def fdiff(self, argindex=1):
        x, n = self.args
        return 1 / (n * root(x, n) ** (n - 1))

    def _elementary(self):
        return sympy.real_root(*self.args)


def _sinc_series(x: sympy.Expr) -> sympy.Expr:
    """d sinc/dx = sum_{k>=1} (-1)^k 2k x^(2k-1)/(2k+1)!, to k = 9 (truncation < 1e-18 relative for |x| < 1),
    in Horner form over x**2."""
    s = x**2
    poly = S.Zero
    for k in range(9, 0, -1):
        poly = poly * s + sympy.Rational((-1) ** k * 2 * k, factorial(2 * k + 1))
    return x * poly


class sinc(_Primitive):
    """sin(x)/x, 1 at 0 (SymPy's unnormalized sinc; numpy's and torch's are sinc(pi*x)).

    d/dx = (cos(x) - sinc(x))/x for |x| >= 1, its Taylor series below (the closed form cancels there, and is
    0/0 at 1e-300)."""

    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return piecewise((_sinc_series(x), Abs(x) < 1), ((cos(x) - sinc(x)) / x, True))

    @classmethod
    def eval(cls, x):
        if x is S.Zero:
            return S.One

    def _elementary(self):
        return sympy.sinc(self.args[0])


class erfcx(_Primitive):
    """The scaled complementary error function exp(x**2)*erfc(x); d/dx = ``erfcx_grad``."""

    nargs = 1

    def fdiff(self, argindex=1):
        return erfcx_grad(self.args[0])

    def _elementary(self):
        x = self.args[0]
        return sympy.exp(x**2) * sympy.erfc(x)


class erfcx_grad(_Primitive):
    """d erfcx/dx = 2x*erfcx(x) - 2/sqrt(pi), computed as one function: the difference cancels by ~2x**2
    (the emitters' helpers use a continued fraction from x = 2 on)."""

    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return 2 * erfcx(x) + 2 * x * self

    def _elementary(self):
        x = self.args[0]
        return 2 * x * sympy.exp(x**2) * sympy.erfc(x) - 2 / sqrt(sympy.pi)


class digamma_difference(_Primitive):
    """digamma(x + h) - digamma(x), computed without cancelling the two digammas when h is small against x
    (the gradients of beta and betaln); d/dh = polygamma(1, x + h)."""

    nargs = 2

    def fdiff(self, argindex=1):
        x, h = self.args
        if argindex == 2:
            return sympy.polygamma(1, x + h)
        return sympy.polygamma(1, x + h) - sympy.polygamma(1, x)

    def _elementary(self):
        x, h = self.args
        return sympy.polygamma(0, x + h) - sympy.polygamma(0, x)


def _digamma_gap(args: tuple, argindex: int) -> sympy.Expr:
    """digamma(a) - digamma(a + b) for ``a`` the argument ``argindex`` (1 or 2) and ``b`` the other."""
    a, b = args if argindex == 1 else args[::-1]
    return -digamma_difference(a, b)


class beta(_Primitive):
    """B(a, b) = Gamma(a) Gamma(b)/Gamma(a + b); d/da = B*(digamma(a) - digamma(a + b)) (the difference
    computed as one function: it cancels when b << a)."""

    nargs = 2

    def fdiff(self, argindex=1):
        return self * _digamma_gap(self.args, argindex)

    def _elementary(self):
        return sympy.beta(*self.args)


class betaln(_Primitive):
    """log|B(a, b)|; d/da = digamma(a) - digamma(a + b) (as in ``beta``)."""

    nargs = 2

    def fdiff(self, argindex=1):
        return _digamma_gap(self.args, argindex)

    def _elementary(self):
        a, b = self.args
        return sympy.log(Abs(sympy.beta(a, b)))


def _over_x_limit(x: sympy.Expr, value: sympy.Expr) -> sympy.Expr:
    """``value``, except 1/2 at x == 0 (the limit of the order-1 Bessel derivatives, which divide by x)."""
    return piecewise((S.Half, Eq(x, 0)), (value, True))


class j0(_Primitive):
    """Bessel J0; d/dx = -J1."""

    nargs = 1

    def fdiff(self, argindex=1):
        return -j1(self.args[0])

    def _elementary(self):
        return sympy.besselj(0, self.args[0])


class j1(_Primitive):
    """Bessel J1; d/dx = J0 - J1/x (1/2 at 0)."""

    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return _over_x_limit(x, j0(x) - j1(x) / x)

    def _elementary(self):
        return sympy.besselj(1, self.args[0])


class i0(_Primitive):
    """Modified Bessel I0; d/dx = I1."""

    nargs = 1

    def fdiff(self, argindex=1):
        return i1(self.args[0])

    def _elementary(self):
        return sympy.besseli(0, self.args[0])


class i1(_Primitive):
    """Modified Bessel I1; d/dx = I0 - I1/x (1/2 at 0)."""

    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return _over_x_limit(x, i0(x) - i1(x) / x)

    def _elementary(self):
        return sympy.besseli(1, self.args[0])


class i0e_minus_i1e(_Primitive):
    """i0e(x) - i1e(x) for x >= 0, computed on its own (symgrad/special_tables.py): the difference cancels
    for large x (both ~ 1/sqrt(2 pi x), the difference ~ 1/(2x) of that). The gradients of i0e and i1e."""

    nargs = 1

    def fdiff(self, argindex=1):
        a = self.args[0]  # d/da (i0e - i1e) = -2 (i0e - i1e) + i1e(a)/a for a > 0
        return piecewise((-S(3) / 2, Eq(a, 0)), (-2 * self + i1e(a) / a, True))

    def _elementary(self):
        a = self.args[0]
        return sympy.exp(-Abs(a)) * (sympy.besseli(0, a) - sympy.besseli(1, a))


class i0e(_Primitive):
    """exp(-|x|)*I0(x); d/dx = i1e(x) - sign(x)*i0e(x), computed as -sign(x)*(i0e - i1e)(|x|)."""

    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return -sign(x) * i0e_minus_i1e(Abs(x))

    def _elementary(self):
        x = self.args[0]
        return sympy.exp(-Abs(x)) * sympy.besseli(0, x)


class i1e(_Primitive):
    """exp(-|x|)*I1(x); d/dx = i0e(x) - i1e(x)/x - sign(x)*i1e(x) = (i0e - i1e)(|x|) - i1e(x)/x (1/2 at 0)."""

    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return _over_x_limit(x, i0e_minus_i1e(Abs(x)) - i1e(x) / x)

    def _elementary(self):
        x = self.args[0]
        return sympy.exp(-Abs(x)) * sympy.besseli(1, x)


class hurwitz_zeta(_Primitive):
    """The Hurwitz zeta function zeta(s, q) = sum_k (k + q)**-s, for s > 1 and q > 0 (``sg.zeta``; SymPy's
    own ``zeta`` evaluates zeta(s, 1) to zeta(s) and leaves d/ds unevaluated); d/dq = -s*zeta(s + 1, q).
    Not differentiable in s: its derivative there raises ``UnsupportedError``."""

    nargs = 2

    def fdiff(self, argindex=1):
        s, q = self.args
        if argindex == 1:
            raise UnsupportedError(
                f"sg.zeta(s, q) is not differentiable in its first argument s (here {formula(s, 80)}): "
                "symgrad has no rule for d/ds zeta(s, q). Pass s as a number, or declare the argument it "
                "comes from nondiff (@sg.function(nondiff=(...)); uniform alone still differentiates it)"
            )
        return -s * hurwitz_zeta(s + 1, q)

    def _elementary(self):  # NaN outside s > 1, q > 0 (mpmath's zeta does not return at s = -1e30)
        s, q = self.args
        return piecewise((sympy.zeta(s, q), (s > 1) & (q > 0)), (sympy.nan, True))


SPECIAL_PRIMITIVES = (
    cbrt,
    root,
    sinc,
    erfcx,
    erfcx_grad,
    beta,
    betaln,
    digamma_difference,
    j0,
    j1,
    i0,
    i1,
    i0e,
    i1e,
    i0e_minus_i1e,
    hurwitz_zeta,
)
#: SymPy's classes that symgrad compiles as they are
SYMPY_SPECIAL = (
    sympy.loggamma,
    sympy.gamma,
    sympy.polygamma,
    sympy.beta,
    sympy.erfinv,
    sympy.Mod,
    sympy.frac,
    exp2,
    log2,
    log10,
)


def _order(name: str, n, orders: range) -> int:
    if not (isinstance(n, (int, sympy.Integer)) and int(n) in orders):
        raise ModelError(
            f"sg.{name}: the order must be an integer in {orders.start}..{orders.stop - 1}, got {n!r}"
        )
    return int(n)


def polygamma(n, x) -> sympy.Expr:
    """The n-th derivative of digamma, n = 0..3 (its derivative is polygamma(n + 1, x))."""
    return sympy.polygamma(_order("polygamma", n, range(MAX_POLYGAMMA)), x)


def digamma(x) -> sympy.Expr:
    """d/dx log Gamma(x) (``polygamma(0, x)``)."""
    return sympy.polygamma(0, x)


def besselj(nu, x) -> sympy.Expr:
    """Bessel function of the first kind J_nu(x), nu = 0 or 1."""
    return (j0, j1)[_order("besselj", nu, range(2))](x)


def besseli(nu, x) -> sympy.Expr:
    """Modified Bessel function of the first kind I_nu(x), nu = 0 or 1 (``i0e``/``i1e``: exp(-|x|)*I_nu)."""
    return (i0, i1)[_order("besseli", nu, range(2))](x)


def zeta(s, q=1) -> sympy.Expr:
    """The Hurwitz zeta function zeta(s, q) (s > 1, q > 0; NaN elsewhere, except where SciPy defines it:
    +inf at s == 1 or at q = 0, -1, ..., and integer s with negative q); ``zeta(s)`` is Riemann's, zeta(s, 1).
    Differentiable in q only."""
    return hurwitz_zeta(s, q)


def real_root(x, n) -> sympy.Expr:
    """The real n-th root (negative for negative x and odd n), n an integer >= 1; n = 3 is ``cbrt``."""
    n = _order("real_root", n, range(1, 1025))
    return {1: x, 2: sqrt(x), 3: cbrt(x)}.get(n) if n <= 3 else root(x, n)
