"""The seed cases of the project, through compiled functions and vjp chaining."""

import numpy as np
import pytest
import sympy

import symgrad as sg


@sg.function
def square(x):
    return x**2


@sg.function
def square_of_square(x):
    return square(square(x))  # @sg.function composes symbolically


@sg.function
def sine(x):
    return sg.sin(x)


@sg.function
def neo_relu(x):
    return sg.where(x > 0, x, -0.1)


def test_square_value_and_gradient(backend):
    out, (g,) = square.value_and_vjp(np.array(3.0), np.array(1.0))
    assert out == 9.0 and g == 6.0


def test_square_of_square_by_vjp_chaining(backend):
    x = np.array(3.0)
    y = square(x)
    z, (gy,) = square.value_and_vjp(y, np.array(1.0))
    (gx,) = square.vjp(x, gy)
    assert z == 81.0 and gx == 108.0


def test_square_of_square_composed(backend):
    out, (g,) = square_of_square.value_and_vjp(np.array(3.0), np.array(1.0))
    assert out == 81.0 and g == 108.0


def test_sin_gradient_is_grad_times_cos(backend):
    x = sympy.Symbol("x", real=True)
    assert (
        sympy.sympify(sine.derivatives["x"]) == sympy.Symbol("grad", real=True) * sympy.cos(x)
        or sine.derivatives["x"] == "grad*cos(x)"
    )
    xs = np.linspace(-3, 3, 7)
    g = np.linspace(0.5, 2, 7)
    np.testing.assert_allclose(sine.vjp(xs, g)[0], g * np.cos(xs), rtol=1e-15)


def test_neo_relu(backend, dtype):
    x = np.array([-2.0, -1e-9, 0.0, 1e-9, 3.0], dtype=dtype)
    np.testing.assert_array_equal(neo_relu(x), np.array([-0.1, -0.1, -0.1, 1e-9, 3.0], dtype=dtype))
    np.testing.assert_array_equal(neo_relu.vjp(x, np.ones_like(x))[0], [0, 0, 0, 1, 1])


def test_python_numbers_and_broadcasting(backend):
    (g,) = square.vjp(3.0, 1.0)
    assert g.shape == () and g == 6.0
    (gx,) = square.vjp(np.array([1.0, 2.0]), np.ones((4, 2)))
    np.testing.assert_array_equal(gx, [8.0, 16.0])  # summed over the broadcast axis


def test_float32_stays_float32(backend):
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    out, (g,) = square.value_and_vjp(x, np.ones_like(x))
    assert out.dtype == np.float32 and g.dtype == np.float32


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_sizes_including_empty(backend, n):
    x = np.linspace(-1, 1, n)
    out, (g,) = square.value_and_vjp(x, np.ones(n))
    np.testing.assert_array_equal(out, x**2)
    np.testing.assert_array_equal(g, 2 * x)
