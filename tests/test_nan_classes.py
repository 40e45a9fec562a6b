"""Issue 20, part 2: no NaN or inf where the true value and gradient are finite, one class of formula at a
time, each at the points where today's naive derivative breaks (and one ordinary point), on every backend
and dtype, against 50-digit mpmath formulas.

The classes: structural zeros (select, don't multiply), quotients through the output, the user's grouped
power, hypot/atan2/sinc at extreme magnitudes, textbook forms rewritten to stable primitives, and xlogy.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import mpmath as mp
import numpy as np
import pytest
import sympy

import symgrad as sg
from symgrad.compiler.primitives import hypot as hypot_primitive
from symgrad.compiler.primitives import logaddexp, logsigmoid, sigmoid
from symgrad.compiler.rewrite import stabilize

mp.mp.dps = 50

#: relative tolerance per dtype (a few ulp of the result; f32 formulas do a few more roundings)
RTOL = {"float64": 1e-14, "float32": 4e-6}


@dataclass(frozen=True)
class Case:
    fn: sg.SymbolicFunction
    reference: Callable  # mpf arguments -> (value, (d/darg0, d/darg1, ...)), 50 digits
    points: dict[str, list[tuple[float, ...]]]  # per dtype
    atol: float = 0.0  # on top of the dtype's smallest normal (a gradient that is 0 up to roundoff)


def _sigmoid(x):
    return 1 / (1 + mp.exp(-x))


def _logsigmoid(x):
    return -mp.log1p(mp.exp(-x))  # log(sigmoid(x)) would lose 1e-44 next to 1 at 50 digits


# -- 1. structural zeros: an adjoint that is zero on an unselected branch stays an exact zero ----------------


@sg.function
def relu_plus_min(x):
    return sg.Max(0, x) + sg.Min(0, (sg.exp(2 * x) - 1) / 2)


@sg.function
def power(x, y):
    return x**y


@sg.function
def scaled_power(x, y):
    return 3 * x**y + y  # the power inside a product inside a sum


@sg.function
def bump_plus_line(x):
    return x * sg.exp(-(x**2)) + x  # the product inside a sum


@sg.function
def gaussian_bump(x):
    return x * sg.exp(-(x**2))


@sg.function
def lorentz(x):
    return x / (1 + x**2)


# -- 2. quotients differentiate through their output ---------------------------------------------------------


@sg.function
def softmax3(a, b, c):
    return sg.exp(a) / (sg.exp(a) + sg.exp(b) + sg.exp(c))


@sg.function
def tanh_of_exps(x):
    return (sg.exp(x) - sg.exp(-x)) / (sg.exp(x) + sg.exp(-x))


@sg.function
def sinc(x):
    return sg.where(sg.Ne(x, 0), sg.sin(x) / x, 1)


# -- 3. the user's grouped power -----------------------------------------------------------------------------


@sg.function
def gaussian_nll(x, s):
    return -((x / s) ** 2) / 2 - sg.log(s)


# -- 4. hypot, atan2 -----------------------------------------------------------------------------------------


@sg.function
def hypot(x, y):
    return sg.hypot(x, y)


@sg.function
def norm2(x, y):
    return sg.sqrt(x**2 + y**2)


@sg.function
def angle(y, x):
    return sg.atan2(y, x)


# -- 5. textbook forms ---------------------------------------------------------------------------------------


@sg.function
def one_minus_sigmoid(x):
    return 1 - sg.sigmoid(x)


@sg.function
def log_one_minus_sigmoid(x):
    return sg.log(1 - sg.sigmoid(x))


@sg.function
def bce(x, y):
    p = 1 / (1 + sg.exp(-x))
    return -(y * sg.log(p) + (1 - y) * sg.log(1 - p))


@sg.function
def softmax2(x, y):
    return sg.exp(x) / (sg.exp(x) + sg.exp(y))


@sg.function
def log_one_plus_exps(x, y):
    return sg.log(1 + sg.exp(x) + sg.exp(y))


@sg.function
def log_sum_exps(a, b, c):
    return sg.log(sg.exp(a) + sg.exp(b) + sg.exp(c))


@sg.function
def logsumexp_list(a, b, c):
    return sg.logsumexp([a, b, c])


# -- 6. xlogy ------------------------------------------------------------------------------------------------


@sg.function
def xlogy(x, y):
    return sg.xlogy(x, y)


@sg.function
def asinh(x):
    return sg.asinh(x)


@sg.function
def atan_of_hypot(x):
    return sg.atan(sg.hypot(x, x))


@sg.function
def abs_gamma(x):
    return sg.Abs(sg.exp(sg.loggamma(x)))


@sg.function
def log_one_plus_square(x, y):
    return sg.log(1 + x**2 * y**2)


@sg.function
def gelu_tanh(x):
    return 0.5 * x * (1 + sg.tanh(sg.sqrt(2 / sg.pi) * (x + 0.044715 * x**3)))


@sg.function
def of_reciprocal(x):
    return sg.atan(1 / x) + sg.tanh(1 / x) + sg.erf(1 / x) + sg.sigmoid(1 / x)


@sg.function
def over_one_plus_reciprocal(x):
    return 1 / (1 + 1 / x) + sg.exp(-1 / x**2)


@sg.function
def over_a_function(x):
    return 1 / sg.sin(x**3)


def _of_reciprocal_ref(x):
    t = 1 / x
    s = 1 / (1 + mp.exp(-t))
    value = mp.atan(t) + mp.tanh(t) + mp.erf(t) + s
    return value, (
        -(1 / (1 + t**2) + 1 / mp.cosh(t) ** 2 + 2 * mp.exp(-(t**2)) / mp.sqrt(mp.pi) + s * (1 - s)) * t**2,
    )


def _gelu_ref(x):
    c = mp.sqrt(2 / mp.pi)
    z = c * (x + mp.mpf("0.044715") * x**3)
    slope = 0.5 * (1 + mp.tanh(z)) + 0.5 * x * c * (1 + 3 * mp.mpf("0.044715") * x**2) / mp.cosh(z) ** 2
    return 0.5 * x * (1 + mp.tanh(z)), (slope,)


def _sinc_derivative(x):
    """(x cos x - sin x)/x**2, by its series where 50 digits would cancel to 0."""
    return -x / 3 + x**3 / 30 if abs(x) < 1e-5 else (x * mp.cos(x) - mp.sin(x)) / x**2


def _hypot_ref(x, y):
    h = mp.sqrt(x**2 + y**2)
    return h, ((x / h if x else 0), (y / h if y else 0))


def _lse_ref(*args):
    total = sum(mp.exp(a) for a in args)
    return mp.log(total), tuple(mp.exp(a) / total for a in args)


def _xlogy_ref(x, y):
    if x == 0:
        return mp.mpf(0), ((mp.log(y) if y else 0), 0)
    return x * mp.log(y), (mp.log(y), x / y)


BOTH = ("float64", "float32")
CASES = {
    "relu_plus_min": Case(
        relu_plus_min,
        lambda x: (max(x, 0) + min(0, mp.expm1(2 * x) / 2), (int(x > 0) + (mp.exp(2 * x) if x < 0 else 0),)),
        dict.fromkeys(BOTH, [(1e4,), (-1e4,), (0.5,)]),
    ),
    "power": Case(
        power,
        lambda x, y: (x**y, (y * x ** (y - 1), 0 if x == 0 else x**y * mp.log(x))),
        dict.fromkeys(BOTH, [(0.0, 2.0), (0.0, 3.5), (2.0, 0.5)]),
    ),
    "scaled_power": Case(
        scaled_power,
        lambda x, y: (3 * x**y + y, (3 * y * x ** (y - 1), 1 + (0 if x == 0 else 3 * x**y * mp.log(x)))),
        dict.fromkeys(BOTH, [(0.0, 2.0), (2.0, 0.5)]),
    ),
    "bump_plus_line": Case(
        bump_plus_line,
        lambda x: (x * mp.exp(-(x**2)) + x, (mp.exp(-(x**2)) * (1 - 2 * x**2) + 1,)),
        {"float64": [(1e200,), (0.5,)], "float32": [(1e30,), (0.5,)]},
    ),
    "gaussian_bump": Case(
        gaussian_bump,
        lambda x: (x * mp.exp(-(x**2)), (mp.exp(-(x**2)) * (1 - 2 * x**2),)),
        {"float64": [(1e200,), (-1e200,), (0.5,)], "float32": [(1e30,), (-1e30,), (0.5,)]},
    ),
    "lorentz": Case(
        lorentz,
        lambda x: (x / (1 + x**2), ((1 - x**2) / (1 + x**2) ** 2,)),
        # x**2 finite, (1 + x**2)**2 not (at 1e200 the value's own x**2 overflows: x/inf = 0, not 1e-200)
        {"float64": [(1e154,), (-1e154,), (0.5,)], "float32": [(1e19,), (0.5,)]},
    ),
    "softmax3": Case(
        softmax3,
        lambda a, b, c: (
            mp.exp(a) / (mp.exp(a) + mp.exp(b) + mp.exp(c)),
            tuple(
                (mp.exp(a) * (k == 0) * (mp.exp(a) + mp.exp(b) + mp.exp(c)) - mp.exp(a) * mp.exp(v))
                / (mp.exp(a) + mp.exp(b) + mp.exp(c)) ** 2
                for k, v in enumerate((a, b, c))
            ),
        ),
        {
            "float64": [(360.0, 361.0, 0.0), (0.5, -1.0, 2.0)],
            "float32": [(50.0, 51.0, 0.0), (0.5, -1.0, 2.0)],
        },
    ),
    "tanh_of_exps": Case(
        tanh_of_exps,
        lambda x: (mp.tanh(x), (1 / mp.cosh(x) ** 2,)),
        {"float64": [(400.0,), (-400.0,), (0.5,)], "float32": [(60.0,), (0.5,)]},
    ),
    "sinc": Case(
        sinc,
        lambda x: (mp.sin(x) / x, (_sinc_derivative(x),)),
        {"float64": [(1e-300,), (1e-150,), (0.5,)], "float32": [(1e-30,), (0.5,)]},
        # the true gradient near 0 is -x/3: both terms of (cos(x) - sinc(x))/x are ~1/x, so 0 is within their
        # rounding there; 1e-29 is above -x/3 at the tiny points and negligible at 0.5
        atol=1e-29,
    ),
    "gaussian_nll": Case(
        gaussian_nll,
        lambda x, s: (-((x / s) ** 2) / 2 - mp.log(s), (-x / s**2, x**2 / s**3 - 1 / s)),
        {
            "float64": [(1e-200, 1e-200), (1e200, 1e200), (3e-200, 2e-200), (0.5, 2.0)],
            "float32": [(1e-30, 1e-30), (1e30, 1e30), (0.5, 2.0)],
        },
    ),
    "hypot": Case(
        hypot,
        _hypot_ref,
        {
            "float64": [(1e200, 1e200), (3e-200, 4e-200), (0.0, 0.0), (0.0, -2.0), (3.0, 4.0)],
            "float32": [(1e30, 1e30), (3e-30, 4e-30), (0.0, 0.0), (3.0, 4.0)],
        },
    ),
    "norm2": Case(
        norm2,
        _hypot_ref,
        {"float64": [(1e200, -1e200), (3e-200, 4e-200)], "float32": [(1e30, 1e30), (3e-30, 4e-30)]},
    ),
    "atan2": Case(
        angle,
        lambda y, x: (mp.atan2(y, x), (x / (x**2 + y**2), -y / (x**2 + y**2))),
        {
            "float64": [(1e-200, 2e-200), (-3e-300, 1e-300), (1.0, -2.0)],
            "float32": [(1e-30, 2e-30), (1.0, -2.0)],
        },
    ),
    "atan2_on_an_axis": Case(
        angle,
        lambda y, x: (mp.atan2(y, x), (x / (x**2 + y**2), -y / (x**2 + y**2))),
        # through cos/sin of the rounded angle pi/2, d/dy at (1, 0) was 6e-17 (float32: -4e-8), not 0
        {"float64": [(1.0, 0.0), (1e30, 1.0), (1e-300, 1e-300)], "float32": [(1.0, 0.0), (1e15, 1.0)]},
    ),
    "asinh": Case(
        asinh,
        lambda x: (mp.asinh(x), (1 / mp.sqrt(1 + x**2),)),  # 1/sqrt(1 + x**2) was 0 from 1e154
        {"float64": [(3e200,), (-1e300,), (0.5,)], "float32": [(3e30,), (0.5,)]},
    ),
    "hypot_inside_a_function": Case(
        atan_of_hypot,  # (n/m)**2 distributed into n**2/m**2 was 0/0 at 1.5e-300 and inf/inf at 1e30 (f32)
        lambda x: (mp.atan(mp.sqrt(2) * abs(x)), (mp.sqrt(2) * mp.sign(x) / (1 + 2 * x**2),)),
        {"float64": [(-1.5e-300,), (1e200,), (0.5,)], "float32": [(-1e30,), (1e-30,), (0.5,)]},
    ),
    "abs_of_exp_of_loggamma": Case(
        abs_gamma,  # SymPy's exp(re(loggamma(x))) was an UnsupportedError (re)
        lambda x: (mp.gamma(x), (mp.gamma(x) * mp.digamma(x),)),
        dict.fromkeys(BOTH, [(2.0,), (3.5,), (0.25,)]),
    ),
    "log_one_plus_square": Case(
        log_one_plus_square,  # x**2*y**2 overflowed from 1e154 (inf, NaN gradients); inf*0 at (1e200, 1e-200)
        lambda x, y: (
            mp.log1p(x**2 * y**2),
            (2 * x * y**2 / (1 + x**2 * y**2), 2 * x**2 * y / (1 + x**2 * y**2)),
        ),
        {
            "float64": [(1e300, -1e300), (1e-200, 1e300), (1e200, 1e-200), (1e-300, 1e-300), (0.5, 0.25)],
            "float32": [(1e30, 1e30), (1e-30, 1e30), (0.5, 0.25)],
        },
    ),
    "gelu_tanh": Case(
        gelu_tanh,  # x*(1 - tanh(z)**2)*(1 + 3c*x**2) was 0*inf at 1e200: an exact 0 where tanh' is 0
        _gelu_ref,
        {"float64": [(1e200,), (-1e200,), (1e300,), (0.5,)], "float32": [(1e30,), (-1e30,), (0.5,)]},
    ),
    "function_of_a_reciprocal": Case(
        of_reciprocal,  # at 1e-200: 1/(1 + t**2) = 0 (and tanh', erf', sigmoid') times -1/x**2 = inf: NaN
        _of_reciprocal_ref,
        {"float64": [(1e-200,), (-1e-200,), (0.5,)], "float32": [(1e-30,), (0.5,)]},
    ),
    "one_over_one_plus_reciprocal": Case(
        over_one_plus_reciprocal,  # w**2/x**2 and exp(-1/x**2)*2/x**3: 0/0 and 0*inf at 1e-200
        lambda x: (1 / (1 + 1 / x) + mp.exp(-1 / x**2), (1 / (1 + x) ** 2 + 2 * mp.exp(-1 / x**2) / x**3,)),
        {"float64": [(1e-200,), (0.5,)], "float32": [(1e-30,), (0.5,)]},
    ),
    "quotient_by_a_function": Case(
        over_a_function,  # -g*w/v = -g*w**2*dv: w**2 = 1e48 overflows float32 at 1e-8, w*(dv/v) = 3e32 not
        lambda x: (1 / mp.sin(x**3), (-3 * x**2 * mp.cos(x**3) / mp.sin(x**3) ** 2,)),
        {"float64": [(1e-8,), (0.5,)], "float32": [(1e-8,), (0.5,)]},
    ),
    "one_minus_sigmoid": Case(
        one_minus_sigmoid,
        lambda x: (_sigmoid(-x), (-_sigmoid(x) * _sigmoid(-x),)),
        {"float64": [(40.0,), (700.0,), (-3.0,)], "float32": [(20.0,), (-3.0,)]},
    ),
    "log_one_minus_sigmoid": Case(
        log_one_minus_sigmoid,
        lambda x: (_logsigmoid(-x), (-_sigmoid(x),)),
        dict.fromkeys(BOTH, [(100.0,), (-100.0,), (0.5,)]),
    ),
    "bce": Case(
        bce,
        lambda x, y: (
            -(y * _logsigmoid(x) + (1 - y) * _logsigmoid(-x)),
            (_sigmoid(x) - y, -x),
        ),
        dict.fromkeys(BOTH, [(100.0, 0.0), (-100.0, 1.0), (0.5, 0.25)]),
    ),
    "softmax2": Case(
        softmax2,
        lambda x, y: (
            _sigmoid(x - y),
            (_sigmoid(x - y) * _sigmoid(y - x), -_sigmoid(x - y) * _sigmoid(y - x)),
        ),
        {"float64": [(800.0, 799.0), (0.5, 2.0)], "float32": [(100.0, 99.0), (0.5, 2.0)]},
    ),
    "log_one_plus_exps": Case(
        log_one_plus_exps,
        lambda x, y: (lambda v, g: (v, g[1:]))(*_lse_ref(mp.mpf(0), x, y)),
        dict.fromkeys(BOTH, [(1000.0, 1000.0), (-1000.0, 3.0), (0.5, -1.0)]),
    ),
    "log_sum_exps": Case(
        log_sum_exps, _lse_ref, dict.fromkeys(BOTH, [(1000.0, 1000.0, 0.0), (0.5, -1.0, 2.0)])
    ),
    "logsumexp_list": Case(
        logsumexp_list, _lse_ref, dict.fromkeys(BOTH, [(1000.0, 1000.0, 0.0), (0.5, -1.0, 2.0)])
    ),
    "xlogy": Case(xlogy, _xlogy_ref, dict.fromkeys(BOTH, [(0.0, 2.0), (0.0, 0.5), (0.0, 0.0), (3.0, 0.5)])),
}


def _expected(case: Case, point: tuple[float, ...], dtype: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The reference at the point as the dtype holds it, rounded to the dtype (inf where it overflows)."""
    args = [mp.mpf(float(np.asarray(p, dtype=dtype))) for p in point]
    value, grads = case.reference(*args)
    with np.errstate(over="ignore"):
        return np.asarray(float(value), dtype=dtype), [np.asarray(float(g), dtype=dtype) for g in grads]


