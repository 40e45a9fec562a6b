"""50-digit mpmath references for the special functions of tests/models/special.py, their hard points, and
the error measure of tests/test_special_functions.py and of docs/numerics.md's accuracy table.

Error measure, in ulp of the dtype: ``|got - want| / (eps * max(|want|, sum_i |x_i * d want/d x_i|))``,
eps = 2**-52 (float64) or 2**-23 (float32). The second term is the error that rounding the inputs alone
causes (the condition of the result): without it a result near a zero of the function (digamma between its
negative poles, lgamma at 1 and 2, J0 at its zeros) would demand more digits than its inputs carry. Points
whose true result is not a normal number of the dtype (overflow, underflow, pole, complex) are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import mpmath as mp
import numpy as np

DIGITS = 50  # and more for large inputs (``reference``)
EPS = {"float64": 2.0**-52, "float32": 2.0**-23}


def _sign(x):
    return (x > 0) - (x < 0)


def _erfcx(x):
    if x > 1e6:  # A&S 7.1.23: mpmath's erfc cannot take x this large; 6 terms are exact to 1e-70 here
        t = 1 / (2 * x * x)
        return sum((-1) ** k * mp.fac2(2 * k - 1) * t**k for k in range(6)) / (x * mp.sqrt(mp.pi))
    return mp.exp(x * x) * mp.erfc(x)


def _erfcx_grad(x):
    if x > 1e6:  # the same series differentiated: 2x erfcx(x) - 2/sqrt(pi)
        t = 1 / (2 * x * x)
        return 2 / mp.sqrt(mp.pi) * sum((-1) ** k * mp.fac2(2 * k - 1) * t**k for k in range(1, 7))
    return 2 * x * _erfcx(x) - 2 / mp.sqrt(mp.pi)


def _sinc_grad(x):
    if abs(x) < 1e-4:  # the closed form cancels to below 50 digits; the series is exact to 1e-36 here
        return -x / 3 + x**3 / 30 - x**5 / 840 + x**7 / 45360
    return (mp.cos(x) - mp.sinc(x)) / x


def _hurwitz_zeta(s, q):
    """zeta(s, q) for s > 1, q > 0: the direct sum until k + q >= 200, then Euler-Maclaurin (DLMF 25.11.43)
    with B_2..B_60 (remainder < 1e-60 relative for s <= 60). mpmath's zeta loses digits here: at 60 digits
    zeta(25.59, 303.2) is off from the 9th."""
    n = max(0, int(mp.ceil(200 - q)))
    head = mp.fsum((k + q) ** -s for k in range(n))
    a = q + n
    tail = a ** (1 - s) / (s - 1) + a**-s / 2
    tail += mp.fsum(
        mp.bernoulli(2 * k) / mp.factorial(2 * k) * mp.rf(s, 2 * k - 1) * a ** (1 - s - 2 * k)
        for k in range(1, 31)
    )
    return head + tail


_ZETA_HARD = [(1 + 1e-12, 1.0), (1 + 1e-8, 1e6), (1.001, 0.5), (2.0, 1.0), (3.0, 1e-100), (50.0, 1e-3),
              (50.0, 1e6), (2.5, 8.9), (20.0, 1e5), (1.5, 9e5), (2.0, 1.5e8), (1 + 1e-6, 1e12)]  # fmt: skip


def _scaled_i(n):
    return lambda x: mp.exp(-abs(x)) * mp.besseli(n, x)


def _over_x(f):
    """f(x)/x, 1/2 at 0 (the order-1 Bessel functions' derivative term)."""
    return lambda x: mp.mpf(1) / 2 if x == 0 else f(x) / x


@dataclass(frozen=True)
class Case:
    """One function: its value and gradients in mpmath, an ordinary sampling box and its hard points."""

    value: Callable
    grads: tuple[Callable, ...]
    box: tuple[
        tuple[float, float], ...
    ]  # per argument: where ordinary points are drawn (log-uniform if "log")
    hard: dict[str, list[tuple[float, ...]]] = field(default_factory=dict)  # per dtype
    log: bool = False


def _pg(n):
    return Case(
        lambda x: mp.psi(n, x),
        (lambda x: mp.psi(n + 1, x),),
        ((-12.0, 30.0),),
        {
            "float64": [
                (-2.3,),
                (-7.5,),
                (-0.999999,),
                (-3 + 1e-9,),
                (-1234.25,),
                (1e-5,),
                (0.5,),
                (19.9,),
                (20.1,),
                (1e10,),
            ],
            "float32": [(-2.3,), (-7.5,), (-3 + 1e-4,), (1e-3,), (19.9,), (20.1,), (1e6,)],
        },
    )


def _one(*values):
    return [(float(v),) for v in values]


def _ordinary_bessel(n, tails):
    return {
        "float64": _one(0.0, 1e-300, 2.404825557695773, 3.8317059702075125, *tails),
        "float32": _one(0, 1e-30, 2.4048256, 3.831706, *tails),
    }


CASES: dict[str, Case] = {
    "loggamma": Case(
        lambda x: mp.re(mp.loggamma(x)),
        (mp.digamma,),
        ((-10.0, 40.0),),
        {
            "float64": _one(
                1e-300, 1e300, 1e-10, 1.0, 2.0, 0.5, 1e5, 170.5, -2.5, -0.5, -3 + 1e-9, -2.4570247, 2.5e305
            ),
            "float32": _one(1e-38, 1e30, 1e-5, 1.0, 2.0, 0.5, 1e5, -2.5, -0.5, -3 + 1e-4, 3e36),
        },
    ),
    "gamma": Case(
        mp.gamma,
        (lambda x: mp.gamma(x) * mp.digamma(x),),
        ((-6.0, 30.0),),
        {
            "float64": _one(1e-300, 1e-8, 0.5, 1.0, 2.0, 170.5, -2.5, -0.5, -3 + 1e-9),
            "float32": _one(1e-30, 0.5, 34.5, -2.5, -3 + 1e-4),
        },
    ),
    "digamma": Case(
        mp.digamma,
        (lambda x: mp.psi(1, x),),
        ((-12.0, 30.0),),
        {
            "float64": _one(
                1e-300,
                1e300,
                1.4616321449683622,
                -1 - 1e-9,
                -5 + 1e-7,
                -0.5,
                -10.3,
                -12345.25,
                -0.9,
                19.99,
                20.01,
            ),
            "float32": _one(1e-30, 1e30, 1.4616321, -1 - 1e-4, -5 + 1e-3, -0.5, -10.3, 19.99, 20.01),
        },
    ),
    "polygamma1": _pg(1),
    "polygamma2": _pg(2),
    "polygamma3": _pg(3),
    "beta": Case(
        mp.beta,
        (
            lambda a, b: mp.beta(a, b) * (mp.digamma(a) - mp.digamma(a + b)),
            lambda a, b: mp.beta(a, b) * (mp.digamma(b) - mp.digamma(a + b)),
        ),
        ((0.05, 20.0), (0.05, 20.0)),
        {
            "float64": [(0.5, 0.5), (1e-5, 3.0), (100.0, 200.0), (1e5, 3.0), (80.0, 95.0), (1e-300, 2.0)],
            "float32": [(0.5, 0.5), (1e-5, 3.0), (30.0, 40.0), (1e4, 3.0)],
        },
    ),
    "betaln": Case(
        lambda a, b: mp.re(mp.loggamma(a) + mp.loggamma(b) - mp.loggamma(a + b)),
        (lambda a, b: mp.digamma(a) - mp.digamma(a + b), lambda a, b: mp.digamma(b) - mp.digamma(a + b)),
        ((0.05, 50.0), (0.05, 50.0)),
        {
            "float64": [
                (0.5, 0.5),
                (1.0, 1.0),
                (1e10, 2.0),
                (1e5, 1e5),
                (300.0, 400.0),
                (1e300, 3.0),
                (9.9, 10.1),
                (1e-300, 5.0),
            ],
            "float32": [(0.5, 0.5), (1e10, 2.0), (300.0, 400.0), (1e30, 3.0), (9.9, 10.1)],
        },
    ),
    "exp2": Case(
        lambda x: mp.power(2, x),
        (lambda x: mp.power(2, x) * mp.ln2,),
        ((-50.0, 50.0),),
        {"float64": _one(1000, -1000, 1e-300, 0), "float32": _one(120, -120, 1e-30)},
    ),
    "log2": Case(
        lambda x: mp.log(x, 2),
        (lambda x: 1 / (x * mp.ln2),),
        ((1e-3, 1e3),),
        {"float64": _one(1e-300, 1e300, 1.0, 1 + 2**-40), "float32": _one(1e-37, 1e37, 1.0)},
        log=True,
    ),
    "log10": Case(
        lambda x: mp.log10(x),
        (lambda x: 1 / (x * mp.ln10),),
        ((1e-3, 1e3),),
        {"float64": _one(1e-300, 1e300, 10.0, 1 - 2**-40), "float32": _one(1e-37, 1e37, 10.0)},
        log=True,
    ),
    "cbrt": Case(
        lambda x: _sign(x) * mp.cbrt(abs(x)),
        (lambda x: 1 / (3 * mp.cbrt(abs(x)) ** 2),),
        ((-100.0, 100.0),),
        {"float64": _one(-8, 1e-300, -1e300, 1e300, 27), "float32": _one(-8, 1e-37, -1e37, 27)},
    ),
    "real_root5": Case(
        lambda x: _sign(x) * mp.root(abs(x), 5),
        (lambda x: mp.root(abs(x), 5) / (5 * abs(x)),),
        ((-100.0, 100.0),),
        {"float64": _one(-32, 1e-300, -1e300), "float32": _one(-32, 1e-30, -1e30)},
    ),
    "sinc": Case(
        lambda x: mp.sinc(x),
        (_sinc_grad,),
        ((-20.0, 20.0),),
        {
            "float64": _one(0, 1e-300, 1e-8, 1e-3, 0.999, 1.0, 1.001, 1e5, 1e200),
            "float32": _one(0, 1e-30, 1e-4, 0.999, 1.0, 1.001, 1e5, 1e30),
        },
    ),
    "mod": Case(
        lambda x, y: x - y * mp.floor(x / y),
        (lambda x, y: mp.mpf(1), lambda x, y: -mp.floor(x / y)),
        ((-30.0, 30.0), (-5.0, 5.0)),
        {
            "float64": [(7.5, 2.0), (-7.5, 2.0), (7.5, -2.0), (1e10, 3.0)],
            "float32": [(7.5, 2.0), (-7.5, 2.0), (7.5, -2.0)],
        },
    ),
    "frac": Case(
        lambda x: x - mp.floor(x),
        (lambda x: mp.mpf(1),),
        ((-30.0, 30.0),),
        {"float64": _one(-0.25, 1e10 + 0.5), "float32": _one(-0.25, 1000.5)},
    ),
    "erfinv": Case(
        mp.erfinv,
        (lambda x: mp.sqrt(mp.pi) / 2 * mp.exp(mp.erfinv(x) ** 2),),
        ((-1.0, 1.0),),
        {
            "float64": _one(
                1e-300, 1e-10, 0.5, -0.5, 0.9, 1 - 2**-20, -(1 - 2**-40), 1 - 2**-53, -(1 - 2**-53), 0.9966
            ),
            "float32": _one(1e-30, 1e-5, 0.5, -0.5, 1 - 2**-10, -(1 - 2**-24), 1 - 2**-24),
        },
    ),
    "erfcx": Case(
        _erfcx,
        (_erfcx_grad,),
        ((-5.0, 30.0),),
        {
            "float64": _one(-26.0, -5.0, 0.0, 1e-300, 0.5, 3.0, 9.9, 10.1, 25.9, 26.1, 1e5, 1e200, 1e300),
            "float32": _one(-9.0, -3.0, 0.0, 0.5, 3.0, 9.9, 10.1, 1e5, 1e30),
        },
    ),
    "j0": Case(
        lambda x: mp.besselj(0, x),
        (lambda x: -mp.besselj(1, x),),
        ((-40.0, 40.0),),
        _ordinary_bessel(0, (1e3, 1e5, -77.3)),
    ),
    "j1": Case(
        lambda x: mp.besselj(1, x),
        (lambda x: mp.besselj(0, x) - _over_x(lambda t: mp.besselj(1, t))(x),),
        ((-40.0, 40.0),),
        _ordinary_bessel(1, (1e3, 1e5, -77.3)),
    ),
    "i0": Case(
        lambda x: mp.besseli(0, x),
        (lambda x: mp.besseli(1, x),),
        ((-30.0, 30.0),),
        {"float64": _one(0, 1e-300, 7.99, 8.01, 700, -700), "float32": _one(0, 1e-30, 7.99, 8.01, 85, -85)},
    ),
    "i1": Case(
        lambda x: mp.besseli(1, x),
        (lambda x: mp.besseli(0, x) - _over_x(lambda t: mp.besseli(1, t))(x),),
        ((-30.0, 30.0),),
        {"float64": _one(0, 1e-300, 7.99, 8.01, 700, -700), "float32": _one(0, 1e-30, 7.99, 8.01, 85, -85)},
    ),
    "i0e": Case(
        _scaled_i(0),
        (lambda x: _scaled_i(1)(x) - _sign(x) * _scaled_i(0)(x),),
        ((-30.0, 30.0),),
        {
            "float64": _one(0, 1e-300, 7.99, 8.01, 1e3, -1e5, 1e10),
            "float32": _one(0, 1e-30, 7.99, 8.01, 1e3, -1e5),
        },
    ),
    "i1e": Case(
        _scaled_i(1),
        (lambda x: _scaled_i(0)(x) - _over_x(_scaled_i(1))(x) - _sign(x) * _scaled_i(1)(x),),
        ((-30.0, 30.0),),
        {
            "float64": _one(0, 1e-300, 7.99, 8.01, 1e3, -1e5, 1e10),
            "float32": _one(0, 1e-30, 7.99, 8.01, 1e3, -1e5),
        },
    ),
    # s is nondiff in the model: one gradient, in q (the condition still counts the rounding of s)
    "zeta": Case(
        _hurwitz_zeta,
        (lambda s, q: -s * _hurwitz_zeta(s + 1, q),),
        ((1.0 + 2**-20, 50.0), (1e-3, 1e6)),
        {
            "float64": _ZETA_HARD,
            "float32": [(1 + 2**-20, 1.0), (1.001, 1e6), (2.0, 1.0), (3.0, 1e-12), (20.0, 1e-3), (30.0, 1.0)],
        },
        log=True,
    ),
}
CASES["lgamma"] = CASES["loggamma"]


def sample(name: str, dtype: str, n: int) -> list[tuple[float, ...]]:
    """The hard points of ``name`` for ``dtype`` and ``n`` ordinary ones from its box (seeded by name)."""
    case = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)) + n)
    if case.log:
        cols = [np.exp(rng.uniform(math.log(lo), math.log(hi), n)) for lo, hi in case.box]
    else:
        cols = [rng.uniform(lo, hi, n) for lo, hi in case.box]
    return list(case.hard.get(dtype, [])) + [tuple(float(c[i]) for c in cols) for i in range(n)]


