"""Kinks follow PyTorch 2.13 (measured values, not finite differences), on every backend and dtype."""

import numpy as np
import pytest

import symgrad as sg


@sg.function
def relu(x):
    return sg.Max(x, 0)


@sg.function
def relu6(x):
    return sg.Min(sg.Max(x, 0), 6)


@sg.function
def absolute(x):
    return sg.Abs(x)


@sg.function
def clamp06(x):
    return sg.clamp(x, 0, 6)


@sg.function
def maximum(x, y):
    return sg.Max(x, y)


@sg.function
def minimum(x, y):
    return sg.Min(x, y)


@sg.function
def sign_floor(x):
    return sg.sign(x) + sg.floor(x)


def grads(fn, *args, dtype="float64"):
    arrays = [np.asarray(a, dtype=dtype) for a in args]
    return fn.vjp(*arrays, np.ones_like(arrays[0]))


@pytest.mark.parametrize(
    "fn, x, want",
    [
        (relu, [-1.0, 0.0, 2.0], [0, 0, 1]),
        (relu6, [0.0, 3.0, 6.0, 7.0], [0, 1, 0, 0]),
        (absolute, [-2.0, 0.0, 2.0], [-1, 0, 1]),
        (clamp06, [-1.0, 0.0, 3.0, 6.0, 7.0], [0, 1, 1, 1, 0]),
        (sign_floor, [-1.5, 0.0, 2.5], [0, 0, 0]),
    ],
)
def test_one_argument_kinks(backend, dtype, fn, x, want):
    np.testing.assert_array_equal(grads(fn, x, dtype=dtype)[0], want)


def test_maximum_minimum_split_ties(backend, dtype):
    gx, gy = grads(maximum, [1.0, 2.0, 3.0], [1.0, 1.0, 4.0], dtype=dtype)
    np.testing.assert_array_equal(gx, [0.5, 1, 0])
    np.testing.assert_array_equal(gy, [0.5, 0, 1])
    gx, gy = grads(minimum, [1.0, 2.0, 3.0], [1.0, 1.0, 4.0], dtype=dtype)
    np.testing.assert_array_equal(gx, [0.5, 0, 1])
    np.testing.assert_array_equal(gy, [0.5, 1, 0])


def test_nan_propagates_through_max_and_relu(backend, dtype):
    assert np.isnan(relu(np.array([np.nan], dtype=dtype))[0])
    assert np.isnan(maximum(np.array([np.nan], dtype=dtype), np.array([1.0], dtype=dtype))[0])
    assert np.isnan(maximum(np.array([1.0], dtype=dtype), np.array([np.nan], dtype=dtype))[0])


@sg.function
def max4(a, b, c, d):
    return sg.Max(a, b, c, d)


@sg.function
def min3(a, b):
    return sg.Min(a, b, 1)


def test_ties_among_many_inputs_split_evenly(backend, dtype):
    """Max of four tied inputs split the gradient 1/8, 1/8, 1/4, 1/2 (nested pairs, order-dependent); now
    1/j for each of the j tied inputs, as torch.amax (a constant counts as one of them)."""
    one = [1.0, 1.0, 2.0]
    a, b, c, d = [1.0, 1.0, 0.0], [1.0, 3.0, 0.0], [1.0, 1.0, 2.0], [1.0, 0.0, 2.0]
    ga, gb, gc, gd = grads(max4, a, b, c, d, dtype=dtype)
    np.testing.assert_array_equal(
        np.stack([ga, gb, gc, gd]), [[0.25, 0, 0], [0.25, 1, 0], [0.25, 0, 0.5], [0.25, 0, 0.5]]
    )
    ga, gb = grads(min3, one, [1.0, 0.5, 1.0], dtype=dtype)
    np.testing.assert_allclose(np.stack([ga, gb]), [[1 / 3, 0, 0], [1 / 3, 1, 0.5]], rtol=1e-6)
