"""``@sg.function(uniform=(...))``: scalar arguments that take one number per call, passed to the C kernels by
value. Reference: the same function without ``uniform``, where the number is broadcast like any argument."""

from __future__ import annotations

import re

import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import ArgumentError, ModelError

TOL = {"float64": dict(rtol=1e-12, atol=1e-12), "float32": dict(rtol=2e-6, atol=2e-6)}


def _scaled(x, rate, offset):
    return sg.exp(rate * x) * sg.sin(x + offset), rate * x**2


scaled = sg.function(uniform=("rate", "offset"))(_scaled)
scaled_broadcast = sg.function(_scaled)


def test_values_and_gradients_match_broadcasting(backend, dtype):
    x = np.linspace(-2, 2, 37).astype(dtype)
    cots = (np.cos(x), np.ones_like(x))
    out = scaled(x, 0.7, -0.25)
    want = scaled_broadcast(x, 0.7, -0.25)
    for o, w in zip(out, want):
        assert o.dtype == np.dtype(dtype)
        np.testing.assert_allclose(o, w, **TOL[dtype])
    grads = scaled.vjp(x, 0.7, -0.25, *cots)
    want_grads = scaled_broadcast.vjp(x, 0.7, -0.25, *cots)
    assert grads[1].shape == () and grads[2].shape == ()  # summed over the batch
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=TOL[dtype]["rtol"] * 10, atol=TOL[dtype]["atol"] * 10)
    _, J = scaled.value_and_jacobian(x, 0.7, -0.25)
    np.testing.assert_allclose(J, scaled_broadcast.jacobian(x, 0.7, -0.25), **TOL[dtype])


def test_uniform_takes_numpy_scalars_and_0d_arrays(backend):
    x = np.linspace(0, 1, 5)
    want = scaled(x, 0.5, 0.25)
    for rate in (np.float32(0.5), np.array(0.5), np.float64(0.5), 0.5):
        for o, w in zip(scaled(x, rate, 0.25), want):
            np.testing.assert_array_equal(o, w)


def test_c_kernels_take_uniform_arguments_by_value():
    source = scaled.compiled().source("c")
    assert "const double rate," in source and "const float rate," in source
    assert not re.search(r"\b(rate|offset)\[i\]", source)  # grad_rate[i] is a result, fine


@pytest.mark.parametrize("value, got", [(np.ones(3), "shape (3,)"), (True, "bool"), ("0.5", "str")])
def test_array_for_a_uniform_argument_is_an_error(backend, value, got):
    with pytest.raises(
        ArgumentError, match=re.escape(f"scaled: argument 'rate' is uniform (one number per call); got {got}")
    ):
        scaled(np.ones(3), value, 0.0)


def test_declaration_errors():
    @sg.function(uniform=("v",))
    def vector_uniform(v: sg.Vector(2)):
        return v[0]

    @sg.function(uniform=("rte",))
    def misspelt(x, rate):
        return x * rate

    with pytest.raises(ModelError, match="uniform argument 'v' must be a scalar"):
        vector_uniform.compiled()
    with pytest.raises(ModelError, match="misspelt: uniform names 'rte', which is not an argument"):
        misspelt.compiled()


def test_tape_gradient_of_a_uniform_tensor(backend):
    x = sg.tensor(np.linspace(-1, 1, 9), requires_grad=True)
    rate = sg.tensor(np.array(0.3), requires_grad=True)
    first, second = scaled(x, rate, 0.1)
    (first.sum() + second.sum()).backward()
    _, g_rate, _ = scaled_broadcast.vjp(x.data, 0.3, 0.1, np.ones(9), np.ones(9))
    np.testing.assert_allclose(rate.grad.numpy(), g_rate, rtol=1e-12)
    assert rate.grad.shape == ()


def test_torch_op_with_a_uniform_argument():
    torch = pytest.importorskip("torch")
    op = scaled.compiled().to_torch()
    x = torch.linspace(-1, 1, 9, dtype=torch.float64, requires_grad=True)
    rate = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, r: op(a, r, 0.1), (x, rate))


@sg.function(uniform=("rate",))
def decay(x, rate):
    return x * sg.exp(-rate * x)


def test_tape_rejects_a_same_shape_tensor_for_a_uniform_argument(backend):
    """The tape's fast path (same shapes, the Jacobian recorded) leaves a uniform argument's check to the
    boundary."""
    x = sg.tensor(np.linspace(0, 1, 4), requires_grad=True)
    with pytest.raises(
        ArgumentError,
        match=re.escape("decay: argument 'rate' is uniform (one number per call); got shape (4,)"),
    ):
        decay(x, sg.tensor(np.full(4, 0.5)))
    y = decay(x, 0.5)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(-0.5 * x.data) * (1 - 0.5 * x.data), rtol=1e-12)