def _real(v) -> mp.mpf | None:
    if isinstance(v, mp.mpc):
        if abs(v.imag) > 0:
            return None
        v = v.real
    return v if mp.isfinite(v) else None


def _eval(f, args):
    try:
        return _real(f(*args))
    except (ValueError, ZeroDivisionError):  # a pole
        return None


def _condition(f, args, value) -> mp.mpf:
    """sum_i |x_i d f/d x_i|, by a central difference of relative step 1e-30 at ``DIGITS`` digits."""
    total = abs(value)
    cond = mp.mpf(0)
    for i, x in enumerate(args):
        if x == 0:
            continue
        up, down = list(args), list(args)
        up[i], down[i] = x * (1 + mp.mpf("1e-30")), x * (1 - mp.mpf("1e-30"))
        hi, lo = _eval(f, up), _eval(f, down)
        if hi is None or lo is None:
            return mp.inf
        cond += abs(hi - lo) / mp.mpf("2e-30")
    return max(total, cond)


def reference(name: str, point: tuple[float, ...]) -> list[tuple[float, float] | None]:
    """(value, scale) then one (gradient, scale) per argument at ``point``; None where not a finite real."""
    case = CASES[name]
    out = []
    # beyond 50 digits by the inputs' magnitude: B(1e300, 3) needs 1e300 + 3 exactly
    digits = DIGITS + 10 + max(0, int(math.log10(max(abs(p) for p in point) + 1)))
    with mp.workdps(digits):
        args = [mp.mpf(p) for p in point]
        for f in (case.value, *case.grads):
            v = _eval(f, args)
            out.append(None if v is None else (float(v), float(_condition(f, args, v))))
    return out


def ulp_errors(got: np.ndarray, want: list, dtype: str) -> np.ndarray:
    """Per point, the error of ``got`` in ulp (the measure above); NaN where the point is skipped."""
    info = np.finfo(dtype)
    errors = np.full(len(want), np.nan)
    for k, w in enumerate(want):
        if w is None or not (float(info.tiny) <= abs(w[0]) <= float(info.max)) or not np.isfinite(w[1]):
            continue
        g = float(got[k])
        errors[k] = abs(g - w[0]) / (EPS[dtype] * w[1]) if np.isfinite(g) else np.inf
    return errors
