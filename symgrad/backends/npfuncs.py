"""Array helpers that generated NumPy code calls: xlogy, the special functions (``scipy.special``, the field's
standard) and packing (the exp(-|u|) primitives are written out by the lowering, see
``symgrad.compiler.primitives.expand_shared_cores``).

Every function keeps its input's float dtype (float32 stays float32): SciPy computes some of them in double
(``polygamma``), and its result is cast back.
"""

from __future__ import annotations

import numpy
from numpy.polynomial.chebyshev import chebval
from scipy import special

from symgrad.special_tables import (
    D_LARGE,
    D_SMALL,
    DIGAMMA_ASYMPTOTIC,
    I0_LARGE,
    I0_SMALL,
    I1_LARGE,
    I1_SMALL,
)


def _like(result, *args):
    """``result`` in the float dtype NumPy gives the arguments (Python numbers are weak: float32 stays)."""
    dtype = numpy.result_type(*args)
    dtype = dtype if dtype.kind == "f" else numpy.dtype(numpy.float64)
    return numpy.asarray(result).astype(dtype, copy=False)


def _unary(fn):
    def apply(x):
        return _like(fn(x), x)

    apply.__doc__ = f"{fn.__name__} of an array, in its dtype."
    return apply


def xlogy(x, y):
    """x * log(y), and 0 where x == 0."""
    return numpy.where(x == 0, 0, x * numpy.log(y))


erf, erfc, erfinv, erfcx = (_unary(f) for f in (special.erf, special.erfc, special.erfinv, special.erfcx))
loggamma, gamma = _unary(special.gammaln), _unary(special.gamma)  # gammaln: log|Gamma(x)|, as lgamma
j0, j1 = _unary(special.j0), _unary(special.j1)
exp2, log2, log10, cbrt = (_unary(f) for f in (numpy.exp2, numpy.log2, numpy.log10, numpy.cbrt))


def polygamma(n, x):
    """The n-th derivative of digamma (n = 0: digamma itself)."""
    return _like(special.psi(x) if int(n) == 0 else special.polygamma(int(n), x), x)


def _stirling_remainder(x):
    """log Gamma(x) - ((x - 1/2) log x - x + log(2 pi)/2) for x >= 10 (A&S 6.1.41, to x^-13)."""
    t = 1 / (x * x)
    u = 1 / 1188 + t * (-691 / 360360 + t / 156)
    return (1 / 12 + t * (-1 / 360 + t * (1 / 1260 + t * (-1 / 1680 + t * u)))) / x


def _betaln64(a, b):
    """log|B(a, b)| in float64, the C helper's algorithm (SciPy's betaln errs by 3800 ulp at (1e5, 3)): with
    p <= q, lgamma sums while p <= 0 or q < 10, else the Stirling terms cancelled in closed form."""
    a, b = numpy.asarray(a, dtype=numpy.float64), numpy.asarray(b, dtype=numpy.float64)
    p, q = numpy.minimum(a, b), numpy.maximum(a, b)
    with numpy.errstate(all="ignore"):
        plain = special.gammaln(p) + special.gammaln(q) - special.gammaln(p + q)
        d = _stirling_remainder(q) - _stirling_remainder(p + q)
        mid = special.gammaln(p) + d - (q - 0.5) * numpy.log1p(p / q) - p * numpy.log(p + q) + p
        big = 0.9189385332046728 - 0.5 * numpy.log(p) + _stirling_remainder(p) + d
        big = big - p * numpy.log1p(q / p) - (q - 0.5) * numpy.log1p(p / q)
    return numpy.where(~(p > 0) | (q < 10), plain, numpy.where(p < 10, mid, big))


def beta(a, b):
    """B(a, b): exp(betaln) for positive arguments where |betaln| < 16 or a + b > 171, else SciPy's gamma
    ratio (the C helper's choice)."""
    log_form = _betaln64(a, b)
    with numpy.errstate(all="ignore"):
        use_log = (
            (a > 0) & (b > 0) & ((numpy.abs(log_form) < 16) | (numpy.add(a, b, dtype=numpy.float64) > 171))
        )
        result = numpy.where(use_log, numpy.exp(log_form), special.beta(numpy.float64(a), numpy.float64(b)))
    return _like(result, a, b)


def betaln(a, b):
    """log|B(a, b)|."""
    return _like(_betaln64(a, b), a, b)


def _scaled_bessel_i(order: int, x) -> numpy.ndarray:
    """exp(-|x|) I_order(x) in float64 by the C helpers' Chebyshev expansions (symgrad.special_tables; SciPy's
    i1e errs by 8 ulp near x = 8, these by 2)."""
    a = numpy.abs(numpy.asarray(x, dtype=numpy.float64))
    small, large = (I0_SMALL, I0_LARGE) if order == 0 else (I1_SMALL, I1_LARGE)
    with numpy.errstate(divide="ignore", invalid="ignore"):
        near = chebval(a / 4 - 1, small) * (a / (1 + a) if order else 1)
        far = chebval(16 / a - 1, large) / numpy.sqrt(a)
    y = numpy.where(a <= 8, near, far)
    return numpy.copysign(y, x) if order else y


def _unscaled_bessel_i(order: int, x) -> numpy.ndarray:
    h = numpy.exp(
        numpy.abs(numpy.asarray(x, dtype=numpy.float64)) / 2
    )  # in halves: overflows only where I does
    with numpy.errstate(over="ignore"):
        return _scaled_bessel_i(order, x) * h * h


