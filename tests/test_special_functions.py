"""The special functions (tests/models/special.py), on both targets and dtypes: value and gradient against
50-digit mpmath at ordinary points and at the hard ones (lgamma at 1e-300 and 1e300, digamma near its negative
poles, erfinv near +-1, Bessel tails, ...; tests/special_reference.py), in ulp of the dtype scaled by the
result's condition (see there).

Tolerances, ulp: float64 value 4 / gradient 8; float32 value 2 / gradient 4 (both computed in double for
the C helpers; float32 NumPy is SciPy's float32 loop). ``WIDER`` lists the functions measured beyond them,
with the reason (docs/numerics.md has the measured table).
"""

from __future__ import annotations

from pathlib import Path

import mpmath as mp
import numpy as np
import pytest
import scipy.special
import sympy
from special_reference import CASES, reference, sample, ulp_errors

import symgrad as sg
from symgrad.errors import ModelError, UnsupportedError

MODEL = Path(__file__).parent / "models" / "special.py"
TOLERANCE = {"float64": (4.0, 8.0), "float32": (2.0, 4.0)}  # (value, gradient), ulp
#: (name, dtype) -> (value, gradient) ulp where a function is measured beyond TOLERANCE
WIDER = {
    # B = exp(log B) errs by log B's absolute error, that of its lgamma terms (7.5 ulp at (0.16, 8.04), C)
    ("beta", "float64"): (8.0, 8.0),
    # i1e' = (i0e - i1e)(|x|) - i1e(x)/x cancels by up to 4x near x = 2.5 (6.6 ulp C, 8.2 NumPy)
    ("i1e", "float64"): (4.0, 16.0),
    # betaln: the lgamma sum below 10 errs by the lgamma terms' ulp, near a zero of betaln (8.9 ulp)
    ("betaln", "float64"): (16.0, 8.0),
    # SciPy's gammaln (NumPy target): 4.1 ulp
    ("loggamma", "float64"): (8.0, 8.0),
    ("lgamma", "float64"): (8.0, 8.0),
}
NAMES = list(CASES)


@pytest.fixture(scope="module")
def compiled():
    return sg.compile(MODEL)


_REFERENCES: dict = {}


def _measure(fn, name: str, dtype: str, n: int) -> tuple[list, list[np.ndarray]]:
    """Points, and per output (value, then each gradient) the error in ulp at each point (NaN: skipped)."""
    points = [p for p in sample(name, dtype, n)]
    cols = [np.array([p[i] for p in points], dtype=dtype) for i in range(len(points[0]))]
    rounded = list(zip(*[c.astype(np.float64) for c in cols]))  # what the dtype holds
    key = (name, dtype, n)
    if key not in _REFERENCES:  # the same for both backends
        _REFERENCES[key] = [reference(name, p) for p in rounded]
    refs = _REFERENCES[key]
    with np.errstate(all="ignore"):
        out, grads = fn.value_and_vjp(*cols, np.ones(len(points), dtype=dtype))
    grads = [g for g in grads if g is not None]  # a nondiff argument's (zeta's s)
    assert out.dtype == np.dtype(dtype) and all(g.dtype == np.dtype(dtype) for g in grads)
    errors = [ulp_errors(out, [r[0] for r in refs], dtype)]
    errors += [ulp_errors(g, [r[1 + i] for r in refs], dtype) for i, g in enumerate(grads)]
    return rounded, errors


def _check(compiled, name: str, dtype: str, n: int) -> None:
    points, errors = _measure(getattr(compiled, name), name, dtype, n)
    value_tol, grad_tol = WIDER.get((name, dtype), TOLERANCE[dtype])
    for k, (err, tol) in enumerate(zip(errors, [value_tol] + [grad_tol] * (len(errors) - 1))):
        bad = [(points[i], float(err[i])) for i in np.flatnonzero(~(np.isnan(err) | (err <= tol)))]
        what = "value" if k == 0 else f"gradient {k}"
        assert not bad, f"{name} {dtype} {what}: ulp error above {tol} at {bad}"
        assert np.count_nonzero(~np.isnan(err)) >= 3, f"{name} {dtype}: too few points measured"


@pytest.mark.parametrize("name", NAMES)
def test_value_and_gradient_against_mpmath(name, compiled, backend, dtype):
    _check(compiled, name, dtype, 4)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_value_and_gradient_against_mpmath_many_points(name, compiled, backend, dtype):
    _check(compiled, name, dtype, 200)


def test_heaviside_values_and_zero_gradient(compiled, backend, dtype):
    x = np.array([-2.0, 0.0, 3.0, -0.0], dtype=dtype)
    out, (g,) = compiled.heaviside.value_and_vjp(x, np.ones(4, dtype=dtype))
    assert out.tolist() == [0.0, 0.5, 1.0, 0.5] and g.tolist() == [0.0] * 4


