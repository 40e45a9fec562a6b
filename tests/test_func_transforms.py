"""``sg.func.jacobian`` and ``sg.func.hessian``: new ``@sg.function``s whose outputs are derivatives,
against ``jax.jacrev``/``jax.hessian`` and ``torch.func.hessian`` on the same numbers; they compose with each
other and with ``sg.func.grad``, compile on both backends and dtypes, show and check like any function.

Tolerances: float64 rtol 1e-11 (atol 1e-12); float32 rtol 2e-5 (atol 1e-5) against the float64 reference.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy
import torch

import symgrad as sg
from symgrad.check import check_function

jax.config.update("jax_enable_x64", True)

TOL = {"float64": {"rtol": 1e-11, "atol": 1e-12}, "float32": {"rtol": 2e-5, "atol": 1e-5}}


@sg.function
def spring(p: sg.Vector(3), k):
    r = sg.sqrt(p[0] ** 2 + p[1] ** 2 + p[2] ** 2)
    return k * (r - 1) ** 2 / 2 + sg.sin(k * p[0])


def spring_ref(p, k, np_=jnp):
    r = np_.sqrt((p**2).sum(-1))
    return k * (r - 1) ** 2 / 2 + np_.sin(k * p[..., 0])


@sg.function
def polar(rad, ang):
    return rad * sg.cos(ang), rad * sg.sin(ang)


@sg.function
def turn(p: sg.Vector(2), a):
    return sympy.Matrix([[sg.cos(a) * p[0] - sg.sin(a) * p[1]], [sg.sin(a) * p[0] + sg.cos(a) * p[1]]])


@sg.function
def bump(x, y):
    return sg.exp(-(x**2) * y) + x**3 * y**2


def bump_ref(x, y):
    return jnp.exp(-(x**2) * y) + x**3 * y**2


def close(a, b, dtype):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), **TOL[dtype])


def points(dtype):
    rng = np.random.default_rng(0)
    return rng.normal(size=(5, 3)).astype(dtype), rng.uniform(0.5, 2, size=5).astype(dtype)


def per_row(fn, *args):
    """``jax.vmap`` of ``fn`` over the leading axis, as float64 NumPy."""
    return jax.tree_util.tree_map(np.asarray, jax.vmap(fn)(*[jnp.asarray(a, jnp.float64) for a in args]))


def test_jacobian_and_hessian_of_a_vector_argument_match_jax(backend, dtype):
    p, k = points(dtype)
    jac = sg.func.jacobian(spring)(p, k)
    assert jac.shape == (5, 3) and jac.dtype == np.dtype(dtype)
    close(jac, per_row(jax.jacrev(spring_ref), p, k), dtype)
    hess = sg.func.hessian(spring)(p, k)
    assert hess.shape == (5, 3, 3)
    close(hess, per_row(jax.hessian(spring_ref), p, k), dtype)
    np.testing.assert_array_equal(hess, np.swapaxes(hess, 1, 2))


def test_hessian_over_several_arguments_is_flat_row_major_like_torch_func(backend, dtype):
    p, k = points(dtype)
    blocks = sg.func.hessian(spring, (0, 1))(p, k)
    assert [b.shape for b in blocks] == [(5, 3, 3), (5, 3), (5, 3), (5,)]
    for row in range(5):
        ref = torch.func.hessian(lambda a, b: spring_ref(a, b, torch), (0, 1))(
            torch.tensor(p[row], dtype=torch.float64), torch.tensor(k[row], dtype=torch.float64)
        )
        flat = [ref[0][0], ref[0][1], ref[1][0], ref[1][1]]
        for mine, theirs in zip(blocks, flat):
            close(mine[row], theirs.numpy(), dtype)


def test_jacobian_of_several_outputs_and_a_vector_output(backend):
    rad, ang = np.array([1.0, 2.0]), np.array([0.3, -1.2])
    d_xr, d_xa, d_yr, d_ya = sg.func.jacobian(polar, (0, 1))(rad, ang)
    close(d_xr, np.cos(ang), "float64")
    close(d_xa, -rad * np.sin(ang), "float64")
    close(d_yr, np.sin(ang), "float64")
    close(d_ya, rad * np.cos(ang), "float64")
    h_x, h_y = sg.func.hessian(polar, 1)(rad, ang)  # d2/dang2 of each output
    close(h_x, -rad * np.cos(ang), "float64")
    close(h_y, -rad * np.sin(ang), "float64")
    p, a = np.array([[1.0, 2.0]]), np.array([0.7])
    jac = sg.func.jacobian(turn)(p, a)
    rotation = np.array([[np.cos(0.7), -np.sin(0.7)], [np.sin(0.7), np.cos(0.7)]])
    close(jac[0], rotation, "float64")
    close(sg.func.hessian(turn, 1)(p, a)[0], -rotation @ p[0], "float64")


def test_derivative_transforms_compose(backend):
    x, y = np.array([0.4, -1.1, 2.0]), np.array([1.5, 0.2, -0.7])
    third = sg.func.hessian(sg.func.grad(bump), (0, 1))(x, y)  # d3/dx d(x|y) d(x|y)
    ref = per_row(jax.hessian(jax.grad(bump_ref), (0, 1)), x, y)
    for mine, theirs in zip(third, [ref[0][0], ref[0][1], ref[1][0], ref[1][1]]):
        close(mine, theirs, "float64")
    close(sg.func.jacobian(sg.func.grad(bump))(x, y), sg.func.hessian(bump)(x, y), "float64")
    close(sg.func.grad(sg.func.jacobian(bump, 1), 1)(x, y), sg.func.hessian(bump, 1)(x, y), "float64")


def test_derivative_functions_show_and_check_like_any_function():
    hess = sg.func.hessian(bump, (0, 1))
    assert hess.name == "hessian_bump" and "Hessian of bump" in hess.__doc__
    assert "def hessian_bump" in hess.compiled().source("numpy")
    assert check_function(hess.compiled(), n=16) == []
    assert check_function(sg.func.jacobian(spring).compiled(), n=16) == []


def test_unsupported_requests_are_refused_clearly():
    with pytest.raises(sg.ModelError, match=r"shape \(2, 2, 2\).*at most 2 axes"):
        sg.func.hessian(turn)(np.ones((1, 2)), 0.5)
    with pytest.raises(sg.ModelError, match="argnums 2 is not a differentiable argument"):
        sg.func.jacobian(bump, 2)
    with pytest.raises(sg.ModelError, match="sg.func.hessian takes an @sg.function"):
        sg.func.hessian(bump_ref)