def _close(got, want, dtype: str, atol: float, what: str) -> None:
    if not np.isfinite(want):
        return  # not representable: nothing is promised
    assert np.isfinite(got), f"{what}: {got}, want {want}"
    tol = RTOL[dtype] * abs(float(want)) + float(np.finfo(dtype).tiny) + atol
    assert abs(float(got) - float(want)) <= tol, f"{what}: {got}, want {want}"


@pytest.mark.parametrize("name", list(CASES))
def test_finite_and_accurate(name, backend, dtype):
    """Value and gradient by value_and_vjp, and the same gradient by the vjp alone (pruned without the
    output), the Jacobian (reverse, one row) and the jvp (forward accumulation, one unit tangent each)."""
    case = CASES[name]
    for point in case.points[dtype]:
        arrays = [np.asarray([p], dtype=dtype) for p in point]
        want, want_grads = _expected(case, point, dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no RuntimeWarning from an untaken branch either
            out, grads = case.fn.value_and_vjp(*arrays, np.ones_like(arrays[0]))
            vjp_only = case.fn.vjp(*arrays, np.ones_like(arrays[0]))  # pruned without the output
            _, jacobian = case.fn.value_and_jacobian(*arrays)
            jvps = [
                case.fn.jvp(tuple(arrays), tuple(np.full_like(a, j == k) for j, a in enumerate(arrays)))[1]
                for k in range(len(arrays))
            ]
        _close(out[0], want, dtype, case.atol, f"{name}{point} value")
        for k, w in enumerate(want_grads):
            _close(grads[k][0], w, dtype, case.atol, f"{name}{point} d/darg{k} (vjp)")
            _close(np.ravel(vjp_only[k])[0], w, dtype, case.atol, f"{name}{point} d/darg{k} (vjp only)")
            _close(np.ravel(jacobian)[k], w, dtype, case.atol, f"{name}{point} d/darg{k} (jacobian)")
            _close(np.ravel(jvps[k])[0], w, dtype, case.atol, f"{name}{point} d/darg{k} (jvp)")


@sg.function
def power_of_two(x):
    return 2**x


@pytest.mark.parametrize("mode", ["vjp", "jvp"])
def test_power_of_two_near_overflow(backend, dtype, mode):
    """d 2**x = log(2)*2**x, with log(2) multiplied in before the cotangent: 1.4 * 2**1023.9 overflows,
    1.4 * log(2) * 2**1023.9 = 1.6e308 does not."""
    x = np.asarray([1023.9 if dtype == "float64" else 127.9, 3.0], dtype=dtype)
    seed = np.full_like(x, 1.4)
    out, g = power_of_two.value_and_vjp(x, seed) if mode == "vjp" else power_of_two.jvp((x,), (seed,))
    for k, xk in enumerate(x):
        want = mp.mpf(1.4) * mp.log(2) * mp.mpf(2) ** mp.mpf(float(xk))
        _close(np.ravel(g)[k], np.asarray(float(want), dtype=dtype), dtype, 0.0, f"2**x at {xk} ({mode})")


@sg.function
def logsumexp_vector(v: sg.Vector(3)):
    return sg.logsumexp(v)


def test_logsumexp_reduces_a_vector(backend, dtype):
    v = np.array([[1000.0, 1000.0, 0.0], [0.5, -1.0, 2.0]], dtype=dtype)
    out, (g,) = logsumexp_vector.value_and_vjp(v, np.ones(2, dtype=dtype))
    assert out.shape == (2,)
    for row, o, gr in zip(v, out, g):
        want, want_grads = _expected(CASES["log_sum_exps"], tuple(row), dtype)
        _close(o, want, dtype, 0.0, f"logsumexp{tuple(row)}")
        for gk, wk in zip(gr, want_grads):
            _close(gk, wk, dtype, 0.0, f"d logsumexp{tuple(row)}")


def test_textbook_forms_become_primitives():
    """The rewrites themselves, so that a change that keeps the numbers by luck still shows."""
    x, y = sympy.symbols("x y", real=True)

    assert stabilize(1 - sg.sigmoid(x)) == sigmoid(-x)
    assert stabilize(sg.log(1 - sg.sigmoid(x))) == logsigmoid(-x)
    assert stabilize(sg.exp(x) / (sg.exp(x) + sg.exp(y))) == sigmoid(x - y)
    assert stabilize(sg.log(1 + sg.exp(x) + sg.exp(y))).has(logaddexp)
    assert stabilize(sg.sqrt(x**2 + y**2)) == hypot_primitive(x, y)


@sg.function
def log_add_exp(a, b):
    return sg.logaddexp(a, b)


def test_logaddexp_hessian_at_a_tie(backend, dtype):
    """d/da logaddexp is sigmoid(a - b) also at a == b (exactly 1/2 there), so its derivative is the true
    s*(1 - s) = 1/4 (the tie's constant 1/2 gave 0); an infinite tie keeps finite gradients of 1/2."""
    a = np.array([0.0, 3.0, -700.0, 1.0], dtype)
    b = np.array([0.0, 3.0, -700.0, 0.0], dtype)
    s = 1 / (1 + np.exp(-1.0))
    want = np.array(
        [[0.25, -0.25], [-0.25, 0.25]] * 3 + [[s * (1 - s), -s * (1 - s)], [-s * (1 - s), s * (1 - s)]]
    )
    np.testing.assert_allclose(np.reshape(log_add_exp.hessian(a, b), (4 * 2, 2)), want, rtol=RTOL[dtype])
    inf = np.full(1, -np.inf, dtype)
    _, grads = log_add_exp.value_and_vjp(inf, inf, np.ones(1, dtype))
    assert [float(g[0]) for g in grads] == [0.5, 0.5]