def test_mod_follows_the_divisor_sign_and_its_gradient_is_minus_floor(compiled, backend, dtype):
    """``x % y`` as Python's %; d/dy = -floor(x/y) (the rule used to give 0 for the divisor)."""
    x, y = np.array([7.5, -7.5, 7.5, 6.0], dtype=dtype), np.array([2.0, 2.0, -2.0, 3.0], dtype=dtype)
    out, (gx, gy) = compiled.mod.value_and_vjp(x, y, np.ones(4, dtype=dtype))
    assert out.tolist() == [1.5, 0.5, -0.5, 0.0] and gx.tolist() == [1.0] * 4
    assert gy.tolist() == [-3.0, 4.0, 4.0, -2.0]


@pytest.mark.parametrize(
    "name",
    "loggamma lgamma gamma digamma polygamma beta betaln exp2 log2 log10 cbrt Heaviside real_root sinc Mod "
    "frac erfinv erfcx besselj besseli i0e i1e zeta".split(),
)
def test_sg_exports_the_special_functions(name):
    assert callable(getattr(sg, name))


@pytest.mark.parametrize(
    "call", [lambda x: sg.polygamma(4, x), lambda x: sg.besselj(2, x), lambda x: sg.besseli(0.5, x)]
)
def test_unsupported_orders_are_refused_when_the_model_is_written(call):
    with pytest.raises(ModelError, match="order must be an integer"):
        call(sympy.Symbol("x", real=True))


def test_sinc_derivative_is_finite_at_tiny_arguments(compiled, backend):
    """SymPy's own rule, cos(x)/x - sin(x)/x**2, is 0/0 = NaN at 1e-300; the series gives -x/3."""
    out, (g,) = compiled.sinc.value_and_vjp(np.array([1e-300, 0.0]), np.ones(2))
    assert out.tolist() == [1.0, 1.0] and g.tolist() == [-1e-300 / 3, 0.0]


def test_zeta_is_not_differentiable_in_s_and_says_so():
    """d/ds zeta(s, q) has no rule: differentiating through s names sg.zeta and its first argument."""

    @sg.function
    def both(s, q):
        return sg.zeta(s, q)

    with pytest.raises(
        UnsupportedError, match=r"sg\.zeta\(s, q\) is not differentiable in its first argument s"
    ):
        both.value_and_vjp(np.array([2.0]), np.array([1.0]), np.ones(1))


def test_zeta_of_a_number_s_and_riemann_zeta(backend, dtype):
    """A Python-number s needs no declaration; sg.zeta(s) is Riemann's zeta(s, 1) (SymPy's convention)."""

    @sg.function(nondiff=("s",))
    def model(s, q):
        return sg.zeta(3, q) + sg.zeta(s)

    q, s = np.array([1.0, 0.5], dtype=dtype), np.array([2.0, 4.0], dtype=dtype)
    out, (gs, gq) = model.value_and_vjp(s, q, np.ones(2, dtype=dtype))
    want = [float(mp.zeta(3, a) + mp.zeta(b)) for a, b in zip(q.tolist(), s.tolist())]
    want_q = [float(-3 * mp.zeta(4, a)) for a in q.tolist()]
    rtol = 4 * np.finfo(dtype).eps
    assert (
        gs is None
        and np.allclose(out, want, rtol=rtol, atol=0)
        and np.allclose(gq, want_q, rtol=rtol, atol=0)
    )


def test_zeta_outside_its_domain_follows_scipy(compiled, backend, dtype):
    """NaN for s < 1 and for q <= 0 with s not an integer; +inf at s == 1 and at q = 0, -1, ...; integer s
    with a negative q is the sum, as scipy.special.zeta."""
    s = np.array([0.5, 1.0, 2.0, 2.0, 2.5, 2.0, np.nan, 2.0], dtype=dtype)
    q = np.array([1.0, 3.0, 0.0, -1.0, -0.5, -0.5, 1.0, np.inf], dtype=dtype)
    with np.errstate(all="ignore"):
        out, (_, gq) = compiled.zeta.value_and_vjp(s, q, np.ones(len(s), dtype=dtype))
    want = scipy.special.zeta(s.astype(np.float64), q.astype(np.float64))
    assert np.array_equal(np.isnan(out), np.isnan(want)) and np.array_equal(np.isinf(out), np.isinf(want))
    finite = np.isfinite(want)
    assert finite.tolist() == [False, False, False, False, False, True, False, True]
    assert np.allclose(out[finite], want[finite], rtol=4 * np.finfo(dtype).eps, atol=0)
    assert np.isclose(gq[5], -2 * scipy.special.zeta(3.0, -0.5), rtol=4 * np.finfo(dtype).eps)
