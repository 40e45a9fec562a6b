"""NaN regressions that PyTorch, JAX, TensorFlow and others still have open: finite, correct gradients here,
on every backend and dtype."""

import warnings

import numpy as np
import pytest

import symgrad as sg


@sg.function
def sqrt_relu(x):
    return sg.where(x > 0, sg.sqrt(x), 0)


@sg.function
def sinc(x):
    return sg.where(sg.Ne(x, 0), sg.sin(x) / x, 1)


@sg.function
def norm_squared(x, y):
    return sg.sqrt(x**2 + y**2) ** 2


@sg.function
def softplus(x):
    return sg.log(1 + sg.exp(x))


@sg.function
def logaddexp(a, b):
    return sg.log(sg.exp(a) + sg.exp(b))


@sg.function
def logsumexp3(a, b, c):
    return sg.logsumexp(a, b, c)


@sg.function
def x_log_x(x):
    return sg.xlogy(x, x)


@sg.function
def guarded_log(x):
    return sg.where(x > 0, x * sg.log(x), 0)


@sg.function
def sqrt_relu_of_clamp(y):
    u = sg.clamp(sg.clamp(y, -1, 1), -1, 1)
    return sg.where(u > 0, sg.sqrt(u), 0)


def run(fn, *args, dtype):
    arrays = [np.asarray(a, dtype=dtype) for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from an untaken branch either
        return fn.value_and_vjp(*arrays, np.ones_like(arrays[0]))


def test_where_sqrt_at_zero_and_below(backend, dtype):
    out, (g,) = run(sqrt_relu, [-4.0, -1e-30, 0.0, 4.0], dtype=dtype)
    np.testing.assert_array_equal(out, [0, 0, 0, 2])
    np.testing.assert_allclose(g, [0, 0, 0, 0.25])


def test_sinc_at_zero(backend, dtype):
    out, (g,) = run(sinc, [0.0, np.pi / 2], dtype=dtype)
    np.testing.assert_allclose(out, [1.0, 2 / np.pi], rtol=1e-6)
    np.testing.assert_allclose(g, [0.0, -4 / np.pi**2], rtol=1e-5, atol=1e-7)


def test_python_inequality_is_rejected_clearly():
    @sg.function
    def bad(x):
        return sg.where(x != 0, sg.sin(x) / x, 1)

    with pytest.raises(sg.ModelError, match="sg.Ne"):
        bad.compiled()


def test_norm_squared_at_origin(backend, dtype):
    out, (gx, gy) = run(norm_squared, [0.0, 3.0], [0.0, 4.0], dtype=dtype)
    np.testing.assert_allclose(out, [0, 25], rtol=1e-6)
    np.testing.assert_allclose(gx, [0, 6], rtol=1e-6)
    np.testing.assert_allclose(gy, [0, 8], rtol=1e-6)


@pytest.mark.parametrize("x", [100.0, 1000.0, -1000.0])
def test_softplus_large(backend, dtype, x):
    out, (g,) = run(softplus, [x], dtype=dtype)
    want = max(x, 0.0)
    np.testing.assert_allclose(out, [want], rtol=1e-6)
    np.testing.assert_allclose(g, [1.0 if x > 0 else 0.0], atol=1e-30)


def test_logaddexp_with_minus_inf(backend, dtype):
    inf = np.inf
    out, (ga, gb) = run(logaddexp, [-inf, -inf, 0.0, 1.0], [-inf, 0.0, -inf, 1.0], dtype=dtype)
    np.testing.assert_allclose(out, [-inf, 0.0, 0.0, 1 + np.log(2)], rtol=1e-6)
    np.testing.assert_allclose(ga, [0.5, 0.0, 1.0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(gb, [0.5, 1.0, 0.0, 0.5], rtol=1e-6)


def test_logsumexp_all_minus_inf_is_finite(backend, dtype):
    inf = np.inf
    out, grads = run(logsumexp3, [-inf], [-inf], [-inf], dtype=dtype)
    assert out[0] == -inf
    assert all(np.all(np.isfinite(g)) for g in grads)
    np.testing.assert_allclose(sum(g[0] for g in grads), 1.0, rtol=1e-6)


def test_xlogy_x_log_x_at_zero(backend, dtype):
    out, (g,) = run(x_log_x, [0.0, 1.0, np.e], dtype=dtype)
    np.testing.assert_allclose(out, [0.0, 0.0, np.e], rtol=1e-6)
    np.testing.assert_allclose(g, [0.0, 1.0, 2.0], rtol=1e-6)


def test_guarded_log_has_no_nan_below_zero(backend, dtype):
    out, (g,) = run(guarded_log, [-1.0, 0.0, 1.0], dtype=dtype)
    np.testing.assert_allclose(out, [0, 0, 0], atol=1e-7)
    np.testing.assert_allclose(g, [0, 0, 1], rtol=1e-6)


def test_nan_input_propagates(backend, dtype):
    out, (g,) = run(softplus, [np.nan, 1.0], dtype=dtype)
    assert np.isnan(out[0]) and np.isnan(g[0]) and np.isfinite(out[1])


# -- found by the property tests (tests/test_properties.py) --------------------------------------------------


@sg.function
def sinc_of_sqrt_relu(x):
    u = sg.where(x > 0, sg.sqrt(x), 0)
    return sg.where(sg.Ne(u, 0), sg.sin(u) / u, 1)  # SymPy folds 1/u into a branch with 1/0 = zoo


@sg.function
def log1p_exp(x):
    return sg.log1p(sg.exp(x))  # rewritten to softplus, like log(1 + exp(x))


@sg.function
def logaddexp_inf(a, b):
    return sg.logaddexp(a, b)


def test_composed_guards_compile_and_stay_finite(backend, dtype):
    out, (g,) = run(sinc_of_sqrt_relu, [-1.0, 0.0, 1.0, 4.0], dtype=dtype)
    np.testing.assert_allclose(out, [1.0, 1.0, np.sin(1.0), np.sin(2.0) / 2], rtol=1e-6)
    want = [0.0, 0.0, (np.cos(1.0) - np.sin(1.0)) / 2, (2 * np.cos(2.0) - np.sin(2.0)) / 16]
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("x", [100.0, 1000.0, -1000.0])
def test_log1p_exp_large(backend, dtype, x):
    out, (g,) = run(log1p_exp, [x], dtype=dtype)
    np.testing.assert_allclose(out, [max(x, 0.0)], rtol=1e-6)
    np.testing.assert_allclose(g, [1.0 if x > 0 else 0.0], atol=1e-30)


def test_logaddexp_with_plus_inf(backend, dtype):
    inf = np.inf
    out, (ga, gb) = run(logaddexp_inf, [inf, inf, 0.0], [inf, 0.0, inf], dtype=dtype)
    np.testing.assert_array_equal(out, [inf, inf, inf])
    np.testing.assert_allclose(ga, [0.5, 1.0, 0.0])
    np.testing.assert_allclose(gb, [0.5, 0.0, 1.0])


def test_folded_branch_with_complex_value(backend, dtype):
    """SymPy folds sqrt into the clamp's branches, making sqrt(-1) = I in one that is never taken (it
    was "complex values are not supported", found by make fuzz); that branch is NaN, never selected."""
    out, (g,) = run(sqrt_relu_of_clamp, [-2.0, -1.0, -0.5, 0.0, 0.25, 1.0, 2.0], dtype=dtype)
    np.testing.assert_array_equal(out, [0, 0, 0, 0, 0.5, 1, 1])
    np.testing.assert_array_equal(g, [0, 0, 0, 0, 1, 0.5, 0])  # clamp's boundary gradient is 1 (torch)