def i0e(x):
    return _like(_scaled_bessel_i(0, x), x)


def i1e(x):
    return _like(_scaled_bessel_i(1, x), x)


def i0(x):
    return _like(_unscaled_bessel_i(0, x), x)


def i1(x):
    return _like(_unscaled_bessel_i(1, x), x)


def i0e_minus_i1e(x):
    """i0e(x) - i1e(x) for x >= 0 without the cancellation of the difference (symgrad.special_tables)."""
    a = numpy.abs(numpy.asarray(x, dtype=numpy.float64))
    with numpy.errstate(divide="ignore", invalid="ignore"):
        small = chebval(a / 4 - 1, D_SMALL) / ((1 + a) * numpy.sqrt(1 + a))
        large = chebval(16 / a - 1, D_LARGE) / (a * numpy.sqrt(a))
    return _like(numpy.where(a <= 8, small, large), x)


def digamma_difference(x, h):
    """digamma(x + h) - digamma(x) without cancellation for x, x + h > 0 (the algorithm of the C helper,
    emitters/c/special.py: both shifted to >= 20 by the recurrence, then the asymptotic series differenced
    term by term); elsewhere the plain difference."""
    given = (x, h)
    x0, h = numpy.broadcast_arrays(
        numpy.asarray(x, dtype=numpy.float64), numpy.asarray(h, dtype=numpy.float64)
    )
    x, y = x0.copy(), x0 + h
    acc = numpy.zeros_like(x)
    with numpy.errstate(all="ignore"):
        for _ in range(20):
            low = (x < 20) | (y < 20)
            acc = numpy.where(low, acc + h / (x * y), acc)
            x, y = numpy.where(low, x + 1, x), numpy.where(low, y + 1, y)
        a, b, d = 1 / (y * y), 1 / (x * x), -(h / (x * y)) * (1 / x + 1 / y)  # (a - b), no overflow
        sk, bk, total = numpy.ones_like(x), b, numpy.full_like(x, DIGAMMA_ASYMPTOTIC[0])
        for c in DIGAMMA_ASYMPTOTIC[1:]:
            sk = a * sk + bk
            bk = bk * b
            total = total + c * sk
        series = numpy.log1p(h / x) + h / (2 * x * y) - d * total + acc
        plain = special.psi(x0 + h) - special.psi(x0)
    return _like(numpy.where((x0 > 0) & (x0 + h > 0), series, plain), *given)


def erfcx_grad(x):
    """d erfcx/dx = 2x erfcx(x) - 2/sqrt(pi); from x = 2 on as -2 K(x) erfcx(x) with K the continued-fraction
    tail (the C helper's algorithm, emitters/c/special.py), which does not cancel."""
    x64 = numpy.asarray(x, dtype=numpy.float64)
    e = special.erfcx(x64)
    k = numpy.zeros_like(x64)
    with numpy.errstate(all="ignore"):
        for n in range(64, 0, -1):
            k = 0.5 * n / (x64 + k)
        return _like(numpy.where(x64 >= 2, -2 * k * e, 2 * x64 * e - 1.1283791670955126), x)


def root(x, n):
    """The real n-th root, integer n >= 4: pow corrected by one Newton step (the C helper's algorithm)."""
    x64, n = numpy.asarray(x, dtype=numpy.float64), int(n)
    a = numpy.abs(x64)
    with numpy.errstate(all="ignore"):
        y = a ** (1.0 / n)
        y = numpy.where((y > 0) & (y < numpy.inf), y - (y - a / y ** (n - 1)) / n, y)
        y = numpy.where((x64 < 0) & (n % 2 == 0), numpy.nan, numpy.copysign(y, x64))
    return _like(y, x)


def hurwitz_zeta(s, q):
    """The Hurwitz zeta function zeta(s, q): SciPy's (Cephes zeta.c), but for q > 1e8 the asymptotic
    expansion to the q^-2 term, as the C helper (SciPy's stops at q^-1: 90 ulp off at s = 50)."""
    s64, q64 = numpy.asarray(s, dtype=numpy.float64), numpy.asarray(q, dtype=numpy.float64)
    with numpy.errstate(all="ignore"):
        far = (1 / (s64 - 1) + 0.5 / q64 + s64 / (12 * q64 * q64)) * q64 ** (1 - s64)
        result = numpy.where((q64 > 1e8) & (s64 > 1), far, special.zeta(s64, q64))
    return _like(result, s, q)


def sinc(x):
    """sin(x)/x (SymPy's unnormalized sinc), 1 at 0."""
    with numpy.errstate(invalid="ignore", divide="ignore"):
        return _like(numpy.where(x == 0, 1, numpy.sin(x) / x), x)


def Mod(a, b):  # noqa: N802  (SymPy's class name: the printer calls the helper of that name)
    """a mod b with the sign of b (Python's %, SymPy's Mod)."""
    return _like(numpy.mod(a, b), a, b)


def frac(x):
    """x - floor(x), in [0, 1)."""
    return _like(x - numpy.floor(x), x)


def pack(elements, shape):
    """Stack per-element scalars (arrays or constants) into arrays with trailing ``shape``."""
    if not elements:  # a Jacobian with no columns (every argument nondiff): broadcast by the caller
        return numpy.zeros(tuple(shape))
    arrays = numpy.broadcast_arrays(*elements)
    return numpy.stack(arrays, axis=-1).reshape(arrays[0].shape + tuple(shape))
